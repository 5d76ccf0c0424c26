// Bench: native BashOperations vs pi's createLocalBashOperations, same process, medians.
import { fileURLToPath } from "node:url";

const GiB = 1024 ** 3;

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function roundTrip(ops, runs) {
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await ops.exec("true", "/tmp", { onData() {} });
    times.push(performance.now() - t0);
  }
  return median(times);
}

async function flood(ops) {
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  let calls = 0;
  let bytes = 0;
  const t0 = performance.now();
  await ops.exec(`head -c ${GiB} /dev/zero`, "/tmp", {
    onData: (chunk) => {
      bytes += chunk.length;
      if (++calls % 16 === 0) peak = Math.max(peak, process.memoryUsage().rss);
    },
  });
  if (bytes !== GiB) throw new Error(`flood delivered ${bytes} bytes`);
  return { ms: performance.now() - t0, memMiB: (peak - baseline) / 1024 ** 2 };
}

export async function bench(ctx) {
  const native = ctx.native.createBashOperations();
  const stock = ctx.pi.createLocalBashOperations();
  const rows = [];
  const runs = 40;
  await roundTrip(native, 5);
  await roundTrip(stock, 5);
  // Interleave the sides so machine noise hits both alike.
  const nativeTrips = [];
  const stockTrips = [];
  for (let i = 0; i < 3; i++) {
    nativeTrips.push(await roundTrip(native, runs));
    stockTrips.push(await roundTrip(stock, runs));
  }
  const nativeMs = median(nativeTrips);
  const stockMs = median(stockTrips);
  rows.push({ operation: "bash exec `true` round trip", corpus: "-", nativeMs, stockMs, ratio: nativeMs / stockMs, target: "≤ 1.0×" });
  ctx.log("bash: flooding 1 GiB through onData (3× each side)");
  const nativeFloods = [];
  const stockFloods = [];
  for (let i = 0; i < 3; i++) {
    nativeFloods.push(await flood(native));
    stockFloods.push(await flood(stock));
  }
  const nf = median(nativeFloods.map((f) => f.ms));
  const sf = median(stockFloods.map((f) => f.ms));
  rows.push({
    operation: "bash 1 GiB through onData",
    corpus: "-",
    nativeMs: nf,
    stockMs: sf,
    ratio: nf / sf,
    nativeMemMiB: Math.max(...nativeFloods.map((f) => f.memMiB)),
    stockMemMiB: Math.max(...stockFloods.map((f) => f.memMiB)),
    target: "≥ 1.0× throughput (ratio ≤ 1.0)",
    note: "ratio = native/stock time; memory = peak RSS growth during the flood",
  });
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const native = await import("pi-native-ops");
  const { requirePi } = await import("../js/pi.js");
  const { name, module } = requirePi();
  const rows = await bench({ pi: module, piName: name, native, corpora: {}, log: console.log });
  console.table(rows);
}
