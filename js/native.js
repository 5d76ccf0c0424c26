// Loads the native addon through napi-rs's generated loader (native.cjs), which picks the
// platform package (or NAPI_RS_NATIVE_LIBRARY_PATH), and turns its failure into an error
// that says which platform we are on, what was tried and what to do.
import { createRequire } from "node:module";
import { isMainThread } from "node:worker_threads";
import { PREBUILT } from "./platforms.js";

const require = createRequire(import.meta.url);

/** The napi-rs platform suffix for this process, e.g. `linux-x64-gnu`, `darwin-arm64`. */
export function platformSuffix() {
  const base = `${process.platform}-${process.arch}`;
  if (process.platform === "win32") return `${base}-msvc`;
  if (process.platform !== "linux") return base;
  // glibc reports its runtime version; musl does not.
  const header = process.report?.getReport?.().header;
  return `${base}-${header?.glibcVersionRuntime ? "gnu" : "musl"}`;
}

/** First line of each error in the generated loader's cause chain, minus its WASI probes. */
function attempts(err) {
  const lines = [];
  for (let e = err?.cause; e; e = e.cause) {
    const line = String(e.message).split("\n")[0];
    // The generated loader always probes a WASI fallback; this package publishes none.
    if (!/wasi/i.test(line)) lines.push(line);
  }
  return lines.reverse();
}

function noBinaryError(err) {
  const suffix = platformSuffix();
  const override = process.env.NAPI_RS_NATIVE_LIBRARY_PATH;
  const packageName = `pi-native-ops-${suffix}`;
  const tried = attempts(err);
  let fix;
  if (override) {
    fix =
      `NAPI_RS_NATIVE_LIBRARY_PATH is set to "${override}" and that file could not be loaded. ` +
      `Point it at a pi-native-ops .node file built for ${suffix}, or unset it to use the installed "${packageName}".`;
  } else if (PREBUILT.includes(suffix)) {
    fix =
      `The prebuilt binary ships in the optional dependency "${packageName}". Reinstall so npm fetches it: ` +
      `remove node_modules and package-lock.json, then run npm install, without --omit=optional / --no-optional ` +
      `(npm bug https://github.com/npm/cli/issues/4828). Or set NAPI_RS_NATIVE_LIBRARY_PATH to a .node file.`;
  } else {
    fix =
      `No prebuilt binary is published for ${suffix} (prebuilt: ${PREBUILT.join(", ")}). Build one from a ` +
      `checkout with a Rust toolchain ("npm run build") and set NAPI_RS_NATIVE_LIBRARY_PATH to the .node file.`;
  }
  const error = new Error(
    `pi-native-ops: no native binary could be loaded for ${suffix} (Node ${process.versions.node}).\n` +
      (tried.length ? `Tried:\n${tried.map((line) => `  - ${line}`).join("\n")}\n` : `Loader said: ${err?.message}\n`) +
      `Fix: ${fix}`,
  );
  error.code = "ERR_PI_NATIVE_OPS_NO_BINARY";
  error.cause = err;
  return error;
}

function loadNative() {
  try {
    return require("../native.cjs");
  } catch (err) {
    throw noBinaryError(err);
  }
}

export const native = loadNative();

// At exit Node waits for libuv's pool threads: a walk still running would hold the exit until it
// ends, so the native side stops every search first. Only the main thread's exit stops the
// process (a worker's would stop the searches of the whole process).
if (isMainThread) process.once("exit", () => native.shutdown());
