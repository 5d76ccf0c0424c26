// Windows only: the inputs Windows adds to the bounded fs (drive letters, \\?\ and UNC spellings, drive-
// relative paths, alternate data streams, reserved device names, trailing dots and spaces, 8.3 short names,
// case) and the ways out it adds (junctions, symlinks to another drive or a UNC share), each with a clear
// answer: refused as `path "…" is outside workspace`, refused with EINVAL (a name Win32 reads otherwise), or
// the same file as its plain spelling. Under wine (scripts/test-windows.sh) the links are unix symlinks
// (helpers/tree.js), which wine shows as what they lead to; the tests of Windows links themselves (a
// junction, a symlink to a UNC path, a directory swapped for a junction) run on the Windows runner only.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createBoundFs, createNativeTools, grep } from "pi-native-ops";
import { isPi1, runTool } from "./helpers/pi.js";
import { makeTree, removeTree, snapshot, tempDir, wineExchangeStart, wineSwapStart } from "./helpers/tree.js";
import { underWine, windows } from "./helpers/windows.js";

const describeWindows = windows ? describe : describe.skip;
const message = (p) => `path "${p}" is outside workspace`;

describeWindows("the bounded fs on Windows", () => {
  let base;
  let root;
  let outside;
  let fs;
  let outsideBefore;

  beforeAll(() => {
    base = tempDir("pno-win-");
    outside = makeTree(path.join(base, "outside"), { "secret.txt": "SECRET\n", "dir/inner.txt": "INNER\n" });
    root = makeTree(path.join(base, "root"), {
      "a.txt": "A\n",
      "Mixed Case.TXT": "mixed\n",
      "a long file name here.txt": "long\n",
      "sub/deeper/x.txt": "x\n",
      "link-in": { symlink: "a.txt" },
      "link-dir-in": { symlink: "sub" },
      "link-deep-in": { symlink: "sub\\deeper" },
      "link-abs-out": { symlink: path.join(outside, "secret.txt") },
      "link-rel-out": { symlink: "..\\outside\\secret.txt" },
      "link-dir-out": { symlink: outside },
      "sub/up-and-out": { symlink: "..\\..\\outside\\dir" },
    });
    fs = createBoundFs(root);
    outsideBefore = snapshot(outside);
  });
  afterAll(() => removeTree(base));
  beforeEach(() => expect(snapshot(outside)).toEqual(outsideBefore));

  const refusedEverywhere = async (p) => {
    await expect(fs.read.readFile(p)).rejects.toThrow(message(p));
    await expect(fs.write.writeFile(p, "x")).rejects.toThrow(message(p));
    await expect(fs.ls.stat(p)).rejects.toThrow(message(p));
    await expect(fs.ls.exists(p)).rejects.toThrow(message(p));
  };

  describe("paths that leave the workspace are refused", () => {
    const cases = [
      ["a .. chain with backslashes", () => `${root}\\..\\outside\\secret.txt`],
      ["a .. chain with forward slashes", () => `${root.replaceAll("\\", "/")}/../outside/secret.txt`],
      ["another drive", () => `${root[0] === "Q" ? "R" : "Q"}:\\secret.txt`],
      ["a UNC path to the same directory", () => `\\\\localhost\\${root[0]}$${root.slice(2)}\\a.txt`],
      ["a \\\\?\\UNC path", () => `\\\\?\\UNC\\localhost\\${root[0]}$${root.slice(2)}\\a.txt`],
      ["a device path (\\\\.\\)", () => `\\\\.\\${root}\\a.txt`],
      ["the drive's root", () => root.slice(0, 3)],
    ];
    for (const [name, make] of cases) {
      it(name, async () => {
        await refusedEverywhere(make());
      });
    }
  });

  describe("links that lead out are refused, in-root links followed", () => {
    for (const [name, rel] of [
      ["an absolute symlink to a file outside", "link-abs-out"],
      ["a relative symlink climbing out", "link-rel-out"],
      ["a directory symlink pointing out", "link-dir-out\\secret.txt"],
      ["a symlink under a subdirectory climbing out", "sub\\up-and-out\\inner.txt"],
    ]) {
      it(name, async () => {
        await refusedEverywhere(path.join(root, rel));
        await expect(fs.read.readFile(path.join(root, "link-dir-out"))).rejects.toThrow("outside workspace");
      });
    }

    it("a symlink to another drive", async () => {
      // Under wine, / is Z: (the prefix is on C:); on Windows, a symlink to a drive letter that need not exist.
      const target = underWine ? "Z:\\etc\\hostname" : `${root[0] === "Q" ? "R" : "Q"}:\\secret.txt`;
      const dir = makeTree(path.join(root, "other-drive"), { out: { symlink: target } });
      await refusedEverywhere(path.join(dir, "out"));
    });

    it("in-root links are followed, whatever their case", async () => {
      expect((await fs.read.readFile(path.join(root, "link-in"))).toString()).toBe("A\n");
      expect((await fs.read.readFile(path.join(root, "LINK-DIR-IN", "deeper", "X.TXT"))).toString()).toBe("x\n");
      expect(await fs.ls.readdir(path.join(root, "link-dir-in"))).toEqual(expect.arrayContaining(["deeper"]));
      // One to a directory elsewhere than beside it (under wine, whose open follows it, the directory reached
      // is checked as the one its own path names inside the root).
      expect((await fs.read.readFile(path.join(root, "link-deep-in", "x.txt"))).toString()).toBe("x\n");
      expect(await fs.ls.readdir(path.join(root, "link-deep-in"))).toEqual(["x.txt"]);
      await fs.write.writeFile(path.join(root, "link-deep-in", "made.txt"), "made\n");
      expect(readFileSync(path.join(root, "sub", "deeper", "made.txt"), "utf8")).toBe("made\n");
    });
  });

  describe("Windows-only links (not under wine: it makes no junction or Windows symlink)", () => {
    const onWindows = underWine ? it.skip : it;

    onWindows("a junction pointing out", async () => {
      symlinkSync(outside, path.join(root, "junction-out"), "junction");
      await refusedEverywhere(path.join(root, "junction-out", "secret.txt"));
    });

    onWindows("a junction pointing back in is followed", async () => {
      symlinkSync(path.join(root, "sub"), path.join(root, "junction-in"), "junction");
      expect((await fs.read.readFile(path.join(root, "junction-in", "deeper", "x.txt"))).toString()).toBe("x\n");
    });

    onWindows("a symlink to a UNC path", async () => {
      const unc = `\\\\localhost\\${outside[0]}$${outside.slice(2)}\\secret.txt`;
      symlinkSync(unc, path.join(root, "unc-out"), "file");
      await refusedEverywhere(path.join(root, "unc-out"));
    });

    onWindows("a directory swapped for a junction while writes run never lets one out", async () => {
      const swapped = path.join(root, "swapped");
      const swaps = 200;
      const writes = [];
      for (let i = 0; i < swaps; i++) {
        // A swap may be refused while a walk holds the directory (held without FILE_SHARE_DELETE).
        try {
          rmSync(swapped, { recursive: true, force: true });
          if (i % 2 === 0) mkdirSync(swapped);
          else symlinkSync(outside, swapped, "junction");
        } catch {}
        writes.push(fs.write.writeFile(path.join(swapped, "escape.txt"), "x").catch(() => {}));
      }
      await Promise.all(writes);
      expect(existsSync(path.join(outside, "escape.txt"))).toBe(false);
    });
  });

  // Under wine the swap is done by the Linux side with a unix symlink (helpers/tree.js), which wine shows as
  // the directory it leads to: what holds it out is the final-path check of each handle.
  it.runIf(underWine)("a directory swapped for a link out while reads and writes run never lets one out", async () => {
    const swapped = path.join(root, "swapped-by-linux");
    // Swaps: enough for the calls below to meet each state many times over (a swap is four processes).
    const ended = wineSwapStart(swapped, outside, 300);
    let calls = 0;
    while (!ended()) {
      const p = path.join(swapped, "secret.txt");
      const read = await fs.read.readFile(p).then(String, (e) => e.message);
      expect(read).not.toBe("SECRET\n");
      await fs.write.writeFile(path.join(swapped, "escape.txt"), "x").catch(() => {});
      await fs.write.mkdir(path.join(swapped, "made")).catch(() => {});
      calls++;
    }
    expect(calls).toBeGreaterThan(0);
    expect(existsSync(path.join(outside, "escape.txt"))).toBe(false);
    expect(existsSync(path.join(outside, "made"))).toBe(false);
  });

  // The same swap made atomically (renameat2's RENAME_EXCHANGE of a directory and a unix symlink out, by the
  // Linux side at full speed): each name is always either the directory or the link, and changes between any
  // two of our system calls. What holds it out is each directory handle's identity (docs/windows.md, "Races").
  it.runIf(underWine)(
    "a directory exchanged atomically with a link out: nothing outside is read, listed or written",
    async () => {
      const dir = path.join(root, "exchanged");
      const link = path.join(root, "exchanged-link");
      makeTree(dir, { "secret.txt": "inside\n", "mine.txt": "mine\n" });
      // Its own outside, so that what a failure leaves there fails this test only.
      const out = makeTree(path.join(base, "exchanged-outside"), {
        "secret.txt": "SECRET\n",
        "dir/inner.txt": "INNER\n",
      });
      const outBefore = snapshot(out);
      const leaks = [];
      const leak = (what, value) => leaks.push(`${what}: ${JSON.stringify(value)}`);
      // Names and contents found only outside (outside/secret.txt, outside/dir/inner.txt).
      const outsideName = (n) => /(^|[\\/])(dir|inner\.txt)$/.test(n);
      const stop = wineExchangeStart(dir, link, out);
      let swaps;
      // Writes that went through (inside, under one name or the other): the race was run, not refused.
      let writes = 0;
      try {
        for (let i = 0; i < 60; i++) {
          for (const at of [dir, link]) {
            const read = await fs.read.readFile(path.join(at, "secret.txt")).then(String, () => "");
            if (read.includes("SECRET")) leak("read.readFile", read);
            const names = await fs.ls.readdir(at).catch(() => []);
            if (names.some(outsideName)) leak("ls.readdir", names);
            if (
              await fs.ls.stat(path.join(at, "dir")).then(
                () => true,
                () => false,
              )
            )
              leak("ls.stat", "dir");
            if (await fs.find.exists(path.join(at, "dir", "inner.txt")).catch(() => false))
              leak("find.exists", "inner.txt");
            const found = await fs.find.glob("**", at, {}).catch(() => []);
            if (found.some(outsideName)) leak("find.glob", found);
            const grepped = await grep({ pattern: "SECRET|INNER", path: at, fs }).catch(() => ({ matches: [] }));
            if (grepped.matches.length > 0) leak("grep", grepped.matches);
            if (
              await fs.write.writeFile(path.join(at, `escape-${i}.txt`), "x").then(
                () => true,
                () => false,
              )
            )
              writes++;
            await fs.write.writeFile(path.join(at, "secret.txt"), "inside\n").catch(() => {});
            await fs.write.mkdir(path.join(at, `made-${i}`, "deeper")).catch(() => {});
          }
        }
      } finally {
        swaps = stop();
      }
      expect(swaps).toBeGreaterThan(0);
      expect(writes).toBeGreaterThan(0);
      expect(leaks).toEqual([]);
      expect(snapshot(out)).toEqual(outBefore);
    },
  );

  describe("names Win32 reads otherwise are refused with EINVAL, and nothing is made", () => {
    const names = [
      ["an alternate data stream", "a.txt:secret"],
      ["the default data stream named", "a.txt::$DATA"],
      ["a reserved device name", "CON"],
      ["a device name in lower case", "nul"],
      ["a device name with an extension", "com1.txt"],
      ["a printer port", "LPT1"],
      ["a trailing dot", "a.txt."],
      ["a trailing space", "a.txt "],
      ["a wildcard", "a*.txt"],
    ];
    for (const [name, file] of names) {
      it(`${name}: ${JSON.stringify(file)}`, async () => {
        const before = readdirSync(root).sort();
        const p = path.join(root, file);
        await expect(fs.write.writeFile(p, "x")).rejects.toMatchObject({ code: "EINVAL" });
        await expect(fs.read.readFile(p)).rejects.toMatchObject({ code: "EINVAL" });
        expect(readdirSync(root).sort()).toEqual(before);
        expect(readFileSync(path.join(root, "a.txt"), "utf8")).toBe("A\n");
      });
    }
  });

  describe("spellings of the same file", () => {
    it("names are case-insensitive, and a write keeps the file's own name", async () => {
      expect((await fs.read.readFile(path.join(root, "MIXED case.txt"))).toString()).toBe("mixed\n");
      await fs.write.writeFile(path.join(root, "mixed CASE.txt"), "rewritten\n");
      expect(readdirSync(root).filter((n) => n.toLowerCase() === "mixed case.txt")).toEqual(["Mixed Case.TXT"]);
      expect(readFileSync(path.join(root, "Mixed Case.TXT"), "utf8")).toBe("rewritten\n");
    });

    it("the root in its \\\\?\\ form, in another case, with forward slashes", async () => {
      for (const p of [
        `\\\\?\\${root}\\a.txt`,
        `${root.toUpperCase()}\\A.TXT`,
        `${root.toLowerCase()}\\a.txt`,
        `${root.replaceAll("\\", "/")}/a.txt`,
      ]) {
        expect((await fs.read.readFile(p)).toString(), p).toBe("A\n");
      }
    });

    it("a drive-relative path (C:foo) is refused as not absolute", async () => {
      const p = `${root.slice(0, 2)}secret.txt`;
      await expect(fs.read.readFile(p)).rejects.toThrow(TypeError);
      await expect(fs.write.writeFile(p, "x")).rejects.toThrow(TypeError);
    });

    it("a rooted path (\\x, as pi resolves /x on Windows) is on the current directory's drive", async () => {
      const rooted = `${root.slice(2)}\\a.txt`;
      if (process.cwd()[0].toUpperCase() === root[0].toUpperCase()) {
        expect((await fs.read.readFile(rooted)).toString()).toBe("A\n");
      } else {
        await refusedEverywhere(rooted);
      }
    });

    it("a runtime root given with / or \\ maps either spelling to the root", async () => {
      const drive = root.slice(0, 2);
      for (const runtimeRoot of [`${drive}/workspace`, `${drive}\\workspace\\`]) {
        const rfs = createBoundFs(root, { runtimeRoot });
        expect(rfs.runtimeRoot).toBe(`${drive}\\workspace`);
        for (const p of [`${drive}\\workspace\\a.txt`, `${drive}/workspace/a.txt`, `${drive}\\WORKSPACE\\A.txt`]) {
          expect((await rfs.read.readFile(p)).toString(), p).toBe("A\n");
        }
        await expect(rfs.read.readFile(`${drive}\\workspace\\..\\a.txt`)).rejects.toThrow("outside workspace");
        await expect(rfs.read.readFile(`${drive}\\workspace2\\a.txt`)).rejects.toThrow("outside workspace");
      }
    });

    it("an 8.3 short name names the same file as its long name", async (ctx) => {
      const long = path.join(root, "a long file name here.txt");
      // `dir /x` lists each entry's 8.3 name before its long name.
      const listing = execFileSync("cmd", ["/d", "/c", "dir", "/x", root], { encoding: "utf8" });
      const line = listing.split(/\r?\n/).find((l) => l.endsWith(" a long file name here.txt"));
      const shortName = line?.trim().split(/\s+/).at(-6) ?? "";
      const short = shortName.includes("~") ? path.join(root, shortName) : "";
      // Volumes can have 8.3 names turned off: then there is nothing to test.
      if (!short || path.basename(short).toLowerCase() === path.basename(long).toLowerCase()) ctx.skip();
      expect((await fs.read.readFile(short)).toString()).toBe("long\n");
      await fs.write.writeFile(short, "via short\n");
      expect(readFileSync(long, "utf8")).toBe("via short\n");
      expect(readdirSync(root).filter((n) => n.startsWith("a long") || n.includes("~"))).toEqual([
        "a long file name here.txt",
      ]);
    });
  });

  describe("a policy compares names as Windows does", () => {
    let proot;
    let pfs;
    const protectedBy = (p) => `path "${p}" is protected by policy`;
    /** The 8.3 name `dir /x` lists for `name` in `dir`, or "" when the volume gives it none. */
    const shortNameOf = (dir, name) => {
      const listing = execFileSync("cmd", ["/d", "/c", "dir", "/x", "/a", dir], { encoding: "utf8" });
      const line = listing.split(/\r?\n/).find((l) => l.endsWith(` ${name}`));
      const short = line?.trim().split(/\s+/).at(-2) ?? "";
      return short.includes("~") ? short : "";
    };

    beforeAll(() => {
      proot = makeTree(path.join(base, "policy-root"), {
        ".env": "SECRET\n",
        "a.txt": "A\n",
        ".git/hooks/pre-commit.sample": "#!/bin/sh\n",
      });
      pfs = createBoundFs(proot, { policy: { denyRead: [".env"] } });
    });

    it("a denied .env is refused by its case variants and left out of listings", async () => {
      for (const p of [path.join(proot, ".env"), path.join(proot, ".ENV"), `${proot}\\sub\\..\\.Env`]) {
        const err = await pfs.read.readFile(p).catch((e) => e);
        expect(err.message, p).toBe(protectedBy(p));
        expect(err.rule).toBe(".env");
        await expect(pfs.ls.stat(p)).rejects.toThrow(protectedBy(p));
        await expect(pfs.ls.exists(p)).rejects.toThrow(protectedBy(p));
      }
      const names = await pfs.ls.readdir(proot);
      expect(names.map((n) => n.toLowerCase())).not.toContain(".env");
      expect(names).toContain("a.txt");
    });

    it("a denied .env is refused by its 8.3 short name", async (ctx) => {
      const short = shortNameOf(proot, ".env");
      // Volumes can have 8.3 names turned off: then there is nothing to test.
      if (!short || short.toLowerCase() === ".env") ctx.skip();
      const p = path.join(proot, short);
      const err = await pfs.read.readFile(p).catch((e) => e);
      expect(err.message, p).toBe(protectedBy(p));
      expect(err.rule).toBe(".env");
      await expect(pfs.ls.stat(p)).rejects.toThrow(protectedBy(p));
      await expect(pfs.edit.access(p)).rejects.toThrow(protectedBy(p));
    });

    it("a hook is protected through .git/hooks, its case variants and the short name of .git", async () => {
      const spellings = [".git\\hooks\\x", ".GIT\\Hooks\\x", ".git/HOOKS/x"];
      const short = shortNameOf(proot, ".git");
      if (short && short.toLowerCase() !== ".git") spellings.push(`${short}\\hooks\\x`);
      for (const rel of spellings) {
        const p = `${proot}\\${rel}`;
        const err = await pfs.write.writeFile(p, "#!/bin/sh\necho pwned\n").catch((e) => e);
        expect(err.message, p).toBe(protectedBy(p));
        expect(err.rule).toBe("**/.git/hooks/");
        await expect(pfs.write.mkdir(`${p}dir`)).rejects.toThrow(protectedBy(`${p}dir`));
      }
      expect(readdirSync(path.join(proot, ".git", "hooks"))).toEqual(["pre-commit.sample"]);
      await pfs.write.writeFile(path.join(proot, "A.TXT"), "B\n");
      expect(readFileSync(path.join(proot, "a.txt"), "utf8")).toBe("B\n");
    });
  });

  describe("createNativeTools", () => {
    it("read, write, edit, ls, grep and find run on the bounded fs; bash (and pi 1.6's powershell) on the native exec", async () => {
      const tools = createNativeTools(root);
      const names = ["bash", "edit", "find", "grep", "ls", "read", "write", ...(isPi1 ? ["powershell"] : [])];
      expect(Object.keys(tools).sort()).toEqual(names.sort());
      expect((await runTool(tools.read, { path: "a.txt" })).text).toContain("A");
      expect((await runTool(tools.write, { path: "tools\\made.txt", content: "one\n" })).error).toBeUndefined();
      expect(
        (await runTool(tools.edit, { path: "tools/made.txt", edits: [{ oldText: "one", newText: "two" }] })).error,
      ).toBeUndefined();
      expect(readFileSync(path.join(root, "tools", "made.txt"), "utf8")).toBe("two\n");
      expect((await runTool(tools.ls, { path: "tools" })).text).toContain("made.txt");
      expect((await runTool(tools.find, { pattern: "*.txt", path: "tools" })).text).toBe("made.txt");
      expect((await runTool(tools.grep, { pattern: "two", path: "tools" })).text).toBe("made.txt:1: two");
      // No fd or rg was reached for (pi would download them): the search is ours, bounded.
      expect((await runTool(tools.grep, { pattern: "x", path: "link-dir-out" })).error).toContain(
        "is outside workspace",
      );
      // The refusals reach the model as on Linux.
      for (const p of ["link-abs-out", "..\\outside\\secret.txt", "a.txt:secret"]) {
        const r = await runTool(tools.read, { path: p });
        expect(r.error ?? r.text, p).toMatch(/is outside workspace|EINVAL/);
      }
      const r = await runTool(tools.write, { path: "link-dir-out\\new.txt", content: "PWNED" });
      expect(r.error).toContain("is outside workspace");
    });
  });

  describe("writes", () => {
    it("replace a file atomically and leave no temporary behind", async () => {
      const p = path.join(root, "atomic.txt");
      writeFileSync(p, "old\n");
      await fs.write.writeFile(p, "new\n");
      expect(readFileSync(p, "utf8")).toBe("new\n");
      expect(readdirSync(root).filter((n) => n.endsWith(".tmp"))).toEqual([]);
    });

    it("refuse a read-only file with EPERM, as Node's own write does, and keep it", async () => {
      const p = path.join(root, "read-only.txt");
      writeFileSync(p, "keep\n", { mode: 0o444 });
      await expect(fs.write.writeFile(p, "x")).rejects.toMatchObject({ code: "EPERM" });
      await expect(fs.edit.access(p)).rejects.toMatchObject({ code: "EPERM" });
      await fs.read.access(p);
      expect(readFileSync(p, "utf8")).toBe("keep\n");
      expect((await fs.ls.stat(p)).mode & 0o777).toBe(0o444);
    });
  });
});
