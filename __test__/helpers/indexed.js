// Workspaces with the warm search index on, for the index suites (__test__/index-*.test.js): searches run
// through pi's find tool and our grep tool, compared byte for byte with the same searches through a fresh
// fs without an index over the same tree. Workspaces made here are closed and removed in afterEach.
// PI_NATIVE_OPS_INDEX_CACHE=1 (the persisted leg): a workspace made ready is given the persisted index,
// built with a cache directory, closed (saved) and started again from its cache file, which must be
// restored.
import { spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import { afterEach, expect } from "vitest";
import * as pno from "pi-native-ops";
import { pi, runTool } from "./pi.js";
import { makeTree, tempDir } from "./tree.js";

const made = [];
afterEach(async () => {
  const all = made.splice(0);
  await Promise.all(all.map((ws) => ws.fs.index?.close()));
  for (const ws of all) {
    // A test may leave modes that stop rm (chmod 000): open them again first.
    spawnSync("chmod", ["-R", "u+rwX", ws.base], { stdio: "ignore" });
    rmSync(ws.base, { recursive: true, force: true });
    rmSync(`${ws.base}.cache`, { recursive: true, force: true });
  }
});

/**
 * A temp directory holding `spec` (helpers/tree.js's makeTree) at `<base>/<sub>` (default the base
 * itself), and a bound fs over it with `index` (createBoundFs's option). `ready`: awaits the build and
 * expects state "ready". `setup(root)` runs before the index starts. Returns `{ base, root, fs, stats }`.
 */
export async function workspace(spec, { index = true, ready = true, sub = "", prefix = "pno-index-", setup } = {}) {
  const base = tempDir(prefix);
  const root = sub ? `${base}/${sub}` : base;
  makeTree(base, sub ? { [`${sub}/`]: "" } : {});
  makeTree(root, spec);
  // What makeTree cannot make (hard links), before the index starts.
  setup?.(root);
  const persisted = ready && index !== false && process.env.PI_NATIVE_OPS_INDEX_CACHE === "1";
  if (persisted) {
    index = { ...(index === true ? {} : index), cache: `${base}.cache` };
    const first = pno.createBoundFs(root, { index });
    await first.index.ready;
    await first.index.close();
  }
  const fs = pno.createBoundFs(root, { index });
  const ws = { base, root, fs, stats: null };
  made.push(ws);
  if (ready) {
    ws.stats = await fs.index.ready;
    expect(ws.stats.state, ws.stats.reason ?? "").toBe("ready");
    if (persisted) expect(ws.stats.cache).toBe("restored");
  }
  return ws;
}

/** Tool outputs as the model reads them: `{ text, details }` or `{ error }`, one per `[tool, params]`. */
export async function run(fs, cwd, searches) {
  const tools = { find: pi.createFindTool(cwd, { operations: fs.find }), grep: pno.createGrepTool(cwd, { fs }) };
  const out = [];
  for (const [name, params] of searches) {
    const r = await runTool(tools[name], params);
    out.push(r.error !== undefined ? { error: r.error } : { text: r.text, details: r.details ?? null });
  }
  return out;
}

/**
 * Runs `searches` through the indexed fs at once, then through a fresh unindexed fs over the same root;
 * expects the same outputs, and the index ready (`state`: expected state, default "ready"). Returns the
 * indexed outputs.
 */
export async function expectFresh(ws, searches, { cwd = ws.root, state = "ready" } = {}) {
  const got = await run(ws.fs, cwd, searches);
  const want = await run(pno.createBoundFs(ws.root), cwd, searches);
  expect(got).toEqual(want);
  if (state) {
    const stats = await ws.fs.index.stats();
    expect(stats.state, stats.reason ?? "").toBe(state);
  }
  return got;
}

/**
 * Searches, makes `change`, and searches again at once: the outputs equal a fresh fs's (expectFresh) and
 * differ from before the change, so an index that missed the change would fail the comparison.
 */
export async function step(ws, searches, change, opts = {}) {
  const before = await run(ws.fs, opts.cwd ?? ws.root, searches);
  await change();
  const after = await expectFresh(ws, searches, opts);
  expect(after).not.toEqual(before);
  return after;
}

/** Waits (polling, 30 s deadline) until the background thread has re-indexed every changed file. */
export async function reindexed(ws) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const stats = await ws.fs.index.stats();
    if (stats.dirtyFiles === 0) return stats;
    if (Date.now() > deadline) throw new Error(`still ${stats.dirtyFiles} dirty files after 30 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Waits (polling, `seconds` deadline) until stats satisfy `ok`; returns those stats. */
export async function statsUntil(ws, ok, seconds = 90) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const stats = await ws.fs.index.stats();
    if (ok(stats)) return stats;
    if (Date.now() > deadline) throw new Error(`index stats never matched in ${seconds} s: ${JSON.stringify(stats)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const bash = pno.createBashOperations();
/** Runs `command` through our bash Operations in `cwd`; its output; throws unless it exits 0. */
export async function sh(command, cwd) {
  let out = "";
  const { exitCode } = await bash.exec(command, cwd, {
    onData: (c) => {
      out += c.toString("utf8");
    },
  });
  if (exitCode !== 0) throw new Error(`${command}: exit ${exitCode}: ${out}`);
  return out;
}
