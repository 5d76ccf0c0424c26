// npm run bench: every native-vs-stock comparison in one process run, written to bench/RESULTS.md and
// bench/results.svg. Each bench/<capability>.js exports `bench(ctx)` returning rows (see bench/lib.js).
import { execFileSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { findBinary, onNode22, preferOnPath, rerunUnderNode22 } from "../scripts/node-tools.js";
import { prepareCorpora } from "./corpus.js";
import { renderMarkdown, renderSvg } from "./report.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.dirname(here);

rerunUnderNode22(); // returns only when already on Node >= 22.19, or when none was found
if (!onNode22()) console.log("bench: no Node >= 22.19 found, benchmarking against the legacy pi on this Node");

const { requirePi } = await import("../js/pi.js");
const { name: piName, module: pi } = requirePi();
const native = await import("pi-native-ops");
const only = process.argv.slice(2).filter((a) => !a.startsWith("-"));

const log = (msg) => console.log(`  ${msg}`);
const corpora = await prepareCorpora(log);
const rg = findBinary("rg");
const fd = findBinary("fd");
const skipped = [];
if (!rg) skipped.push("stock grep: no `rg` on PATH or in ~/.cargo/bin (install with `cargo install ripgrep`)");
if (!fd) skipped.push("stock find: no `fd` on PATH or in ~/.cargo/bin (install with `cargo install fd-find`)");
if (!corpora.kernel) skipped.push(corpora.kernelWhy);
// pi's stock find/grep locate fd/rg on PATH; make sure they see the ones we found, never a download.
preferOnPath(rg, fd);

const ctx = { pi, piName, corpora, rg, fd, native, log, repo, skip: (why) => skipped.push(why) };
const rows = [];
for (const capability of [
  "fs",
  "bash",
  "find",
  "grep",
  "policy",
  "remote",
  "websocket",
  "index",
  "pi-extension",
  "import",
  "windows",
]) {
  if (only.length && !only.includes(capability)) continue;
  const file = path.join(here, `${capability}.js`);
  if (!existsSync(file)) {
    skipped.push(`${capability}: bench/${capability}.js not present`);
    continue;
  }
  console.log(`\n== ${capability}`);
  const { bench } = await import(file);
  for (const row of await bench(ctx)) {
    rows.push({ capability, ...row });
    const ratio = row.ratio == null ? "n/a" : `${row.ratio.toFixed(2)}×`;
    const mem =
      row.nativeMemMiB != null
        ? `, peak RSS native ${row.nativeMemMiB.toFixed(0)} MiB${row.stockMemMiB != null ? ` / stock ${row.stockMemMiB.toFixed(0)} MiB` : ""}`
        : "";
    log(
      `${row.operation} [${row.corpus}]: native ${fmt(row.nativeMs)} ms, stock ${fmt(row.stockMs)} ms, ratio ${ratio}${mem}${row.note ? ` (${row.note})` : ""}`,
    );
  }
}

const machine = {
  cpu: os.cpus()[0]?.model ?? "unknown",
  cores: os.cpus().length,
  memGiB: Math.round(os.totalmem() / 2 ** 30),
  os: `${os.type()} ${os.release()} ${os.arch()}`,
  node: process.version,
  pi: `${piName}@${pi.VERSION ?? "?"}`,
  rg: rg ? execFileSync(rg, ["--version"], { encoding: "utf8" }).split("\n")[0] : "absent",
  fd: fd ? execFileSync(fd, ["--version"], { encoding: "utf8" }).trim() : "absent",
  date: new Date().toISOString(),
};
if (!only.length) {
  writeFileSync(path.join(here, "RESULTS.md"), renderMarkdown(rows, machine, skipped));
  writeFileSync(path.join(here, "results.svg"), renderSvg(rows, machine));
  console.log(`\nwrote bench/RESULTS.md and bench/results.svg (${rows.length} rows)`);
}
for (const s of skipped) console.log(`skipped: ${s}`);

function fmt(ms) {
  return ms == null ? "n/a" : ms < 1 ? ms.toFixed(3) : ms.toFixed(1);
}
