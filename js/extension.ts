// pi's entry for pi-native-ops (package.json "pi"). TypeScript so that pi's loader transpiles it, and
// so maps the pi package names imported here to the pi that runs (an ES module in JavaScript it
// imports natively, where the names would find whatever copy node_modules holds, or none).
import { piNativeOpsWith } from "./extension.js";

export default piNativeOpsWith([
  ["@mariozechner/pi-coding-agent", () => import("@mariozechner/pi-coding-agent")],
  ["@earendil-works/pi-coding-agent", () => import("@earendil-works/pi-coding-agent")],
]);
