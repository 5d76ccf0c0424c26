export declare function createBashOperations(options?: unknown): unknown;
