import type { BoundFs } from "./fs.js";
import type { Pi, PiModule } from "./pi.js";

/** pi's GrepOperations, bounded: `isDirectory` throws for missing or outside paths. */
export interface BoundGrepOperations {
  isDirectory(path: string): Promise<boolean>;
  readFile(path: string): Promise<string>;
}

export interface GrepOptions {
  pattern: string;
  /** Directory or file to search; relative paths resolve against `cwd` (default: fs.runtimeRoot or process.cwd()). */
  path?: string;
  cwd?: string;
  /** rg --glob, rooted at the searched directory; `!` negates. */
  glob?: string;
  ignoreCase?: boolean;
  literal?: boolean;
  context?: number;
  /** Maximum matches (default 100). */
  limit?: number;
  signal?: AbortSignal;
  /** Bound the search to a createBoundFs() root (runtime paths mapped to the host). */
  fs?: BoundFs;
}

export interface GrepLineResult {
  /** Path relative to the searched directory, or the file's name when a file was searched. */
  path: string;
  lineNumber: number;
  /** The line without its terminator, cut to 500 UTF-16 units as pi shows it. */
  text: string;
  isContext: boolean;
}

export interface GrepResult {
  matches: GrepLineResult[];
  matchCount: number;
  /** The limit, when one more match proved results were cut. */
  matchLimitReached: number | undefined;
  linesTruncated: boolean;
}

/**
 * Searches file contents in-process with ripgrep semantics; stable order, no rg binary.
 * When `signal` aborts, rejects with `Operation aborted` once the native search has stopped; the error's
 * `filesSearched` is how many files it had begun to read.
 */
export declare function grep(options: GrepOptions): Promise<GrepResult>;

export interface GrepToolFactoryOptions {
  /** Bound the search by this boundFs (and map its runtime root); default: unbounded below `cwd`. */
  fs?: BoundFs;
  /**
   * The pi-coding-agent module whose factories build the tools (`import * as pi from
   * "@earendil-works/pi-coding-agent"`), e.g. the one pi gives an extension. Default: the installed pi,
   * found by package name from this package's location. A TypeError if it is not a pi module.
   */
  pi?: PiModule;
}

/** pi's grep ToolDefinition from the installed pi, with a native execute. */
export declare function createGrepToolDefinition(
  cwd: string,
  options?: GrepToolFactoryOptions,
): ReturnType<Pi["createGrepToolDefinition"]>;
/** pi's grep AgentTool from the installed pi, with a native execute. */
export declare function createGrepTool(cwd: string, options?: GrepToolFactoryOptions): ReturnType<Pi["createGrepTool"]>;
