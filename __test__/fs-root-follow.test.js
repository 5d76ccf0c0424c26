// The root follows its path (docs/contracts.md, "The root follows its path"): when the workspace
// directory is moved aside or removed and made again, the next call works in the directory now at that
// path, as Node's fs and stock pi do; `pinRoot: true` keeps the directory the fs was made on. Locally,
// through a server, and with the warm index.
import { mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync, existsSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { createBoundFs, createGrepTool, createRemoteTools } from "pi-native-ops";
import { serverPath, startServer } from "./helpers/face.js";
import { pi, runTool } from "./helpers/pi.js";
import { removeTree, tempDir } from "./helpers/tree.js";

const unix = process.platform !== "win32";
const top = tempDir("pno-follow-");
const ws = path.join(top, "ws");
afterAll(() => removeTree(top));
beforeEach(() => {
  rmSync(ws, { recursive: true, force: true });
  rmSync(`${ws}.bak`, { recursive: true, force: true });
  mkdirSync(ws);
  writeFileSync(path.join(ws, "a.txt"), "old\n");
});

/** `mv ws ws.bak; mkdir ws` with a.txt saying "new" in the new one. */
function moveAsideAndRemake() {
  renameSync(ws, `${ws}.bak`);
  mkdirSync(ws);
  writeFileSync(path.join(ws, "a.txt"), "new needle\n");
}

/** `rm -rf ws; mkdir ws` with c.txt in the new one. */
function removeAndRemake() {
  rmSync(ws, { recursive: true });
  mkdirSync(ws);
  writeFileSync(path.join(ws, "c.txt"), "needle in the new ws\n");
}

describe.skipIf(!unix)("the root follows its path", () => {
  it("after mv ws ws.bak; mkdir ws: reads see the new ws, writes land in it", async () => {
    const fs = createBoundFs(ws);
    expect(String(await fs.read.readFile(path.join(ws, "a.txt")))).toBe("old\n");
    moveAsideAndRemake();
    expect(String(await fs.read.readFile(path.join(ws, "a.txt")))).toBe("new needle\n");
    const edit = pi.createEditTool(ws, { operations: fs.edit });
    const edited = await runTool(edit, { path: "a.txt", edits: [{ oldText: "new", newText: "edited" }] });
    expect(edited.error).toBeUndefined();
    expect(readFileSync(path.join(ws, "a.txt"), "utf8")).toBe("edited needle\n");
    expect(readFileSync(path.join(`${ws}.bak`, "a.txt"), "utf8")).toBe("old\n");
  });

  it("after rm -rf ws; mkdir ws: grep and ls see the new one", async () => {
    const fs = createBoundFs(ws);
    const ls = pi.createLsTool(ws, { operations: fs.ls });
    expect((await runTool(ls, { path: "." })).text).toBe("a.txt");
    removeAndRemake();
    expect((await runTool(ls, { path: "." })).text).toBe("c.txt");
    const grep = createGrepTool(ws, { fs });
    expect((await runTool(grep, { pattern: "needle" })).text).toBe("c.txt:1: needle in the new ws");
  });

  it("with the warm index, a search after the workspace was replaced sees the new one", async () => {
    const fs = createBoundFs(ws, { index: true });
    try {
      await fs.index.ready;
      const grep = createGrepTool(ws, { fs });
      expect((await runTool(grep, { pattern: "needle" })).text).toBe("No matches found");
      removeAndRemake();
      expect((await runTool(grep, { pattern: "needle" })).text).toBe("c.txt:1: needle in the new ws");
      const found = await fs.find.glob("*.txt", ws, { ignore: [], limit: 10 });
      expect(found).toEqual([path.join(ws, "c.txt")]);
    } finally {
      await fs.index.close();
    }
  });

  it("pinRoot: true keeps the directory the fs was made on", async () => {
    const fs = createBoundFs(ws, { pinRoot: true });
    moveAsideAndRemake();
    expect(String(await fs.read.readFile(path.join(ws, "a.txt")))).toBe("old\n");
    await fs.write.writeFile(path.join(ws, "b.txt"), "pinned");
    expect(existsSync(path.join(`${ws}.bak`, "b.txt"))).toBe(true);
    expect(existsSync(path.join(ws, "b.txt"))).toBe(false);
    expect(() => createBoundFs(ws, { pinRoot: "yes" })).toThrow(TypeError);
  });

  it("a symlink put in the workspace's place is not followed", async () => {
    const fs = createBoundFs(ws);
    rmSync(ws, { recursive: true });
    symlinkSync("/etc", ws);
    try {
      await expect(fs.read.readFile(path.join(ws, "hostname"))).rejects.toThrow(/ENOENT/);
    } finally {
      rmSync(ws);
    }
  });

  it.skipIf(!serverPath())("the server's root follows its path too", async () => {
    const server = await startServer(ws);
    try {
      const { read } = createRemoteTools(ws, { connection: server.connection });
      expect((await runTool(read, { path: "a.txt" })).text).toBe("old\n");
      moveAsideAndRemake();
      expect((await runTool(read, { path: "a.txt" })).text).toBe("new needle\n");
    } finally {
      await server.close();
    }
  });
});

describe.skipIf(!unix || !serverPath())("the server's --pin-root", () => {
  it("keeps the directory opened at start", async () => {
    const server = await startServer(ws, { args: ["--pin-root"] });
    try {
      const { read } = createRemoteTools(ws, { connection: server.connection });
      moveAsideAndRemake();
      expect((await runTool(read, { path: "a.txt" })).text).toBe("old\n");
    } finally {
      await server.close();
    }
  });
});
