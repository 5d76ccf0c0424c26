// find: pi's real find tool driven by fs.find must print what pi 1.6.0's stock find tool (fd 10.5) printed
// for the same search (goldens recorded by scripts/record-golden-find.js), in a stable path order.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { createBoundFs, glob } from "pi-native-ops";
import { makeFs } from "./helpers/face.js";
import { pi, isPi1, runTool } from "./helpers/pi.js";
import { absentOnWindows, buildFixture, caseFile, caseName, cases, prunedByPi, splitOutput } from "./find/fixtures.js";
import { makeTree, tempDir } from "./helpers/tree.js";
import { windows } from "./helpers/windows.js";

// The find tool must never reach for fd with fs.find; if it did, it must not download it.
process.env.PI_OFFLINE = "1";

const goldenDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "find/golden");
const built = new Map();
function fixture(name) {
  if (!built.has(name)) built.set(name, buildFixture(os.tmpdir(), name));
  return built.get(name);
}
afterAll(() => {
  for (const fx of built.values()) fx.dispose();
});

/** Path order: depth-first, siblings compared byte-wise by name (a directory before its contents). */
function pathOrder(a, b) {
  const pa = Buffer.from(a.replace(/\/$/, "")).toString("latin1").split("/");
  const pb = Buffer.from(b.replace(/\/$/, "")).toString("latin1").split("/");
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    if (pa[i] !== pb[i]) return Buffer.compare(Buffer.from(pa[i], "latin1"), Buffer.from(pb[i], "latin1"));
  }
  return pa.length - pb.length;
}

async function nativeFind(root, pattern, opts = {}, runtimeRoot) {
  const bfs = await makeFs(root, runtimeRoot ? { runtimeRoot } : {});
  const tool = pi.createFindTool(runtimeRoot ?? root, { operations: bfs.find });
  const res = await runTool(tool, { pattern, path: opts.path, limit: opts.limit });
  if (res.error !== undefined) throw new Error(res.error);
  return splitOutput(res.text);
}

describe("find against pi's stock find tool (fd goldens)", () => {
  for (const c of cases) {
    const [name, pattern, opts = {}] = c;
    // On Windows `\` is a path separator in a pattern, as pi 1.6 reads it there (#9262): no glob escapes.
    const escapes = pattern.includes("\\");
    it.skipIf(windows && escapes)(caseName(c), async () => {
      const golden = JSON.parse(fs.readFileSync(path.join(goldenDir, caseFile(c)), "utf8"));
      const stock = splitOutput(golden.text);
      const got = await nativeFind(fixture(name).root, pattern, opts);
      expect([...got.lines].sort(pathOrder)).toEqual(got.lines);
      if (opts.limit) {
        // fd keeps whichever `limit` entries its threads found first; ours are the first in path order.
        const all = golden.all.filter((l) => !prunedByPi(l) && !absentOnWindows(l)).sort(pathOrder);
        expect(got.lines).toEqual(all.slice(0, opts.limit));
        expect(got.lines.length).toBe(stock.lines.length);
        expect(got.notice !== null).toBe(stock.notice !== null);
      } else {
        expect(got.lines).toEqual(stock.lines.filter((l) => !prunedByPi(l) && !absentOnWindows(l)).sort(pathOrder));
        expect(got.notice).toBe(null);
      }
    });
  }
});

describe("fs.find", () => {
  it("returns the same list in the same order every time, including limit cuts", async () => {
    const { root } = fixture("plain");
    const bfs = await makeFs(root);
    const full = await bfs.find.glob("*", root, { ignore: [], limit: 1000 });
    expect(full.length).toBeGreaterThan(30);
    for (let i = 0; i < 5; i++) expect(await bfs.find.glob("*", root, { ignore: [], limit: 1000 })).toEqual(full);
    for (const limit of [1, 7, 20]) {
      expect(await bfs.find.glob("*", root, { ignore: [], limit })).toEqual(full.slice(0, limit));
    }
    expect(await bfs.find.glob("*", root, { ignore: [], limit: 0 })).toEqual([]);
  });

  it("cuts large trees at the limit in path order, beyond the sequential walk's budget", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), "pi-native-find-big-"));
    try {
      for (let d = 0; d < 50; d++) {
        fs.mkdirSync(path.join(base, `d${d}`));
        for (let f = 0; f < 110; f++)
          fs.writeFileSync(path.join(base, `d${d}`, `f${f}${f % 50 === 0 ? ".hit" : ""}`), "");
      }
      const bfs = await makeFs(base);
      const all = await bfs.find.glob("*.hit", base, { ignore: [], limit: 100000 });
      expect(all.length).toBe(150);
      const rel = (p) => path.relative(base, p).split(path.sep).join("/");
      expect([...all].sort((a, b) => pathOrder(rel(a), rel(b)))).toEqual(all);
      expect(await bfs.find.glob("*.hit", base, { ignore: [], limit: 10 })).toEqual(all.slice(0, 10));
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  it("maps runtimeRoot: cwd in runtime form, absolute runtime results, no host path in errors", async () => {
    const { root } = fixture("plain");
    // On Windows a runtime root is a Windows path too (pi resolves `/workspace` to `\workspace` there).
    const rt = windows ? "C:\\workspace" : "/workspace";
    const at = (rel) => path.join(rt, rel);
    const bfs = await makeFs(root, { runtimeRoot: rt });
    expect(await bfs.find.glob("src/*.ts", rt, { ignore: [], limit: 10 })).toEqual([at("src/a.ts")]);
    // Smart case: an all-lowercase pattern also finds e.TS.
    expect(await bfs.find.glob("*.ts", at("pkg"), { ignore: [], limit: 10 })).toEqual([
      at("pkg/e.TS"),
      at("pkg/src/d.ts"),
    ]);
    // A host-form cwd still answers in runtime form.
    expect(await bfs.find.glob("src/*.ts", root, { ignore: [], limit: 10 })).toEqual([at("src/a.ts")]);
    const got = await nativeFind(root, "*.ts", { path: "src" }, rt);
    expect(got.lines).toEqual(["a.ts", "util/c.ts"]);
    if (windows) return; // The fixture has no links on Windows.
    const err = await bfs.find.glob("*", "/workspace/link-out", { ignore: [], limit: 10 }).catch((e) => e);
    expect(err.message).toBe('path "/workspace/link-out" is outside workspace');
    expect(err.message).not.toContain(root);
  });

  it("is bounded: exists throws outside, a symlink leading out is listed but never entered", async () => {
    const { root, outside } = fixture("plain");
    const bfs = await makeFs(root);
    expect(await bfs.find.exists(path.join(root, "src"))).toBe(true);
    expect(await bfs.find.exists(path.join(root, "nope"))).toBe(false);
    await expect(bfs.find.exists(outside)).rejects.toThrow(`path "${outside}" is outside workspace`);
    if (windows) return; // The fixture has no links on Windows: search-windows.test.js has them.
    await expect(bfs.find.exists(path.join(root, "link-out"))).rejects.toThrow(/is outside workspace/);
    const all = await bfs.find.glob("*", root, { ignore: [], limit: 1000 });
    expect(all).toContain(path.join(root, "link-out"));
    expect(all.some((p) => p.includes("secret.ts"))).toBe(false);
    const tool = pi.createFindTool(root, { operations: bfs.find });
    await expect(tool.execute("t", { pattern: "*", path: "link-out" })).rejects.toThrow(/is outside workspace/);
  });

  it("prunes options.ignore subtrees, the directory itself included", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), "pi-native-find-ign-"));
    try {
      for (const f of ["node_modules/a/index.js", "pkg/node_modules/b.js", "pkg/main.js", "x.js", "gen/out.js"]) {
        fs.mkdirSync(path.dirname(path.join(base, f)), { recursive: true });
        fs.writeFileSync(path.join(base, f), "");
      }
      const bfs = await makeFs(base);
      const rel = async (ignore) =>
        (await bfs.find.glob("*", base, { ignore, limit: 100 })).map(
          (p) => path.relative(base, p).split(path.sep).join("/") + (p.endsWith(path.sep) ? "/" : ""),
        );
      expect(await rel(["**/node_modules/**", "**/.git/**"])).toEqual([
        "gen/",
        "gen/out.js",
        "pkg/",
        "pkg/main.js",
        "x.js",
      ]);
      expect(await rel(["gen"])).toEqual([
        "node_modules/",
        "node_modules/a/",
        "node_modules/a/index.js",
        "pkg/",
        "pkg/main.js",
        "pkg/node_modules/",
        "pkg/node_modules/b.js",
        "x.js",
      ]);
      // `*` does not cross `/`: only depth-2 .js files are pruned.
      expect(await rel(["./*/*.js"])).toEqual([
        "gen/",
        "node_modules/",
        "node_modules/a/",
        "node_modules/a/index.js",
        "pkg/",
        "pkg/node_modules/",
        "pkg/node_modules/b.js",
        "x.js",
      ]);
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  // Windows names are UTF-16: no such name exists there.
  it.skipIf(windows)(
    "returns non-UTF-8 names (lossily, as pi shows fd's output) instead of dropping them",
    async () => {
      const { root } = fixture("plain");
      const bfs = await makeFs(root);
      expect(await bfs.find.glob("*.bin", root, { ignore: [], limit: 10 })).toEqual([path.join(root, "f\uFFFD.bin")]);
    },
  );

  it("returns names holding newlines and separators whole, and no entry for no match", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), "pi-native-find-names-"));
    try {
      // Windows refuses control characters in names.
      const names = windows ? ["c d.txt", "e,f.txt"] : ["a\nb.txt", "c d.txt", "e,f.txt"];
      for (const name of names) fs.writeFileSync(path.join(base, name), "");
      const bfs = await makeFs(base);
      const found = await bfs.find.glob("*.txt", base, { ignore: [], limit: 10 });
      expect([...found].sort()).toEqual(names.map((n) => path.join(base, n)));
      expect(await bfs.find.glob("*.none", base, { ignore: [], limit: 10 })).toEqual([]);
      expect(await bfs.find.glob("*.txt", base, { ignore: [], limit: 1 })).toHaveLength(1);
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  // Unix links and permission bits (Windows: search-windows.test.js has its links; it has no mode bits).
  it.skipIf(windows)("survives symlink loops and skips unreadable directories", async () => {
    const base = fs.mkdtempSync(path.join(os.tmpdir(), "pi-native-find-perm-"));
    try {
      fs.mkdirSync(path.join(base, "open"));
      fs.mkdirSync(path.join(base, "closed"));
      fs.writeFileSync(path.join(base, "open/a.ts"), "");
      fs.writeFileSync(path.join(base, "closed/b.ts"), "");
      fs.symlinkSync("..", path.join(base, "open/up"));
      fs.symlinkSync("loop2", path.join(base, "loop1"));
      fs.symlinkSync("loop1", path.join(base, "loop2"));
      fs.chmodSync(path.join(base, "closed"), 0);
      const bfs = await makeFs(base);
      const got = (await bfs.find.glob("*", base, { ignore: [], limit: 100 })).map((p) => path.relative(base, p));
      const rootCanRead = process.getuid?.() === 0;
      expect(got).toEqual([
        "closed",
        ...(rootCanRead ? ["closed/b.ts"] : []),
        "loop1",
        "loop2",
        "open",
        "open/a.ts",
        "open/up",
      ]);
    } finally {
      fs.chmodSync(path.join(base, "closed"), 0o755);
      fs.rmSync(base, { recursive: true, force: true });
    }
  });

  it("rejects invalid globs and arguments with clear errors", async () => {
    const { root } = fixture("plain");
    const bfs = await makeFs(root);
    await expect(bfs.find.glob("src/[abc", root, { ignore: [], limit: 10 })).rejects.toThrow(
      'invalid glob pattern "src/[abc": unclosed character class',
    );
    await expect(bfs.find.glob("*", root, { ignore: ["{a"], limit: 10 })).rejects.toThrow(/invalid glob pattern "\{a"/);
    await expect(bfs.find.glob(42, root, {})).rejects.toThrow(TypeError);
    await expect(bfs.find.glob("*", "relative", {})).rejects.toThrow(TypeError);
    await expect(bfs.find.glob("*", root, { limit: -1 })).rejects.toThrow(TypeError);
    await expect(bfs.find.glob("*", root, { ignore: "x" })).rejects.toThrow(TypeError);
    await expect(bfs.find.glob("*", path.join(root, "a.txt"), {})).rejects.toMatchObject({ code: "ENOTDIR" });
    const tool = pi.createFindTool(root, { operations: bfs.find });
    await expect(tool.execute("t", { pattern: "[z" })).rejects.toThrow(/invalid glob pattern "\[z"/);
  });

  it.runIf(isPi1)("reports pi 1.6's limit notice from one result past the limit", async () => {
    const got = await nativeFind(fixture("plain").root, "*.ts", { limit: 2 });
    expect(got.notice).toBe("2 results limit reached");
  });
});

describe("glob (plain function)", () => {
  it("searches a directory with fd semantics, bounded to it", async () => {
    const { root } = fixture("plain");
    expect(await glob("**/src/*.ts", root)).toEqual([path.join(root, "pkg/src/d.ts"), path.join(root, "src/a.ts")]);
    expect(await glob("*.ts", path.join(root, "src"), { limit: 1 })).toEqual([path.join(root, "src/a.ts")]);
    if (windows) return; // The fixture has no links on Windows.
    expect(await glob("*", path.join(root, "link-dir"))).toEqual([
      path.join(root, "link-dir/a.ts"),
      path.join(root, "link-dir/b.js"),
      path.join(root, "link-dir/util/"),
      path.join(root, "link-dir/util/c.ts"),
    ]);
  });
});

describe("a path pattern's literal leading directories", () => {
  // Only directories on the pattern's literal path are entered; smart case folds them too (ASCII only).
  const FILES = [
    "drivers/Kconfig",
    "drivers/a/Kconfig",
    "drivers/a/b/Kconfig",
    "drivers2/Kconfig",
    "Drivers/c/Kconfig",
    "arch/x/Kconfig",
    "arch/drivers/Kconfig",
    "É/x/Kconfig",
    "é/y/Kconfig",
  ];
  const CASES = [
    ["drivers/**/Kconfig", ["drivers/Kconfig", "drivers/a/Kconfig", "drivers/a/b/Kconfig"]],
    ["drivers/**/kconfig", ["Drivers/c/Kconfig", "drivers/Kconfig", "drivers/a/Kconfig", "drivers/a/b/Kconfig"]],
    ["drivers/*/Kconfig", ["drivers/a/Kconfig"]],
    ["drivers/*", ["Drivers/c/", "drivers/Kconfig", "drivers/a/"]],
    ["é/*/kconfig", ["é/y/Kconfig"]],
    ["arch/drivers/*", ["arch/drivers/Kconfig"]],
  ];

  it.runIf(process.platform === "linux")("bound the walk, with the index and without, to the same answer", async () => {
    const root = tempDir("pno-find-prefix-");
    try {
      makeTree(root, Object.fromEntries(FILES.map((f) => [f, "x\n"])));
      const indexed = createBoundFs(root, { index: true });
      expect((await indexed.index.ready).state).toBe("ready");
      const live = createBoundFs(root);
      const options = { ignore: ["**/node_modules/**", "**/.git/**"], limit: 100 };
      for (const [pattern, want] of CASES) {
        const expected = want.map((rel) => `${root}/${rel}`);
        expect(await live.find.glob(pattern, root, options), pattern).toEqual(expected);
        expect(await indexed.find.glob(pattern, root, options), `${pattern}, indexed`).toEqual(expected);
        expect(await glob(pattern, root), `${pattern}, glob`).toEqual(expected);
      }
      await indexed.index.close();
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
