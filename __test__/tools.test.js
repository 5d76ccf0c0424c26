// One-call wiring: a realistic session driving all seven tools on a fixture repository.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createNativeToolDefinitions, createNativeTools } from "pi-native-ops";
import { pi, runTool } from "./helpers/pi.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const dirs = [];
afterAll(() => dirs.forEach(removeTree));

function repo() {
  const dir = makeTree(tempDir("pno-session-"), {
    "package.json": JSON.stringify({ name: "calc", type: "module", scripts: { test: "node test.js" } }, null, 2),
    ".gitignore": "dist/\n",
    "dist/bundle.js": "export function add() {}\n",
    "README.md": "# calc\n",
  });
  execFileSync("git", ["init", "-q", dir]);
  dirs.push(dir);
  return dir;
}

/** What the model sees from a call: the tool's text, or the message it threw. */
const output = async (tool, params) => {
  const r = await runTool(tool, params);
  return r.error ?? r.text;
};

describe("createNativeTools", () => {
  it("returns pi's seven tools with pi's names and schemas", () => {
    const dir = repo();
    const tools = createNativeTools(dir);
    const stock = pi.createReadOnlyTools
      ? Object.fromEntries([...pi.createCodingTools(dir), ...pi.createReadOnlyTools(dir)].map((t) => [t.name, t]))
      : {};
    expect(Object.keys(tools).sort()).toEqual(["bash", "edit", "find", "grep", "ls", "read", "write"]);
    for (const [name, tool] of Object.entries(tools)) {
      expect(tool.name).toBe(name);
      expect(typeof tool.execute).toBe("function");
      if (stock[name]) {
        expect(tool.description).toBe(stock[name].description);
        expect(JSON.stringify(tool.parameters)).toBe(JSON.stringify(stock[name].parameters));
      }
    }
    const defs = createNativeToolDefinitions(dir);
    expect(Object.keys(defs).sort()).toEqual(Object.keys(tools).sort());
    for (const def of Object.values(defs)) expect(typeof def.execute).toBe("function");
    expect(() => createNativeTools(42)).toThrow(TypeError);
  });

  it("drives a whole session: create, edit, find, grep, ls, read, and run the tests with bash", async () => {
    const dir = repo();
    const t = createNativeTools(dir);

    expect(
      await output(t.write, { path: "src/math.js", content: "export function add(a, b) {\n  return a - b;\n}\n" }),
    ).toContain("Successfully wrote");
    await output(t.write, {
      path: "test.js",
      content:
        'import { add } from "./src/math.js";\nif (add(2, 3) !== 5) { console.error("FAIL add"); process.exit(1); }\nconsole.log("ok");\n',
    });

    const failing = await output(t.bash, { command: "npm test --silent" });
    expect(failing).toContain("FAIL add");
    expect(failing).toMatch(/exited with code 1|exit code 1/i);

    const edited = await output(t.edit, {
      path: "src/math.js",
      edits: [{ oldText: "return a - b;", newText: "return a + b;" }],
    });
    expect(edited).toContain("Successfully replaced");
    expect(readFileSync(path.join(dir, "src/math.js"), "utf8")).toContain("return a + b;");

    const found = await output(t.find, { pattern: "*.js" });
    expect(
      found
        .split("\n")
        .filter((l) => l.endsWith(".js"))
        .sort(),
    ).toEqual(["src/math.js", "test.js"]);

    const grepped = await output(t.grep, { pattern: "export function", path: "." });
    expect(grepped).toBe("src/math.js:1: export function add(a, b) {");

    const listed = await output(t.ls, {});
    expect(listed.split("\n")).toEqual(
      expect.arrayContaining([".gitignore", "dist/", "package.json", "README.md", "src/", "test.js"]),
    );

    const read = await output(t.read, { path: "src/math.js" });
    expect(read).toContain("return a + b;");

    const passing = await output(t.bash, { command: "npm test --silent" });
    expect(passing.trim()).toBe("ok");

    const outside = await output(t.read, { path: "../../etc/passwd" });
    expect(outside).toContain("is outside workspace");
  });

  it("maps a runtime root: the agent sees /workspace, the tools work on the host directory", async () => {
    const dir = repo();
    makeTree(dir, { "src/a.ts": "export const marker = 1;\n" });
    const t = createNativeTools("/workspace", { root: dir, runtimeRoot: "/workspace" });
    expect(await output(t.read, { path: "src/a.ts" })).toContain("marker");
    expect(await output(t.grep, { pattern: "marker" })).toBe("src/a.ts:1: export const marker = 1;");
    expect(await output(t.find, { pattern: "*.ts" })).toBe("src/a.ts");
    expect(await output(t.ls, { path: "src" })).toBe("a.ts");
    const leak = await output(t.read, { path: "/workspace/../etc/passwd" });
    expect(leak).toContain("is outside workspace");
    expect(leak).not.toContain(dir);
  });

  it("passes bash tool options through (commandPrefix, spawnHook)", async () => {
    const dir = repo();
    const t = createNativeTools(dir, {
      bash: {
        commandPrefix: "export GREETING=hello",
        spawnHook: (ctx) => ({ ...ctx, env: { ...ctx.env, FROM_HOOK: "hooked" } }),
      },
    });
    expect((await output(t.bash, { command: 'echo "$GREETING $FROM_HOOK"' })).trim()).toBe("hello hooked");
  });
});
