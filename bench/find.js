// Bench: pi's find tool with fs.find (in-process) against pi's stock find tool (spawns fd), same process,
// medians of many calls. Standalone: node bench/find.js [kernelDir] [smallDir]  (needs fd >= 10 on PATH or
// in ~/.cargo/bin for the stock side; pi 1.6.0 under Node 22 for the anchored path semantics).
import path from "node:path";
import { fileURLToPath } from "node:url";
import { findBinary } from "../scripts/node-tools.js";
import { timeBoth } from "./lib.js";

const PATTERNS = [
  { name: "name glob *.c", pattern: "*.c" },
  { name: "name glob *.md", pattern: "*.md" },
  { name: "path glob **/include/**/*.h", pattern: "**/include/**/*.h" },
  { name: "no match", pattern: "*.no-such-extension" },
];
const TARGETS = { kernel: "≤ 0.9×", small: "≤ 0.3×" };

export async function bench(ctx) {
  const { pi, native, log } = ctx;
  // pi's stock tool finds fd on PATH; never let it download one.
  process.env.PI_OFFLINE = "1";
  if (ctx.fd) process.env.PATH = `${path.dirname(ctx.fd)}${path.delimiter}${process.env.PATH}`;
  const rows = [];
  // The corpora themselves, not the reasons one is missing (piMonoWhy, kernelWhy).
  for (const corpus of ["small", "piMono", "kernel"]) {
    const dir = ctx.corpora[corpus];
    if (!dir) {
      if (corpus !== "small") ctx.skip(`find on ${corpus}: ${ctx.corpora[`${corpus}Why`] ?? "corpus not present"}`);
      continue;
    }
    const runs = corpus === "kernel" ? 15 : 40;
    const nativeTool = pi.createFindTool(dir, { operations: native.createBoundFs(dir).find });
    const stockTool = pi.createFindTool(dir);
    for (const { name, pattern } of PATTERNS) {
      const nativeRun = () => nativeTool.execute("bench", { pattern });
      const stockRun = () => stockTool.execute("bench", { pattern });
      const [nativeMs, stockMs] = await timeBoth([nativeRun, ctx.fd ? stockRun : null], runs);
      let note;
      if (ctx.fd) {
        const [a, b] = [await nativeRun(), await stockRun()].map((r) => r.content[0].text.split("\n").length);
        note = `${a} native / ${b} stock output lines`;
      } else {
        note = "fd not available: stock side not run";
      }
      const row = {
        operation: `find ${name}`,
        corpus,
        nativeMs,
        stockMs,
        ratio: stockMs ? nativeMs / stockMs : null,
        target: TARGETS[corpus],
        note,
      };
      log?.(`${row.operation} [${corpus}]: native ${nativeMs.toFixed(1)} ms, stock ${stockMs?.toFixed(1) ?? "-"} ms`);
      rows.push(row);
    }
  }
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { requirePi } = await import("../js/pi.js");
  const native = await import("pi-native-ops");
  const { module: pi, name: piName } = await requirePi();
  const fd = findBinary("fd");
  const [kernel = "/work/corpus/linux", small = null] = process.argv.slice(2);
  const rows = await bench({ pi, piName, corpora: { kernel, small }, fd, native, log: console.log });
  console.table(rows.map((r) => ({ ...r, ratio: r.ratio?.toFixed(2) })));
}
