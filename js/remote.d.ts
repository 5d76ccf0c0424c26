/// <reference types="node" />
import type { Readable, Writable } from "node:stream";
import type { NativeBashOperations } from "./bash.js";
import type { BoundFs, IndexOptions } from "./fs.js";
import type { GrepOptions, GrepResult } from "./grep.js";
import type { BashSpawnHook, PiModule } from "./pi.js";
import type { Policy, PolicyEvent, PolicyEventsDropped } from "./policy-events.js";
import type { NativeToolDefinitions, NativeTools } from "./tools.js";

/**
 * The byte streams to a pi-native-ops-server: a child process with piped stdin/stdout (`spawn(...)`), a
 * Node Duplex (a socket), or `{ readable, writable }` as Node or web streams (a sandbox SDK's command).
 */
export type RemoteTransport =
  | { stdin: Writable | null; stdout: Readable | null }
  | { readable: Readable | ReadableStream<Uint8Array>; writable: Writable | WritableStream<Uint8Array> }
  | (Readable & Writable);

export interface ConnectOptions {
  /**
   * Whether exec sends the `env` pi passes (this machine's whole environment, API keys included).
   * Default `false`: commands run in the server's environment. `true` sends it; a function returns the
   * environment to send (or `undefined` for the server's).
   */
  forwardEnv?: boolean | ((env: NodeJS.ProcessEnv) => Record<string, string | undefined> | undefined | null);
  /** Aborts the handshake (e.g. a server that never answers). */
  signal?: AbortSignal;
  /**
   * Have the server keep a warm search index of its root for find and grep (as createBoundFs's `index`),
   * and give the connection's `fs.index`. A server started with `--index` already keeps one (then these
   * options are ignored). `index` needs a Linux server: elsewhere it stays aside and searches walk.
   */
  index?: boolean | IndexOptions;
  /**
   * The workspace policy the server enforces for every fs call, find and grep, sent before any call.
   * It is laid over the server's own `--policy` (if any), which it can only add to. Without it the
   * protected defaults apply. A rule the core refuses fails connect with the core's error. Commands
   * (`exec`) are held to it only when the server runs with `--sandbox` (each refusal then an event
   * with tool "bash"); without it they run unsandboxed on the server and are not confined by it.
   */
  policy?: Policy;
  /**
   * Receives each refusal of a file tool (from the server's Protected error) and each event the server
   * reports; `{ dropped, time }` says the server dropped that many events the client did not take fast
   * enough. A callback that throws (or rejects) is ignored.
   */
  onPolicyEvent?: (event: PolicyEvent | PolicyEventsDropped) => void;
  /**
   * Refuse a server that runs commands unsandboxed (started without `--sandbox`): connect rejects with
   * code `ERR_PI_NATIVE_OPS_UNSANDBOXED` and the connection is closed before any call. Default `false`.
   */
  requireSandbox?: boolean;
}

/** What the server said in its hello. */
export interface RemoteServerInfo {
  /** The protocol version (docs/protocol.md). */
  protocol: number;
  /** The server's version. */
  version: string;
  /** The workspace root as the agent sees it: every path is under it. */
  root: string;
  /** The server's `platform-arch`, e.g. `linux-x64`. */
  platform: string;
  /**
   * How the server confines commands (`pi-native-ops-server --sandbox`), or null when it runs them
   * unsandboxed. `mode`: the sandbox commands run in, null when the server's machine can make none (then
   * every command fails with `ESANDBOX`: none runs unconfined). `network`: `false` (none), `true` (the
   * host's) or the hosts its proxy allows.
   */
  sandbox: { mode: "namespaces" | "landlock" | null; network: boolean | string[] } | null;
}

/** A connection made by {@link connect}. */
export interface RemoteConnection {
  readonly server: RemoteServerInfo;
  /**
   * Shaped as createBoundFs()'s object, but for `view()` (the root's view is the server's own); `root` and
   * `runtimeRoot` are both the server's root. `fs.index` is the server's index when connected with the
   * `index` option (`ready` resolves with state `closed` if the connection ends first; `close()` of a
   * closed connection resolves).
   */
  readonly fs: Omit<BoundFs, "view">;
  /** pi's BashOperations on the server (shell found there as pi finds it). */
  readonly bash: NativeBashOperations;
  /** BashOperations running `shellPath`, a path on the server. */
  createBashOperations(options?: { shellPath?: string }): NativeBashOperations;
  /** grep() on the server; a relative `path` resolves against `cwd` (default: the server's root). */
  grep(options: Omit<GrepOptions, "fs">): Promise<GrepResult>;
  /**
   * Ends the stream (the server kills its running commands and exits); pending and later calls reject
   * with `remote connection closed: closed by the client`. Resolves once the end is written.
   */
  close(): Promise<void>;
}

/**
 * Connects to a pi-native-ops-server over `transport` and completes the handshake. Rejects with
 * `remote protocol mismatch: …` naming both versions when the server speaks another protocol. When the
 * stream ends or breaks, every pending and later call rejects with `remote connection closed: <reason>`.
 */
export declare function connect(transport: RemoteTransport, options?: ConnectOptions): Promise<RemoteConnection>;

export interface RemoteToolsOptions {
  /** The connection the tools run on (made with connect's `index` option for a warm search index). */
  connection: RemoteConnection;
  /** `shellPath` (on the server), plus pi's bash tool options (`spawnHook`, `commandPrefix`). */
  bash?: { shellPath?: string; spawnHook?: BashSpawnHook; commandPrefix?: string };
  /**
   * The pi-coding-agent module whose factories build the tools (`import * as pi from
   * "@earendil-works/pi-coding-agent"`), e.g. the one pi gives an extension. Default: the installed pi,
   * found by package name from this package's location. A TypeError if it is not a pi module.
   */
  pi?: PiModule;
}

/** Like createNativeTools(cwd): the seven tools, each running on the connection's server; `cwd` is a server path. */
export declare function createRemoteTools(cwd: string, options: RemoteToolsOptions): NativeTools;
/** The same as tool definitions, for `registerTool` or `createAgentSession({ customTools })`. */
export declare function createRemoteToolDefinitions(cwd: string, options: RemoteToolsOptions): NativeToolDefinitions;

/**
 * The local path of the pi-native-ops-server binary for a platform (default: this machine's), to
 * upload into a sandbox. Throws (code `ERR_PI_NATIVE_OPS_NO_SERVER`) naming what was tried when absent.
 */
export declare function serverBinaryPath(target?: { platform?: NodeJS.Platform; arch?: NodeJS.Architecture }): string;
