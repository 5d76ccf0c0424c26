// The grep tool searches where stock pi's grep would: its path is resolved by pi's own resolver (pi's
// `resolveToCwd`, asked of pi), so every spelling a model may give (relative, `./`, absolute, `@`-prefixed, a
// file:// URL, and on Windows the Git Bash form /c/…) names the same directory as for stock pi's grep.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";
import { windows } from "./helpers/windows.js";

// Stock pi's grep asks for rg before it resolves anything: a placeholder where pi looks first (its agent
// directory's bin, set before pi loads), so that it never downloads one. It never runs: the operations given
// to stock grep stop it at the first one, which receives the path it resolved.
const agentDir = tempDir("pno-grep-agent-");
mkdirSync(path.join(agentDir, "bin"));
writeFileSync(path.join(agentDir, "bin", windows ? "rg.exe" : "rg"), "");
process.env.PI_CODING_AGENT_DIR = agentDir;
const { isPi1, pi, runTool } = await import("./helpers/pi.js");
const { createNativeTools } = await import("pi-native-ops");

/** Where stock pi's grep, given `p` from `cwd`, would search. */
async function stockSearches(p, cwd) {
  let searched;
  const operations = {
    isDirectory: (q) => {
      searched = q;
      throw new Error("stopped");
    },
    readFile: () => "",
  };
  await pi
    .createGrepToolDefinition(cwd, { operations })
    .execute("stock", { pattern: "needle", path: p })
    .catch(() => {});
  return searched;
}

describe("grep resolves its path as stock pi's grep does", () => {
  let base;
  let root;
  let sub;
  let tools;

  beforeAll(() => {
    base = tempDir("pno-grep-paths-");
    root = makeTree(path.join(base, "root"), { "a.txt": "needle a\n", "sub/b.txt": "needle b\n" });
    sub = path.join(root, "sub");
    tools = createNativeTools(root);
  });
  afterAll(() => {
    removeTree(base);
    removeTree(agentDir);
  });

  const slashed = (p) => p.replaceAll("\\", "/");
  const spellings = () => [
    "sub",
    "./sub",
    "@sub",
    sub,
    `${slashed(sub)}/`,
    `file://${windows ? "/" : ""}${slashed(sub)}`,
    ...(windows ? [`/${root[0].toLowerCase()}${slashed(sub).slice(2)}`] : []),
  ];

  /** What our grep tool answers for each spelling: its output, or its error. */
  const oursFor = async (paths) => {
    const out = [];
    for (const p of paths) {
      const r = await runTool(tools.grep, { pattern: "needle", path: p });
      out.push(`${p} -> ${r.error ?? r.text}`);
    }
    return out;
  };

  it("each spelling is searched where stock pi's grep searches it", async () => {
    const stock = [];
    for (const p of spellings()) {
      const there = await stockSearches(p, root);
      expect(typeof there, p).toBe("string");
      const r = await runTool(tools.grep, { pattern: "needle", path: there });
      stock.push(`${p} -> ${r.error ?? r.text}`);
    }
    expect(await oursFor(spellings())).toEqual(stock);
  });

  // pi 1.6 reads a file:// URL, and on Windows the Git Bash form, as the local path it names.
  it.runIf(isPi1)("pi 1.6's spellings of a directory reach that directory", async () => {
    for (const p of spellings()) expect(path.resolve(await stockSearches(p, root)), p).toBe(sub);
    expect(await oursFor(spellings())).toEqual(spellings().map((p) => `${p} -> b.txt:1: needle b`));
  });
});
