import type { RemoteConnection } from "./remote.js";
import type { WebSocketConnectOptions } from "./websocket.js";

/** Options of the sandbox adapters; the others are connectWebSocket's (and connect's). */
export interface SandboxConnectOptions extends Omit<WebSocketConnectOptions, "token"> {
  /** The workspace directory in the sandbox (the server's `--root`). */
  root: string;
  /** The port the server listens on in the sandbox, one the sandbox exposes (default 8765). */
  port?: number;
  /** The path the agent sees the workspace as (the server's `--runtime-root`). */
  runtimeRoot?: string;
  /**
   * Where the server binary goes in the sandbox (default `/tmp/pi-native-ops-server`). When the file
   * there has the same SHA-256 as the one to upload, the upload is skipped.
   */
  serverPath?: string;
  /** The local server binary to upload (default: `serverBinaryPath()` for Linux on the sandbox's architecture). */
  binary?: string;
  /** The session token (default: 24 random bytes, base64url). Goes to the server's environment only. */
  token?: string;
  /** The address the server binds in the sandbox (default `0.0.0.0`, for the platform's proxy). */
  host?: string;
  /** More server arguments (e.g. `["--index"]`, `["--idle-timeout", "600"]`). */
  serverArgs?: string[];
  /**
   * How long the first dial retries while the server starts and the proxy answers 502 (default 30000). A
   * server that exits first fails the connect at once where the SDK reports its exit (Vercel, E2B).
   */
  startTimeoutMs?: number;
}

/** The part of `@vercel/sandbox`'s Sandbox the adapter uses. */
export interface VercelSandboxLike {
  writeFiles(files: { path: string; content: Uint8Array; mode?: number }[]): Promise<void>;
  /** `{ cmd: "sh", args: ["-c", …] }` to look (stdout()), and `detached: true` to start the server (kill()). */
  runCommand(params: {
    cmd: string;
    args?: string[];
    env?: Record<string, string>;
    detached?: boolean;
  }): Promise<unknown>;
  domain(port: number): string;
}

/** The part of `e2b`'s Sandbox the adapter uses. */
export interface E2BSandboxLike {
  files: { write(path: string, data: ArrayBuffer): Promise<unknown> };
  commands: {
    run(
      cmd: string,
      opts?: { background?: boolean; envs?: Record<string, string>; timeoutMs?: number },
    ): Promise<unknown>;
  };
  getHost(port: number): string;
  trafficAccessToken?: string;
}

/** The part of `@daytonaio/sdk`'s Sandbox the adapter uses. */
export interface DaytonaSandboxLike {
  fs: { uploadFile(file: Buffer, remotePath: string): Promise<void> };
  process: {
    executeCommand(command: string): Promise<{ exitCode: number; result: string }>;
    createSession(sessionId: string): Promise<void>;
    executeSessionCommand(sessionId: string, req: { command: string; runAsync?: boolean }): Promise<unknown>;
    deleteSession?(sessionId: string): Promise<void>;
  };
  getPreviewLink(port: number): Promise<{ url: string; token?: string }>;
}

/**
 * pi-native-ops-server in a Vercel Sandbox created with `ports: [port]`: uploaded once (writeFiles),
 * started detached with the token in `env`, dialled at `sandbox.domain(port)`. `close()` ends the session
 * and the command.
 */
export declare function connectVercelSandbox(
  sandbox: VercelSandboxLike,
  options: SandboxConnectOptions,
): Promise<RemoteConnection>;
/** The same in an E2B sandbox: `files.write`, `commands.run(…, { background, envs })`, `getHost(port)`. */
export declare function connectE2B(sandbox: E2BSandboxLike, options: SandboxConnectOptions): Promise<RemoteConnection>;
/** The same in a Daytona sandbox: `fs.uploadFile`, a process session, `getPreviewLink(port)` and its token. */
export declare function connectDaytona(
  sandbox: DaytonaSandboxLike,
  options: SandboxConnectOptions,
): Promise<RemoteConnection>;
