// Every way out of the workspace is refused, through the raw operations and through pi's tools,
// and nothing outside changes.
import { homedir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { makeFs } from "./helpers/face.js";
import { pi, runTool } from "./helpers/pi.js";
import { makeTree, removeTree, snapshot, tempDir } from "./helpers/tree.js";
import { underWine } from "./helpers/windows.js";

// Built at collection time: the test names below are made from these paths.
const base = tempDir("pno-escape-");
const outside = makeTree(path.join(base, "outside"), { "secret.txt": "SECRET\n", "dir/inner.txt": "INNER\n" });
const root = path.join(base, "root");
let fs;
let outsideBefore;

beforeAll(async () => {
  makeTree(root, {
    "ok.txt": "fine\n",
    "sub/deeper/x.txt": "x\n",
    "..foo": "dotdot name\n",
    "link-file-out": { symlink: path.join(outside, "secret.txt") },
    "link-dir-out": { symlink: outside },
    "link-rel-out": { symlink: "../outside/secret.txt" },
    "dangling-out": { symlink: path.join(outside, "created-by-escape.txt") },
    "chain-1": { symlink: "chain-2" },
    "chain-2": { symlink: "sub/chain-3" },
    "sub/chain-3": { symlink: "../../outside/secret.txt" },
    "chain-in-1": { symlink: "chain-in-2" },
    "chain-in-2": { symlink: "sub/deeper/x.txt" },
    "proc-root": { symlink: "/proc/self/root" },
    "sub/up-and-out": { symlink: "../../outside/dir" },
  });
  fs = await makeFs(root);
  outsideBefore = snapshot(outside);
});
afterAll(() => removeTree(base));
beforeEach(() => expect(snapshot(outside)).toEqual(outsideBefore));

const escapes = [
  ["a .. chain", () => path.join(root, "../outside/secret.txt")],
  ["a long .. chain", () => path.join(root, "sub/deeper/../../../outside/secret.txt")],
  ["an absolute path outside", () => path.join(outside, "secret.txt")],
  ["/etc/passwd", () => "/etc/passwd"],
  ["a symlinked file pointing out", () => path.join(root, "link-file-out")],
  ["a symlinked directory pointing out", () => path.join(root, "link-dir-out/secret.txt")],
  ["a relative symlink pointing out", () => path.join(root, "link-rel-out")],
  ["a symlink chain ending outside", () => path.join(root, "chain-1")],
  ["/proc/self/root", () => `/proc/self/root${path.join(outside, "secret.txt")}`],
  ["a symlink to /proc/self/root", () => path.join(root, "proc-root", outside, "secret.txt")],
  ["a symlink under a subdirectory climbing out", () => path.join(root, "sub/up-and-out/inner.txt")],
  ["the root's parent", () => path.dirname(root)],
  ["trailing spaces after an escape", () => `${path.join(outside, "secret.txt")} `],
];

const message = (p) => `path "${p}" is outside workspace`;

describe("raw operations refuse escapes", () => {
  for (const [name, make] of escapes) {
    it(name, async () => {
      const p = make();
      for (const op of [
        fs.read.readFile,
        fs.read.access,
        fs.read.detectImageMimeType,
        fs.edit.readFile,
        fs.edit.access,
        fs.ls.exists,
        fs.ls.stat,
        fs.ls.readdir,
        fs.grep.isDirectory,
        fs.find.exists,
      ]) {
        await expect(op(p)).rejects.toThrow(message(p));
      }
      await expect(
        (async () => {
          for await (const _ of fs.read.createReadStream(p)) void _;
        })(),
      ).rejects.toThrow(message(p));
      await expect(fs.write.writeFile(p, "PWNED")).rejects.toThrow(message(p));
      await expect(fs.edit.writeFile(p, "PWNED")).rejects.toThrow(message(p));
      expect(snapshot(outside)).toEqual(outsideBefore);
    });
  }

  // Wine shows a dangling unix symlink as a missing name (helpers/windows.js): these run on Windows itself.
  it.skipIf(underWine)("a dangling symlink pointing out is not written through", async () => {
    const p = path.join(root, "dangling-out");
    await expect(fs.write.writeFile(p, "PWNED")).rejects.toThrow(message(p));
    await expect(fs.edit.writeFile(p, "PWNED")).rejects.toThrow(message(p));
    expect(snapshot(outside)).toEqual(outsideBefore);
  });

  it("mkdir never creates outside, even through links", async () => {
    for (const p of [
      path.join(root, "link-dir-out/newdir/x"),
      path.join(root, "../outside/newdir"),
      path.join(root, "sub/up-and-out/n"),
    ]) {
      await expect(fs.write.mkdir(p)).rejects.toThrow(message(p));
    }
    expect(snapshot(outside)).toEqual(outsideBefore);
  });

  it("writing under a symlinked parent pointing out is refused", async () => {
    const p = path.join(root, "link-dir-out/dir/new.txt");
    await expect(fs.write.writeFile(p, "PWNED")).rejects.toThrow(message(p));
    expect(snapshot(outside)).toEqual(outsideBefore);
  });

  it("names that only look like escapes are ordinary names", async () => {
    expect((await fs.read.readFile(path.join(root, "..foo"))).toString()).toBe("dotdot name\n");
    expect((await fs.read.readFile(path.join(root, "chain-in-1"))).toString()).toBe("x\n");
    expect((await fs.read.readFile(path.join(root, "sub/deeper/../../ok.txt"))).toString()).toBe("fine\n");
    // Windows: a trailing space is a name Win32 reads otherwise (it drops it), refused as such.
    const trailing = process.platform === "win32" ? "EINVAL" : "ENOENT";
    await expect(fs.read.readFile(path.join(root, "ok.txt "))).rejects.toMatchObject({ code: trailing });
  });

  it("NUL bytes and '~' are refused as bad arguments", async () => {
    await expect(fs.read.readFile(`${root}/ok.txt\0../../outside/secret.txt`)).rejects.toThrow(TypeError);
    await expect(fs.write.writeFile(`${root}/\0`, "x")).rejects.toThrow(TypeError);
    await expect(fs.read.readFile("~/secret.txt")).rejects.toThrow(TypeError);
  });

  it("runtime roots never leak the host path", async () => {
    const rfs = await makeFs(root, { runtimeRoot: "/workspace" });
    expect((await rfs.read.readFile("/workspace/ok.txt")).toString()).toBe("fine\n");
    for (const p of ["/workspace/../etc/passwd", "/workspace/link-dir-out/secret.txt"]) {
      const err = await rfs.read.readFile(p).catch((e) => e);
      expect(err.message).toBe(message(p));
      expect(err.message).not.toContain(root);
    }
    const missing = await rfs.read.readFile("/workspace/missing").catch((e) => e);
    // Windows: a system error's path has Node's `\` separators there.
    const shown = process.platform === "win32" ? "\\workspace\\missing" : "/workspace/missing";
    expect(missing.message).toBe(`ENOENT: no such file or directory, open '${shown}'`);
  });
});

describe("pi's tools with boundFs refuse escapes", () => {
  const tools = () => ({
    read: pi.createReadTool(root, { operations: fs.read }),
    write: pi.createWriteTool(root, { operations: fs.write }),
    edit: pi.createEditTool(root, { operations: fs.edit }),
    ls: pi.createLsTool(root, { operations: fs.ls }),
  });
  const modelPaths = [
    "../outside/secret.txt",
    "sub/deeper/../../../outside/secret.txt",
    path.join(outside, "secret.txt"),
    "link-file-out",
    "link-dir-out/secret.txt",
    "link-rel-out",
    "chain-1",
    `/proc/self/root${path.join(outside, "secret.txt")}`,
    "proc-root/etc/passwd",
    "sub/up-and-out/inner.txt",
    "~/.bashrc",
    `~/${path.relative(homedir(), path.join(outside, "secret.txt"))}`,
    "../outside/secret.txt ",
  ];
  for (const p of modelPaths) {
    it(`the model's path ${JSON.stringify(p)}`, async () => {
      const t = tools();
      const results = [
        await runTool(t.read, { path: p }),
        await runTool(t.write, { path: p, content: "PWNED" }),
        await runTool(t.edit, { path: p, edits: [{ oldText: "SECRET", newText: "PWNED" }] }),
      ];
      for (const r of results) {
        expect(r.text ?? "").not.toContain("SECRET");
        expect(r.text ?? "").not.toContain("INNER");
        expect(r.error ?? "").toMatch(/is outside workspace|ENOENT/);
      }
      const ls = await runTool(t.ls, { path: p.replace(/secret\.txt ?$/, "") || "." });
      expect(ls.text ?? "").not.toContain("secret.txt");
      expect(snapshot(outside)).toEqual(outsideBefore);
    });
  }

  it.skipIf(underWine)("writing through a dangling symlink pointing out fails", async () => {
    const r = await runTool(tools().write, { path: "dangling-out", content: "PWNED" });
    expect(r.error).toContain("is outside workspace");
    expect(snapshot(outside)).toEqual(outsideBefore);
  });

  it("ls of a directory symlink pointing out lists nothing and says it is outside", async () => {
    const r = await runTool(tools().ls, { path: "link-dir-out" });
    expect(r.text ?? "").not.toContain("secret.txt");
    expect(r.error).toBe(message(path.join(root, "link-dir-out")));
  });

  it("ls of a path outside says it is outside, not that it is missing", async () => {
    // path.resolve: on Windows, pi reads "/etc" on the current drive.
    expect((await runTool(tools().ls, { path: "/etc" })).error).toBe(message(path.resolve("/etc")));
    expect((await runTool(tools().ls, { path: "missing-dir" })).error).toBe(
      `Path not found: ${path.join(root, "missing-dir")}`,
    );
  });
});
