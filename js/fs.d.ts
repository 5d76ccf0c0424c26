/// <reference types="node" />
import type { BoundFindOperations } from "./find.js";
import type { BoundGrepOperations } from "./grep.js";

export interface BoundFsOptions {
  /** Absolute path the agent sees for `root` (e.g. `/workspace` in a sandbox). Default: `root`. */
  runtimeRoot?: string;
}

/** What `ls.stat` returns: symlinks followed, still bounded. */
export interface BoundStats {
  size: number;
  mtimeMs: number;
  mode: number;
  isDirectory(): boolean;
  isFile(): boolean;
  isSymbolicLink(): boolean;
}

/** pi's `ReadOperations`, bounded. */
export interface BoundReadOperations {
  readFile(absolutePath: string): Promise<Buffer>;
  access(absolutePath: string): Promise<void>;
  detectImageMimeType(absolutePath: string): Promise<string | null>;
  createReadStream(absolutePath: string, options?: { signal?: AbortSignal }): AsyncIterable<Uint8Array>;
}

/** pi's `WriteOperations`, bounded; `writeFile` is atomic and writes through in-workspace symlinks. */
export interface BoundWriteOperations {
  writeFile(absolutePath: string, content: string | Buffer): Promise<void>;
  mkdir(dir: string): Promise<void>;
}

/** pi's `EditOperations`, bounded; `access` checks read and write permission. */
export interface BoundEditOperations {
  readFile(absolutePath: string): Promise<Buffer>;
  writeFile(absolutePath: string, content: string | Buffer): Promise<void>;
  access(absolutePath: string): Promise<void>;
}

/** pi's `LsOperations`, bounded; `exists` is false for a missing path and rejects with the refusal for an outside one. */
export interface BoundLsOperations {
  exists(absolutePath: string): Promise<boolean>;
  stat(absolutePath: string): Promise<BoundStats>;
  readdir(absolutePath: string): Promise<string[]>;
}

export interface BoundFs {
  /** The host root, absolute. */
  readonly root: string;
  /** The agent-visible root, absolute. */
  readonly runtimeRoot: string;
  read: BoundReadOperations;
  write: BoundWriteOperations;
  edit: BoundEditOperations;
  ls: BoundLsOperations;
  find: BoundFindOperations;
  grep: BoundGrepOperations;
}

/**
 * Path-bounded Operations for pi's read/write/edit/ls/find/grep tools: nothing outside `root` is ever
 * read, written or listed, symlinks and races included. Refusals throw
 * `Error('path "<path>" is outside workspace')`.
 */
export declare function createBoundFs(root: string, options?: BoundFsOptions): BoundFs;
