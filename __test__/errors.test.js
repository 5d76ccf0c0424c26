// Errors come out of the binding Node-shaped (src/error.rs): the same message, errno, code, syscall and
// path as Node's own fs and child_process give for the same failure, as own properties in Node's order;
// refusals and pattern errors are the message alone (no `code`, so pi shows the model the text).
import { spawn } from "node:child_process";
import { promises as nodeFs } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBashOperations, createBoundFs, glob, grep } from "pi-native-ops";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

let base;
let dir;
let outside;
let fs;
beforeAll(() => {
  base = tempDir("pno-errors-");
  dir = makeTree(path.join(base, "root"), { "a.txt": "A\n", "sub/b.txt": "B\n", "script.sh": "echo hi\n" });
  outside = makeTree(path.join(base, "outside"), { "secret.txt": "S\n" });
  fs = createBoundFs(dir);
});
afterAll(() => removeTree(base));

/** What a caller can see of an error: its own properties (in order), message and class. */
const shape = (err) => ({
  isError: err instanceof Error,
  message: err.message,
  props: Object.fromEntries(Object.keys(err).map((k) => [k, err[k]])),
  keys: Object.keys(err),
});
const failure = (promise) =>
  promise.then(
    () => expect.fail("expected a rejection"),
    (err) => err,
  );

describe("system errors match Node's", () => {
  const cases = [
    ["read of a missing file", (p) => fs.read.readFile(p("nope")), (p) => nodeFs.readFile(p("nope"))],
    ["read of a directory (read, no path)", (p) => fs.read.readFile(p("sub")), (p) => nodeFs.readFile(p("sub"))],
    ["stat of a missing path", (p) => fs.ls.stat(p("nope")), (p) => nodeFs.stat(p("nope"))],
    ["access of a missing path", (p) => fs.edit.access(p("nope")), (p) => nodeFs.access(p("nope"))],
    ["readdir of a file", (p) => fs.ls.readdir(p("a.txt")), (p) => nodeFs.readdir(p("a.txt"))],
    ["mkdir below a file", (p) => fs.write.mkdir(p("a.txt/x")), (p) => nodeFs.mkdir(p("a.txt/x"), { recursive: true })],
    [
      "write into a missing directory",
      (p) => fs.write.writeFile(p("no/x"), "x"),
      (p) => nodeFs.writeFile(p("no/x"), "x"),
    ],
  ];
  for (const [name, ours, node] of cases) {
    it(name, async () => {
      const p = (rel) => path.join(dir, rel);
      const [mine, theirs] = [await failure(ours(p)), await failure(node(p))];
      expect(shape(mine)).toEqual(shape(theirs));
      expect(mine.errno).toBeLessThan(0);
    });
  }

  it("a shell that cannot be started fails as Node's spawn does", async () => {
    const shell = path.join(dir, "script.sh"); // not executable: EACCES
    const mine = await failure(createBashOperations({ shellPath: shell }).exec("true", dir, { onData: () => {} }));
    const theirs = await new Promise((resolve) => spawn(shell, ["-c", "true"]).on("error", resolve));
    const pick = ({ message, errno, code, syscall, path }) => ({ message, errno, code, syscall, path });
    expect(pick(mine)).toEqual(pick(theirs));
    expect(mine).toBeInstanceOf(Error);
    expect(mine.message).toBe(`spawn ${shell} EACCES`);
  });

  it("a root that cannot be opened says so, with Node's errno and code", () => {
    const missing = path.join(base, "missing");
    let err;
    try {
      createBoundFs(missing);
    } catch (e) {
      err = e;
    }
    expect(shape(err)).toEqual({
      isError: true,
      message: `cannot open workspace root "${missing}": No such file or directory (os error 2)`,
      props: { errno: -2, code: "ENOENT", path: missing },
      keys: ["errno", "code", "path"],
    });
  });
});

describe("refusals and pattern errors are the message alone", () => {
  const alone = (message) => ({ isError: true, message, props: {}, keys: [] });

  it("a path outside the workspace, from async and synchronous calls", async () => {
    const secret = path.join(outside, "secret.txt");
    const refusal = alone(`path "${secret}" is outside workspace`);
    expect(shape(await failure(fs.read.readFile(secret)))).toEqual(refusal);
    expect(shape(await failure(fs.ls.stat(secret)))).toEqual(refusal);
    expect(shape(await failure(fs.write.writeFile(secret, "x")))).toEqual(refusal);
    expect(shape(await failure(fs.find.exists(secret)))).toEqual(refusal);
  });

  it("an invalid glob or regex, a missing grep path", async () => {
    expect(shape(await failure(glob("[z", dir)))).toEqual(
      alone(`invalid glob pattern "[z": unclosed character class; missing ']'`),
    );
    const regex = await failure(grep({ pattern: "foo(", path: dir }));
    expect(shape(regex)).toEqual(alone("rg: regex parse error:\n    (?:foo()\n    ^\nerror: unclosed group"));
    const badGlob = await failure(grep({ pattern: "x", path: dir, glob: "{a" }));
    expect(shape(badGlob)).toEqual(alone(badGlob.message));
    expect(badGlob.message).toMatch(/^rg: /);
    const missing = path.join(dir, "nope");
    expect(shape(await failure(grep({ pattern: "x", path: missing })))).toEqual(alone(`Path not found: ${missing}`));
  });
});
