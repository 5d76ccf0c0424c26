// Request decoding is decided once, in the core: grep's and find's option defaults and bounds
// (`grep::Query::new`, `find::Search::new`), `exists` with the workspace refusal (`Root::exists_inside`)
// and the `access` mode (`Access::from_mode`). The same calls, with options missing and out of range, go
// through the local face (the napi binding) and the remote face (a `pi-native-ops-server` child): each
// answer is checked against what the core decides and the two faces must answer alike, byte for byte.
import { symlinkSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as pno from "pi-native-ops";
import { serverPath, startServer } from "./helpers/face.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

// 150 matching lines in one file (over pi's default limit of 100), a few more in others.
const many = Array.from({ length: 150 }, (_, i) => `needle ${i}\nfiller ${i}\n`).join("");
const root = makeTree(tempDir("pno-requests-"), {
  "many.txt": many,
  "a.txt": "x\nneedle a\ny\nz\n",
  "b.txt": "needle b\n",
  "src/c.rs": "needle c\n",
  "src/d.rs": "needle d\n",
});
symlinkSync("/etc", path.join(root, "out-link"));
afterAll(() => removeTree(root));

/** A settled call as compared: its value, or its error's class, message and code. */
async function settle(call) {
  try {
    return { value: await call() };
  } catch (err) {
    return { error: { type: err?.constructor?.name, message: err?.message, code: err?.code } };
  }
}

const faces = {};
let server;
beforeAll(async () => {
  const fs = pno.createBoundFs(root);
  faces.local = {
    fs,
    grep: (options) => pno.grep({ ...options, fs }),
    tool: pno.createGrepTool(root, { fs }),
  };
  if (!serverPath()) return;
  server = await startServer(root);
  const { connection } = server;
  faces.remote = {
    fs: connection.fs,
    grep: (options) => connection.grep(options),
    tool: pno.createRemoteTools(root, { connection }).grep,
  };
});
afterAll(() => server?.close());

/** `call(face)` through each face; expects the same settled result from both, and returns it. */
async function same(call) {
  const local = await settle(() => call(faces.local));
  if (faces.remote) {
    const remote = await settle(() => call(faces.remote));
    expect(remote).toEqual(local);
  }
  return local;
}

const counts = [undefined, null, 0, -3, 0.5, 2.7, 1e20, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY];

describe.skipIf(!serverPath())("requests decoded by the core, alike through both faces", () => {
  it("grep: limit and context, missing and out of range", async () => {
    const got = {};
    for (const limit of counts) {
      for (const context of counts) {
        const r = await same((face) => face.grep({ pattern: "needle", path: root, limit, context }));
        got[`${limit}/${context}`] = r.value;
        expect(r.value, `${limit}/${context}`).toBeDefined();
      }
    }
    const matches = (limit, context) => got[`${limit}/${context}`].matches.filter((m) => !m.isContext).length;
    const shown = (limit, context) => got[`${limit}/${context}`].matches.length;
    // Missing or null: pi's default of 100; fractions floor; at least 1; infinity is no limit.
    expect(matches(undefined, undefined)).toBe(100);
    expect(got["undefined/undefined"].matchLimitReached).toBe(100);
    expect(matches(null, undefined)).toBe(100);
    expect(matches(2.7, undefined)).toBe(2);
    expect(got["2.7/undefined"].matchLimitReached).toBe(2);
    for (const least of [0, -3, 0.5, Number.NEGATIVE_INFINITY]) {
      expect(matches(least, undefined)).toBe(1);
      expect(got[`${least}/undefined`].matchLimitReached).toBe(1);
    }
    for (const none of [1e20, Number.POSITIVE_INFINITY]) {
      expect(matches(none, undefined)).toBe(154);
      expect(got[`${none}/undefined`].matchLimitReached).toBeUndefined();
    }
    // Context: none when missing or not positive, floored, any size.
    for (const none of [undefined, null, 0, -3, 0.5, Number.NEGATIVE_INFINITY]) expect(shown(2.7, none)).toBe(2);
    // a.txt's match (line 2) with one line each side.
    expect(got["2.7/2.7"].matches.slice(0, 4).map((m) => [m.lineNumber, m.isContext])).toEqual([
      [1, true],
      [2, false],
      [3, true],
      [4, true],
    ]);
    expect(shown(0.5, 1e20)).toBe(4);
    expect(shown(0.5, Number.POSITIVE_INFINITY)).toBe(4);
  });

  it("grep: globs as pi hands them to rg, and bad types", async () => {
    const paths = async (glob) =>
      (await same((face) => face.grep({ pattern: "needle", path: root, glob, limit: 1000 }))).value.matches.map(
        (m) => m.path,
      );
    expect(await paths("./src/*.rs")).toEqual(["src/c.rs", "src/d.rs"]);
    expect(await paths("././*.rs")).toEqual(["src/c.rs", "src/d.rs"]);
    expect(await paths("!./many.txt")).toEqual(["a.txt", "b.txt", "src/c.rs", "src/d.rs"]);
    expect((await paths("")).length).toBe(154);
    expect((await paths(undefined)).length).toBe(154);
    for (const [options, message] of [
      [{ limit: Number.NaN }, "limit must be a number, got NaN"],
      [{ context: Number.NaN }, "context must be a number, got NaN"],
      [{ limit: "3" }, "limit must be a number, got string"],
      [{ glob: 3 }, "glob must be a string, got number"],
    ]) {
      const r = await same((face) => face.grep({ pattern: "needle", path: root, ...options }));
      expect(r.error).toEqual({ type: "TypeError", message, code: undefined });
    }
  });

  it("grep tool: the limit notice shows the limit the core ran with", async () => {
    const text = async (params) =>
      (await same((face) => face.tool.execute("t", { pattern: "needle", ...params }))).value.content[0].text;
    expect(await text({ limit: 2.7 })).toMatch(
      /\[2 matches limit reached\. Use limit=4 for more, or refine pattern\]$/,
    );
    expect(await text({ limit: -1 })).toMatch(/\[1 matches limit reached\. Use limit=2 for more, or refine pattern\]$/);
    expect(await text({})).toMatch(/\[100 matches limit reached\. Use limit=200 for more, or refine pattern\]$/);
    expect(await text({ limit: 1000 })).not.toMatch(/limit reached/);
    const details = await same((face) => face.tool.execute("t", { pattern: "needle", limit: 0 }));
    expect(details.value.details).toEqual({ matchLimitReached: 1 });
  });

  it("find: the limit, missing and out of range", async () => {
    const found = {};
    for (const limit of [undefined, 0, 0.5, 2.9, 1e20, Number.POSITIVE_INFINITY]) {
      const options = limit === undefined ? { ignore: [] } : { ignore: [], limit };
      found[limit] = (await same((face) => face.fs.find.glob("**/*.*", root, options))).value;
    }
    expect(found[undefined]).toHaveLength(5);
    expect(found[0]).toEqual([]);
    expect(found[0.5]).toEqual([]);
    expect(found[2.9]).toEqual(found[undefined].slice(0, 2));
    expect(found[1e20]).toEqual(found[undefined]);
    expect(found[Number.POSITIVE_INFINITY]).toEqual(found[undefined]);
    expect((await same((face) => face.fs.find.glob("*.txt", root))).value).toHaveLength(3);
    for (const limit of [-1, Number.NaN, "2", null]) {
      const r = await same((face) => face.fs.find.glob("*", root, { ignore: [], limit }));
      expect(r.error?.type, String(limit)).toBe("TypeError");
    }
  });

  it("exists: false when missing, the refusal when outside", async () => {
    for (const [p, want] of [
      [root, true],
      [path.join(root, "a.txt"), true],
      [path.join(root, "src"), true],
      [path.join(root, "src/../b.txt"), true],
      [path.join(root, "missing"), false],
      [path.join(root, "a.txt/x"), false],
    ]) {
      expect((await same((face) => face.fs.ls.exists(p))).value, p).toBe(want);
      expect((await same((face) => face.fs.find.exists(p))).value, p).toBe(want);
    }
    for (const p of ["/etc", path.join(root, "out-link"), path.join(root, "out-link/passwd"), path.dirname(root)]) {
      for (const exists of [(face) => face.fs.ls.exists(p), (face) => face.fs.find.exists(p)]) {
        const r = await same(exists);
        expect(r.error?.message, p).toMatch(/^path ".*" is outside workspace$/);
      }
    }
  });

  it("access: the modes pi's read and edit tools ask for", async () => {
    for (const p of [path.join(root, "a.txt"), root, path.join(root, "missing"), "/etc/passwd"]) {
      const read = await same((face) => face.fs.read.access(p));
      const edit = await same((face) => face.fs.edit.access(p));
      expect(edit).toEqual(read);
    }
    expect((await same((face) => face.fs.read.access(path.join(root, "missing")))).error.code).toBe("ENOENT");
    expect((await same((face) => face.fs.edit.access("/etc/passwd"))).error.message).toBe(
      'path "/etc/passwd" is outside workspace',
    );
    expect(await same((face) => face.fs.edit.access(path.join(root, "a.txt")))).toEqual({ value: undefined });
  });
});
