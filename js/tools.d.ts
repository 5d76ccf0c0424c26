import type { NativeBashOptions, SandboxOptions } from "./bash.js";
import type { BoundIndex, IndexOptions, Policy, PolicyEvent } from "./fs.js";
import type { BashSpawnHook, Pi, PiModule } from "./pi.js";

export interface NativeToolsOptions {
  /** Host directory the file tools are bounded to. Default: `cwd`. */
  root?: string;
  /** Absolute path the agent sees for `root` (e.g. `/workspace`). Default: `root`. */
  runtimeRoot?: string;
  /** `shellPath` for the native exec, plus pi's bash tool options (`spawnHook`, `commandPrefix`). */
  bash?: Omit<NativeBashOptions, "sandbox"> & { spawnHook?: BashSpawnHook; commandPrefix?: string };
  /**
   * Sandbox bash over the same `root` and `runtimeRoot` as the file tools: `true` for the defaults, or
   * the sandbox's other options (a `root`/`runtimeRoot` here, if given, must match the tools'; without
   * a runtimeRoot anywhere the workspace keeps its host path).
   */
  sandbox?: boolean | (Omit<SandboxOptions, "root"> & { root?: string });
  /**
   * A warm search index of `root` for find and grep (createBoundFs's `index` option); the tools object
   * then has `index` (not enumerable) to await, inspect or close it.
   */
  index?: boolean | IndexOptions;
  /**
   * The workspace policy of the file tools and, with a sandbox, of the shell (a `sandbox.policy` given too must
   * say the same). Absent: the protected defaults only. See createBoundFs's `policy`.
   */
  policy?: Policy;
  /** Called with each refusal of the policy, by any tool (see createBoundFs's `onPolicyEvent`). */
  onPolicyEvent?: (event: PolicyEvent) => void;
  /**
   * The pi-coding-agent module whose factories build the tools (`import * as pi from
   * "@earendil-works/pi-coding-agent"`), e.g. the one pi gives an extension. Default: the installed pi,
   * found by package name from this package's location. A TypeError if it is not a pi module.
   */
  pi?: PiModule;
}

/** pi's tool objects (AgentTool), each as the installed pi's own factory types it. */
export interface NativeTools {
  read: ReturnType<Pi["createReadTool"]>;
  bash: ReturnType<Pi["createBashTool"]>;
  edit: ReturnType<Pi["createEditTool"]>;
  write: ReturnType<Pi["createWriteTool"]>;
  grep: ReturnType<Pi["createGrepTool"]>;
  find: ReturnType<Pi["createFindTool"]>;
  ls: ReturnType<Pi["createLsTool"]>;
  /** On Windows with a pi that has it (1.6): pi's powershell tool on the native exec; absent elsewhere. */
  powershell?: Pi extends { createPowerShellTool: (...args: never[]) => infer T } ? T : never;
  /** With the `index` option: the index (not enumerable, so `Object.values(tools)` is the seven tools). */
  readonly index?: BoundIndex;
}

/** pi's tool definitions (ToolDefinition), for `registerTool` or `createAgentSession({ customTools })`. */
export interface NativeToolDefinitions {
  read: ReturnType<Pi["createReadToolDefinition"]>;
  bash: ReturnType<Pi["createBashToolDefinition"]>;
  edit: ReturnType<Pi["createEditToolDefinition"]>;
  write: ReturnType<Pi["createWriteToolDefinition"]>;
  grep: ReturnType<Pi["createGrepToolDefinition"]>;
  find: ReturnType<Pi["createFindToolDefinition"]>;
  ls: ReturnType<Pi["createLsToolDefinition"]>;
  /** On Windows with a pi that has it (1.6): pi's powershell tool on the native exec; absent elsewhere. */
  powershell?: Pi extends { createPowerShellToolDefinition: (...args: never[]) => infer T } ? T : never;
  /** With the `index` option: the index (not enumerable). */
  readonly index?: BoundIndex;
}

/** Like pi's `createAllTools(cwd)`, each tool on native operations. */
export declare function createNativeTools(cwd: string, options?: NativeToolsOptions): NativeTools;
/** Like pi's `createAllToolDefinitions(cwd)`, for extensions that call `registerTool`. */
export declare function createNativeToolDefinitions(cwd: string, options?: NativeToolsOptions): NativeToolDefinitions;
