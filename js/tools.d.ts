import type { NativeBashOptions } from "./bash.js";

export interface NativeToolsOptions {
  /** Host directory the file tools are bounded to. Default: `cwd`. */
  root?: string;
  /** Absolute path the agent sees for `root` (e.g. `/workspace`). Default: `root`. */
  runtimeRoot?: string;
  /** `shellPath` for the native exec, plus pi's bash tool options (`spawnHook`, `commandPrefix`). */
  bash?: NativeBashOptions & { spawnHook?: (context: any) => any; commandPrefix?: string };
}

/** pi's tool objects (AgentTool), typed loosely so both supported pi versions fit. */
export interface NativeTools<T = any> {
  read: T;
  bash: T;
  edit: T;
  write: T;
  grep: T;
  find: T;
  ls: T;
}

/** Like pi's `createAllTools(cwd)`, each tool on native operations. */
export declare function createNativeTools(cwd: string, options?: NativeToolsOptions): NativeTools;
/** Like pi's `createAllToolDefinitions(cwd)`, for extensions that call `registerTool`. */
export declare function createNativeToolDefinitions(cwd: string, options?: NativeToolsOptions): NativeTools;
