// Path limits as Node's fs gives them (docs/contracts.md, "Path limits"): a path of PATH_MAX bytes or more
// is refused with ENAMETOOLONG, nothing created, where the bounded walk could otherwise reach it one
// component at a time. pi's write tool with boundFs and with its stock operations, on twin directories
// of the same path length.
import { existsSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeFs } from "./helpers/face.js";
import { pi, runTool } from "./helpers/pi.js";
import { removeTree, tempDir } from "./helpers/tree.js";

const linux = process.platform === "linux";
let stockDir;
let nativeDir;
beforeAll(() => {
  stockDir = tempDir("pno-deep-s-");
  nativeDir = tempDir("pno-deep-n-");
});
afterAll(() => {
  removeTree(stockDir);
  removeTree(nativeDir);
});

/** pi's tool `factory` with stock operations and with boundFs; each run's text with its directory replaced. */
async function both(factory, group, params) {
  const fs = await makeFs(nativeDir);
  const shown = (r, dir) => JSON.stringify(r).replaceAll(dir, "<ROOT>");
  const stock = await runTool(pi[factory](stockDir), params);
  const native = await runTool(pi[factory](nativeDir, { operations: fs[group] }), params);
  return { stock: shown(stock, stockDir), native: shown(native, nativeDir), raw: native };
}

describe.skipIf(!linux)("path limits as Node's", () => {
  it("a write 2,000 directories deep (over PATH_MAX) fails as stock's, creating nothing", async () => {
    expect(stockDir.length).toBe(nativeDir.length);
    const params = { path: `${"ab/".repeat(2000)}f.txt`, content: "deep" };
    const got = await both("createWriteTool", "write", params);
    expect(got.raw.error).toContain("ENAMETOOLONG");
    expect(got.native).toBe(got.stock);
    expect(existsSync(path.join(nativeDir, "ab"))).toBe(false);
    // Read and ls of the same path answer as stock's too.
    for (const [factory, group, p] of [
      ["createReadTool", "read", { path: params.path }],
      ["createLsTool", "ls", { path: path.dirname(params.path) }],
    ]) {
      const again = await both(factory, group, p);
      expect(again.native).toBe(again.stock);
    }
  });

  it("a write as deep as PATH_MAX allows succeeds, and reads back", async () => {
    const room = 4095 - nativeDir.length - "/f".length;
    const params = { path: `${"ab/".repeat(Math.floor(room / 3))}f`, content: "deepest" };
    const got = await both("createWriteTool", "write", params);
    expect(got.raw.error).toBeUndefined();
    expect(got.native).toBe(got.stock);
    const read = await both("createReadTool", "read", { path: params.path });
    expect(read.raw.text).toBe("deepest");
    expect(read.native).toBe(read.stock);
  });
});
