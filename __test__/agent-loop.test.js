// What the model sees, through pi's real agent loop: createAgentSession driven by pi-ai's faux provider
// (scripted assistant turns, no network), once with pi's stock tools and once with
// createNativeToolDefinitions() replacing them, on identical workspaces. Every tool result the model
// receives and the final tree must match, except escapes: stock pi is unbounded, ours must refuse with
// `path "…" is outside workspace` through every tool. Stock find and grep spawn fd and rg: this test
// finds them (see stockSearchTools) and never lets pi download them (PI_OFFLINE).
import { spawnSync } from "node:child_process";
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

// Nothing under the real HOME: pi's agent dir, settings and tool bin dir all live in a scratch HOME.
const scratch = realpathSync(mkdtempSync(path.join(tmpdir(), "pi-native-ops-agent-")));
const saved = {
  HOME: process.env.HOME,
  PATH: process.env.PATH,
  PI_OFFLINE: process.env.PI_OFFLINE,
  PI_CODING_AGENT_DIR: process.env.PI_CODING_AGENT_DIR,
};
const agentDir = path.join(scratch, "home", ".pi", "agent");
mkdirSync(agentDir, { recursive: true });
process.env.HOME = path.join(scratch, "home");
process.env.PI_CODING_AGENT_DIR = agentDir;
process.env.PI_OFFLINE = "1";

/**
 * A directory for PATH holding `fd` (>= 10, whose flags pi 1.6.0 passes) and `rg` (>= 14) for stock
 * pi, found on PATH (Debian names fd `fdfind`) or in ~/.cargo/bin; null when either is missing.
 */
function stockSearchTools() {
  const major = (file, name) => {
    const out = spawnSync(file, ["--version"], { encoding: "utf8" });
    return Number(new RegExp(`^${name} (\\d+)`).exec(out.stdout ?? "")?.[1] ?? 0);
  };
  const find = (names, name, min) => {
    const onPath = names.map((n) => spawnSync("sh", ["-c", `command -v ${n}`], { encoding: "utf8" }).stdout.trim());
    const cargo = saved.HOME ? [path.join(saved.HOME, ".cargo", "bin", names[0])] : [];
    return [...onPath, ...cargo].find((file) => file && major(file, name) >= min) ?? null;
  };
  const fd = find(["fd", "fdfind"], "fd", 10);
  const rg = find(["rg"], "ripgrep", 14);
  if (!fd || !rg) return null;
  const bin = path.join(scratch, "bin");
  mkdirSync(bin);
  symlinkSync(fd, path.join(bin, "fd"));
  symlinkSync(rg, path.join(bin, "rg"));
  return bin;
}
const searchBin = stockSearchTools();
if (searchBin) process.env.PATH = `${searchBin}${path.delimiter}${process.env.PATH}`;

const { pi, piName, isPi1 } = await import("./helpers/pi.js");
const ai = await import(isPi1 ? "@earendil-works/pi-ai" : "@mariozechner/pi-ai");
const { createNativeToolDefinitions, createNativeTools } = await import("../index.js");

const TOOLS = ["read", "bash", "edit", "write", "grep", "find", "ls"];

function makeWorkspace(dir) {
  const files = {
    "README.md": "# Demo\nhello world\n",
    "notes.txt": "remember the milk\nTODO: call back\n",
    "src/a.ts": "export const a = 1;\n// TODO: fix a\n",
    "src/b.ts": "export const b = 2;\n",
    "src/c.ts": "export const c = 3;\n",
    "src/lib/d.ts": "export const d = 4;\n// TODO: fix d\n",
    "src/lib/e.ts": "export const e = 5;\n",
  };
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(path.join(dir, path.dirname(name)), { recursive: true });
    writeFileSync(path.join(dir, name), content);
  }
}

/** Every entry below `dir` with its content (files) or a trailing `/` (directories). */
function tree(dir, base = dir, out = {}) {
  for (const name of readdirSync(dir).sort()) {
    const full = path.join(dir, name);
    const rel = path.relative(base, full);
    if (statSync(full).isDirectory()) {
      out[`${rel}/`] = "";
      tree(full, base, out);
    } else {
      out[rel] = readFileSync(full, "utf8");
    }
  }
  return out;
}

// The model's turns: each is one tool call; escapes are marked "escape" so their results are judged apart.
const SCRIPT = [
  ["read", { path: "README.md" }],
  ["ls", { path: "." }],
  ["ls", { path: "src" }],
  // Five .ts files, limit 4: the notice tells the model how to get more.
  ["find", { pattern: "**/*.ts", limit: 4 }],
  ["find", { pattern: "*.md" }],
  ["grep", { pattern: "TODO" }],
  ["grep", { pattern: "const [a-c]", path: "src", context: 1 }],
  ["write", { path: "out/new.txt", content: "fresh file\n" }],
  ["edit", { path: "src/a.ts", edits: [{ oldText: "export const a = 1;", newText: "export const a = 10;" }] }],
  ["read", { path: "src/a.ts" }],
  ["bash", { command: "ls -R | sort; cat out/new.txt" }],
  ["grep", { pattern: "nothing matches this" }],
  ["ls", { path: "missing-dir" }],
  ["ls", { path: "/etc" }, "escape"],
  ["grep", { pattern: "root", path: "/etc" }, "escape"],
  ["find", { pattern: "*.conf", path: "/etc" }, "escape"],
  ["read", { path: "/etc/hostname" }, "escape"],
];

/** Runs the scripted session in a fresh workspace; returns each tool result as the model sees it. */
async function runSession(kind) {
  const cwd = path.join(scratch, kind);
  mkdirSync(cwd);
  makeWorkspace(cwd);
  let turn = 0;
  const steps = SCRIPT.map(([name, args]) => () => {
    turn++;
    return ai.fauxAssistantMessage([ai.fauxToolCall(name, args, { id: `call-${turn}` })], { stopReason: "toolUse" });
  });
  steps.push(() => ai.fauxAssistantMessage("done"));

  let model;
  let modelOptions;
  let cleanup = () => {};
  if (isPi1) {
    const faux = ai.fauxProvider();
    faux.setResponses(steps);
    const modelRuntime = await pi.ModelRuntime.create({
      authPath: path.join(agentDir, "auth.json"),
      modelsPath: path.join(agentDir, "models.json"),
    });
    modelRuntime.registerNativeProvider(faux.provider);
    model = faux.getModel();
    modelOptions = { modelRuntime };
  } else {
    const faux = ai.registerFauxProvider();
    faux.setResponses(steps);
    const authStorage = pi.AuthStorage.inMemory();
    // The faux provider takes any key; pi only insists that one is configured.
    authStorage.setRuntimeApiKey(faux.getModel().provider, "faux-key");
    model = faux.getModel();
    modelOptions = { authStorage, modelRegistry: pi.ModelRegistry.inMemory(authStorage) };
    cleanup = () => faux.unregister();
  }
  const resourceLoader = {
    getExtensions: () => ({ extensions: [], errors: [], runtime: pi.createExtensionRuntime() }),
    getSkills: () => ({ skills: [], diagnostics: [] }),
    getPrompts: () => ({ prompts: [], diagnostics: [] }),
    getThemes: () => ({ themes: [], diagnostics: [] }),
    getAgentsFiles: () => ({ agentsFiles: [] }),
    getSystemPrompt: () => "You are a test agent.",
    getSystemPromptSource: () => undefined,
    getAppendSystemPrompt: () => [],
    getAppendSystemPromptSources: () => [],
    extendResources: () => {},
    reload: async () => {},
  };
  const { session } = await pi.createAgentSession({
    cwd,
    agentDir,
    model,
    thinkingLevel: "off",
    ...modelOptions,
    resourceLoader,
    tools: TOOLS,
    customTools: kind === "native" ? Object.values(createNativeToolDefinitions(cwd)) : [],
    sessionManager: pi.SessionManager.inMemory(cwd),
    settingsManager: pi.SettingsManager.inMemory({ compaction: { enabled: false }, retry: { enabled: false } }),
  });
  try {
    await session.prompt("Work through the script.");
    const results = session.messages
      .filter((m) => m.role === "toolResult")
      .map((m) => ({
        tool: m.toolName,
        isError: Boolean(m.isError),
        text: m.content
          .map((c) => c.text ?? `[${c.type}]`)
          .join("")
          .replaceAll(cwd, "<workspace>"),
      }));
    return { results, tree: tree(cwd), calls: turn };
  } finally {
    session.dispose();
    cleanup();
  }
}

/** A grep result with its output lines sorted (notices kept last), to compare across file orders. */
function inAnyFileOrder(result) {
  const cut = result.text.lastIndexOf("\n\n[");
  const body = cut < 0 ? result.text : result.text.slice(0, cut);
  return { ...result, text: body.split("\n").sort(), notice: cut < 0 ? "" : result.text.slice(cut) };
}

describe(`pi's agent loop (${piName}): native tools against stock tools`, () => {
  let stock;
  let native;
  beforeAll(async () => {
    stock = await runSession("stock");
    native = await runSession("native");
  });
  afterAll(() => {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    rmSync(scratch, { recursive: true, force: true });
  });

  it("ran every scripted call through the loop", () => {
    expect(native.calls).toBe(SCRIPT.length);
    expect(native.results.map((r) => r.tool)).toEqual(SCRIPT.map(([name]) => name));
    expect(stock.results.map((r) => r.tool)).toEqual(SCRIPT.map(([name]) => name));
  });

  const searches = new Set(["find", "grep"]);

  it("gives the model the same read, write, edit, ls and bash results as stock pi", () => {
    SCRIPT.forEach(([name, args, outside], i) => {
      if (outside || searches.has(name)) return;
      expect(native.results[i], `call ${i + 1}: ${name} ${JSON.stringify(args)}`).toEqual(stock.results[i]);
    });
  });

  // Stock find and grep spawn fd and rg; without both on PATH this is reported as skipped, and the
  // literal texts below still pin ours.
  it.skipIf(!searchBin)("gives the model the same find and grep results as stock pi (fd and rg)", () => {
    SCRIPT.forEach(([name, args, outside], i) => {
      if (outside || !searches.has(name)) return;
      const label = `call ${i + 1}: ${name} ${JSON.stringify(args)}`;
      if (name === "find" && args.limit) {
        // fd keeps whichever `limit` matches its threads reach first; ours keeps the first in path
        // order. The model still gets as many paths, from the same matches, and the same notice.
        const [stockPaths, stockNotice] = stock.results[i].text.split("\n\n");
        const [nativePaths, nativeNotice] = native.results[i].text.split("\n\n");
        expect(nativeNotice, label).toBe(stockNotice);
        expect(nativePaths.split("\n").length, label).toBe(stockPaths.split("\n").length);
        const matches = Object.keys(native.tree).filter((p) => p.endsWith(".ts"));
        expect(matches, label).toEqual(expect.arrayContaining(stockPaths.split("\n")));
        return;
      }
      // pi 0.73.1's own grep reads context lines itself (and shows one past a file's end); ours gives
      // pi 1.6.0's text on both versions (docs/contracts.md, "grep"), checked below.
      if (name === "grep" && args.context && !isPi1) return;
      if (name === "grep") {
        // rg prints files in whichever order its threads finish them; ours are in path order.
        expect(inAnyFileOrder(native.results[i]), label).toEqual(inAnyFileOrder(stock.results[i]));
        return;
      }
      expect(native.results[i], label).toEqual(stock.results[i]);
    });
  });

  it("tells the model how to get more when find hits its limit, as stock pi does", () => {
    const i = SCRIPT.findIndex(([name, args]) => name === "find" && args.limit === 4);
    expect(native.results[i].text).toBe(
      "src/a.ts\nsrc/b.ts\nsrc/c.ts\nsrc/lib/d.ts\n\n[4 results limit reached. Use limit=8 for more, or refine pattern]",
    );
  });

  it("gives the same find notice from createNativeTools' AgentTool, and none below the limit", async () => {
    const cwd = path.join(scratch, "native");
    const find = createNativeTools(cwd).find;
    const text = async (params) => (await find.execute("t", params)).content[0].text;
    expect(await text({ pattern: "*.ts", limit: 1 })).toBe(
      "src/a.ts\n\n[1 results limit reached. Use limit=2 for more, or refine pattern]",
    );
    expect(await text({ pattern: "*.ts", path: "src/lib", limit: 3 })).toBe("d.ts\ne.ts");
  });

  it("gives pi 1.6.0's grep text on both pi versions, files in path order", () => {
    const text = (pattern) =>
      native.results[SCRIPT.findIndex(([name, args]) => name === "grep" && args.pattern === pattern)].text;
    expect(text("TODO")).toBe(
      "notes.txt:2: TODO: call back\nsrc/a.ts:2: // TODO: fix a\nsrc/lib/d.ts:2: // TODO: fix d",
    );
    expect(text("const [a-c]")).toBe(
      "a.ts:1: export const a = 1;\na.ts-2- // TODO: fix a\nb.ts:1: export const b = 2;\nc.ts:1: export const c = 3;",
    );
  });

  it("refuses escapes through every tool with the workspace refusal", () => {
    SCRIPT.forEach(([name, args, outside], i) => {
      if (!outside) return;
      const target = args.path;
      expect(native.results[i], `call ${i + 1}: ${name} ${JSON.stringify(args)}`).toEqual({
        tool: name,
        isError: true,
        text: `path "${target}" is outside workspace`,
      });
    });
  });

  it("leaves identical trees", () => {
    expect(native.tree).toEqual(stock.tree);
    expect(native.tree["src/a.ts"]).toBe("export const a = 10;\n// TODO: fix a\n");
    expect(native.tree["out/new.txt"]).toBe("fresh file\n");
  });
});
