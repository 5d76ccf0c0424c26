// The installed pi-coding-agent, loaded on first use: PI_NATIVE_OPS_PI names the package to use,
// otherwise the current name (@earendil-works, pi >= 1.0) is tried before the legacy one (@mariozechner).
// Only the tool factories need pi, so importing this package never loads it (loading pi costs about a
// second). pi is ESM-only and the factories are synchronous, so it is loaded with require(esm): that
// needs Node >= 20.19 or >= 22.12, and works because pi's module graph has no top-level await.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(import.meta.url);

let found = null;

/**
 * The file `import(name)` would load, found from this package's location. pi's package.json exports
 * only an "import" condition, which require.resolve() does not match, so the entry is read from it.
 */
function resolveEsm(name) {
  for (const dir of require.resolve.paths(name) ?? []) {
    const packageDir = path.join(dir, name);
    let manifest;
    try {
      manifest = require(path.join(packageDir, "package.json"));
    } catch {
      continue;
    }
    const root = manifest.exports?.["."] ?? manifest.exports;
    const entry = (typeof root === "string" ? root : (root?.import ?? root?.default)) ?? manifest.main ?? "index.js";
    return path.join(packageDir, typeof entry === "string" ? entry : entry.default);
  }
  throw new Error(`Cannot find package '${name}'`);
}

function load(name) {
  try {
    return require(resolveEsm(name));
  } catch (err) {
    if (err.code === "ERR_REQUIRE_ESM") {
      err.message =
        `Node ${process.versions.node} cannot load the ES module pi from a synchronous call ` +
        "(require(esm) needs Node >= 20.19 or >= 22.12)";
    } else if (err.code === "ERR_REQUIRE_ASYNC_MODULE") {
      err.message = "this pi's module graph uses top-level await, which require(esm) cannot load";
    }
    throw err;
  }
}

/** The pi module and its package name, loaded on the first call; throws saying why none could be loaded. */
export function requirePi() {
  if (found) return found;
  const names = process.env.PI_NATIVE_OPS_PI
    ? [process.env.PI_NATIVE_OPS_PI]
    : ["@earendil-works/pi-coding-agent", "@mariozechner/pi-coding-agent"];
  const failures = [];
  for (const name of names) {
    try {
      found = { name, module: load(name) };
      return found;
    } catch (err) {
      failures.push(`${name}: ${String(err.message).split("\n")[0]}`);
    }
  }
  throw new Error(
    `pi-native-ops: this needs pi-coding-agent, and none could be loaded:\n  ${failures.join("\n  ")}\n` +
      `Install "@earendil-works/pi-coding-agent" (Node >= 22.19) or "@mariozechner/pi-coding-agent".`,
  );
}

/** The factories and helpers the tools take from pi; a `pi` option lacking one is not a pi module. */
const NEEDED = [
  "createReadToolDefinition",
  "createBashToolDefinition",
  "createEditToolDefinition",
  "createWriteToolDefinition",
  "createGrepToolDefinition",
  "createFindToolDefinition",
  "createLsToolDefinition",
  "createReadTool",
  "createBashTool",
  "createEditTool",
  "createWriteTool",
  "createGrepTool",
  "createFindTool",
  "createLsTool",
  "truncateHead",
  "formatSize",
];

/** The pi modules piOf has returned. */
const accepted = new WeakSet();

/**
 * The pi module a factory uses: its `pi` option (the module as `import * as pi from
 * "@earendil-works/pi-coding-agent"` gives it, e.g. the copy pi hands an extension), else the installed
 * one found by name ({@link requirePi}).
 */
export function piOf(option) {
  if (option === undefined) {
    const { module } = requirePi();
    accepted.add(module);
    return module;
  }
  // A module already chosen (found by name, or checked) is passed on between the factories as is.
  if (accepted.has(option)) return option;
  if (option === null || (typeof option !== "object" && typeof option !== "function")) {
    throw new TypeError(
      `pi must be the pi-coding-agent module (import * as pi from "@earendil-works/pi-coding-agent")`,
    );
  }
  const missing = NEEDED.filter((name) => typeof option[name] !== "function");
  if (missing.length > 0) {
    throw new TypeError(
      `pi must be the pi-coding-agent module (import * as pi from "@earendil-works/pi-coding-agent"): ` +
        `it has no ${missing.slice(0, 3).join(", ")}${missing.length > 3 ? ", …" : ""}`,
    );
  }
  accepted.add(option);
  return option;
}
