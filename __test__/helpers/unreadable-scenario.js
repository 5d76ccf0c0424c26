// The unreadable-directory scenario of __test__/index-failures.test.js, run by a user the permission bits
// bind (root reads every directory whatever its mode): in the test process when it is not root, else in a
// child Node process dropped to nobody (`node unreadable-scenario.js <dir>`, JSON on stdout). No vitest
// here: it returns what each phase gave, through the indexed fs and a fresh unindexed one, for the test to
// compare.
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const pno = await import(path.resolve(here, "../../index.js"));
const { pi, runTool } = await import("./pi.js");

const SEARCHES = [
  ["grep", { pattern: "needle" }],
  ["grep", { pattern: "needle", path: "closed" }],
  ["find", { pattern: "*" }],
  ["find", { pattern: "*", path: "half" }],
  // Below the root, away from the unreadable directory: searches the index can answer while that one,
  // never listed, keeps it from answering searches of the whole root.
  ["grep", { pattern: "needle", path: "open" }],
  ["find", { pattern: "*", path: "open" }],
];

async function run(fs, cwd) {
  const tools = { find: pi.createFindTool(cwd, { operations: fs.find }), grep: pno.createGrepTool(cwd, { fs }) };
  const out = [];
  for (const [name, params] of SEARCHES) {
    const r = await runTool(tools[name], params);
    out.push(r.error !== undefined ? { error: r.error.replaceAll(cwd, "<root>") } : { text: r.text });
  }
  return out;
}

/**
 * Builds a tree in `dir` (an empty directory of the running user) with a directory it cannot read, one
 * it can only pass through, and then opens and closes them: `[{ phase, indexed, plain, state, reason }]`.
 */
export async function unreadableScenario(dir) {
  const files = {
    "open/a.txt": "needle open\n",
    "open/sub/o.txt": "needle open sub\n",
    "closed/b.txt": "needle closed\n",
    "closed/sub/c.txt": "needle closed sub\n",
    "half/known.txt": "needle half\n",
    "top.txt": "needle top\n",
  };
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), content);
  }
  chmodSync(path.join(dir, "closed"), 0o000);
  // Search permission without read: entered by path, never listed.
  chmodSync(path.join(dir, "half"), 0o311);
  const fs = pno.createBoundFs(dir, { index: true });
  const phases = [];
  const phase = async (name) => {
    const indexed = await run(fs, dir);
    const plain = await run(pno.createBoundFs(dir), dir);
    const { state, reason, directories } = await fs.index.stats();
    phases.push({ phase: name, indexed, plain, state, reason, directories });
  };
  const built = await fs.index.ready;
  phases.push({ phase: "built", state: built.state, reason: built.reason, directories: built.directories });
  await phase("one unreadable, one search-only directory");
  chmodSync(path.join(dir, "closed"), 0o755);
  await phase("the unreadable directory made readable");
  chmodSync(path.join(dir, "open"), 0o000);
  await phase("a readable directory made unreadable");
  chmodSync(path.join(dir, "open"), 0o755);
  writeFileSync(path.join(dir, "open/sub/o2.txt"), "needle new in sub\n");
  await phase("readable again, a file added below it");
  chmodSync(path.join(dir, "closed/b.txt"), 0o000);
  await phase("a file made unreadable");
  chmodSync(path.join(dir, "closed/b.txt"), 0o644);
  await phase("the file readable again");
  await fs.index.close();
  chmodSync(path.join(dir, "half"), 0o755);
  return phases;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  process.stdout.write(JSON.stringify(await unreadableScenario(process.argv[2])));
}
