// Whatever the input, every export answers with a value or a clear Error: never a crash, never a hang.
import { afterAll, describe, expect, it } from "vitest";
import * as api from "pi-native-ops";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const dir = makeTree(tempDir("pno-robust-"), { "a.txt": "a\n", "sub/b.txt": "b\n" });
afterAll(() => removeTree(dir));

const junk = [undefined, null, 0, -1, NaN, Infinity, 1n, "", "\0", "relative", "/", dir, `${dir}/\0x`, "x".repeat(70_000), {}, [], [dir], () => dir, Symbol("s"), new Proxy({}, { get: () => { throw new Error("trap"); } })];

/** Calls `fn(...args)`, awaiting a promise (bounded), and reports how it ended. The bound is
 * generous because some junk is a real request: `glob("/", "/")` walks the whole machine (~420k
 * entries: 0.5 s warm, 2-4 s with a cold cache under load, and once over 10 s in a full CI run). */
async function outcome(fn, args) {
  try {
    const value = fn(...args);
    if (value && typeof value.then === "function") {
      const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("HUNG")), 60_000));
      await Promise.race([value, timeout]);
    }
    return "value";
  } catch (err) {
    expect(err, String(err)).toBeInstanceOf(Error);
    expect(err.message).not.toBe("HUNG");
    return "error";
  }
}

describe("garbage in, clear errors out", () => {
  const fs = api.createBoundFs(dir);
  const bash = api.createBashOperations();
  const targets = {
    "createBoundFs": api.createBoundFs,
    "glob": api.glob,
    "grep": api.grep,
    "createGrepTool": api.createGrepTool,
    "createNativeTools": api.createNativeTools,
    "createBashOperations": api.createBashOperations,
    "bash.exec": (...a) => bash.exec(...a),
    ...Object.fromEntries(
      ["read", "write", "edit", "ls", "find", "grep"].flatMap((g) =>
        Object.entries(fs[g]).map(([m, f]) => [`fs.${g}.${m}`, (...a) => {
          const r = f(...a);
          // Drain async iterables (createReadStream) so their errors surface here.
          return r && typeof r[Symbol.asyncIterator] === "function" ? (async () => { for await (const _ of r) void _; })() : r;
        }]),
      ),
    ),
  };
  for (const [name, fn] of Object.entries(targets)) {
    it(name, async () => {
      for (const a of junk) {
        await outcome(fn, [a]);
        await outcome(fn, [a, a]);
        await outcome(fn, [dir, a, a]);
      }
    }, 120_000);
  }
});
