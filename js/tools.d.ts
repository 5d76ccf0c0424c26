export declare function createNativeTools(cwd: string, options?: unknown): unknown;
export declare function createNativeToolDefinitions(cwd: string, options?: unknown): unknown;
