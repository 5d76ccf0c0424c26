// npm run record-golden: re-records the golden outputs of pi's stock find (fd) and grep (rg) tools
// that the vitest suites compare against. Needs fd >= 10 and rg >= 14 on PATH or in ~/.cargo/bin
// (cargo install fd-find ripgrep); each script re-runs itself under Node 22 for pi 1.6.0.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
for (const script of ["record-golden-find.js", "record-golden-grep.js"]) {
  console.log(`== ${script}`);
  const r = spawnSync(process.execPath, [path.join(here, script)], { stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
