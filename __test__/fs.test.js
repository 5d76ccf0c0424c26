// boundFs raw Operations: behaviour, Node-shaped errors, bad arguments.
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, rmSync, statSync, lstatSync, readdirSync, writeFileSync } from "node:fs";
import nodeFs from "node:fs/promises";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBoundFs } from "pi-native-ops";
import { isRemote, makeFs } from "./helpers/face.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";
import { underWine, windows } from "./helpers/windows.js";

const PNG = Buffer.from(
  "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082",
  "hex",
);

let dir;
let fs;
beforeAll(async () => {
  dir = makeTree(tempDir(), {
    "a.txt": "hello\n",
    "sub/b.txt": "bee",
    "img.png": PNG,
    "fake.png": "not a png",
    "link-a": { symlink: "a.txt" },
    "empty/": null,
  });
  makeTree(dir, { "link-abs": { symlink: path.join(dir, "sub") } });
  fs = await makeFs(dir);
});
afterAll(() => removeTree(dir));

describe("createBoundFs", () => {
  it("returns plain objects shaped like pi's Operations", () => {
    expect(fs.root).toBe(dir);
    expect(fs.runtimeRoot).toBe(dir);
    for (const [group, members] of Object.entries({
      read: ["readFile", "access", "detectImageMimeType", "createReadStream"],
      write: ["writeFile", "mkdir"],
      edit: ["readFile", "writeFile", "access"],
      ls: ["exists", "stat", "readdir"],
      find: ["exists", "glob"],
      grep: ["isDirectory"],
    })) {
      expect(Object.getPrototypeOf(fs[group])).toBe(Object.prototype);
      for (const m of members) expect(typeof fs[group][m], `${group}.${m}`).toBe("function");
    }
  });

  // The local constructor's checks: a remote root is the server's --root, checked where it starts.
  it.skipIf(isRemote)("rejects bad roots clearly", () => {
    expect(() => createBoundFs(42)).toThrow(TypeError);
    expect(() => createBoundFs("")).toThrow(TypeError);
    expect(() => createBoundFs("/a\0b")).toThrow(/NUL/);
    expect(() => createBoundFs(path.join(dir, "missing"))).toThrow(/cannot open workspace root/);
    expect(() => createBoundFs(path.join(dir, "a.txt"))).toThrow(/cannot open workspace root/);
    expect(() => createBoundFs(dir, { runtimeRoot: "relative" })).toThrow(TypeError);
  });
});

describe("read", () => {
  it("reads files into real Buffers, following in-root symlinks", async () => {
    const buf = await fs.read.readFile(path.join(dir, "a.txt"));
    expect(Buffer.isBuffer(buf)).toBe(true);
    expect(buf.toString()).toBe("hello\n");
    expect((await fs.read.readFile(path.join(dir, "link-a"))).toString()).toBe("hello\n");
    expect((await fs.read.readFile(path.join(dir, "link-abs/b.txt"))).toString()).toBe("bee");
  });

  it("works detached", async () => {
    const { readFile, access } = fs.read;
    await access(path.join(dir, "a.txt"));
    expect((await readFile(path.join(dir, "sub/b.txt"))).toString()).toBe("bee");
  });

  it("fails like Node for missing files", async () => {
    const p = path.join(dir, "nope.txt");
    const err = await fs.read.readFile(p).catch((e) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err.code).toBe("ENOENT");
    expect(err.syscall).toBe("open");
    expect(err.path).toBe(p);
    expect(err.message).toBe(`ENOENT: no such file or directory, open '${p}'`);
    await expect(fs.read.access(p)).rejects.toMatchObject({
      code: "ENOENT",
      message: `ENOENT: no such file or directory, access '${p}'`,
    });
    await expect(fs.read.readFile(path.join(dir, "sub"))).rejects.toMatchObject({ code: "EISDIR" });
  });

  it("detects image types by magic bytes", async () => {
    expect(await fs.read.detectImageMimeType(path.join(dir, "img.png"))).toBe("image/png");
    expect(await fs.read.detectImageMimeType(path.join(dir, "fake.png"))).toBeNull();
    expect(await fs.read.detectImageMimeType(path.join(dir, "a.txt"))).toBeNull();
  });

  it("streams files in chunks", async () => {
    const big = path.join(dir, "big.bin");
    const data = Buffer.alloc(1024 * 1024 + 17, 7);
    writeFileSync(big, data);
    const chunks = [];
    for await (const c of fs.read.createReadStream(big, {})) chunks.push(c);
    expect(chunks.length).toBeGreaterThan(1);
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
    await expect(
      (async () => {
        for await (const _ of fs.read.createReadStream(path.join(dir, "nope"))) void _;
      })(),
    ).rejects.toMatchObject({ code: "ENOENT" });
  });

  // Windows has no permission bits to take away (fs-windows.test.js: a read-only file).
  it.skipIf(windows)("access checks permissions (read for read, read+write for edit)", async () => {
    const p = path.join(dir, "readonly.txt");
    writeFileSync(p, "ro");
    chmodSync(p, 0o444);
    await fs.read.access(p);
    if (process.getuid?.() !== 0) await expect(fs.edit.access(p)).rejects.toMatchObject({ code: "EACCES" });
    await fs.edit.access(path.join(dir, "a.txt"));
  });
});

describe("write and edit", () => {
  it("creates directories recursively and writes files", async () => {
    await fs.write.mkdir(path.join(dir, "new/deep/er"));
    await fs.write.mkdir(path.join(dir, "new/deep/er"));
    const p = path.join(dir, "new/deep/er/f.txt");
    await fs.write.writeFile(p, "content ✓");
    expect(readFileSync(p, "utf8")).toBe("content ✓");
    await expect(fs.write.mkdir(path.join(dir, "a.txt"))).rejects.toMatchObject({ code: "EEXIST" });
  });

  // Windows keeps attributes, not modes (fs-windows.test.js).
  it.skipIf(windows)("keeps the file's mode and leaves no temporary files", async () => {
    const p = path.join(dir, "script.sh");
    writeFileSync(p, "#!/bin/sh\n");
    chmodSync(p, 0o755);
    await fs.write.writeFile(p, "#!/bin/sh\necho hi\n");
    expect(statSync(p).mode & 0o777).toBe(0o755);
    expect(readdirSync(dir).filter((n) => n.includes(".tmp"))).toEqual([]);
  });

  // Wine shows no link as a link (helpers/windows.js).
  it.skipIf(underWine)("writes through an in-workspace symlink, keeping the link", async () => {
    const target = path.join(dir, "target.txt");
    writeFileSync(target, "old");
    makeTree(dir, { "to-target": { symlink: "target.txt" } });
    await fs.write.writeFile(path.join(dir, "to-target"), "new");
    expect(lstatSync(path.join(dir, "to-target")).isSymbolicLink()).toBe(true);
    expect(readFileSync(target, "utf8")).toBe("new");
  });

  it("edit.writeFile never creates directories", async () => {
    const p = path.join(dir, "no-such-dir/f.txt");
    await expect(fs.edit.writeFile(p, "x")).rejects.toMatchObject({ code: "ENOENT" });
    expect(() => statSync(path.join(dir, "no-such-dir"))).toThrow();
  });

  it("accepts Buffers and refuses other content", async () => {
    const p = path.join(dir, "buf.bin");
    await fs.write.writeFile(p, Buffer.from([0, 1, 2]));
    expect([...readFileSync(p)]).toEqual([0, 1, 2]);
    await expect(fs.write.writeFile(p, 12)).rejects.toThrow(TypeError);
    expect([...readFileSync(p)]).toEqual([0, 1, 2]);
  });

  it("refuses to write a directory", async () => {
    await expect(fs.write.writeFile(path.join(dir, "sub"), "x")).rejects.toMatchObject({ code: "EISDIR" });
  });
});

describe("ls", () => {
  it("exists, stat and readdir, following symlinks", async () => {
    expect(await fs.ls.exists(path.join(dir, "a.txt"))).toBe(true);
    expect(await fs.ls.exists(path.join(dir, "nope"))).toBe(false);
    expect((await fs.ls.stat(path.join(dir, "sub"))).isDirectory()).toBe(true);
    expect((await fs.ls.stat(path.join(dir, "link-abs"))).isDirectory()).toBe(true);
    expect((await fs.ls.stat(path.join(dir, "a.txt"))).isDirectory()).toBe(false);
    expect((await fs.ls.readdir(path.join(dir, "link-abs"))).sort()).toEqual(["b.txt"]);
    expect(await fs.ls.readdir(path.join(dir, "empty"))).toEqual([]);
    await expect(fs.ls.readdir(path.join(dir, "a.txt"))).rejects.toMatchObject({ code: "ENOTDIR", syscall: "scandir" });
    await expect(fs.ls.stat(path.join(dir, "nope"))).rejects.toMatchObject({ code: "ENOENT", syscall: "stat" });
  });

  it("readdir lists every entry on both sides of the small-directory cut (256, listed right away; more, in the pool)", async () => {
    for (const count of [255, 256, 257, 3000]) {
      const big = path.join(dir, `many-${count}`);
      mkdirSync(big);
      const names = Array.from({ length: count }, (_, i) => `f${i}.txt`);
      for (const n of names) writeFileSync(path.join(big, n), "");
      // In Node's order (libuv sorts by bytes), not the order the directory lists them.
      expect(await fs.ls.readdir(big)).toEqual(readdirSync(big));
      expect(await fs.ls.readdir(big)).toEqual([...names].sort());
    }
    const mixed = path.join(dir, "mixed-names");
    mkdirSync(mixed);
    for (const n of ["b", "B", "a", "_x", "été", "Zed", "10", "9", "ü", "a.b", "a-b", ".hidden"]) {
      writeFileSync(path.join(mixed, n), "");
    }
    expect(await fs.ls.readdir(mixed)).toEqual(readdirSync(mixed));
    await expect(fs.ls.readdir(path.join(dir, "nope"))).rejects.toMatchObject({ code: "ENOENT", syscall: "scandir" });
  });
});

describe("bad arguments never crash", () => {
  const calls = () => [
    fs.read.readFile,
    fs.read.access,
    fs.read.detectImageMimeType,
    fs.write.mkdir,
    (p) => fs.write.writeFile(p, "x"),
    fs.edit.access,
    fs.ls.stat,
    fs.ls.readdir,
    fs.ls.exists,
  ];
  for (const bad of [undefined, null, 42, {}, "relative/path", "", `${"/tmp"}/a\0b`]) {
    it(`refuses ${JSON.stringify(bad)}`, async () => {
      for (const call of calls()) {
        let err;
        try {
          await call(bad);
        } catch (e) {
          err = e;
        }
        expect(err, String(call)).toBeInstanceOf(TypeError);
      }
    });
  }

  it("handles very long and odd paths as errors, not crashes", async () => {
    const long = path.join(dir, "x".repeat(5000));
    // Node on Windows answers an over-long name with ENOENT (ERROR_INVALID_NAME).
    await expect(fs.read.readFile(long)).rejects.toMatchObject({ code: windows ? "ENOENT" : "ENAMETOOLONG" });
    expect(await fs.ls.exists(long)).toBe(false);
    // Windows answers a path through a file with ENOENT (ERROR_PATH_NOT_FOUND), as Node's own fs there.
    await expect(fs.read.readFile(path.join(dir, "a.txt/child"))).rejects.toMatchObject({
      code: windows ? "ENOENT" : "ENOTDIR",
    });
  });
});

// Hostile files never crash, hang or bloat the process; the next call is answered.
describe.runIf(process.platform === "linux")("huge and special files", () => {
  it("refuses a file over 2 GiB as Node's fs.readFile does, without reserving its claimed size", async () => {
    const sparse = path.join(dir, "sparse-1t.bin");
    const over = path.join(dir, "sparse-2g.bin");
    execFileSync("truncate", ["-s", "1T", sparse]);
    execFileSync("truncate", ["-s", String(2 ** 31), over]);
    try {
      for (const p of [sparse, over]) {
        const node = await nodeFs.readFile(p).catch((e) => e);
        const ours = await fs.read.readFile(p).catch((e) => e);
        expect(ours).toBeInstanceOf(RangeError);
        expect(ours.code).toBe("ERR_FS_FILE_TOO_LARGE");
        expect(ours.code).toBe(node.code);
        expect(ours.message).toBe(node.message);
        expect(Object.keys(ours)).toEqual(Object.keys(node));
        await expect(fs.edit.readFile(p)).rejects.toMatchObject({ code: "ERR_FS_FILE_TOO_LARGE" });
      }
      // The process is up and answers the next call.
      expect((await fs.read.readFile(path.join(dir, "a.txt"))).toString()).toBe("hello\n");
    } finally {
      rmSync(sparse, { force: true });
      rmSync(over, { force: true });
    }
  });

  it("a FIFO named to read, stream or sniff fails at once with ESPIPE, as pi's read gives once a writer comes", async () => {
    const fifo = path.join(dir, "named.fifo");
    execFileSync("mkfifo", [fifo]);
    try {
      const espipe = { code: "ESPIPE", syscall: "read", message: "ESPIPE: invalid seek, read" };
      await expect(fs.read.readFile(fifo)).rejects.toMatchObject(espipe);
      await expect(fs.read.detectImageMimeType(fifo)).rejects.toMatchObject(espipe);
      await expect(
        (async () => {
          for await (const _ of fs.read.createReadStream(fifo)) void _;
        })(),
      ).rejects.toMatchObject(espipe);
      expect((await fs.read.readFile(path.join(dir, "a.txt"))).toString()).toBe("hello\n");
    } finally {
      rmSync(fifo, { force: true });
    }
  });
});
