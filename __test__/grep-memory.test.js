// grep's memory is bounded by what pi can show (docs/contracts.md, "grep's memory"): a search's peak
// RSS growth, measured in a child process (or in the server doing the search), stays far below what
// holding every line would take. Each fixture would cost well over 100 MiB held whole.
import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serverPath } from "./helpers/face.js";
import { removeTree, tempDir } from "./helpers/tree.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const linux = process.platform === "linux";
// Generous: the bounded search grows by a few MiB; holding the lines takes over 100.
const MAX_GROWTH_MIB = 48;

let root;
beforeAll(() => {
  if (!linux) return;
  root = tempDir("pno-grep-mem-");
  // 2M matching lines in one file.
  mkdirSync(path.join(root, "lines"));
  writeChunks(path.join(root, "lines/big.txt"), 2_000_000, (i) => `needle ${i}\n`);
  // One slow file first in path order (a 100 MB line, a pattern with no literal prefix), then 3,000
  // files of long matching lines the other threads search ahead meanwhile.
  mkdirSync(path.join(root, "ahead/a"), { recursive: true });
  mkdirSync(path.join(root, "ahead/b"));
  writeChunks(path.join(root, "ahead/a/slow.txt"), 100, (i) => (i < 99 ? "x".repeat(1 << 20) : "needle\n"));
  const long = `needle ${"y".repeat(512)}\n`.repeat(60);
  for (let i = 0; i < 3000; i++)
    writeChunks(path.join(root, `ahead/b/${String(i).padStart(5, "0")}.txt`), 1, () => long);
  // 100 lines of 900 KB (context of the next), then a 9 MiB matching line.
  mkdirSync(path.join(root, "context"));
  writeChunks(path.join(root, "context/f.txt"), 101, (i) =>
    i < 100 ? `ctx ${"q".repeat(900_000)}\n` : `needle ${"z".repeat(9 << 20)}\n`,
  );
}, 300_000);
afterAll(() => root && removeTree(root));

/** Writes `count` pieces `piece(i)` to `file`, buffered. */
function writeChunks(file, count, piece) {
  const fd = openSync(file, "w");
  let buf = "";
  for (let i = 0; i < count; i++) {
    buf += piece(i);
    if (buf.length > 1 << 22) {
      writeSync(fd, buf);
      buf = "";
    }
  }
  writeSync(fd, buf);
  closeSync(fd);
}

/** One search in a child process: how much it grew the peak RSS, and the end of the tool's text. */
function peak(dir, params, remote) {
  const args = [path.join(here, "helpers/grep-peak.js"), dir, JSON.stringify(params)];
  if (remote) args.push("remote");
  const out = execFileSync(process.execPath, args, { encoding: "utf8", timeout: 600_000 });
  return JSON.parse(out.trim().split("\n").pop());
}

const cases = [
  ["a limit of 1e9 over 2M matching lines", "lines", { pattern: "needle", limit: 1e9 }, "[50.0KB limit reached]"],
  ["3,000 files searched ahead of one slow file", "ahead", { pattern: ".eedle" }, "100 matches limit reached"],
  ["context of 1000 lines of 900 KB before a 9 MiB line", "context", { pattern: "needle", context: 1000 }, "truncated"],
];

describe.skipIf(!linux)("grep's memory is bounded by what pi can show", () => {
  for (const [what, dir, params, notice] of cases) {
    it(`natively: ${what}`, { timeout: 600_000 }, () => {
      const got = peak(path.join(root, dir), params, false);
      expect(got.tail).toContain(notice);
      expect(got.grownMiB).toBeLessThan(MAX_GROWTH_MIB);
    });
    it.skipIf(!serverPath())(`in the server: ${what}`, { timeout: 600_000 }, () => {
      const got = peak(path.join(root, dir), params, true);
      expect(got.tail).toContain(notice);
      expect(got.grownMiB).toBeLessThan(MAX_GROWTH_MIB);
    });
  }
});
