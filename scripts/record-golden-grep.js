// Records pi 1.6.0's stock grep tool output (ripgrep spawned) for every case in __test__/grep/fixture.js
// into __test__/grep/goldens.json. Needs Node 22 and rg >= 14 (~/.cargo/bin is put first on PATH, and
// an absent rg is an error: pi must never download one here). Paths in goldens are relative to the fixture.
import { execFileSync } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CASES, makeFixture } from "../__test__/grep/fixture.js";

process.env.PATH = `${path.join(homedir(), ".cargo/bin")}${path.delimiter}${process.env.PATH}`;
const rgVersion = execFileSync("rg", ["--version"], { encoding: "utf8" }).split("\n")[0];
if (Number(/ripgrep (\d+)/.exec(rgVersion)?.[1]) < 14) throw new Error(`need rg >= 14, found ${rgVersion}`);
const pi = await import("@earendil-works/pi-coding-agent");

const dir = realpathSync(mkdtempSync(path.join(tmpdir(), "grep-golden-")));
try {
  makeFixture(dir);
  const tool = pi.createGrepTool(dir);
  const goldens = { rg: rgVersion, pi: "@earendil-works/pi-coding-agent@1.6.0", cases: {} };
  for (const c of CASES) {
    try {
      const r = await tool.execute("golden", c.params);
      goldens.cases[c.name] = { text: r.content[0].text, details: r.details ?? null };
    } catch (err) {
      goldens.cases[c.name] = { error: err.message.replaceAll(dir, "<root>") };
    }
  }
  const out = path.join(path.dirname(fileURLToPath(import.meta.url)), "../__test__/grep/goldens.json");
  writeFileSync(out, `${JSON.stringify(goldens, null, 2)}\n`);
  console.log(`grep goldens: ${CASES.length} cases (${rgVersion}) -> ${path.relative(process.cwd(), out)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
