// Bench: what the workspace policy costs (docs/policy.md). The same tools over the kernel corpus twice, with a
// dozen deny-read globs and with no policy at all, calls alternated; the "native" column is the policy's side,
// "stock" the side without one, so the ratio is the policy's cost (target ≤ 1.05×).
// Standalone: node bench/policy.js [kernelDir]  (needs a release build).
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { compare, timeBoth } from "./lib.js";

/** A dozen rules of the kind users give: secrets by name and by directory, at any depth or from the root. */
const DENY_READ = [
  ".env",
  ".env.*",
  "*.pem",
  "*.key",
  "id_rsa*",
  "secrets/",
  "**/credentials*",
  "*.p12",
  ".aws/",
  ".ssh/",
  "*.keystore",
  "/config/*.secret",
];
const TARGET = "≤ 1.05×";
const NOTE = "with 12 denyRead globs / no policy";

/** Files read by the read rows: a small and a large one, a few directories deep. */
const READS = [
  ["read tool, 4 KB file", "kernel/sched/Makefile"],
  ["read tool, 300 KB file", "kernel/sched/core.c"],
];
const FINDS = [
  { name: "name glob *.c", pattern: "*.c" },
  { name: "path glob **/include/**/*.h", pattern: "**/include/**/*.h" },
];
const GREPS = [
  { name: "literal, few hits", params: { pattern: "sched_clock_stable", literal: true } },
  { name: "regex, many hits", params: { pattern: "EXPORT_SYMBOL_GPL\\(\\w+_lock", limit: 1000 } },
];

export async function bench(ctx) {
  const { pi, native, log } = ctx;
  const dir = ctx.corpora.kernel;
  if (!dir) return [];
  const runs = Number(process.env.BENCH_POLICY_RUNS ?? 15);
  const withPolicy = native.createNativeTools(dir, { pi, policy: { denyRead: DENY_READ } });
  const without = native.createNativeTools(dir, { pi, policy: { protect: false } });
  const exec = (tool, params) => () => tool.execute("bench", params, undefined, undefined);
  const rows = [];
  const row = (operation, [policyMs, plainMs]) => {
    const r = {
      operation: `policy: ${operation}`,
      corpus: "kernel",
      nativeMs: policyMs,
      stockMs: plainMs,
      ratio: policyMs / plainMs,
      target: TARGET,
      note: NOTE,
    };
    log?.(`${r.operation}: policy ${policyMs.toFixed(3)} ms, none ${plainMs.toFixed(3)} ms, ${r.ratio.toFixed(3)}×`);
    return r;
  };
  for (const [name, rel] of READS) {
    if (!existsSync(path.join(dir, rel))) continue;
    const r = await compare(name, "kernel", exec(withPolicy.read, { path: rel }), exec(without.read, { path: rel }), {
      runs: runs * 20,
    });
    rows.push(row(name, [r.nativeMs, r.stockMs]));
  }
  // The raw operation, where a check costs the most relative to the call.
  const rawPolicy = native.createBoundFs(dir, { policy: { denyRead: DENY_READ } });
  const rawPlain = native.createBoundFs(dir, { policy: { protect: false } });
  const small = path.join(dir, READS[0][1]);
  if (existsSync(small)) {
    const r = await compare(
      "readFile 4 KB",
      "kernel",
      () => rawPolicy.read.readFile(small),
      () => rawPlain.read.readFile(small),
      { runs: runs * 40 },
    );
    rows.push(row("fs.read.readFile 4 KB", [r.nativeMs, r.stockMs]));
  }
  const lsDir = path.dirname(READS[0][1]);
  if (existsSync(path.join(dir, lsDir))) {
    const r = await compare(
      `ls tool, ${lsDir}`,
      "kernel",
      exec(withPolicy.ls, { path: lsDir }),
      exec(without.ls, { path: lsDir }),
      { runs: runs * 20 },
    );
    rows.push(row(`ls tool, ${lsDir}`, [r.nativeMs, r.stockMs]));
  }
  // The protected defaults are write rules: what a write pays for them when no policy is given.
  const out = mkdtempSync(path.join(tmpdir(), "pno-policy-bench-"));
  const protectedFs = native.createBoundFs(out);
  const openFs = native.createBoundFs(out, { policy: { protect: false } });
  const text = "x".repeat(4096);
  const w = await compare(
    "writeFile 4 KB",
    "tmp",
    () => protectedFs.write.writeFile(path.join(out, "a.txt"), text),
    () => openFs.write.writeFile(path.join(out, "b.txt"), text),
    { runs: runs * 20 },
  );
  rmSync(out, { recursive: true, force: true });
  rows.push({
    ...row("fs.write.writeFile 4 KB", [w.nativeMs, w.stockMs]),
    note: "protected defaults (no policy given) / protect: false",
  });
  for (const { name, pattern } of FINDS) {
    rows.push(
      row(`find ${name}`, await timeBoth([exec(withPolicy.find, { pattern }), exec(without.find, { pattern })], runs)),
    );
  }
  for (const { name, params } of GREPS) {
    rows.push(row(`grep ${name}`, await timeBoth([exec(withPolicy.grep, params), exec(without.grep, params)], runs)));
  }
  return rows;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { requirePi } = await import("../js/pi.js");
  const { module: pi } = requirePi();
  const native = await import("pi-native-ops");
  const here = path.dirname(fileURLToPath(import.meta.url));
  const kernel = process.argv[2] ?? path.join(here, ".corpus", "linux");
  await bench({ pi, native, log: console.log, corpora: { kernel: existsSync(kernel) ? kernel : null } });
}
