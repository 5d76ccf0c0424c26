// Native grep tool vs pi's stock grep tool (rg spawned), same process, medians of repeated calls.
// Run standalone: `node bench/grep.js [kernelDir] [smallDir]` (needs a release build and rg).
import path from "node:path";
import { fileURLToPath } from "node:url";
import { findBinary } from "../scripts/node-tools.js";

const QUERIES = [
  { label: "rare literal", params: { pattern: "Linus Torvalds", literal: true } },
  { label: "common regex (limit)", params: { pattern: "\\bint\\b" } },
  { label: "ignoreCase + glob", params: { pattern: "mutex_lock", ignoreCase: true, glob: "*.c" } },
  { label: "context 3", params: { pattern: "EXPORT_SYMBOL_GPL\\(", context: 3, limit: 50 } },
  { label: "no match", params: { pattern: "qqzzxx_no_such_thing" } },
];

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function time(fn, runs) {
  await fn(); // warm: page cache, pi's rg lookup
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await fn();
    times.push(performance.now() - t);
  }
  return median(times);
}

export async function bench(ctx) {
  const rows = [];
  if (ctx.rg) process.env.PATH = `${path.dirname(ctx.rg)}${path.delimiter}${process.env.PATH}`;
  for (const [corpus, dir, runs, target] of [
    ["kernel", ctx.corpora.kernel, 3, "≤ 0.85×"],
    ["small", ctx.corpora.small, 15, "≤ 0.3×"],
  ]) {
    if (!dir) {
      rows.push({ operation: "grep", corpus, nativeMs: null, stockMs: null, ratio: null, target, note: "corpus not present" });
      continue;
    }
    const native = ctx.native.createGrepTool(dir);
    const stock = ctx.rg ? ctx.pi.createGrepTool(dir) : null;
    for (const q of QUERIES) {
      const nativeMs = await time(() => native.execute("bench", q.params), runs);
      const nativeMemMiB = process.resourceUsage().maxRSS / 1024;
      const stockMs = stock ? await time(() => stock.execute("bench", q.params), runs) : null;
      rows.push({
        operation: `grep: ${q.label}`,
        corpus,
        nativeMs,
        stockMs,
        ratio: stockMs ? nativeMs / stockMs : null,
        nativeMemMiB,
        target,
        note: stock ? "nativeMemMiB: this process's peak RSS so far (rg's memory not measured)" : "rg not found",
      });
      ctx.log(`${corpus} ${q.label}: native ${nativeMs.toFixed(1)} ms, stock ${stockMs?.toFixed(1)} ms`);
    }
  }
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const { requirePi } = await import("../js/pi.js");
  const rows = await bench({
    pi: requirePi().module,
    piName: requirePi().name,
    corpora: { kernel: process.argv[2] ?? null, small: process.argv[3] ?? path.join(here, "../src") },
    rg: findBinary("rg"),
    fd: null,
    native: await import("pi-native-ops"),
    log: (m) => console.error(m),
  });
  console.table(rows.map(({ note, target, ...r }) => ({ ...r, ratio: r.ratio?.toFixed(2) })));
}
