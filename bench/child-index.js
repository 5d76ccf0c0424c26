// The index build measured in its own process, so its memory is not mixed with other rows': opens
// `dir` with the warm search index, waits until it is ready, and prints as JSON the wall time, the index's
// stats, this process's RSS growth (when ready, at its peak during the build, sampled every 10 ms) and its
// RSS after close().
const [dir, timeoutArg] = process.argv.slice(2);
const { createBoundFs } = await import("pi-native-ops");
const MiB = 2 ** 20;
const rss = () => process.memoryUsage.rss();
const before = rss();
let peak = before;
const sampler = setInterval(() => (peak = Math.max(peak, rss())), 10);
const started = process.hrtime.bigint();
const fs = createBoundFs(dir, { index: true });
if (!fs.index) {
  console.log(JSON.stringify({ noIndex: true }));
  process.exit(0);
}
const timeoutMs = Number(timeoutArg);
const stats = await Promise.race([
  fs.index.ready,
  new Promise((resolve) => setTimeout(() => resolve(null), timeoutMs).unref()),
]);
const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
clearInterval(sampler);
const ready = rss();
peak = Math.max(peak, ready);
const final = stats ?? (await fs.index.stats());
await fs.index.close();
const closed = rss();
console.log(
  JSON.stringify({
    wallMs,
    timedOut: stats === null,
    stats: final,
    rssGrowthMiB: (ready - before) / MiB,
    peakGrowthMiB: (peak - before) / MiB,
    afterCloseGrowthMiB: (closed - before) / MiB,
  }),
);
