// npm run demo [dir]: runs each of pi's seven tools with the native operations on a directory (default:
// this repository), prints what the model would see (trimmed) and how long each call took next to pi's
// stock tool. Stock find/grep need fd/rg on PATH (or ~/.cargo/bin); without them the demo says so and
// never lets pi download them. write/edit work on a scratch folder that is removed at the end.
import { existsSync, mkdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { findBinary, preferOnPath, rerunUnderNode22 } from "../scripts/node-tools.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.dirname(here);

rerunUnderNode22();

const { requirePi } = await import("../js/pi.js");
const { name: piName, module: pi } = requirePi();
const { createNativeTools } = await import("pi-native-ops");

const dir = path.resolve(process.argv[2] ?? repo);
if (!existsSync(dir)) {
  console.error(`demo: no such directory: ${dir}`);
  process.exit(1);
}

const rg = findBinary("rg");
const fd = findBinary("fd");
preferOnPath(rg, fd);

const scratch = ".pi-native-ops-demo";
const native = createNativeTools(dir);
const stock = {
  read: pi.createReadTool(dir),
  bash: pi.createBashTool(dir),
  edit: pi.createEditTool(dir),
  write: pi.createWriteTool(dir),
  grep: rg ? pi.createGrepTool(dir) : null,
  find: fd ? pi.createFindTool(dir) : null,
  ls: pi.createLsTool(dir),
};
const why = { grep: "no `rg` on PATH (cargo install ripgrep)", find: "no `fd` on PATH (cargo install fd-find)" };
const readTarget = ["README.md", "package.json", "Cargo.toml"].find((f) => existsSync(path.join(dir, f)));

// [tool, params(side), repeatable]: repeatable calls are timed as the median of 5 after a warm-up.
const calls = [
  ["read", () => ({ path: readTarget ?? ".", limit: 12 }), true],
  ["ls", () => ({}), true],
  ["find", () => ({ pattern: "*.{js,ts,rs,md}", limit: 200 }), true],
  ["grep", () => ({ pattern: "export (function|const)", limit: 8 }), true],
  ["write", (side) => ({ path: `${scratch}/${side}.txt`, content: "hello from pi-native-ops\nline two\n" }), true],
  [
    "edit",
    (side) => ({ path: `${scratch}/${side}.txt`, edits: [{ oldText: "line two", newText: "line 2 (edited)" }] }),
    false,
  ],
  ["bash", () => ({ command: 'echo "shell: $0"; ls | head -3; exit 0' }), true],
];

const trim = (s, lines = 8) => {
  const all = s.split("\n");
  return (
    all
      .slice(0, lines)
      .map((l) => (l.length > 110 ? `${l.slice(0, 110)}…` : l))
      .join("\n") + (all.length > lines ? `\n… (${all.length - lines} more lines)` : "")
  );
};

async function once(tool, params) {
  const t0 = performance.now();
  try {
    const r = await tool.execute("demo", params, undefined, undefined);
    const text = r.content.map((c) => (c.type === "text" ? c.text : `[${c.type} ${c.mimeType ?? ""}]`)).join("\n");
    return { ms: performance.now() - t0, text };
  } catch (e) {
    return { ms: performance.now() - t0, text: `Error: ${e.message}` };
  }
}

async function timed(tool, params, repeatable) {
  if (!repeatable) return once(tool, params);
  await once(tool, params);
  const runs = [];
  for (let i = 0; i < 5; i++) runs.push(await once(tool, params));
  runs.sort((a, b) => a.ms - b.ms);
  return runs[2];
}

console.log(
  `pi-native-ops demo on ${dir}\n${piName}@${pi.VERSION ?? "?"}, Node ${process.version}; rg: ${rg ?? "absent"}; fd: ${fd ?? "absent"}\n`,
);
mkdirSync(path.join(dir, scratch), { recursive: true });
try {
  for (const [name, params, repeatable] of calls) {
    const n = await timed(native[name], params("native"), repeatable);
    let stockLine;
    if (stock[name]) {
      const s = await timed(stock[name], params("stock"), repeatable);
      stockLine = `stock ${s.ms.toFixed(1)} ms`;
    } else {
      stockLine = `stock cannot run here: ${why[name]}`;
    }
    console.log(`── ${name} ${JSON.stringify(params("native"))}\n   native ${n.ms.toFixed(1)} ms | ${stockLine}`);
    console.log(trim(n.text).replace(/^/gm, "   │ "));
    console.log();
  }
} finally {
  rmSync(path.join(dir, scratch), { recursive: true, force: true });
}
console.log("Times: median of 5 calls after a warm-up (edit: one call). npm run bench has the full comparison.");
