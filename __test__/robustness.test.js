// Whatever the input, every export answers with a value of its documented shape or a clear Error: never
// a crash, never a hang.
import { afterAll, describe, expect, it } from "vitest";
import * as api from "pi-native-ops";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const dir = makeTree(tempDir("pno-robust-"), { "a.txt": "a\n", "sub/b.txt": "b\n" });
afterAll(() => removeTree(dir));

const junk = [
  undefined,
  null,
  0,
  -1,
  NaN,
  Infinity,
  1n,
  "",
  "\0",
  "relative",
  "/",
  dir,
  `${dir}/\0x`,
  "x".repeat(70_000),
  {},
  [],
  [dir],
  () => dir,
  Symbol("s"),
  new Proxy(
    {},
    {
      get: () => {
        throw new Error("trap");
      },
    },
  ),
];

/** Calls `fn(...args)`, awaiting a promise (bounded), and reports how it ended. */
async function outcome(fn, args) {
  try {
    let value = fn(...args);
    if (value && typeof value.then === "function") {
      // Far above any bounded call's time: reaching it means the call hung.
      const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("HUNG")), 60_000));
      value = await Promise.race([value, timeout]);
    }
    return { value };
  } catch (err) {
    expect(err, String(err)).toBeInstanceOf(Error);
    expect(err.message).not.toBe("HUNG");
    return { error: err };
  }
}

async function drain(iterable) {
  const chunks = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}

/** An argument as a test message can show it (a junk Proxy throws on conversion). */
function show(value) {
  try {
    return String(value).slice(0, 40);
  } catch {
    return typeof value;
  }
}

const isStringArray = (v) => Array.isArray(v) && v.every((s) => typeof s === "string");
const isTool = (v, name) => v?.name === name && typeof v.execute === "function";
const isBoundFs = (v) =>
  typeof v?.root === "string" && ["read", "write", "edit", "ls", "find", "grep"].every((g) => typeof v[g] === "object");
const isGrepResult = (v) =>
  Array.isArray(v?.matches) &&
  v.matches.every(
    (m) =>
      typeof m.path === "string" &&
      typeof m.lineNumber === "number" &&
      typeof m.text === "string" &&
      typeof m.isContext === "boolean",
  ) &&
  typeof v.matchCount === "number" &&
  (v.matchLimitReached === undefined || typeof v.matchLimitReached === "number") &&
  typeof v.linesTruncated === "boolean";

const a = `${dir}/a.txt`;

/** What each export resolves to (pi's operation interfaces, this package's .d.ts), and a sound call to it. */
const shapes = {
  createBoundFs: [isBoundFs, [dir]],
  glob: [isStringArray, ["*", dir]],
  grep: [isGrepResult, [{ pattern: "a", path: dir }]],
  createGrepTool: [(v) => isTool(v, "grep"), [dir]],
  createNativeTools: [
    (v) => ["bash", "edit", "find", "grep", "ls", "read", "write"].every((n) => isTool(v?.[n], n)),
    [dir],
  ],
  createBashOperations: [(v) => typeof v?.exec === "function", []],
  "bash.exec": [(v) => v?.exitCode === null || Number.isInteger(v?.exitCode), ["true", dir, { onData() {} }]],
  "fs.read.readFile": [Buffer.isBuffer, [a]],
  "fs.read.access": [(v) => v === undefined, [a]],
  "fs.read.detectImageMimeType": [(v) => v === null || v === undefined || /^image\//.test(v), [a]],
  "fs.read.createReadStream": [(chunks) => chunks.every(Buffer.isBuffer), [a]],
  "fs.write.writeFile": [(v) => v === undefined, [`${dir}/written.txt`, "w"]],
  "fs.write.mkdir": [(v) => v === undefined, [`${dir}/made`]],
  "fs.edit.readFile": [Buffer.isBuffer, [a]],
  "fs.edit.writeFile": [(v) => v === undefined, [`${dir}/edited.txt`, "e"]],
  "fs.edit.access": [(v) => v === undefined, [a]],
  "fs.ls.exists": [(v) => typeof v === "boolean", [a]],
  "fs.ls.stat": [(v) => typeof v?.isDirectory === "function" && typeof v.isDirectory() === "boolean", [a]],
  "fs.ls.readdir": [isStringArray, [dir]],
  "fs.find.exists": [(v) => typeof v === "boolean", [a]],
  "fs.find.glob": [isStringArray, ["*", dir, { ignore: [], limit: 10 }]],
  "fs.grep.isDirectory": [(v) => typeof v === "boolean", [dir]],
  "fs.grep.readFile": [(v) => typeof v === "string", [a]],
};

describe("garbage in, clear errors out", () => {
  const fs = api.createBoundFs(dir);
  const bash = api.createBashOperations();
  const targets = {
    createBoundFs: api.createBoundFs,
    glob: api.glob,
    grep: api.grep,
    createGrepTool: api.createGrepTool,
    createNativeTools: api.createNativeTools,
    createBashOperations: api.createBashOperations,
    "bash.exec": (...a) => bash.exec(...a),
    ...Object.fromEntries(
      ["read", "write", "edit", "ls", "find", "grep"].flatMap((g) =>
        Object.entries(fs[g]).map(([m, f]) => [
          `fs.${g}.${m}`,
          (...a) => {
            const r = f(...a);
            // Drain async iterables (createReadStream) so their errors surface here; resolve to the chunks.
            return r && typeof r[Symbol.asyncIterator] === "function" ? drain(r) : r;
          },
        ]),
      ),
    ),
  };
  it("has a shape for every export it calls", () => {
    expect(Object.keys(targets).sort()).toEqual(Object.keys(shapes).sort());
  });
  for (const [name, fn] of Object.entries(targets)) {
    it(name, async () => {
      const [shape, sound] = shapes[name];
      const expectShape = (args, value) =>
        expect(shape(value), `${name}(${args.map(show).join(", ")}) resolved to ${show(value)}`).toBe(true);
      const ok = await outcome(fn, sound);
      expect(ok.error).toBeUndefined();
      expectShape(sound, ok.value);
      for (const junkArg of junk) {
        for (const args of [[junkArg], [junkArg, junkArg], [dir, junkArg, junkArg]]) {
          // glob's cwd is its bound: "/" would walk the whole machine (see the bounded call below).
          if (name === "glob" && args[1] === "/") continue;
          const r = await outcome(fn, args);
          if (!r.error) expectShape(args, r.value);
        }
      }
    }, 120_000);
  }
  it("glob with / as its cwd, bounded by a limit", async () => {
    const found = await api.glob("*", "/", { limit: 3 });
    expect(isStringArray(found)).toBe(true);
    expect(found.length).toBeGreaterThan(0);
    expect(found.length).toBeLessThanOrEqual(3);
  });
});
