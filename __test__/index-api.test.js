// The warm search index's API through the built package and the built server: the `index`
// option's validation, `fs.index`'s shape and lifecycle (ready, stats, close, the finalizer), the tools'
// pass-through, the fallback where there is no inotify, and the same through a remote connection
// (connect's `index` option, the server's `--index`). What searches return with the index on is the
// freshness and parity suites' matter; here only enough searching to see the index serves them.
import { spawn, spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import * as pno from "pi-native-ops";
import { fakeServer } from "./helpers/fake-server.js";
import { statsUntil } from "./helpers/indexed.js";
import { runTool } from "./helpers/pi.js";
import { boundRootOf } from "../js/args.js";
import { native } from "../js/native.js";
import { makeTree, tempDir } from "./helpers/tree.js";

const linux = process.platform === "linux";
const STATS_KEYS = [
  "state",
  "reason",
  "files",
  "directories",
  "bytesIndexed",
  "memoryBytes",
  "buildMs",
  "lastRefresh",
  "dirtyFiles",
  "unfilteredFiles",
  "watches",
  "restoredFiles",
  "cache",
].sort();

// The tree: 5 files of known sizes in 3 directories (the root, src, src/deep), nothing ignored.
const FILES = {
  "README.md": "# demo\nthe needle is not here\n",
  "src/a.js": "export const needle = 1;\n",
  "src/b.js": "export const hay = 2;\n",
  "src/deep/c.txt": "needle in deep\nline two\n",
  "notes.txt": "hay\n".repeat(100),
};
const FILE_COUNT = Object.keys(FILES).length;
const DIR_COUNT = 3;
const BYTES = Object.values(FILES).reduce((n, text) => n + Buffer.byteLength(text), 0);

const dirs = [];
const closers = [];
function tree(spec = FILES) {
  const dir = tempDir("pno-index-api-");
  dirs.push(dir);
  return makeTree(dir, spec);
}
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A bound fs with the index on, closed after the test. */
function indexedFs(root, index = true) {
  const fs = pno.createBoundFs(root, { index });
  closers.push(() => fs.index.close());
  return fs;
}

/**
 * What find and grep answer over `fs` (in `root`), the results the index must never change; `grep` is a
 * connection's grep for a remote fs.
 */
async function searches(fs, root, grep = (options) => pno.grep({ fs, ...options })) {
  const found = await fs.find.glob("**/*.js", root, { ignore: ["**/.git/**", "**/node_modules/**"], limit: 100 });
  const plain = await grep({ pattern: "needle", path: root });
  const regex = await grep({ pattern: "hay|two", path: root, ignoreCase: true, limit: 3 });
  return { found, grep: plain, regex };
}

describe("the index option", () => {
  it("is off unless asked for: fs.index is undefined", () => {
    const root = tree();
    expect(pno.createBoundFs(root).index).toBeUndefined();
    expect(pno.createBoundFs(root, { index: false }).index).toBeUndefined();
    expect("index" in pno.createBoundFs(root, {})).toBe(false);
  });

  it("refuses bad values with a TypeError naming the option", () => {
    const root = tree();
    const cases = [
      [1, "index must be true, false or an object { maxWatches?, maxFileBytes?, cache?, cacheMaxBytes? }, got number"],
      [
        "yes",
        "index must be true, false or an object { maxWatches?, maxFileBytes?, cache?, cacheMaxBytes? }, got string",
      ],
      [null, "index must be true, false or an object { maxWatches?, maxFileBytes?, cache?, cacheMaxBytes? }, got null"],
      [
        [],
        "index must be true, false or an object { maxWatches?, maxFileBytes?, cache?, cacheMaxBytes? }, got an array",
      ],
      [
        { maxWatch: 5 },
        "index.maxWatch is not an index option (the options are maxWatches, maxFileBytes, cache, cacheMaxBytes)",
      ],
      [{ maxWatches: 0 }, "index.maxWatches must be an integer >= 1, got 0"],
      [{ maxWatches: 1.5 }, "index.maxWatches must be an integer >= 1, got 1.5"],
      [{ maxWatches: "8" }, "index.maxWatches must be an integer >= 1, got string"],
      [{ maxFileBytes: -1 }, "index.maxFileBytes must be an integer >= 0, got -1"],
      [{ maxFileBytes: Number.POSITIVE_INFINITY }, "index.maxFileBytes must be an integer >= 0, got Infinity"],
      [{ maxFileBytes: null }, "index.maxFileBytes must be an integer >= 0, got null"],
    ];
    for (const [index, message] of cases) {
      expect(() => pno.createBoundFs(root, { index }), JSON.stringify(index)).toThrow(new TypeError(message));
    }
    // The tools validate through createBoundFs.
    expect(() => pno.createNativeTools(root, { index: 2 })).toThrow(TypeError);
    expect(() => pno.createNativeToolDefinitions(root, { index: { maxWatches: -1 } })).toThrow(
      "index.maxWatches must be an integer >= 1, got -1",
    );
  });

  it("takes its options", async () => {
    const root = tree();
    const fs = indexedFs(root, { maxWatches: 1000, maxFileBytes: 1 << 20 });
    expect((await fs.index.ready).state).toBe(linux ? "ready" : "aside");
  });
});

describe.runIf(linux)("fs.index", () => {
  it("has ready (one promise), stats() and close(), and is frozen", async () => {
    const root = tree();
    const fs = indexedFs(root);
    const { index } = fs;
    expect(Object.isFrozen(index)).toBe(true);
    expect(Object.keys(index).sort()).toEqual(["close", "ready", "stats"]);
    expect(index.ready).toBeInstanceOf(Promise);
    expect(index.ready).toBe(index.ready);
    expect(index.stats()).toBeInstanceOf(Promise);
    await index.ready;
  });

  it("ready resolves with the built index's figures: the files, directories and bytes of the tree", async () => {
    const root = tree();
    const fs = indexedFs(root);
    const stats = await fs.index.ready;
    expect(Object.keys(stats).sort()).toEqual(STATS_KEYS);
    expect(stats).toMatchObject({
      state: "ready",
      reason: null,
      files: FILE_COUNT,
      directories: DIR_COUNT,
      bytesIndexed: BYTES,
      dirtyFiles: 0,
      unfilteredFiles: 0,
    });
    // One per indexed directory, and the root's ancestors' (their ignore files apply too).
    expect(stats.watches).toBeGreaterThanOrEqual(DIR_COUNT);
    expect(stats.memoryBytes).toBeGreaterThan(0);
    expect(stats.buildMs).toBeGreaterThanOrEqual(0);
    expect(stats.lastRefresh === null || typeof stats.lastRefresh === "number").toBe(true);
    // stats() agrees once ready.
    expect(await fs.index.stats()).toMatchObject({ state: "ready", files: FILE_COUNT, bytesIndexed: BYTES });
  });

  it("counts the large files still owed an exact filter down to 0, while grep stays exact", async () => {
    // Three files of 256 KiB and up (the threshold for an exact filter), one holding the needle.
    const big = (word) => `${word}_${"x".repeat(60)}\n`.repeat(5000);
    const root = tree({
      ...FILES,
      "gen/a.h": big("IRQ_NEEDLE"),
      "gen/b.h": big("hay"),
      "gen/c.h": `${big("hay")}needle\n`,
    });
    const fs = indexedFs(root);
    const ready = await fs.index.ready;
    expect(ready.unfilteredFiles).toBeGreaterThanOrEqual(0);
    expect(ready.unfilteredFiles).toBeLessThanOrEqual(3);
    const warm = await statsUntil({ fs }, (s) => s.unfilteredFiles === 0, 30);
    expect(warm).toMatchObject({ state: "ready", files: FILE_COUNT + 3, unfilteredFiles: 0 });
    const live = pno.createBoundFs(root);
    for (const pattern of ["needle", "IRQ_NEEDLE", "hay_x"])
      expect(await pno.grep({ fs, pattern, path: root }), pattern).toEqual(
        await pno.grep({ fs: live, pattern, path: root }),
      );
  });

  it("stats() after a change: the search after it sees it, and the refresh is recorded", async () => {
    const root = tree();
    const fs = indexedFs(root);
    const before = await fs.index.ready;
    const t0 = Date.now();
    await fs.write.writeFile(path.join(root, "src/new.js"), "const needle = 'new';\n");
    const found = await pno.grep({ fs, pattern: "needle", path: root });
    expect(found.matches.map((m) => m.path)).toContain("src/new.js");
    const after = await fs.index.stats();
    expect(after.state).toBe("ready");
    // The new file is dirty (read by every search) until re-indexed in the background, then counted.
    expect(after.dirtyFiles >= 1 || after.files === before.files + 1, JSON.stringify(after)).toBe(true);
    expect(after.lastRefresh).toBeGreaterThanOrEqual(t0 - 1000);
  });

  it("grep reads only the candidate files once ready, and every file again after close()", async () => {
    const spec = { "hit.txt": "a rare_needle here\n" };
    for (let i = 0; i < 40; i++) spec[`hay/f${i}.txt`] = `nothing to see ${i}\n`;
    const root = tree(spec);
    const fs = indexedFs(root);
    await fs.index.ready;
    // How many files a search began to read: the native counter behind grep's abort error.
    const filesRead = async () => {
      const abort = new native.GrepAbort();
      const request = { pattern: "rare_needle", path: root, displayName: path.basename(root), ignoreCase: false };
      const out = await native.grepSearch(
        boundRootOf(fs),
        { ...request, literal: false, context: 0, limit: 100 },
        abort,
      );
      expect(out.matchCount).toBe(1);
      return abort.filesSearched;
    };
    expect(await filesRead()).toBe(1);
    await fs.index.close();
    expect(await filesRead()).toBe(41);
  });

  it("close(): stats say closed, ready resolves closed, searches still answer as without an index", async () => {
    const root = tree();
    const plain = pno.createBoundFs(root);
    const fs = indexedFs(root);
    await fs.index.ready;
    const warm = await searches(fs, root);
    expect(warm).toEqual(await searches(plain, root));
    expect(warm.grep.matches.length).toBe(3);
    await fs.index.close();
    await fs.index.close(); // idempotent
    expect((await fs.index.stats()).state).toBe("closed");
    writeFileSync(path.join(root, "src/late.js"), "needle again\n");
    expect(await searches(fs, root)).toEqual(await searches(plain, root));
  });

  it("ready read only after close resolves closed, never rejects", async () => {
    const root = tree();
    const fs = indexedFs(root);
    await fs.index.close();
    const stats = await fs.index.ready;
    expect(stats.state).toBe("closed");
    expect(Object.keys(stats).sort()).toEqual(STATS_KEYS);
  });

  it("close() during the build ends it: ready resolves closed or ready, searches answer", async () => {
    const spec = {};
    for (let d = 0; d < 40; d++) for (let f = 0; f < 25; f++) spec[`d${d}/f${f}.txt`] = `needle ${d} ${f}\n`;
    const root = tree(spec);
    const fs = indexedFs(root);
    const ready = fs.index.ready;
    await fs.index.close();
    expect(["closed", "ready"]).toContain((await ready).state);
    expect((await fs.index.stats()).state).toBe("closed");
    expect((await pno.grep({ fs, pattern: "needle 39 24", path: root })).matchCount).toBe(1);
  });

  it("createNativeTools passes it through: tools.index (not enumerable), and the tools search with it", async () => {
    const root = tree();
    const tools = pno.createNativeTools(root, { index: true });
    closers.push(() => tools.index.close());
    expect(Object.keys(tools).sort()).toEqual(["bash", "edit", "find", "grep", "ls", "read", "write"]);
    expect((await tools.index.ready).files).toBe(FILE_COUNT);
    const grep = await runTool(tools.grep, { pattern: "needle" });
    expect(grep.text).toContain("src/deep/c.txt:1: needle in deep");
    const find = await runTool(tools.find, { pattern: "**/*.txt" });
    expect(find.text.split("\n").sort()).toEqual(["notes.txt", "src/deep/c.txt"]);
    const defs = pno.createNativeToolDefinitions(root, { index: { maxFileBytes: 10 } });
    closers.push(() => defs.index.close());
    expect((await defs.index.ready).state).toBe("ready");
    expect(pno.createNativeTools(root).index).toBeUndefined();
  });

  it("a root dropped without close() has its index closed when collected (its inotify descriptor goes)", () => {
    const root = tree();
    // In a child with --expose-gc: counts this process's inotify descriptors around the drop.
    const script = `
      import { readdirSync, readlinkSync } from "node:fs";
      import { createBoundFs } from "pi-native-ops";
      const inotify = () => readdirSync("/proc/self/fd").filter((fd) => {
        try { return readlinkSync("/proc/self/fd/" + fd) === "anon_inode:inotify"; } catch { return false; }
      }).length;
      const before = inotify();
      let fs = createBoundFs(${JSON.stringify(root)}, { index: true });
      const stats = await fs.index.ready;
      const held = inotify();
      fs = null;
      let turns = 0;
      while (inotify() > before && turns < 1000) {
        globalThis.gc();
        await new Promise((resolve) => setImmediate(resolve));
        turns++;
      }
      console.log(JSON.stringify({ state: stats.state, before, held, after: inotify() }));`;
    const child = spawnSync(process.execPath, ["--expose-gc", "--input-type=module", "-e", script], {
      cwd: path.dirname(createRequire(import.meta.url).resolve("pi-native-ops/package.json")),
      encoding: "utf8",
    });
    expect(child.stderr).toBe("");
    const counts = JSON.parse(child.stdout);
    expect(counts.state).toBe("ready");
    expect(counts.held).toBeGreaterThan(counts.before);
    expect(counts.after).toBe(counts.before);
  });
});

describe("where there is no inotify", () => {
  it("index: true gives an index aside with the reason, and searches walk: never an error", async () => {
    const root = tree();
    // Where the core keeps no index it says why (`index::UNSUPPORTED`: "the index needs Linux
    // (inotify)"); js/fs.js reports whatever it says.
    const unsupported = native.indexUnsupported;
    expect(unsupported()).toBe(linux ? null : "the index needs Linux (inotify)");
    let fs;
    try {
      native.indexUnsupported = () => "no inotify here";
      fs = pno.createBoundFs(root, { index: true });
    } finally {
      native.indexUnsupported = unsupported;
    }
    const aside = {
      state: "aside",
      reason: "no inotify here",
      files: 0,
      directories: 0,
      bytesIndexed: 0,
      memoryBytes: 0,
      buildMs: 0,
      lastRefresh: null,
      dirtyFiles: 0,
      unfilteredFiles: 0,
      watches: 0,
      restoredFiles: 0,
      cache: null,
    };
    expect(await fs.index.ready).toEqual(aside);
    expect(await fs.index.stats()).toEqual(aside);
    expect(await searches(fs, root)).toEqual(await searches(pno.createBoundFs(root), root));
    await fs.index.close();
  });
});

describe("remote: a server that cannot index", () => {
  it("connect sends indexStart with the options at once; an older server's refusal leaves the index aside", async () => {
    const root = tree();
    const server = fakeServer(root);
    const connection = await pno.connect(server.transport, { index: { maxWatches: 7 } });
    const aside = {
      state: "aside",
      reason: "the server cannot index: unknown op indexStart",
      files: 0,
      directories: 0,
      bytesIndexed: 0,
      memoryBytes: 0,
      buildMs: 0,
      lastRefresh: null,
      dirtyFiles: 0,
      unfilteredFiles: 0,
      watches: 0,
      restoredFiles: 0,
      cache: null,
    };
    expect(await connection.fs.index.ready).toEqual(aside);
    expect(await connection.fs.index.stats()).toEqual(aside);
    await connection.fs.index.close();
    const calls = server.frames.filter((f) => f.t === "call");
    expect(calls[0]).toEqual({ t: "call", id: 1, op: "indexStart", maxWatches: 7, maxFileBytes: null });
    // Only the start reached the server: the others learnt from its answer.
    expect(calls.length).toBe(1);
    await connection.close();
  });
});

/** The server binary serverBinaryPath() finds (scripts/build-server.sh puts it at the repo root), or null. */
function serverPath() {
  try {
    return pno.serverBinaryPath();
  } catch {
    return null;
  }
}

/** Spawns a server for `root` with `args` and connects with `options`; closed after the test. */
async function remote(root, { args = [], options = {} } = {}) {
  const child = spawn(serverPath(), ["--root", root, ...args], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const connection = await pno.connect(child, options);
  const close = async () => {
    await connection.close();
    await exited;
  };
  closers.push(close);
  return { child, connection, close };
}

describe.runIf(linux && serverPath())("remote: connect's index option and the server's --index", () => {
  let root;
  beforeAll(() => {
    root = tree();
  });

  it("refuses a bad index option before connecting", async () => {
    await expect(pno.connect({}, { index: 1 })).rejects.toThrow(
      new TypeError(
        "options.index must be true, false or an object { maxWatches?, maxFileBytes?, cache?, cacheMaxBytes? }, got number",
      ),
    );
    await expect(pno.connect({}, { index: { maxFileBytes: -2 } })).rejects.toThrow(
      "options.index.maxFileBytes must be an integer >= 0, got -2",
    );
  });

  it("without the option there is no fs.index; createRemoteTools points to connect for it", async () => {
    const { connection } = await remote(root);
    expect(connection.fs.index).toBeUndefined();
    expect(() => pno.createRemoteTools(root, { connection, index: true })).toThrow(
      new TypeError("index: give it to connect(transport, { index }), whose connection the tools use"),
    );
  });

  it("fs.index has the local shape and figures; searches answer as locally; close() then still answer", async () => {
    const { connection } = await remote(root, { options: { index: { maxWatches: 100 } } });
    const { index } = connection.fs;
    expect(Object.isFrozen(index)).toBe(true);
    expect(Object.keys(index).sort()).toEqual(["close", "ready", "stats"]);
    expect(index.ready).toBe(index.ready);
    const stats = await index.ready;
    expect(Object.keys(stats).sort()).toEqual(STATS_KEYS);
    expect(stats).toMatchObject({
      state: "ready",
      reason: null,
      files: FILE_COUNT,
      directories: DIR_COUNT,
      bytesIndexed: BYTES,
    });
    expect(stats.watches).toBeGreaterThanOrEqual(DIR_COUNT);
    expect(await index.stats()).toMatchObject({ state: "ready", files: FILE_COUNT });
    const local = await searches(pno.createBoundFs(root), root);
    expect(await searches(connection.fs, root, connection.grep)).toEqual(local);
    const tools = pno.createRemoteTools(root, { connection });
    expect((await runTool(tools.grep, { pattern: "needle" })).text).toContain("src/a.js:1: export const needle = 1;");
    await index.close();
    await index.close();
    expect((await index.stats()).state).toBe("closed");
    expect(await searches(connection.fs, root, connection.grep)).toEqual(local);
  });

  it("a server started with --index: connecting with the option keeps its index", async () => {
    const { connection } = await remote(root, { args: ["--index"], options: { index: { maxFileBytes: 1 } } });
    const stats = await connection.fs.index.ready;
    // maxFileBytes 1 would have left every file unindexed: the running index's options stand.
    expect(stats).toMatchObject({ state: "ready", files: FILE_COUNT, bytesIndexed: BYTES });
  });

  it("after the connection ends: ready resolves closed with the reason, close() resolves, stats() rejects", async () => {
    const { connection, close } = await remote(root, { options: { index: true } });
    await close();
    const stats = await connection.fs.index.ready;
    expect(stats.state).toBe("closed");
    expect(stats.reason).toMatch(/^remote connection closed: /);
    await connection.fs.index.close();
    await expect(connection.fs.index.stats()).rejects.toThrow(/^remote connection closed: /);
  });

  it("--help names --index; a value for it is a usage error", () => {
    const help = spawnSync(serverPath(), ["--help"], { encoding: "utf8" });
    expect(help.stdout).toContain("--index");
    const bad = spawnSync(serverPath(), ["--root", root, "--index=1"], { encoding: "utf8" });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--index takes no value");
  });
});
