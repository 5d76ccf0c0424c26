// One corpus's index rows in their own process (bench/index.js runs it): reads the corpus once (so its
// files are in the page cache), opens it with the warm search index and measures the build (wall time to
// ready, the index's stats, this process's RSS growth when ready and at its peak during the build, sampled
// every 10 ms: no other row's memory in it) and the time until it is warm (its large files' exact filters
// made), then runs the corpus's search rows on that index, closes it, and prints `{ rows }` as JSON on
// stdout.
// Usage: node bench/child-index.js <small|pi-mono|kernel|monorepo> <dir>
import { execFileSync } from "node:child_process";
import path from "node:path";
import { findBinary } from "../scripts/node-tools.js";
import { BUILD_TIMEOUT_MS, corpusRows } from "./index.js";

const [corpus, dir] = process.argv.slice(2);
const { requirePi } = await import("../js/pi.js");
const { module: pi, name: piName } = requirePi();
const native = await import("pi-native-ops");
const ctx = { pi, piName, native, rg: findBinary("rg"), fd: findBinary("fd"), log: (m) => console.error(`  ${m}`) };
for (const bin of [ctx.rg, ctx.fd])
  if (bin) process.env.PATH = `${path.dirname(bin)}${path.delimiter}${process.env.PATH}`;
process.env.PI_OFFLINE = "1"; // stock find must never download fd

// This VM's page cache does not keep the corpora between rows (the 5 GB monorepo was a sixth resident a
// quarter of an hour after a run), so a build would time the disk: every file is read once first, and the build
// row times the index's own work on a warm cache.
const warmStarted = Date.now();
execFileSync("sh", ["-c", 'find "$1" -type f -print0 | xargs -0 cat > /dev/null 2>&1 || true', "sh", dir]);
const cacheWarmMs = Date.now() - warmStarted;

const MiB = 2 ** 20;
const rss = () => process.memoryUsage.rss();
const before = rss();
let peak = before;
const sampler = setInterval(() => (peak = Math.max(peak, rss())), 10);
const started = process.hrtime.bigint();
const elapsedMs = () => Number(process.hrtime.bigint() - started) / 1e6;
const fs = native.createBoundFs(dir, { index: true });
const stats = await Promise.race([
  fs.index.ready,
  new Promise((resolve) => setTimeout(() => resolve(null), BUILD_TIMEOUT_MS[corpus]).unref()),
]);
const wallMs = elapsedMs();
const ready = rss();
peak = Math.max(peak, ready);
// Then warm: the large files' exact filters made (the thread's work after ready), which the searches'
// rows wait for, so they measure the warm index and not the thread competing for the 2 cores.
let warm = stats;
while (warm?.state === "ready" && warm.unfilteredFiles > 0 && elapsedMs() < BUILD_TIMEOUT_MS[corpus])
  warm = await new Promise((resolve) => setTimeout(() => resolve(fs.index.stats()), 10));
clearInterval(sampler);
const warmMs = warm?.unfilteredFiles === 0 ? elapsedMs() : null;
const warmGrowthMiB = (rss() - before) / MiB;
peak = Math.max(peak, rss());
// Two more builds to ready (each closed at once) beside the first, now idle, where they are short: this
// machine's speed moves by a quarter from minute to minute, and the row gives the median of the three.
const moreBuildsMs = [];
for (let i = 0; i < (corpus === "monorepo" ? 0 : 2) && stats?.state === "ready"; i++) {
  const t = process.hrtime.bigint();
  const again = native.createBoundFs(dir, { index: true });
  await again.index.ready;
  moreBuildsMs.push(Number(process.hrtime.bigint() - t) / 1e6);
  await again.index.close();
}
const build = {
  wallMs,
  buildsMs: [wallMs, ...moreBuildsMs],
  warmMs,
  timedOut: stats === null,
  stats: stats ?? (await fs.index.stats()),
  warmStats: warm,
  cacheWarmMs,
  rssGrowthMiB: (ready - before) / MiB,
  warmGrowthMiB,
  peakGrowthMiB: (peak - before) / MiB,
};
try {
  const rows = await corpusRows(ctx, corpus, dir, fs, build);
  console.log(JSON.stringify({ rows }));
} finally {
  await fs.index.close();
}
