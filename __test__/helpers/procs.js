// Host processes seen from /proc, for the sandbox suites' "nothing is left" checks.
import { readdirSync, readFileSync } from "node:fs";

/** Host pids whose command line contains `marker` (the tree of a command that used it); zombies excluded. */
export function pidsWith(marker) {
  const pids = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8");
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const zombie = stat
        .slice(stat.lastIndexOf(")") + 1)
        .trim()
        .startsWith("Z");
      // cmdline separates the arguments with NUL bytes.
      if (!zombie && cmdline.replaceAll("\0", " ").includes(marker)) pids.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** Waits (polling, up to `tries` × 25 ms) for every process carrying `marker` to be gone; what is left. */
export async function untilDead(marker, tries = 200) {
  for (let i = 0; i < tries && pidsWith(marker).length > 0; i++) await new Promise((r) => setTimeout(r, 25));
  return pidsWith(marker);
}
