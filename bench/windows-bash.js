// The Windows bash rows, for the Windows bench run under wine (bench/windows-child.js calls `bashRows` in npm's
// Windows Node): pi's bash tool over our exec against the same tool over pi's stock local operations, both
// with the same shell (brush-shell under wine: PI_NATIVE_OPS_WIN_BASH, from scripts/build-windows.sh; Git Bash
// as pi finds it on Windows itself), call by call alternately. Under wine every number includes wine's own
// process-creation costs: the rows are ratios between two sides under the same wine, not Windows timings.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

/** The rows: `compare` is bench/lib.js's; `native` the package, `pi` pi's module. */
export async function bashRows({ native, pi, compare, corpus = "under wine" }) {
  const shellPath = process.env.PI_NATIVE_OPS_WIN_BASH || undefined;
  const dir = mkdtempSync(path.join(os.tmpdir(), "pno-bench-bash-"));
  try {
    const ours = pi.createBashTool(dir, { operations: native.createBashOperations({ shellPath }) });
    const stock = pi.createBashTool(dir, { shellPath });
    const call = (tool, command) => async () => {
      const result = await tool.execute("bench", { command });
      if (result.isError) throw new Error(`bench windows bash: ${command} failed`);
    };
    const lines = "for ((i = 0; i < 2000; i++)); do echo line $i; done";
    // Same answers, or the rows mean nothing.
    for (const command of ["echo hi", lines]) {
      const [a, b] = await Promise.all([ours, stock].map((t) => t.execute("bench", { command })));
      if (a.content[0].text !== b.content[0].text) {
        throw new Error(`bench windows bash: "${command}" answers differ between native and stock`);
      }
    }
    return [
      await compare("bash `echo hi` (pi's tool)", corpus, call(ours, "echo hi"), call(stock, "echo hi"), {
        runs: 30,
        warmup: 3,
        note: "a shell started per call, in a Job object (native) or by libuv (stock)",
      }),
      await compare("bash 2000 lines (pi's tool)", corpus, call(ours, lines), call(stock, lines), {
        runs: 10,
        warmup: 2,
        note: "one ordered pipe (native), two (stock)",
      }),
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
