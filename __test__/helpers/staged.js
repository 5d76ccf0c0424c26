// A copy of what a child process run as another user (nobody) loads: the built package (its JS, the
// addon, the server), the test helpers and pi's package tree. A checkout in a private directory (root's
// home, a `mktemp -d`: mode 0700) is closed to every other user, so such a child runs from this copy
// instead, laid out as the checkout is (relative imports hold) in a temp directory any user can read:
// directories 0755, files 0644 (executables 0755). Made once per process, removed at exit or by
// removeStaged(). Node itself may stay where it is, even inside the checkout (.tools/): setpriv execs
// it while it still holds root's capabilities, dropped by that exec.
import {
  chmodSync,
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const checkout = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
// What the children load: the package (its manifest and "files") and the helpers; BUILT names the
// build's outputs beside them (the addon, the server).
const PACKAGE_FILES = ["package.json", "index.js", "native.cjs", "js", "__test__/helpers"];
const BUILT = /^pi-native-ops(\..+\.node|-server\..+)$/;

let root;
const stagedPackages = new Set();
process.once("exit", () => removeStaged());

/** Removes the staged copy (each test file's afterAll: vitest may end a worker without "exit"). */
export function removeStaged() {
  if (root) rmSync(root, { recursive: true, force: true });
  root = undefined;
  stagedPackages.clear();
}

/**
 * The staged copy's path of `rel` (a path relative to the checkout, e.g. "index.js"), staging the
 * package and the helpers on first use. `{ pi: name }` stages that pi package and its dependencies too.
 */
export function staged(rel, { pi } = {}) {
  if (!root) {
    root = mkdtempSync(path.join(os.tmpdir(), "pno-staged-"));
    chmodSync(root, 0o755);
    for (const name of PACKAGE_FILES) put(path.join(checkout, name), path.join(root, name), false);
    for (const name of readdirSync(checkout)) {
      if (BUILT.test(name)) put(path.join(checkout, name), path.join(root, name), false);
    }
    // The package's own dependencies (ws, which js/websocket.js imports).
    const manifest = JSON.parse(readFileSync(path.join(checkout, "package.json"), "utf8"));
    for (const dep of Object.keys(manifest.dependencies ?? {})) stageDependency(dep, checkout);
  }
  if (pi) stageDependency(pi, checkout);
  return path.join(root, rel);
}

/** Stages the package `name` as Node resolves it from `fromDir`, and its dependencies, at their paths. */
function stageDependency(name, fromDir) {
  const require = createRequire(path.join(fromDir, "package.json"));
  const dir = (require.resolve.paths(name) ?? [])
    .map((d) => path.join(d, name))
    .find((d) => existsSync(path.join(d, "package.json")));
  if (!dir || stagedPackages.has(dir)) return;
  stagedPackages.add(dir);
  const rel = path.relative(checkout, dir);
  // A package found above the checkout goes where the staged tree's own lookup finds it.
  const target = path.join(root, rel.startsWith("..") ? path.join("node_modules", name) : rel);
  put(dir, target, true, (entry) => entry !== "node_modules");
  const manifest = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8"));
  const deps = { ...manifest.peerDependencies, ...manifest.optionalDependencies, ...manifest.dependencies };
  for (const dep of Object.keys(deps)) stageDependency(dep, dir);
}

/**
 * Copies `src` (a file or, recursively, a directory, following symbolic links) to `dst` with modes any
 * user can read. `link`: a file other users may already read is hard-linked (no copy of pi's tree,
 * the same inode: its mode is left alone), copied when it cannot be.
 */
function put(src, dst, link, keep = () => true) {
  if (!existsSync(src)) return;
  const st = statSync(src);
  mkdirs(path.dirname(dst));
  if (st.isDirectory()) {
    mkdirs(dst);
    for (const entry of readdirSync(src)) {
      if (entry !== ".bin" && keep(entry)) put(path.join(src, entry), path.join(dst, entry), link);
    }
    return;
  }
  // Other users may read it and, when the owner may execute it, execute it.
  const mode = st.mode & 0o100 ? 0o755 : 0o644;
  if (link && (st.mode & 0o777 & mode) === mode) {
    try {
      linkSync(src, dst);
      return;
    } catch {
      // Another file system, or links refused: a copy.
    }
  }
  copyFileSync(src, dst);
  chmodSync(dst, mode);
}

/** Makes `dir` and its missing parents below the staged root, each 0755 whatever the umask. */
function mkdirs(dir) {
  if (existsSync(dir)) return;
  mkdirs(path.dirname(dir));
  mkdirSync(dir);
  chmodSync(dir, 0o755);
}
