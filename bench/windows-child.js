// The Windows rows' measuring side, run in npm's Windows Node under wine by bench/windows.js
// (scripts/wine-node.sh): pi's read, write, edit, ls, find and grep tools over our operations against the
// same tools with pi's stock operations (Node's fs; fd.exe and rg.exe for find and grep), on one tree in the
// wine user's temporary directory, call by call alternately. Prints the rows as JSON on its last line.
// Under wine every number includes wine's own costs (a spawn of fd.exe or rg.exe most of all): the rows
// are ratios between two sides under the same wine, not Windows timings.
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { compare } from "./lib.js";
import { bashRows } from "./windows-bash.js";

const { requirePi } = await import("../js/pi.js");
const { module: pi } = requirePi();
const native = await import("pi-native-ops");

// Stock find and grep: fd.exe and rg.exe on PATH (bench/windows.js passes their directory), never a download.
process.env.PI_OFFLINE = "1";
const bin = process.env.PI_NATIVE_OPS_WIN_BENCH_BIN_WIN;
if (bin) process.env.PATH = `${bin}${path.delimiter}${process.env.PATH}`;
const stockSearch = process.env.PI_NATIVE_OPS_WIN_BENCH_STOCK_SEARCH === "1";

// The tree: 40 directories of 25 files of 100 lines (about 4 KB each), one line in 50 holding "needle".
const DIRS = 40;
const FILES = 25;
const dir = path.join(os.tmpdir(), `pno-bench-win-${process.pid}`);
rmSync(dir, { recursive: true, force: true });
const text = Array.from({ length: 100 }, (_, i) => `line ${i}: ${i % 50 === 7 ? "needle " : ""}lorem ipsum dolor`).join(
  "\n",
);
for (let d = 0; d < DIRS; d++) {
  mkdirSync(path.join(dir, "src", `d${d}`), { recursive: true });
  for (let f = 0; f < FILES; f++) writeFileSync(path.join(dir, "src", `d${d}`, `f${f}.${f % 2 ? "ts" : "js"}`), text);
}
mkdirSync(path.join(dir, "out"));
// 4 KB with one unique line to edit.
const editText = `${text}\nmarker alpha\n`;
writeFileSync(path.join(dir, "edit-native.txt"), editText);
writeFileSync(path.join(dir, "edit-stock.txt"), editText);

const tools = native.createNativeTools(dir);
const stock = {
  read: pi.createReadTool(dir),
  write: pi.createWriteTool(dir),
  edit: pi.createEditTool(dir),
  ls: pi.createLsTool(dir),
  find: pi.createFindTool(dir),
  grep: pi.createGrepTool(dir),
};
const call = (tool, params) => () => tool.execute("bench", params);
/** Edits there and back, so every call has its text to replace. */
const editBoth = (tool, file) => async () => {
  await tool.execute("bench", { path: file, edits: [{ oldText: "marker alpha", newText: "marker beta" }] });
  await tool.execute("bench", { path: file, edits: [{ oldText: "marker beta", newText: "marker alpha" }] });
};

const corpus = `${DIRS * FILES} files, under wine`;
const small = { runs: 60, warmup: 5 };
const searches = { runs: 15, warmup: 2 };
const rows = [
  await compare(
    "read (pi's tool)",
    corpus,
    call(tools.read, { path: "src/d0/f0.js" }),
    call(stock.read, { path: "src/d0/f0.js" }),
    small,
  ),
  await compare(
    "write 4 KB (pi's tool)",
    corpus,
    call(tools.write, { path: "out/native.txt", content: text }),
    call(stock.write, { path: "out/stock.txt", content: text }),
    { ...small, note: "native writes in place under wine, as stock (docs/windows.md); atomic on Windows" },
  ),
  await compare(
    "edit, two calls (pi's tool)",
    corpus,
    editBoth(tools.edit, "edit-native.txt"),
    editBoth(stock.edit, "edit-stock.txt"),
    small,
  ),
  await compare(
    "ls 25 entries (pi's tool)",
    corpus,
    call(tools.ls, { path: "src/d0" }),
    call(stock.ls, { path: "src/d0" }),
    small,
  ),
  await compare(
    "find *.ts (pi's tool)",
    corpus,
    call(tools.find, { pattern: "*.ts", limit: 10000 }),
    stockSearch ? call(stock.find, { pattern: "*.ts", limit: 10000 }) : null,
    { ...searches, note: stockSearch ? "stock spawns fd.exe" : "no fd.exe: stock side not run" },
  ),
  await compare(
    "grep needle, pi's default limit (pi's tool)",
    corpus,
    call(tools.grep, { pattern: "needle" }),
    stockSearch ? call(stock.grep, { pattern: "needle" }) : null,
    { ...searches, note: stockSearch ? "stock spawns rg.exe" : "no rg.exe: stock side not run" },
  ),
];
// Same answers, or the row means nothing.
if (stockSearch) {
  for (const [name, params] of [
    ["find", { pattern: "*.ts", limit: 10000 }],
    // One directory: the whole answer, under pi's 50 KB cut (which keeps whatever rg printed first).
    ["grep", { pattern: "needle", path: "src/d0", limit: 100000 }],
  ]) {
    const [a, b] = await Promise.all([tools[name], stock[name]].map((t) => t.execute("bench", params)));
    const lines = (r) => r.content[0].text.split("\n").sort().join("\n");
    if (lines(a) !== lines(b)) {
      const [la, lb] = [a, b].map((r) => r.content[0].text.split("\n").sort());
      const [x, y] = [la.filter((l) => !lb.includes(l)).slice(0, 3), lb.filter((l) => !la.includes(l)).slice(0, 3)];
      throw new Error(`bench windows: ${name} answers differ between native and stock: ${x} vs ${y}`);
    }
  }
}
// bash: only with a bash to run (brush-shell under wine: PI_NATIVE_OPS_WIN_BASH, from scripts/build-windows.sh).
if (process.env.PI_NATIVE_OPS_WIN_BASH) rows.push(...(await bashRows({ native, pi, compare, corpus: "under wine" })));
rmSync(dir, { recursive: true, force: true });
console.log(JSON.stringify(rows));
