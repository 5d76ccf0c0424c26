// pi-native-ops: native Operations for pi-coding-agent's tools.
// Each capability lives in its own module under js/; this file only re-exports.
export { createBoundFs } from "./js/fs.js";
export { createBashOperations, createPowerShellOperations, sandboxSupport } from "./js/bash.js";
export { glob } from "./js/find.js";
export { grep, createGrepTool, createGrepToolDefinition } from "./js/grep.js";
export { createNativeTools, createNativeToolDefinitions } from "./js/tools.js";
export { connect, createRemoteTools, createRemoteToolDefinitions, serverBinaryPath } from "./js/remote.js";

// The WebSocket face and the cloud adapters load `ws`, most of this package's import time: each is
// loaded at its first call (they are async anyway), so importing the package for local tools stays fast.

/** See js/websocket.js. */
export async function connectWebSocket(url, ...options) {
  return (await import("./js/websocket.js")).connectWebSocket(url, ...options);
}

/** See js/sandboxes.js. */
export async function connectDaytona(sandbox, ...options) {
  return (await import("./js/sandboxes.js")).connectDaytona(sandbox, ...options);
}

/** See js/sandboxes.js. */
export async function connectE2B(sandbox, ...options) {
  return (await import("./js/sandboxes.js")).connectE2B(sandbox, ...options);
}

/** See js/sandboxes.js. */
export async function connectVercelSandbox(sandbox, ...options) {
  return (await import("./js/sandboxes.js")).connectVercelSandbox(sandbox, ...options);
}
