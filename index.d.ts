// pi-native-ops public types. Each capability declares its types beside its JS module.
export * from "./js/fs.js";
export * from "./js/bash.js";
export * from "./js/find.js";
export * from "./js/grep.js";
export * from "./js/tools.js";
export * from "./js/remote.js";
export * from "./js/websocket.js";
export * from "./js/sandboxes.js";
export type { Policy, PolicyEvent, PolicyEventsDropped } from "./js/policy-events.js";
export type { PiModule } from "./js/pi.js";
