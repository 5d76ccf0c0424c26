// pi-native-ops: native Operations for pi-coding-agent's tools.
// Each capability lives in its own module under js/; this file only re-exports, and loads the remote faces lazily.
import { createRequire } from "node:module";

export { createBoundFs } from "./js/fs.js";
export { createBashOperations, createPowerShellOperations, sandboxSupport } from "./js/bash.js";
export { glob } from "./js/find.js";
export { grep, createGrepTool, createGrepToolDefinition } from "./js/grep.js";
export { createNativeTools, createNativeToolDefinitions } from "./js/tools.js";
export { serverBinaryPath } from "./js/server-binary.js";

// The remote face (the protocol client and the remote tools) is loaded at its first use, as the faces below:
// a program that only runs local tools never pays for it. Each connect loads it; the remote tools can only be
// given a connection one of them made, so they find it loaded (or load it then: require of an ES module).
let remote;
const require = createRequire(import.meta.url);
const remoteFace = async () => (remote ??= await import("./js/remote.js"));
const remoteFaceNow = () => {
  if (remote) return remote;
  try {
    remote = require("./js/remote.js");
  } catch (err) {
    // A Node without require(esm) (before 20.19 and 22.12), before any connect: no connection exists yet.
    if (err?.code !== "ERR_REQUIRE_ESM") throw err;
    throw new TypeError("options.connection must be a connection made by connect()");
  }
  return remote;
};

/** See js/remote.js. */
export async function connect(transport, ...options) {
  return (await remoteFace()).connect(transport, ...options);
}

/** See js/remote.js. */
export function createRemoteTools(cwd, options) {
  return remoteFaceNow().createRemoteTools(cwd, options);
}

/** See js/remote.js. */
export function createRemoteToolDefinitions(cwd, options) {
  return remoteFaceNow().createRemoteToolDefinitions(cwd, options);
}

// The WebSocket face and the cloud adapters load `ws`, most of this package's import time: each is
// loaded at its first call (they are async anyway), so importing the package for local tools stays fast.

/** See js/websocket.js. */
export async function connectWebSocket(url, ...options) {
  await remoteFace();
  return (await import("./js/websocket.js")).connectWebSocket(url, ...options);
}

/** See js/sandboxes.js. */
export async function connectDaytona(sandbox, ...options) {
  await remoteFace();
  return (await import("./js/sandboxes.js")).connectDaytona(sandbox, ...options);
}

/** See js/sandboxes.js. */
export async function connectE2B(sandbox, ...options) {
  await remoteFace();
  return (await import("./js/sandboxes.js")).connectE2B(sandbox, ...options);
}

/** See js/sandboxes.js. */
export async function connectVercelSandbox(sandbox, ...options) {
  await remoteFace();
  return (await import("./js/sandboxes.js")).connectVercelSandbox(sandbox, ...options);
}
