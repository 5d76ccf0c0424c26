// The `pi` option: every factory that needs pi builds its tools with the module it is given (as a pi
// extension gets it from pi), not the one found by package name; anything else is a clear TypeError.
import { spawn } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import {
  connect,
  createGrepTool,
  createGrepToolDefinition,
  createNativeToolDefinitions,
  createNativeTools,
  createRemoteTools,
  serverBinaryPath,
} from "pi-native-ops";
import { pi, runTool } from "./helpers/pi.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const dirs = [];
afterAll(() => dirs.forEach(removeTree));

function workspace() {
  const dir = makeTree(tempDir("pno-inject-"), { "a.txt": "alpha\n" });
  dirs.push(dir);
  return dir;
}

/**
 * A pi module whose every factory marks what it builds, so a test can tell which module made a tool.
 * `calls` records the factories called.
 */
function markedPi() {
  const calls = [];
  const module = { ...pi };
  for (const [name, value] of Object.entries(pi)) {
    if (typeof value !== "function" || !/^create\w+Tool(Definition)?$/.test(name)) continue;
    module[name] = (...args) => {
      calls.push(name);
      return { ...value(...args), marked: true };
    };
  }
  return { module, calls };
}

describe("the pi option", () => {
  it("createNativeTools and createNativeToolDefinitions use the given module for all seven tools", async () => {
    const dir = workspace();
    for (const [make, kind] of [
      [createNativeTools, "Tool"],
      [createNativeToolDefinitions, "ToolDefinition"],
    ]) {
      const { module, calls } = markedPi();
      const tools = make(dir, { pi: module });
      for (const [name, tool] of Object.entries(tools)) expect([name, tool.marked]).toEqual([name, true]);
      for (const name of ["Read", "Bash", "Edit", "Write", "Grep", "Find", "Ls"]) {
        expect(calls).toContain(`create${name}${kind}`);
      }
      expect(await runTool(tools.read, { path: "../x" })).toMatchObject({
        error: expect.stringContaining("is outside workspace"),
      });
    }
  });

  it("createGrepTool and createGrepToolDefinition use the given module", async () => {
    const dir = workspace();
    const { module, calls } = markedPi();
    expect(createGrepToolDefinition(dir, { pi: module }).marked).toBe(true);
    const tool = createGrepTool(dir, { pi: module });
    expect(tool.marked).toBe(true);
    expect(calls).toEqual(["createGrepToolDefinition", "createGrepToolDefinition", "createGrepTool"]);
    expect((await runTool(tool, { pattern: "alpha" })).text).toBe("a.txt:1: alpha");
  });

  it("createRemoteTools uses the given module", async () => {
    const dir = workspace();
    const server = spawn(serverBinaryPath(), ["--root", dir], { stdio: ["pipe", "pipe", "inherit"] });
    const connection = await connect(server);
    try {
      const { module } = markedPi();
      const tools = createRemoteTools(connection.server.root, { connection, pi: module });
      for (const tool of Object.values(tools)) expect(tool.marked).toBe(true);
      expect((await runTool(tools.read, { path: "a.txt" })).text).toBe("alpha\n");
    } finally {
      connection.close();
    }
  });

  it("a pi that is not a pi module is a TypeError naming what is wrong", () => {
    const dir = workspace();
    const notPi = /^pi must be the pi-coding-agent module/;
    for (const bad of [null, "pi", 1, { createReadTool() {} }]) {
      expect(() => createNativeTools(dir, { pi: bad })).toThrow(TypeError);
      expect(() => createNativeTools(dir, { pi: bad })).toThrow(notPi);
      expect(() => createNativeToolDefinitions(dir, { pi: bad })).toThrow(notPi);
      expect(() => createGrepTool(dir, { pi: bad })).toThrow(notPi);
      expect(() => createGrepToolDefinition(dir, { pi: bad })).toThrow(notPi);
    }
    expect(() => createNativeTools(dir, { pi: { createReadTool() {} } })).toThrow(/has no createReadToolDefinition/);
  });
});
