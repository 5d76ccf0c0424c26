// Helpers shared by the bench and the demo: finding rg/fd, and re-running under Node >= 22.19
// (which pi 1.6.0, the semantic reference, needs) when this Node is older.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/** An executable on PATH or in ~/.cargo/bin (where `cargo install` puts rg and fd), or null. */
export function findBinary(name) {
  for (const d of [...(process.env.PATH ?? "").split(":"), path.join(homedir(), ".cargo/bin")]) {
    const p = path.join(d, name);
    if (d && existsSync(p)) return p;
  }
  return null;
}

/** Puts the directories of the found binaries first on PATH, so pi's stock tools use them. */
export function preferOnPath(...binaries) {
  for (const bin of binaries) if (bin) process.env.PATH = `${path.dirname(bin)}:${process.env.PATH}`;
}

/** Whether this Node runs pi 1.6.0 (which needs Node >= 22.19). */
export function onNode22() {
  const [major, minor] = process.versions.node.split(".").map(Number);
  return major > 22 || (major === 22 && minor >= 19);
}

/**
 * When this Node is older than 22.19, re-runs the current script under the Node that
 * scripts/setup.sh installed (exiting with its status); returns when no re-run is needed or possible.
 */
export function rerunUnderNode22(extraEnv = {}) {
  if (onNode22() || process.env.PI_NATIVE_OPS_RERUN) return false;
  const node22 = spawnSync("bash", [path.join(repo, "scripts/node22.sh")], { encoding: "utf8" }).stdout.trim();
  if (!node22) return false;
  console.log(`(re-running under ${node22} for pi 1.6.0)`);
  const r = spawnSync(node22, process.argv.slice(1), {
    stdio: "inherit",
    env: { ...process.env, PI_NATIVE_OPS_RERUN: "1", PI_NATIVE_OPS_PI: "@earendil-works/pi-coding-agent", ...extraEnv },
  });
  process.exit(r.status ?? 1);
}
