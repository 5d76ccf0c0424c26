// Loads the native addon through napi-rs's generated loader (native.cjs), which picks the
// platform package (or NAPI_RS_NATIVE_LIBRARY_PATH), and turns its failure into an error
// that says which platform we are on, what was tried and what to do.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

function loadNative() {
  try {
    return require("../native.cjs");
  } catch (err) {
    const platform = `${process.platform}-${process.arch}`;
    const tried = [];
    for (let e = err.cause; e; e = e.cause) tried.push(`  - ${e.message.split("\n")[0]}`);
    const error = new Error(
      `pi-native-ops: no native binary for ${platform} (Node ${process.versions.node}).\n` +
        (tried.length ? `Tried:\n${tried.join("\n")}\n` : `Loader said: ${err.message.split("\n")[0]}\n`) +
        `Fix: reinstall so npm fetches the optional dependency "pi-native-ops-${platform}-*" ` +
        `(remove node_modules and package-lock.json, then npm install; do not use --no-optional / --omit=optional), ` +
        `or build from source with "npm run build", or point NAPI_RS_NATIVE_LIBRARY_PATH at a .node file.`,
    );
    error.code = "ERR_PI_NATIVE_OPS_NO_BINARY";
    error.cause = err;
    throw error;
  }
}

export const native = loadNative();
