import type { ConnectOptions, RemoteConnection } from "./remote.js";

export interface WebSocketConnectOptions extends ConnectOptions {
  /** The server's `PI_NATIVE_OPS_TOKEN` (characters `A-Z a-z 0-9 . _ ~ -`). */
  token: string;
  /**
   * How the token travels: `"header"` (default) as `Authorization: Bearer <token>`; `"protocol"` as a
   * `Sec-WebSocket-Protocol` entry, for a path where a proxy takes the Authorization header for itself.
   */
  tokenIn?: "header" | "protocol";
  /**
   * How long a dropped connection is redialled and resumed before pending calls reject with
   * `remote connection closed: …` (default 60000, the server's default `--grace`; keep it at most the
   * server's grace).
   */
  graceMs?: number;
  /**
   * How long the first dial retries a server not listening yet or a proxy answering 502/503/504
   * (default 10000). A refused token (401) or a server already serving a session (409) fails at once.
   */
  connectTimeoutMs?: number;
  /** Unacknowledged bytes kept for a replay before writes wait (default 8 MiB). */
  replayBytes?: number;
  /** Extra upgrade request headers (a platform's own access token, e.g. Daytona's preview token). */
  headers?: Record<string, string>;
  /** WebSocket ping interval (default 15000); 3 intervals without an answer count as a drop. */
  pingIntervalMs?: number;
}

/**
 * Connects to `pi-native-ops-server --listen` at `url` (`ws:`/`wss:`, or a platform's `http(s):` port
 * URL): the same object as {@link connect}. A dropped connection is resumed for up to `graceMs`; calls in
 * flight go on untouched. `close()` ends the session (the server kills its commands and exits).
 */
export declare function connectWebSocket(
  url: string | URL,
  options: WebSocketConnectOptions,
): Promise<RemoteConnection>;
