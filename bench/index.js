// Bench: the warm search index (issue 16). Each search row times three sides alternated call by call in
// this process, through the same tools as the find and grep rows: pi's grep/find tool on a createBoundFs
// opened with `{ index: true }` (indexed, once ready), the same tool without the index (non-indexed, today's
// search), and pi's stock tool (rg / fd). The ratio column is indexed / stock; the note gives the
// non-indexed time and whether the indexed output is byte-identical to it. Build rows: wall time and
// memory from a child process (bench/child-index.js), and the index's own stats.
// Standalone: node bench/run.js index
import { writeFileSync, rmSync } from "node:fs";
import path from "node:path";
import { prepareMonorepo } from "./corpus.js";
import { runChild, timeBoth } from "./lib.js";

const here = path.dirname(new URL(import.meta.url).pathname);
/** How long a build may take before its row says so and the rows go on (the monorepo's is the longest). */
const BUILD_TIMEOUT_MS = { small: 30_000, kernel: 60_000, monorepo: 240_000 };

// runs: alternated calls per row; fewer where the non-indexed and stock sides read the whole tree
// (~0.3–1.5 s a call here), so the index rows add about a minute to the full run.
const KERNEL_GREP = [
  {
    label: "selective literal",
    params: { pattern: "irq_set_affinity_hint", literal: true },
    target: "≤ 20 ms, ≤ 0.1×",
    runs: 9,
  },
  { label: "selective regex", params: { pattern: "EXPORT_SYMBOL\\(usb_" }, target: "≤ 0.15×", runs: 7 },
  {
    label: "non-selective \\w+ (limit 100)",
    params: { pattern: "\\w+", limit: 100 },
    target: "≤ non-indexed",
    runs: 9,
  },
  {
    label: "non-selective literal static",
    params: { pattern: "static", literal: true },
    target: "≤ non-indexed",
    runs: 9,
  },
  { label: "no match", params: { pattern: "qqzzxx_no_such_thing" }, target: "report", runs: 5 },
];
const KERNEL_FIND = [
  { label: "*.rs", pattern: "*.rs" },
  { label: "drivers/**/Kconfig", pattern: "drivers/**/Kconfig" },
  { label: "no match", pattern: "*.no-such-extension" },
];
const SMALL_GREP = [
  { label: "rare literal", params: { pattern: "truncateHead", literal: true } },
  { label: "no match", params: { pattern: "qqzzxx_no_such_thing" } },
];
// The kernel has 120 matches of the literal: under pi's default limit of 100 a search would stop inside
// the first copy, so here the limit (1000) lets every copy be searched, as in a monorepo with few matches.
const MONOREPO_GREP = [
  { label: "selective literal (limit 1000)", params: { pattern: "irq_set_affinity_hint", literal: true, limit: 1000 } },
  { label: "selective regex", params: { pattern: "EXPORT_SYMBOL\\(usb_" } },
];
const MONOREPO_FIND = KERNEL_FIND.slice(0, 1);

export async function bench(ctx) {
  const { native, corpora, log } = ctx;
  if (ctx.rg) process.env.PATH = `${path.dirname(ctx.rg)}${path.delimiter}${process.env.PATH}`;
  if (ctx.fd) process.env.PATH = `${path.dirname(ctx.fd)}${path.delimiter}${process.env.PATH}`;
  process.env.PI_OFFLINE = "1"; // stock find must never download fd

  const noIndex = await indexMissing(native, corpora.small ?? corpora.kernel);
  const mono = noIndex ? {} : prepareMonorepo(corpora.kernel, log);
  const plan = [
    ["small", corpora.small, () => smallRows(ctx, corpora.small)],
    ["kernel", corpora.kernel, () => kernelRows(ctx, corpora.kernel)],
    ["monorepo", mono.dir, () => monorepoRows(ctx, mono.dir)],
  ];
  const rows = [];
  for (const [corpus, dir, run] of plan) {
    if (!dir || noIndex) {
      const why = noIndex
        ? `skipped: no index (${noIndex})`
        : `skipped: ${corpus === "monorepo" ? mono.why : "corpus not present"}`;
      rows.push(...plannedRows(corpus).map((operation) => ({ ...empty(operation, corpus), note: why })));
      continue;
    }
    rows.push(...(await run()));
  }
  return rows;
}

/** Why the built package has no working index (null when it has one). */
async function indexMissing(native, dir) {
  if (!dir) return "no corpus to try it on";
  try {
    const fs = native.createBoundFs(dir, { index: true });
    if (!fs.index || typeof fs.index.close !== "function")
      return "createBoundFs(root, { index: true }) has no fs.index";
    await fs.index.stats();
    await fs.index.close();
    return null;
  } catch (err) {
    return `createBoundFs(root, { index: true }): ${err.message}`;
  }
}

/** The operations each corpus's rows measure, for the rows written when they cannot run. */
function plannedRows(corpus) {
  const build = ["index build (child process)"];
  if (corpus === "small") return [...build, ...SMALL_GREP.map((q) => `indexed grep: ${q.label}`)];
  if (corpus === "kernel")
    return [
      ...build,
      ...KERNEL_GREP.map((q) => `indexed grep: ${q.label}`),
      ...KERNEL_FIND.map((q) => `indexed find: ${q.label}`),
      "indexed grep right after a file write",
    ];
  return [
    ...build,
    "first grep while the index builds",
    ...MONOREPO_GREP.map((q) => `indexed grep: ${q.label}`),
    ...MONOREPO_FIND.map((q) => `indexed find: ${q.label}`),
  ];
}

function empty(operation, corpus) {
  return { operation, corpus, nativeMs: null, stockMs: null, ratio: null };
}

const fmtMs = (ms) => (ms == null ? "n/a" : ms < 1 ? ms.toFixed(3) : ms.toFixed(1));
const mb = (bytes) => `${(bytes / 1e6).toFixed(0)} MB`;
const textOf = (result) => result.content.map((c) => c.text ?? "").join("\n");

/** The index build in a child process: its row. */
async function buildRow(ctx, corpus, dir) {
  let r;
  try {
    r = await runChild(path.join(here, "child-index.js"), [dir, String(BUILD_TIMEOUT_MS[corpus])]);
  } catch (err) {
    return { ...empty("index build (child process)", corpus), note: `build failed: ${err.message}` };
  }
  const s = r.stats;
  const share = s.bytesIndexed ? s.memoryBytes / s.bytesIndexed : null;
  const notes = [
    r.timedOut ? `NOT READY after ${BUILD_TIMEOUT_MS[corpus] / 1000} s (state ${s.state})` : `state ${s.state}`,
    s.reason ? `reason: ${s.reason}` : null,
    `${s.files} files, ${s.directories} directories, ${mb(s.bytesIndexed)} indexed, ${s.watches} watches`,
    `stats.buildMs ${fmtMs(s.buildMs)}`,
    `index memory (stats.memoryBytes) ${mb(s.memoryBytes)}${share == null ? "" : ` = ${(share * 100).toFixed(1)}% of the bytes indexed`}`,
    `RSS growth when ready ${r.rssGrowthMiB.toFixed(0)} MiB (peak during the build ${r.peakGrowthMiB.toFixed(0)} MiB, after close ${r.afterCloseGrowthMiB.toFixed(0)} MiB)`,
  ].filter(Boolean);
  ctx.log(`${corpus} index build: ${fmtMs(r.wallMs)} ms; ${notes.join("; ")}`);
  return {
    ...empty("index build (child process)", corpus),
    nativeMs: r.wallMs,
    nativeMemMiB: r.rssGrowthMiB,
    target: corpus === "kernel" ? "≤ 4 s; memory ≤ 25% of bytes indexed" : "report",
    note: `wall time from createBoundFs to ready; ${notes.join("; ")}; native peak MiB = RSS growth`,
    indexStats: s,
  };
}

/** An indexed boundFs on `dir`, ready (or a note why not), in this process. */
async function openIndexed(ctx, corpus, dir) {
  const started = process.hrtime.bigint();
  const fs = ctx.native.createBoundFs(dir, { index: true });
  const stats = await Promise.race([
    fs.index.ready,
    new Promise((resolve) => setTimeout(() => resolve(null), BUILD_TIMEOUT_MS[corpus]).unref()),
  ]);
  const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
  const now = stats ?? (await fs.index.stats());
  const state = now.state === "ready" ? null : `index ${now.state}${now.reason ? ` (${now.reason})` : ""}`;
  ctx.log(`${corpus}: index opened in this process, ${now.state} after ${fmtMs(wallMs)} ms`);
  return { fs, wallMs, state };
}

/** pi's grep tool three ways: indexed, non-indexed, stock. */
function grepSides(ctx, dir, fs) {
  return {
    indexed: ctx.native.createGrepTool(dir, { fs }),
    live: ctx.native.createGrepTool(dir, { fs: ctx.native.createBoundFs(dir) }),
    stock: ctx.rg ? ctx.pi.createGrepTool(dir) : null,
  };
}

/** pi's find tool three ways: on the indexed operations, on non-indexed ones, stock (fd). */
function findSides(ctx, dir, fs) {
  return {
    indexed: ctx.pi.createFindTool(dir, { operations: fs.find }),
    live: ctx.pi.createFindTool(dir, { operations: ctx.native.createBoundFs(dir).find }),
    stock: ctx.fd ? ctx.pi.createFindTool(dir) : null,
  };
}

/**
 * One row: the three sides' medians over `runs` alternated calls, indexed against stock in the ratio, the
 * non-indexed time and the output check in the note.
 */
async function threeWay(ctx, { operation, corpus, sides, params, runs, target, state }) {
  const call = (tool) => tool && (() => tool.execute("bench", params));
  const [indexedMs, liveMs, stockMs] = await timeBoth([call(sides.indexed), call(sides.live), call(sides.stock)], runs);
  const [a, b] = [await sides.indexed.execute("bench", params), await sides.live.execute("bench", params)].map(textOf);
  const notes = [
    state ? `${state}: searches walked live` : null,
    `non-indexed ${fmtMs(liveMs)} ms (indexed = ${(indexedMs / liveMs).toFixed(2)}× of it)`,
    a === b ? "output identical to non-indexed" : "OUTPUT DIFFERS from non-indexed",
    stockMs == null ? "stock tool not available" : null,
    `medians of ${runs}`,
  ];
  const row = {
    ...empty(operation, corpus),
    nativeMs: indexedMs,
    stockMs,
    ratio: stockMs ? indexedMs / stockMs : null,
    target,
    note: notes.filter(Boolean).join("; "),
    nonIndexedMs: liveMs,
  };
  ctx.log(
    `${corpus} ${operation}: indexed ${fmtMs(indexedMs)} ms, non-indexed ${fmtMs(liveMs)} ms, stock ${fmtMs(stockMs)} ms`,
  );
  return row;
}

async function smallRows(ctx, dir) {
  const rows = [await buildRow(ctx, "small", dir)];
  const { fs, state } = await openIndexed(ctx, "small", dir);
  try {
    const sides = grepSides(ctx, dir, fs);
    for (const q of SMALL_GREP) {
      rows.push(
        await threeWay(ctx, {
          operation: `indexed grep: ${q.label}`,
          corpus: "small",
          sides,
          params: q.params,
          runs: 40,
          target: "≤ 2 ms",
          state,
        }),
      );
    }
  } finally {
    await fs.index.close();
  }
  return rows;
}

async function kernelRows(ctx, dir) {
  const rows = [await buildRow(ctx, "kernel", dir)];
  const { fs, wallMs, state } = await openIndexed(ctx, "kernel", dir);
  try {
    const grep = grepSides(ctx, dir, fs);
    for (const q of KERNEL_GREP) {
      rows.push(
        await threeWay(ctx, {
          operation: `indexed grep: ${q.label}`,
          corpus: "kernel",
          sides: grep,
          params: q.params,
          runs: q.runs,
          target: q.target,
          state,
        }),
      );
    }
    const find = findSides(ctx, dir, fs);
    for (const q of KERNEL_FIND) {
      rows.push(
        await threeWay(ctx, {
          operation: `indexed find: ${q.label}`,
          corpus: "kernel",
          sides: find,
          params: { pattern: q.pattern },
          runs: 9,
          target: "≤ 5 ms",
          state,
        }),
      );
    }
    rows.push(await freshnessRow(ctx, dir, grep.indexed, state));
    rows[0].note += `; a second build, in this process for the search rows: ${fmtMs(wallMs)} ms`;
  } finally {
    await fs.index.close();
  }
  return rows;
}

/**
 * The cost of freshness: a file rewritten (by Node's fs, outside the tools: the index learns of it from
 * inotify) right before each indexed search, alternated with the same search with nothing changed. The
 * file is new at the first call (its directory is re-listed), rewritten at the others (it is dirty: always
 * a candidate). Every search must find the line just written.
 */
async function freshnessRow(ctx, dir, tool, state) {
  const file = path.join(dir, "drivers", "bench-index-freshness.c");
  const params = { pattern: "irq_set_affinity_hint", literal: true };
  const runs = 15;
  const afterWrite = [];
  const unchanged = [];
  let stale = 0;
  try {
    for (let i = 0; i < runs; i++) {
      writeFileSync(file, `/* bench ${i} */\nint irq_set_affinity_hint_fresh_${i};\n`);
      let t = process.hrtime.bigint();
      const text = textOf(await tool.execute("bench", params));
      afterWrite.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (!text.includes(`irq_set_affinity_hint_fresh_${i};`)) stale++;
      t = process.hrtime.bigint();
      await tool.execute("bench", params);
      unchanged.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  } finally {
    rmSync(file, { force: true });
  }
  const gone = !textOf(await tool.execute("bench", params)).includes("bench-index-freshness.c");
  const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  const row = {
    ...empty("indexed grep right after a file write", "kernel"),
    nativeMs: median(afterWrite),
    target: "report",
    note: [
      state ? `${state}: searches walked live` : null,
      `selective literal; the same search with nothing changed, alternated: ${fmtMs(median(unchanged))} ms`,
      stale === 0 && gone
        ? "every search saw the write (and the removal)"
        : `STALE: ${stale} of ${runs} searches missed the write${gone ? "" : ", and the removed file was still listed"}`,
      `medians of ${runs}; no stock side (stock has no index to refresh)`,
    ]
      .filter(Boolean)
      .join("; "),
  };
  ctx.log(`kernel ${row.operation}: ${fmtMs(row.nativeMs)} ms (${row.note})`);
  return row;
}

async function monorepoRows(ctx, dir) {
  const rows = [await buildRow(ctx, "monorepo", dir)];
  // A search issued at once on a new index walks live while the background build competes for the cores.
  const q = MONOREPO_GREP[0];
  const started = process.hrtime.bigint();
  const fs = ctx.native.createBoundFs(dir, { index: true });
  const tool = ctx.native.createGrepTool(dir, { fs });
  await tool.execute("bench", q.params);
  const firstMs = Number(process.hrtime.bigint() - started) / 1e6;
  const buildState = (await fs.index.stats()).state;
  rows.push({
    ...empty("first grep while the index builds", "monorepo"),
    nativeMs: firstMs,
    target: "report",
    note: `${q.label} \`${q.params.pattern}\` issued right after createBoundFs({ index: true }), one call (index ${buildState} when it ended)`,
  });
  ctx.log(`monorepo first grep while building: ${fmtMs(firstMs)} ms (index ${buildState} at its end)`);
  const ready = await Promise.race([
    fs.index.ready,
    new Promise((resolve) => setTimeout(() => resolve(null), BUILD_TIMEOUT_MS.monorepo).unref()),
  ]);
  const now = ready ?? (await fs.index.stats());
  const state = now.state === "ready" ? null : `index ${now.state}${now.reason ? ` (${now.reason})` : ""}`;
  try {
    const grep = grepSides(ctx, dir, fs);
    for (const g of MONOREPO_GREP) {
      rows.push(
        await threeWay(ctx, {
          operation: `indexed grep: ${g.label}`,
          corpus: "monorepo",
          sides: grep,
          params: g.params,
          runs: 3,
          target: "report: warm (indexed) vs cold (non-indexed, stock)",
          state,
        }),
      );
    }
    const find = findSides(ctx, dir, fs);
    for (const f of MONOREPO_FIND) {
      rows.push(
        await threeWay(ctx, {
          operation: `indexed find: ${f.label}`,
          corpus: "monorepo",
          sides: find,
          params: { pattern: f.pattern },
          runs: 5,
          target: "report: warm (indexed) vs cold (non-indexed, stock)",
          state,
        }),
      );
    }
  } finally {
    await fs.index.close();
  }
  return rows;
}
