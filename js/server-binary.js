// Where the pi-native-ops-server binary for a platform is on this machine: a checkout's build, or the
// installed platform package (to upload it into a sandbox or run it in a container).
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { checkObject, checkString } from "./args.js";
import { native, platformSuffix } from "./native.js";

const require = createRequire(import.meta.url);

const SERVER_FILE = "pi-native-ops-server";

/** The platform suffixes a server binary for `platform`/`arch` may be published under. */
function suffixesFor(platform, arch) {
  if (platform === process.platform && arch === process.arch) return [platformSuffix()];
  const base = `${platform}-${arch}`;
  if (platform === "win32") return [`${base}-msvc`];
  // Linux servers are static, so either libc's package serves any Linux machine.
  if (platform === "linux") return [`${base}-musl`, `${base}-gnu`];
  return [base];
}

/**
 * The local path of the pi-native-ops-server binary for a platform (default: this one), to upload into
 * a sandbox: `pi-native-ops-server.<suffix>` beside package.json in a checkout (scripts/build-server.sh),
 * else `pi-native-ops-server` in the installed platform package `pi-native-ops-<suffix>`.
 */
export function serverBinaryPath(target = {}) {
  checkObject(target, "serverBinaryPath: target");
  const { platform = process.platform, arch = process.arch } = target;
  checkString(platform, "platform");
  checkString(arch, "arch");
  const exe = platform === "win32" ? ".exe" : "";
  const packageRoot = path.dirname(require.resolve("../package.json"));
  const tried = [];
  for (const suffix of suffixesFor(platform, arch)) {
    const local = path.join(packageRoot, `${SERVER_FILE}.${suffix}${exe}`);
    tried.push(local);
    if (existsSync(local)) return local;
    let packageDir = null;
    try {
      packageDir = path.dirname(require.resolve(`pi-native-ops-${suffix}/package.json`));
    } catch {
      tried.push(`package pi-native-ops-${suffix} (not installed)`);
      continue;
    }
    const installed = path.join(packageDir, `${SERVER_FILE}${exe}`);
    tried.push(installed);
    if (existsSync(installed)) return installed;
  }
  const suffixes = suffixesFor(platform, arch);
  const error = new Error(
    `pi-native-ops: no ${SERVER_FILE} binary for ${platform}-${arch}.\nTried:\n${tried.map((t) => `  - ${t}`).join("\n")}\n` +
      `Fix: install the platform package "pi-native-ops-${suffixes[0]}" (for another machine than this one: ` +
      `npm install --force pi-native-ops-${suffixes[0]}), or build it from a checkout with scripts/build-server.sh.`,
  );
  error.code = "ERR_PI_NATIVE_OPS_NO_SERVER";
  throw error;
}

let helperGiven = false;

/**
 * Gives the addon its helper once, before any sandbox or root's view is made: the platform's
 * pi-native-ops-server, which runs each sandboxed command's supervisor and init and makes a root's
 * view (nothing of this process goes into a sandbox or a namespace). Not found, the core refuses every
 * sandbox (ESANDBOX) and says why, and roots have no view.
 */
export function giveHelper() {
  if (helperGiven || typeof native.sandboxHelper !== "function") return;
  helperGiven = true;
  let found;
  try {
    found = serverBinaryPath();
  } catch {
    found = undefined;
  }
  native.sandboxHelper(found);
}
