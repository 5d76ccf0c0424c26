// The event loop stays free during pi's ls (docs/contracts.md, "The event loop"): ls stats every entry
// in a row of awaits, which never leave the microtask queue when the stats answer synchronously, so a run
// of synchronous stats is cut and the loop turns; a stat that needs the component walk (symlinks to
// follow) runs in the thread pool. Structural checks, no clock: the loop turns while the ls is pending,
// and an abort fired from the loop ends it before it has stated every entry.
import { mkdirSync, symlinkSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBoundFs } from "pi-native-ops";
import { pi } from "./helpers/pi.js";
import { removeTree, tempDir } from "./helpers/tree.js";

const ENTRIES = 30_000;
const unix = process.platform !== "win32";
let root;
beforeAll(() => {
  if (!unix) return;
  root = tempDir("pno-fs-loop-");
  // Dangling symlinks: each stat fails (the walk's or the kernel's ENOENT), costing the most per entry.
  mkdirSync(path.join(root, "dangling"));
  for (let i = 0; i < ENTRIES; i++) symlinkSync(`missing-${i}`, path.join(root, "dangling", `l${i}`));
  // Chains of absolute symlinks (the kernel's bounded resolution refuses those: the component walk).
  mkdirSync(path.join(root, "chains"));
  const chains = path.join(root, "chains");
  for (let c = 0; c < 20; c++) {
    for (let i = 0; i < 30; i++) {
      const next = i === 29 ? path.join(chains, "target") : path.join(chains, `c${c}-${i + 1}`);
      symlinkSync(next, path.join(chains, `c${c}-${i}`));
    }
  }
  mkdirSync(path.join(chains, "target"));
}, 120_000);
afterAll(() => root && removeTree(root));

/** Runs pi's ls with the bound fs's operations on `dir`, counting stats and loop turns (setImmediate). */
async function lsCounting(dir, { abortAfterStats } = {}) {
  const fs = createBoundFs(root);
  let stats = 0;
  const ops = {
    ...fs.ls,
    stat: (p) => {
      stats++;
      return fs.ls.stat(p);
    },
  };
  const controller = new AbortController();
  const tool = pi.createLsTool(root, { operations: ops });
  let turns = 0;
  let pending = true;
  // Turns counted once the entries' stats have begun (the first stat is the directory's): while the
  // listing itself is in the thread pool the loop spins freely.
  const turn = () => {
    if (!pending) return;
    if (stats > 1) turns++;
    if (abortAfterStats !== undefined && stats >= abortAfterStats) controller.abort();
    setImmediate(turn);
  };
  setImmediate(turn);
  try {
    const result = await tool.execute("ls", { path: dir, limit: 1e9 }, controller.signal);
    return { turns, stats, text: result.content[0].text };
  } catch (err) {
    return { turns, stats, error: err.message };
  } finally {
    pending = false;
  }
}

describe.skipIf(!unix)("pi's ls leaves the event loop free", () => {
  it("the loop turns many times while 30,000 dangling symlinks are stated", async () => {
    const got = await lsCounting("dangling");
    // Every dangling link is skipped (pi skips what it cannot stat).
    expect(got.text).toBe("(empty directory)");
    expect(got.stats).toBe(ENTRIES + 1);
    // Synchronous throughout, the loop would turn only while the directory is listed.
    expect(got.turns).toBeGreaterThan(5);
  });

  it("an abort fired from the loop ends the ls before it has stated every entry", async () => {
    const got = await lsCounting("dangling", { abortAfterStats: 1000 });
    expect(got.error).toBe("Operation aborted");
    expect(got.stats).toBeLessThan(ENTRIES);
  });

  it("stats that need the component walk run off the loop, with the same answers", async () => {
    const got = await lsCounting("chains");
    const names = got.text.split("\n");
    expect(names).toHaveLength(20 * 30 + 1);
    expect(names.filter((n) => n.endsWith("/"))).toHaveLength(20 * 30 + 1);
    // One turn at least per stat through the pool, beyond the listing's.
    expect(got.turns).toBeGreaterThan(20 * 30);
  });
});
