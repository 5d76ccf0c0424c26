// Helpers for the bash tests: process liveness by pid (zombies count as gone) and a polling wait.
import { readFileSync } from "node:fs";

export function isAlive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !stat
      .slice(stat.lastIndexOf(")") + 1)
      .trim()
      .startsWith("Z");
  } catch {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
}

export function pidsIn(text) {
  return [...text.matchAll(/PID=(\d+)/g)].map((m) => Number(m[1]));
}

export function collect() {
  const chunks = [];
  return {
    chunks,
    onData: (chunk) => chunks.push(chunk),
    text: () => Buffer.concat(chunks).toString(),
  };
}

/** Polls `condition` every 20 ms until it holds or `deadlineMs` passes; returns whether it held. */
export async function waitFor(condition, deadlineMs = 30_000) {
  const deadline = Date.now() + deadlineMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}
