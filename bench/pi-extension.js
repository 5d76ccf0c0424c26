// The pi extension's cost at startup: the real pi CLI from its start to its first request to the model
// (a scripted local model that answers at once), with `-e <this package>` and without, alternated run by
// run; and, without pi's own variance, the extension's part alone: loading js/extension.js (the addon
// included), its factory and its session_start, in a fresh Node.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { MODEL, PROVIDER, runPi, scratchPiHome, startFakeModel } from "../__test__/helpers/fake-model.js";
import { pathToFileURL } from "node:url";
import { median, runChild } from "./lib.js";

/** pi runs per side: each is a whole pi start (about a second of CPU), so few. */
const PI_RUNS = 11;
/** Fresh-process runs of the extension alone. */
const EXTENSION_RUNS = 15;

/** Times the extension alone in this (fresh) process: import, factory, session_start. */
const CHILD = `
// As under pi: pi is loaded already, and the running script is its CLI.
const [entry, cwd, cli, piEntry] = process.argv.slice(2);
await import(piEntry);
process.argv[1] = cli;
const t0 = performance.now();
const { default: extension } = await import(entry);
const t1 = performance.now();
const handlers = {};
const api = {
  registerFlag() {}, getFlag: () => undefined, registerTool() {},
  on: (name, fn) => { handlers[name] = fn; },
};
await extension(api);
const t2 = performance.now();
await handlers.session_start({}, { hasUI: false, cwd });
const t3 = performance.now();
await handlers.session_shutdown({}, {});
console.log(JSON.stringify({ load: t1 - t0, factory: t2 - t1, sessionStart: t3 - t2, total: t3 - t0 }));
`;

export async function bench({ piName, repo, log }) {
  const cli = path.join(repo, "node_modules", piName, "dist", "cli.js");
  const dir = mkdtempSync(path.join(os.tmpdir(), "pno-bench-piext-"));
  const ws = path.join(dir, "ws");
  mkdirSync(ws);
  const model = await startFakeModel(() => ({ text: "done" }));
  try {
    const env = scratchPiHome(dir, model.url);
    const argv = ["--mode", "json", "--no-session", "--provider", PROVIDER, "--model", MODEL, "go"];
    /** Milliseconds from spawning pi to its first request to the model. */
    const startup = async (extra) => {
      const before = model.requests.length;
      const t0 = performance.now();
      let first = null;
      const waiting = new Promise((resolve) => {
        model.onRequest = () => {
          if (first === null) first = performance.now();
          resolve();
        };
      });
      const out = await runPi(process.execPath, cli, [...argv, ...extra], { cwd: ws, env });
      await waiting;
      if (out.code !== 0 || model.requests.length === before) throw new Error(`pi failed: ${out.stderr}`);
      return first - t0;
    };
    // For scale: what pi's loading of any extension costs, with one that does nothing.
    const empty = path.join(dir, "empty-extension");
    mkdirSync(empty);
    writeFileSync(
      path.join(empty, "package.json"),
      JSON.stringify({ type: "module", pi: { extensions: ["./index.js"] } }),
    );
    writeFileSync(path.join(empty, "index.js"), "export default function () {}\n");
    const sides = [
      { name: "plain", args: [], ms: [] },
      { name: "-e pi-native-ops", args: ["-e", repo], ms: [] },
      { name: "-e an empty extension", args: ["-e", empty], ms: [] },
    ];
    for (const side of sides) await startup(side.args); // warm the page cache
    for (let i = 0; i < PI_RUNS; i++) {
      // Alternated, each side first in turn, so load from elsewhere hits all alike.
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(i + k) % sides.length];
        side.ms.push(await startup(side.args));
      }
    }
    for (const side of sides)
      log(`pi start to first model request, ${side.name}: ${side.ms.map((x) => x.toFixed(0)).join(", ")}`);
    const [plain, withExtension, withEmpty] = sides.map((side) => side.ms);

    const script = path.join(dir, "extension-alone.mjs");
    writeFileSync(script, CHILD);
    const entry = path.join(repo, "js", "extension.js");
    const alone = [];
    const manifest = JSON.parse(readFileSync(path.join(repo, "node_modules", piName, "package.json"), "utf8"));
    const piEntry = path.join(
      repo,
      "node_modules",
      piName,
      manifest.exports["."].import ?? manifest.exports["."].default,
    );
    for (let i = 0; i < EXTENSION_RUNS; i++)
      alone.push(await runChild(script, [pathToFileURL(entry).href, ws, cli, pathToFileURL(piEntry).href]));
    const part = (key) => median(alone.map((r) => r[key]));
    const plainMs = median(plain);
    const extMs = median(withExtension);
    return [
      {
        operation: "pi start to first model request, with the extension (-e) vs plain pi",
        corpus: "empty workspace",
        nativeMs: extMs,
        stockMs: plainMs,
        ratio: extMs / plainMs,
        target: "≤ +50 ms",
        note: `added ${(extMs - plainMs).toFixed(0)} ms; an empty extension: ${median(withEmpty).toFixed(0)} ms (medians of ${PI_RUNS} alternated runs; pi's own run-to-run spread is larger)`,
      },
      {
        operation: "the extension alone: import (addon included), factory, session_start",
        corpus: "empty workspace",
        nativeMs: part("total"),
        stockMs: null,
        ratio: null,
        target: "≤ 50 ms",
        note: `import ${part("load").toFixed(1)} ms, factory ${part("factory").toFixed(1)} ms, session_start ${part("sessionStart").toFixed(1)} ms (fresh Node, median of ${EXTENSION_RUNS})`,
      },
    ];
  } finally {
    await model.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
