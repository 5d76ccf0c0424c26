// The pi extension's cost at startup, as users meet it: `pi -p` through the real CLI (the `bin` of each
// pi package this checkout has: pi 1.6's bundle, pi 0.73's dist/cli.js), from spawn to exit against a
// scripted local model that answers at once, with `-e <this package>` and with `-e` an extension that
// does nothing (what pi's loading of any extension costs), alternated run by run.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { MODEL, PROVIDER, runPi, scratchPiHome, startFakeModel } from "../__test__/helpers/fake-model.js";
import { findBinary } from "../scripts/node-tools.js";
import { median } from "./lib.js";

/** pi runs per side: each is a whole pi start (about half a second of CPU), so few. */
const PI_RUNS = 11;
/** Each pi package and the Node it runs on in CI (pi 1.6 needs Node >= 22.19; 0.73 runs on Node 20). */
const PIS = [
  { name: "@earendil-works/pi-coding-agent", node: () => process.execPath },
  { name: "@mariozechner/pi-coding-agent", node: () => findBinary("node") ?? process.execPath },
];

/** The CLI a user runs: the package's `bin`. */
function binOf(repo, name) {
  const dir = path.join(repo, "node_modules", name);
  const manifest = path.join(dir, "package.json");
  if (!existsSync(manifest)) return null;
  const { bin, version } = JSON.parse(readFileSync(manifest, "utf8"));
  return { cli: path.join(dir, typeof bin === "string" ? bin : bin.pi), version };
}

export async function bench({ repo, log, skip }) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "pno-bench-piext-"));
  const ws = path.join(dir, "ws");
  mkdirSync(ws);
  const model = await startFakeModel(() => ({ text: "done" }));
  const rows = [];
  try {
    const env = scratchPiHome(dir, model.url);
    const time = existsSync("/usr/bin/time") ? "/usr/bin/time" : null;
    const cpuFile = path.join(dir, "cpu");
    // The same kind of entry as the package's (TypeScript, which pi's loader transpiles).
    const empty = path.join(dir, "empty-extension");
    mkdirSync(empty);
    writeFileSync(path.join(empty, "package.json"), JSON.stringify({ pi: { extensions: ["./index.ts"] } }));
    writeFileSync(path.join(empty, "index.ts"), "export default function () {}\n");
    for (const pi of PIS) {
      const found = binOf(repo, pi.name);
      if (found === null) {
        skip(`pi-extension: ${pi.name} is not installed`);
        continue;
      }
      const node = pi.node();
      const argv = ["-p", "--no-session", "--provider", PROVIDER, "--model", MODEL, "go"];
      /**
       * `pi -p` from spawn to exit: wall milliseconds, and its CPU milliseconds (user + system, from
       * time(1)), which a shared machine's load disturbs less.
       */
      const run = async (extra) => {
        const t0 = performance.now();
        const out = time
          ? await runPi(time, "-o", [cpuFile, "-f", "%U %S", node, found.cli, ...argv, ...extra], { cwd: ws, env })
          : await runPi(node, found.cli, [...argv, ...extra], { cwd: ws, env });
        const ms = performance.now() - t0;
        if (out.code !== 0 || out.stdout.trim() !== "done") throw new Error(`pi failed: ${out.stderr}`);
        const cpu = time ? readFileSync(cpuFile, "utf8").trim().split("\n").pop().split(" ").map(Number) : null;
        return { ms, cpuMs: cpu && (cpu[0] + cpu[1]) * 1000 };
      };
      const sides = [
        { name: "-e pi-native-ops", args: ["-e", repo], ms: [], cpuMs: [] },
        { name: "-e an empty extension", args: ["-e", empty], ms: [], cpuMs: [] },
      ];
      for (const side of sides) await run(side.args); // warm the page cache and pi's caches
      for (let i = 0; i < PI_RUNS; i++) {
        // Alternated, each side first in turn, so load from elsewhere hits both alike.
        for (let k = 0; k < sides.length; k++) {
          const side = sides[(i + k) % sides.length];
          const { ms, cpuMs } = await run(side.args);
          side.ms.push(ms);
          side.cpuMs.push(cpuMs);
        }
      }
      const nodeVersion = (await runPi(node, "-p", ["process.versions.node"], { cwd: ws, env })).stdout.trim();
      const label = `${pi.name}@${found.version}, Node ${nodeVersion}`;
      for (const side of sides) {
        log(`${label}: pi -p, ${side.name}: wall ${side.ms.map((x) => x.toFixed(0)).join(", ")} ms`);
        if (time) log(`${label}: pi -p, ${side.name}: CPU ${side.cpuMs.map((x) => x.toFixed(0)).join(", ")} ms`);
      }
      const [withPackage, withEmpty] = sides.map((side) => median(side.ms));
      const cpu = time ? sides.map((side) => median(side.cpuMs)) : null;
      rows.push({
        operation: `pi -p through the real CLI (${label}), -e pi-native-ops vs -e an empty extension`,
        corpus: "empty workspace",
        nativeMs: withPackage,
        stockMs: withEmpty,
        ratio: withPackage / withEmpty,
        target: "≤ +50 ms",
        note:
          `added ${(withPackage - withEmpty).toFixed(0)} ms wall` +
          (cpu ? `, ${(cpu[0] - cpu[1]).toFixed(0)} ms CPU (${cpu[0].toFixed(0)} vs ${cpu[1].toFixed(0)})` : "") +
          ` (medians of ${PI_RUNS} alternated runs, spawn to exit)`,
      });
    }
    return rows;
  } finally {
    await model.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
