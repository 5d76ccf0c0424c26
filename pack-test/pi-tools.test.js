// Runs inside a fresh temporary project that installed pi-native-ops and its linux-x64-gnu package
// from their npm tarballs (scripts/pack-test.sh). It checks what a user gets: the addon loads from the
// platform package, the Operations plug into pi's own tools, and a CommonJS project can require() it.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { createBashOperations, createBoundFs, createNativeTools } from "pi-native-ops";

const piName = process.env.PI_NATIVE_OPS_PI ?? "@mariozechner/pi-coding-agent";
const pi = await import(piName);
const require = createRequire(import.meta.url);

const textOf = (result) => result.content.map((part) => part.text ?? "").join("");

describe(`pi-native-ops installed from tarballs, with ${piName}`, () => {
  it("loads the addon from the platform package, and the main package ships no binary", () => {
    const mainDir = dirname(require.resolve("pi-native-ops/package.json"));
    const platformDir = dirname(require.resolve("pi-native-ops-linux-x64-gnu/package.json"));
    expect(readdirSync(mainDir).filter((name) => name.endsWith(".node"))).toEqual([]);
    expect(readdirSync(platformDir)).toContain("pi-native-ops.linux-x64-gnu.node");
    const loaded = Object.keys(require.cache).filter((file) => file.endsWith(".node"));
    expect(loaded).toEqual([realpathSync(join(platformDir, "pi-native-ops.linux-x64-gnu.node"))]);
  });

  describe("fs Operations in pi's tools", () => {
    let root;
    let fs;
    beforeEach(() => {
      root = realpathSync(mkdtempSync(join(tmpdir(), "pack-test-ws-")));
      writeFileSync(join(root, "hello.txt"), "hello from the workspace\n");
      writeFileSync(join(tmpdir(), "pack-test-outside.txt"), "secret\n");
      fs = createBoundFs(root);
    });

    it("read tool reads a workspace file", async () => {
      const read = pi.createReadTool(root, { operations: fs.read });
      const result = await read.execute("call-1", { path: "hello.txt" });
      expect(textOf(result)).toContain("hello from the workspace");
    });

    it("read tool refuses a path outside the workspace", async () => {
      const read = pi.createReadTool(root, { operations: fs.read });
      const outside = join(root, "..", "pack-test-outside.txt");
      await expect(read.execute("call-2", { path: outside })).rejects.toThrow(/outside workspace/);
    });

    it("write tool creates directories and the file; ls tool lists them", async () => {
      const write = pi.createWriteTool(root, { operations: fs.write });
      await write.execute("call-3", { path: "sub/new.txt", content: "written\n" });
      expect(readFileSync(join(root, "sub", "new.txt"), "utf8")).toBe("written\n");
      const ls = pi.createLsTool(root, { operations: fs.ls });
      const listing = textOf(await ls.execute("call-4", { path: "." }));
      expect(listing.split("\n")).toEqual(expect.arrayContaining(["hello.txt", "sub/"]));
    });

    it("edit tool replaces text in place", async () => {
      mkdirSync(join(root, "src"));
      writeFileSync(join(root, "src", "a.js"), "const answer = 41;\n");
      const edit = pi.createEditTool(root, { operations: fs.edit });
      await edit.execute("call-5", { path: "src/a.js", edits: [{ oldText: "41", newText: "42" }] });
      expect(readFileSync(join(root, "src", "a.js"), "utf8")).toBe("const answer = 42;\n");
    });

    it("createNativeTools: pi's find and grep tools search natively", async () => {
      const tools = createNativeTools(root);
      expect(textOf(await tools.find.execute("call-7", { pattern: "*.txt" }))).toContain("hello.txt");
      const found = textOf(await tools.grep.execute("call-8", { pattern: "from the" }));
      expect(found).toContain("hello.txt:1: hello from the workspace");
    });
  });

  it("a CommonJS project require()s the package and uses it with pi", () => {
    const child = spawnSync(process.execPath, ["cjs-consumer.cjs"], { encoding: "utf8", timeout: 60_000 });
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout.trim().split("\n").pop())).toEqual({
      read: "hello from CommonJS\n",
      found: ["/hello.txt"],
      grep: "hello.txt:1: hello from CommonJS",
      ls: 'path "/etc" is outside workspace',
    });
  });

  it("bash tool runs a command through the native exec", async () => {
    const cwd = realpathSync(mkdtempSync(join(tmpdir(), "pack-test-bash-")));
    const bash = pi.createBashTool(cwd, { operations: createBashOperations() });
    const result = await bash.execute("call-6", { command: "echo out; echo err >&2; pwd" });
    const text = textOf(result);
    expect(text).toContain("out");
    expect(text).toContain("err");
    expect(text).toContain(cwd);
  });
});
