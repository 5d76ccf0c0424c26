// The persisted index through the built package (docs/index.md, "Persisted index"): the `cache` option,
// the private cache directory, a start restored from it, a change made while no index ran, and a corrupt
// cache file refused. Parity of every search against a restored index is the persisted leg of the other
// index suites (PI_NATIVE_OPS_INDEX_CACHE=1, scripts/test.sh).
import { readdirSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import * as pno from "pi-native-ops";
import { expectFresh } from "./helpers/indexed.js";
import { makeTree, tempDir } from "./helpers/tree.js";

const linux = process.platform === "linux";
const dirs = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A tree whose files are older than the save's racy margin (3 s): their stamps are saved. */
function oldTree() {
  const dir = tempDir("pno-index-cache-");
  dirs.push(dir);
  makeTree(dir, { "a.txt": "needle one\n", "src/b.js": "const hay = 1;\n", "src/c.js": "needle two\n" });
  return dir;
}

/** Waits until every file of `dir` was changed more than `ms` ago (the save skips younger ones). */
async function olderThan(dir, ms) {
  const files = ["a.txt", "src/b.js", "src/c.js"].map((f) => path.join(dir, f));
  const youngest = () => Math.max(...files.map((f) => statSync(f).ctimeMs));
  while (Date.now() - youngest() <= ms) await new Promise((r) => setTimeout(r, 50));
}

describe.runIf(linux)("the persisted index", () => {
  it("validates the cache option", () => {
    const root = oldTree();
    expect(() => pno.createBoundFs(root, { index: { cache: "relative/dir" } })).toThrow(TypeError);
    expect(() => pno.createBoundFs(root, { index: { cache: 1 } })).toThrow(TypeError);
    expect(() => pno.createBoundFs(root, { index: { cacheMaxBytes: 0 } })).toThrow(TypeError);
  });

  it("is refused for a remote connection, whose server keeps no cache", async () => {
    await expect(pno.connect({}, { index: { cache: true } })).rejects.toThrow(
      new TypeError("options.index.cache: a remote server's index is not kept between sessions"),
    );
  });

  it("is saved at close in a private directory and restored at the next start; offline changes are seen", async () => {
    const root = oldTree();
    const cache = path.join(tempDir("pno-index-cachedir-"), "nested", "cache");
    dirs.push(path.dirname(path.dirname(cache)));
    await olderThan(root, 3000);
    const first = pno.createBoundFs(root, { index: { cache } });
    const built = await first.index.ready;
    expect([built.state, built.cache, built.restoredFiles]).toEqual(["ready", "none saved", 0]);
    await first.index.close();
    expect(statSync(cache).mode & 0o777).toBe(0o700);
    const [file] = readdirSync(cache);
    expect(statSync(path.join(cache, file)).mode & 0o777).toBe(0o600);

    // Changed while no index ran: a same-size edit with its mtime set back, and a new file.
    const c = path.join(root, "src/c.js");
    const { atime, mtime } = statSync(c);
    writeFileSync(c, "hay!!!!!!!\n");
    utimesSync(c, atime, mtime);
    writeFileSync(path.join(root, "src/d.js"), "needle three\n");

    const fs = pno.createBoundFs(root, { index: { cache } });
    const stats = await fs.index.ready;
    expect([stats.state, stats.cache, stats.restoredFiles, stats.files]).toEqual(["ready", "restored", 2, 4]);
    await expectFresh({ root, fs }, [
      ["grep", { pattern: "needle" }],
      ["grep", { pattern: "hay" }],
      ["find", { pattern: "*.js" }],
    ]);
    await fs.index.close();

    // A corrupt file: refused, the index built from the tree, and saved good again at close.
    writeFileSync(path.join(cache, file), "garbage");
    const again = pno.createBoundFs(root, { index: { cache } });
    const refused = await again.index.ready;
    expect([refused.state, refused.cache, refused.restoredFiles]).toEqual(["ready", "truncated", 0]);
    await expectFresh({ root, fs: again }, [["grep", { pattern: "needle" }]]);
    await again.index.close();
  });
});
