// pi-native-ops: native Operations for pi-coding-agent's tools.
// Each capability lives in its own module under js/; this file only re-exports.
export { createBoundFs } from "./js/fs.js";
export { createBashOperations, createPowerShellOperations, sandboxSupport } from "./js/bash.js";
export { glob } from "./js/find.js";
export { grep, createGrepTool, createGrepToolDefinition } from "./js/grep.js";
export { createNativeTools, createNativeToolDefinitions } from "./js/tools.js";
export { connect, createRemoteTools, createRemoteToolDefinitions, serverBinaryPath } from "./js/remote.js";
export { connectWebSocket } from "./js/websocket.js";
export { connectDaytona, connectE2B, connectVercelSandbox } from "./js/sandboxes.js";
