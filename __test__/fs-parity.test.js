// pi's own read/write/edit/ls tools give the same results with boundFs as with pi's defaults.
import { cpSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeFs } from "./helpers/face.js";
import { pi, runTool } from "./helpers/pi.js";
import { makeTree, removeTree, snapshot, tempDir } from "./helpers/tree.js";
import { underWine } from "./helpers/windows.js";

const PNG = Buffer.from(
  "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082",
  "hex",
);
const GIF = Buffer.from(
  "47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b",
  "hex",
);

const large = Array.from({ length: 5000 }, (_, i) => `line ${i + 1} ${"x".repeat(i % 120)}`).join("\n");
const FIXTURE = {
  "plain.txt": "alpha\nbeta\ngamma\n",
  "crlf.txt": "one\r\ntwo\r\nthree\r\n",
  "bom.txt": "\ufeffbom first line\nsecond\n",
  "empty.txt": "",
  "no-newline.txt": "last line without newline",
  "large.txt": large,
  "long-line.txt": "y".repeat(70_000),
  "image.png": PNG,
  "anim.gif": GIF,
  "naïve café.txt": "unicode name\n",
  "日本語/ファイル.md": "# 見出し\n本文\n",
  "src/index.ts": "export const a = 1;\nexport const b = 2;\nexport const c = 3;\n",
  "src/Zeta.ts": "z\n",
  "src/alpha.ts": "a\n",
  "src/.hidden": "h\n",
  "src/Beta/": null,
  "src/beta.md": "b\n",
  "link-to-plain": { symlink: "plain.txt" },
  "link-to-src": { symlink: "src" },
};

/** Runs a tool and returns its result (or error message) with the fixture directory replaced. */
async function run(tool, dir, params) {
  const r = await runTool(tool, params);
  const out = r.error === undefined ? { content: r.content, details: r.details } : { error: r.error };
  // The directory as it appears inside JSON strings (Windows' backslashes escaped).
  return JSON.parse(JSON.stringify(out).replaceAll(JSON.stringify(dir).slice(1, -1), "<ROOT>"));
}

let stockDir;
let nativeDir;
beforeAll(() => {
  stockDir = makeTree(tempDir("pno-stock-"), FIXTURE);
  nativeDir = tempDir("pno-native-");
  // Under wine a copy would copy what the links lead to (helpers/windows.js): the tree is made again.
  if (underWine) makeTree(nativeDir, FIXTURE);
  else cpSync(stockDir, nativeDir, { recursive: true, verbatimSymlinks: true });
});
afterAll(() => {
  removeTree(stockDir);
  removeTree(nativeDir);
});

/** The same tool built twice: stock operations on one copy, boundFs (local or remote) on an identical copy. */
async function pair(factory, group) {
  const fs = await makeFs(nativeDir);
  return {
    stock: pi[factory](stockDir),
    native: pi[factory](nativeDir, { operations: fs[group] }),
  };
}

async function expectSame(tools, params) {
  const stock = await run(tools.stock, stockDir, params);
  const native = await run(tools.native, nativeDir, params);
  expect(native).toEqual(stock);
  return native;
}

describe("read parity", () => {
  const cases = [
    { path: "plain.txt" },
    { path: "crlf.txt" },
    { path: "bom.txt" },
    { path: "empty.txt" },
    { path: "no-newline.txt" },
    { path: "large.txt" },
    { path: "large.txt", offset: 1200 },
    { path: "large.txt", offset: 10, limit: 5 },
    { path: "large.txt", limit: 3 },
    { path: "large.txt", offset: 4999 },
    { path: "large.txt", offset: 9999 },
    { path: "long-line.txt" },
    { path: "image.png" },
    { path: "anim.gif" },
    { path: "naïve café.txt" },
    { path: "日本語/ファイル.md" },
    { path: "link-to-plain" },
    { path: "link-to-src/index.ts", offset: 2, limit: 1 },
    { path: "missing.txt" },
    { path: "src" },
  ];
  for (const params of cases) {
    it(`read ${JSON.stringify(params)}`, async () => {
      const result = await expectSame(await pair("createReadTool", "read"), params);
      expect(result.content ?? result.error).toBeTruthy();
    });
  }
});

describe("ls parity", () => {
  for (const params of [
    {},
    { path: "src" },
    { path: "link-to-src" },
    { path: "日本語" },
    { path: "missing" },
    { path: "plain.txt" },
    { path: ".", limit: 3 },
  ]) {
    it(`ls ${JSON.stringify(params)}`, async () => {
      await expectSame(await pair("createLsTool", "ls"), params);
    });
  }
});

describe("write and edit parity", () => {
  const steps = [
    ["createWriteTool", "write", { path: "new/nested/file.txt", content: "fresh\n" }],
    ["createWriteTool", "write", { path: "plain.txt", content: "overwritten\n" }],
    ["createWriteTool", "write", { path: "ユニコード.txt", content: "✓ ünïcødé\n" }],
    ["createWriteTool", "write", { path: "empty-new.txt", content: "" }],
    ["createWriteTool", "write", { path: "link-to-src/via-link.ts", content: "through a link\n" }],
    ["createEditTool", "edit", { path: "src/index.ts", edits: [{ oldText: "a = 1", newText: "a = 10" }] }],
    [
      "createEditTool",
      "edit",
      {
        path: "src/index.ts",
        edits: [
          { oldText: "b = 2", newText: "b = 20" },
          { oldText: "c = 3", newText: "c = 30" },
        ],
      },
    ],
    ["createEditTool", "edit", { path: "crlf.txt", edits: [{ oldText: "two\nthree", newText: "2\n3" }] }],
    ["createEditTool", "edit", { path: "bom.txt", edits: [{ oldText: "second", newText: "2nd" }] }],
    ["createEditTool", "edit", { path: "src/index.ts", edits: [{ oldText: "not there", newText: "x" }] }],
    ["createEditTool", "edit", { path: "src/index.ts", edits: [{ oldText: "export", newText: "x" }] }],
    ["createEditTool", "edit", { path: "missing.ts", edits: [{ oldText: "a", newText: "b" }] }],
    [
      "createEditTool",
      "edit",
      { path: "link-to-plain", edits: [{ oldText: "overwritten", newText: "edited via link" }] },
    ],
  ];
  for (const [factory, group, params] of steps) {
    it(`${group} ${JSON.stringify(params)}`, async () => {
      await expectSame(await pair(factory, group), params);
      expect(snapshot(nativeDir)).toEqual(snapshot(stockDir));
    });
  }
});
