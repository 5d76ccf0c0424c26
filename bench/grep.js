// Native grep tool vs pi's stock grep tool (rg spawned), same process, medians of repeated calls.
// Run standalone: `node bench/grep.js [kernelDir] [smallDir]` (needs a release build and rg).
import path from "node:path";
import { fileURLToPath } from "node:url";
import { findBinary } from "../scripts/node-tools.js";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import readline from "node:readline";
import { median, runChild, timeBoth } from "./lib.js";

const here = path.dirname(fileURLToPath(import.meta.url));

/** Peak memory of one search on each side, each in its own process: the native tool's growth over
 * its process's RSS before the search, and rg's whole peak RSS (GNU time's %M), run with the
 * arguments pi gives it. */
async function peakMemory(dir, params, rg) {
  const native = await runChild(path.join(here, "child-grep.js"), [dir, JSON.stringify(params)]);
  let rgMiB = null;
  if (rg && fs.existsSync("/usr/bin/time")) {
    const args = ["--no-config", "--json", "--line-number", "--color=never", "--hidden"];
    if (params.ignoreCase) args.push("--ignore-case");
    if (params.literal) args.push("--fixed-strings");
    if (params.glob) args.push("--glob", params.glob);
    if (params.context) args.push("--context", String(params.context));
    args.push("--", params.pattern, ".");
    const r = spawnSync("/usr/bin/time", ["-f", "%M", rg, ...args], {
      cwd: dir,
      stdio: ["ignore", "ignore", "pipe"],
      encoding: "utf8",
    });
    const kb = Number(r.stderr.trim().split("\n").pop());
    if (Number.isFinite(kb)) rgMiB = kb / 1024;
  }
  return { nativeGrowthMiB: native.maxRssMiB - native.baselineMiB, rgMiB };
}

/**
 * The read floor (bench/read-floor.rs, compiled here with rustc): a child process that, per request,
 * does only the file reads a search of `dir` does and answers with its own wall time, so its passes
 * interleave with the measured calls. Only `{ why }` when it cannot be built.
 */
function startReadFloor(dir, rg, repo) {
  const rustc = findBinary("rustc");
  if (!rustc || !rg) return { why: !rustc ? "no rustc on PATH or in ~/.cargo/bin" : "rg not found (lists the files)" };
  const bin = path.join(repo, "target", "read-floor");
  const src = path.join(here, "read-floor.rs");
  if (!fs.existsSync(bin) || fs.statSync(bin).mtimeMs < fs.statSync(src).mtimeMs) {
    fs.mkdirSync(path.dirname(bin), { recursive: true });
    try {
      execFileSync(rustc, ["--edition", "2021", "-C", "opt-level=3", "-o", bin, src], { stdio: "pipe" });
    } catch (err) {
      return {
        why: `rustc failed: ${
          String(err.stderr ?? err.message)
            .trim()
            .split("\n")[0]
        }`,
      };
    }
  }
  // The files rg searches (so, those both sides read), in path order.
  const list = path.join(repo, "target", `read-floor-${path.basename(dir)}.txt`);
  fs.writeFileSync(list, execFileSync(rg, ["--files", "--hidden", "--sort", "path"], { cwd: dir, maxBuffer: 1 << 28 }));
  const child = spawn(bin, [list], { cwd: dir, stdio: ["pipe", "pipe", "inherit"] });
  const answers = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return {
    files: fs.readFileSync(list, "utf8").split("\n").filter(Boolean).length,
    async pass() {
      child.stdin.write("pass\n");
      const { value, done } = await answers.next();
      if (done) throw new Error("read-floor exited");
      return Number(value);
    },
    stop: () => child.stdin.end(),
  };
}

const QUERIES = [
  { label: "rare literal", params: { pattern: "Linus Torvalds", literal: true } },
  { label: "common regex (limit)", params: { pattern: "\\bint\\b" } },
  { label: "ignoreCase + glob", params: { pattern: "mutex_lock", ignoreCase: true, glob: "*.c" } },
  { label: "context 3", params: { pattern: "EXPORT_SYMBOL_GPL\\(", context: 3, limit: 50 } },
  { label: "no match", params: { pattern: "qqzzxx_no_such_thing" } },
];

export async function bench(ctx) {
  const rows = [];
  if (ctx.rg) process.env.PATH = `${path.dirname(ctx.rg)}${path.delimiter}${process.env.PATH}`;
  for (const [corpus, dir, runs, target] of [
    ["kernel", ctx.corpora.kernel, 7, "≤ 0.85×"],
    ["small", ctx.corpora.small, 15, "≤ 0.3×"],
  ]) {
    if (!dir) {
      rows.push({
        operation: "grep",
        corpus,
        nativeMs: null,
        stockMs: null,
        ratio: null,
        target,
        note: "corpus not present",
      });
      continue;
    }
    const native = ctx.native.createGrepTool(dir);
    const stock = ctx.rg ? ctx.pi.createGrepTool(dir) : null;
    const floor = startReadFloor(dir, ctx.rg, ctx.repo);
    const ratios = [];
    for (const q of QUERIES) {
      // The floor's passes run beside the query that reads every file, timed by the floor itself.
      const floorMs = [];
      const withFloor = q.label === "no match" && floor.pass;
      const [nativeMs, stockMs] = await timeBoth(
        [
          () => native.execute("bench", q.params),
          stock && (() => stock.execute("bench", q.params)),
          withFloor && (async () => floorMs.push(await floor.pass())),
        ],
        runs,
      );
      if (stockMs) ratios.push(nativeMs / stockMs);
      // rg runs to the end here (pi stops it at the limit), so its figure is an upper bound.
      const mem = corpus === "kernel" ? await peakMemory(dir, q.params, ctx.rg) : null;
      rows.push({
        operation: `grep: ${q.label}`,
        corpus,
        nativeMs,
        stockMs,
        ratio: stockMs ? nativeMs / stockMs : null,
        nativeMemMiB: mem?.nativeGrowthMiB ?? null,
        stockMemMiB: mem?.rgMiB ?? null,
        target,
        note: !stock
          ? "rg not found"
          : mem
            ? "memory: native = peak RSS growth of a process doing one search; stock = rg's peak RSS run to the end"
            : undefined,
      });
      ctx.log(`${corpus} ${q.label}: native ${nativeMs.toFixed(1)} ms, stock ${stockMs?.toFixed(1)} ms`);
      if (withFloor) rows.push(floorRow(corpus, floorMs, nativeMs, stockMs, floor.files));
    }
    floor.stop?.();
    if (!floor.pass) {
      rows.push({
        operation: "grep: read floor (file reads only)",
        corpus,
        nativeMs: null,
        stockMs: null,
        ratio: null,
        target: "reference",
        note: `not measured: ${floor.why}`,
      });
    }
    if (ratios.length === QUERIES.length) {
      const middle = median(ratios);
      rows.push({
        operation: "grep: median of the five queries",
        corpus,
        nativeMs: null,
        stockMs: null,
        ratio: middle,
        target,
        note: "the target is on this median",
      });
    }
  }
  if (ctx.corpora.kernel) rows.push(await abortLatency(ctx));
  rows.push(await oneLongLine(ctx));
  rows.push(await manyMatches(ctx));
  return rows;
}

/** The read floor beside stock's no-match search: the least time any search of the tree can take. */
function floorRow(corpus, floorMs, nativeMs, stockMs, files) {
  const ms = [...floorMs].slice(1).sort((a, b) => a - b); // the first pass is timeBoth's warm-up call
  const floorMedian = ms[Math.floor(ms.length / 2)];
  return {
    operation: "grep: read floor (file reads only)",
    corpus,
    nativeMs: floorMedian,
    stockMs,
    ratio: stockMs ? floorMedian / stockMs : null,
    target: "reference",
    note: `bench/read-floor.rs: the reads a search of these ${files} files does, nothing else (no listing, rules or matching), on as many threads; native no match is ${(nativeMs / floorMedian).toFixed(2)}× of it`,
  };
}

/**
 * How long a whole-tree search takes to stop after its signal aborts (median of several): grep() rejects
 * only once the native search has ended, so this is abort() to the native side stopped.
 */
async function abortLatency(ctx) {
  const ms = [];
  const searched = [];
  for (let i = 0; i < 9; i++) {
    const controller = new AbortController();
    const search = ctx.native.grep({
      pattern: "qqzzxx_no_such_thing",
      path: ctx.corpora.kernel,
      signal: controller.signal,
    });
    await new Promise((r) => setTimeout(r, 50 + 20 * i));
    const t = process.hrtime.bigint();
    controller.abort();
    const err = await search.then(
      () => null,
      (e) => e,
    );
    // A search that finished before the abort measured no stopping: left out.
    if (typeof err?.filesSearched !== "number") continue;
    ms.push(Number(process.hrtime.bigint() - t) / 1e6);
    searched.push(err.filesSearched);
  }
  if (ms.length === 0) {
    return {
      operation: "grep: abort to settled",
      corpus: "kernel",
      nativeMs: null,
      stockMs: null,
      ratio: null,
      target: "≤ 50 ms",
      note: "not measured: every search ended before its abort",
    };
  }
  const sorted = ms.sort((a, b) => a - b);
  const files = searched.sort((a, b) => a - b);
  return {
    operation: "grep: abort to settled",
    corpus: "kernel",
    nativeMs: sorted[Math.floor(sorted.length / 2)],
    stockMs: null,
    ratio: null,
    target: "≤ 50 ms",
    note:
      `native only; settled = the native search ended, after ${files[0]}–${files.at(-1)} files searched; ` +
      `worst of ${sorted.length}: ${sorted.at(-1).toFixed(1)} ms`,
  };
}

/** Bytes of the one-line file: 256 MiB (1 GiB takes four times as long to write and search, same rate). */
const LONG_LINE_BYTES = 256 * 2 ** 20;

/**
 * A file holding one 256 MiB line, the needle at its end: grep's bounded-memory path for lines over
 * 1 MiB, with the literal prefilter. Native through the grep tool; rg with --count (searching only:
 * with --json, as pi runs it, rg also prints the whole line). MB/s of each, and peak memory.
 */
async function oneLongLine(ctx) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pno-long-line-"));
  try {
    const file = path.join(dir, "one-line.txt");
    const block = Buffer.alloc(2 ** 20, "abcdefghij");
    const fd = fs.openSync(file, "w");
    for (let written = 0; written < LONG_LINE_BYTES; written += block.length) fs.writeSync(fd, block);
    fs.writeSync(fd, "needle here\n");
    fs.closeSync(fd);
    const params = { pattern: "needle", path: "one-line.txt" };
    const native = ctx.native.createGrepTool(dir);
    const rg =
      ctx.rg &&
      (() =>
        new Promise((resolve, reject) => {
          spawn(ctx.rg, ["--no-config", "--count", "--", params.pattern, file], { stdio: "ignore" }).on(
            "exit",
            (code) => (code === 0 ? resolve() : reject(new Error(`rg exited ${code}`))),
          );
        }));
    const [nativeMs, stockMs] = await timeBoth([() => native.execute("bench", params), rg], 3);
    const mem = await peakMemory(dir, params, ctx.rg);
    const rate = (ms) => `${(LONG_LINE_BYTES / 1e6 / (ms / 1000)).toFixed(0)} MB/s`;
    return {
      operation: "grep, one 256 MiB line, literal",
      corpus: "one-line file",
      nativeMs,
      stockMs,
      ratio: stockMs ? nativeMs / stockMs : null,
      nativeMemMiB: mem.nativeGrowthMiB,
      stockMemMiB: mem.rgMiB,
      target: "≥ 1 GB/s, memory bounded",
      note: `native ${rate(nativeMs)}${stockMs ? `, rg --count ${rate(stockMs)}` : ", rg not found"}; medians of 3; memory: native = RSS growth of a process doing one search, rg = its peak RSS (rg --json as pi runs it)`,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Matching lines in the file of the limit-1e9 row: 4M, ~59 MB. */
const MANY_LINES = 4_000_000;

/**
 * pi's grep tool with `limit: 1e9` over one file of 4M matching lines: memory is bounded by what pi can
 * show (its 50 KB cut), not by the limit. Peak RSS growth of a process doing one search, and times.
 */
async function manyMatches(ctx) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pno-many-matches-"));
  try {
    const fd = fs.openSync(path.join(dir, "big.txt"), "w");
    for (let i = 0; i < MANY_LINES; i += 100_000) {
      let chunk = "";
      for (let j = i; j < i + 100_000; j++) chunk += `needle ${j}\n`;
      fs.writeSync(fd, chunk);
    }
    fs.closeSync(fd);
    const params = { pattern: "needle", limit: 1e9 };
    const native = ctx.native.createGrepTool(dir);
    const stock = ctx.rg ? ctx.pi.createGrepTool(dir) : null;
    const [nativeMs, stockMs] = await timeBoth(
      [() => native.execute("bench", params), stock && (() => stock.execute("bench", params))],
      3,
    );
    const mem = await peakMemory(dir, params, ctx.rg);
    return {
      operation: "grep, limit 1e9 over 4M matching lines",
      corpus: "one 59 MB file",
      nativeMs,
      stockMs,
      ratio: stockMs ? nativeMs / stockMs : null,
      nativeMemMiB: mem.nativeGrowthMiB,
      stockMemMiB: mem.rgMiB,
      target: "≤ +32 MiB peak",
      note: "medians of 3; memory: native = peak RSS growth of a process doing one search (the target), rg = its peak RSS run as pi runs it",
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
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
    repo: path.dirname(here),
    log: (m) => console.error(m),
  });
  console.table(rows.map(({ note, target, ...r }) => ({ ...r, ratio: r.ratio?.toFixed(2) })));
}
