// One corpus's index rows in their own process (bench/index.js runs it): opens the corpus with the warm
// search index and measures the build (wall time to ready, the index's stats, this process's RSS growth
// when ready and at its peak during the build, sampled every 10 ms: no other row's memory in it) and the
// time until it is warm (its large files' exact filters made), then runs the corpus's search rows on that
// index, closes it, and prints `{ rows }` as JSON on stdout.
// Usage: node bench/child-index.js <small|pi-mono|kernel|monorepo> <dir>
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
const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
const ready = rss();
peak = Math.max(peak, ready);
// Then warm: the large files' exact filters made (the thread's work after ready), which the searches'
// rows wait for, so they measure the warm index and not the thread competing for the 2 cores.
let warm = stats;
while (warm?.state === "ready" && warm.unfilteredFiles > 0 && elapsedMs() < BUILD_TIMEOUT_MS[corpus])
  warm = await new Promise((resolve) => setTimeout(() => resolve(fs.index.stats()), 10));
clearInterval(sampler);
const build = {
  wallMs,
  warmMs: warm?.unfilteredFiles === 0 ? elapsedMs() : null,
  timedOut: stats === null,
  stats: stats ?? (await fs.index.stats()),
  warmStats: warm,
  rssGrowthMiB: (ready - before) / MiB,
  warmGrowthMiB: (rss() - before) / MiB,
  peakGrowthMiB: (Math.max(peak, rss()) - before) / MiB,
};
try {
  const rows = await corpusRows(ctx, corpus, dir, fs, build);
  console.log(JSON.stringify({ rows }));
} finally {
  await fs.index.close();
}
