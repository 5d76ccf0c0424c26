// `import("pi-native-ops")` in a fresh process, as a program meets it: the time of the import itself
// (Node's own start excluded), measured inside each child. Beside it, the same import followed by the
// WebSocket face and the cloud adapters (what the package's import cost when it loaded them eagerly,
// and what a remote user's first connectWebSocket adds), fresh processes alternated run by run.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { median } from "./lib.js";

const RUNS = 21;

/** Milliseconds the child spends importing `urls` in order. */
function importMs(urls) {
  const script = `const t = performance.now(); for (const u of ${JSON.stringify(urls)}) await import(u); console.log(performance.now() - t);`;
  return Number(execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" }).trim());
}

export async function bench({ repo }) {
  const pkg = pathToFileURL(path.join(repo, "index.js")).href;
  const faces = ["websocket.js", "sandboxes.js"].map((f) => pathToFileURL(path.join(repo, "js", f)).href);
  const lazy = [];
  const eager = [];
  for (let i = 0; i < RUNS; i++) {
    // Alternate which goes first, so a burst of load elsewhere hits both alike.
    const pair = [() => lazy.push(importMs([pkg])), () => eager.push(importMs([pkg, ...faces]))];
    if (i % 2) pair.reverse();
    for (const run of pair) run();
  }
  const nativeMs = median(lazy);
  const stockMs = median(eager);
  return [
    {
      operation: 'import("pi-native-ops"), fresh process',
      corpus: "-",
      nativeMs,
      stockMs,
      ratio: nativeMs / stockMs,
      target: "≤ 20 ms",
      note: `medians of ${RUNS} fresh processes each; stock = the same import plus js/websocket.js and js/sandboxes.js (ws and the cloud adapters, loaded at their first call)`,
    },
  ];
}
