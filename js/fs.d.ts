/// <reference types="node" />
import type { BoundFindOperations } from "./find.js";
import type { BoundGrepOperations } from "./grep.js";
import type { Policy, PolicyEvent } from "./policy-events.js";

export type { Policy, PolicyEvent } from "./policy-events.js";

export interface BoundFsOptions {
  /** Absolute path the agent sees for `root` (e.g. `/workspace` in a sandbox). Default: `root`. */
  runtimeRoot?: string;
  /**
   * Keep a warm index of the workspace (Linux: a cached walk, n-gram posting lists and inotify watches)
   * that find and grep read instead of walking: the same results, byte for byte, never stale. `true` for
   * the defaults. Off by default. Elsewhere the index stays aside (`fs.index` says why) and searches walk.
   */
  index?: boolean | IndexOptions;
  /**
   * What no tool may read or write (docs/policy.md). Absent: `{ protect: true }`, the protected defaults only.
   * A rule that does not parse throws at creation, naming the option and the rule.
   */
  policy?: Policy;
  /**
   * Called with each refusal of the policy. Called synchronously as the refused operation fails; a callback
   * that throws is ignored (it never changes what the tool does).
   */
  onPolicyEvent?: (event: PolicyEvent) => void;
  /**
   * Keep every operation on the directory `root` named when the fs was made, even after that path comes
   * to name another (the workspace moved aside or removed, and made again). Default `false`: each call
   * follows the path, as Node's fs does (Linux and macOS; on Windows the root is always pinned).
   */
  pinRoot?: boolean;
}

/** Options of the warm search index. */
export interface IndexOptions {
  /** The most inotify watches (one per indexed directory) it may hold; more steps it aside. Default: the system's limit. */
  maxWatches?: number;
  /** Files larger than this many bytes are not indexed, and every grep reads them. Default 64 MiB. */
  maxFileBytes?: number;
  /**
   * Keep the index between sessions: saved when it closes, read back and checked against the tree when it
   * next starts (docs/index.md, "Persisted index"). `true`: `$XDG_CACHE_HOME/pi-native-ops/index` (else
   * `~/.cache/pi-native-ops/index`); a string: that absolute directory. Default `false`.
   */
  cache?: boolean | string;
  /** The cache directory's files add up to at most this many bytes (oldest removed first). Default 2 GiB. */
  cacheMaxBytes?: number;
}

/**
 * The index's state: `building` (searches walk meanwhile), `ready` (searches read it), `aside` (it cannot be
 * trusted now, `reason` says why, searches walk; rebuilt after a backoff unless the reason is permanent),
 * `closed`.
 */
export type IndexState = "building" | "ready" | "aside" | "closed";

export interface IndexStats {
  state: IndexState;
  /** Why it is aside (or why `ready` ended closed); else null. */
  reason: string | null;
  /** Files and directories indexed. */
  files: number;
  directories: number;
  /** Bytes of the files whose contents are indexed. */
  bytesIndexed: number;
  /** Memory the index holds, in bytes. */
  memoryBytes: number;
  /** Milliseconds the last completed (re)build took. */
  buildMs: number;
  /** When changes were last applied (ms since the epoch), or null. */
  lastRefresh: number | null;
  /** Files changed since indexed: read by every grep until re-indexed in the background. */
  dirtyFiles: number;
  /**
   * Files of 256 KiB and up still waiting for their exact filter (made in the background after the build;
   * until then grep may read them when it would not need to). 0 once the index is fully warm.
   */
  unfilteredFiles: number;
  /** inotify watches held. */
  watches: number;
  /** Files of the last build taken from the cache (unchanged since it was saved), not read. */
  restoredFiles: number;
  /** What the last build made of the cache: "restored", or why it was not used; null without a cache. */
  cache: string | null;
}

/** `fs.index`: the warm search index's lifecycle and figures. */
export interface BoundIndex {
  /**
   * Resolves once the first build has ended (state `ready`), or with state `aside` or `closed` when it will
   * not be ready; never rejects.
   */
  readonly ready: Promise<IndexStats>;
  stats(): Promise<IndexStats>;
  /** Stops the index (its thread, watches and memory); searches walk from then on. Idempotent. */
  close(): Promise<void>;
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
  /** The warm search index, when made with the `index` option; else undefined. */
  readonly index?: BoundIndex;
  /**
   * What the root's view is doing (Linux; docs/usage.md, "The root's view"): `"ready"` when `ls.stat`
   * and `ls.exists` of a path with no symlink on it take one system call; `"making"`, `"unasked"` (before
   * the first call, and after a mount was made or removed), or `"none"` (no view here, or for this root).
   */
  view(): "ready" | "making" | "unasked" | "none";
}

/**
 * Path-bounded Operations for pi's read/write/edit/ls/find/grep tools: nothing outside `root` is ever
 * read, written or listed, symlinks and races included. Refusals throw
 * `Error('path "<path>" is outside workspace')`.
 */
export declare function createBoundFs(root: string, options?: BoundFsOptions): BoundFs;
