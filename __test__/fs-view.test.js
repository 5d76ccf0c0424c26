// The root's view (Linux): a read-only copy of the root's mount on which the kernel follows no symlink,
// made by the helper in namespaces of its own, answers ls.stat and ls.exists in one system call. These
// prove it is made where user namespaces work (as root and as nobody), that its answers are the bounded
// resolution's (symlinks inside followed, outside refused, races included), and that a mount made
// beneath the root afterwards retires it.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createBoundFs } from "pi-native-ops";
import { nodeArgvAs, nobody, removeScripts, tempDirFor } from "./helpers/nobody.js";
import { staged } from "./helpers/staged.js";
import { makeTree, removeTree, swapTrees, tempDir } from "./helpers/tree.js";

const linux = process.platform === "linux";
// Where unprivileged user namespaces work, a view is made; elsewhere there is none, and nothing changes.
const userns = linux && spawnSync("unshare", ["-Ur", "true"]).status === 0;
const isRoot = process.getuid?.() === 0;
const dirs = [];
afterAll(() => {
  dirs.forEach(removeTree);
  removeScripts();
});

/** Waits (on the condition, not the clock) until `fs.view()` is `want`; the state it ended in. */
async function viewBecomes(fs, want, tries = 2000) {
  for (let i = 0; i < tries && fs.view() !== want; i++) await new Promise((r) => setTimeout(r, 5));
  return fs.view();
}

/** A fs whose view is ready (asked for by the first stat beneath the root), where one can be made. */
async function withView(root) {
  const fs = createBoundFs(root);
  await fs.ls.exists(path.join(root, "any-name"));
  expect(await viewBecomes(fs, userns ? "ready" : "none")).toBe(userns ? "ready" : "none");
  return fs;
}

const answer = (p) =>
  p.then(
    (v) => (typeof v === "boolean" ? v : { size: v.size, dir: v.isDirectory() }),
    (e) => e.message,
  );

describe.skipIf(!linux)("the root's view", () => {
  it("is made on first use, and its answers are the bounded resolution's", async () => {
    const base = tempDir("pno-view-");
    dirs.push(base);
    makeTree(path.join(base, "outside"), { "secret.txt": "SECRET, OUTSIDE", "d/x": "" });
    const root = makeTree(path.join(base, "root"), {
      "a.txt": "a",
      "sub/b.txt": "bb",
      "sub/deep/er/c.txt": "ccc",
      "sub/link-to-c": { symlink: "deep/er/c.txt" },
      "link-dir": { symlink: "sub/deep" },
      "out-file": { symlink: "../outside/secret.txt" },
      "out-dir": { symlink: "../outside/d" },
      "sub/dangling": { symlink: "nowhere" },
    });
    const fs = createBoundFs(root);
    expect(["unasked", "none"]).toContain(fs.view());
    const view = await withView(root);
    const at = (rel) => path.join(root, rel);
    const cases = [
      "a.txt",
      "sub",
      "sub/b.txt",
      "sub/deep/er/c.txt",
      "sub/link-to-c",
      "link-dir/er/c.txt",
      "out-file",
      "out-dir/x",
      "sub/dangling",
      "missing",
      "sub/missing/deeper",
      "a.txt/under-a-file",
    ];
    for (const rel of cases) {
      for (const op of ["stat", "exists"]) {
        // The same call on a root whose view is not made yet: the resolution without it.
        const without = createBoundFs(root);
        expect(without.view(), rel).toBe("unasked");
        const expected = await answer(without.ls[op](at(rel)));
        expect(await answer(view.ls[op](at(rel))), `${op} ${rel}`).toEqual(expected);
      }
    }
    // What the answers are, spelled out for the paths a view cannot take (a symlink on the way).
    expect(await answer(view.ls.stat(at("sub/link-to-c")))).toEqual({ size: 3, dir: false });
    expect(await answer(view.ls.exists(at("link-dir/er/c.txt")))).toBe(true);
    expect(await answer(view.ls.stat(at("out-file")))).toMatch(/is outside workspace/);
    expect(await answer(view.ls.exists(at("out-dir/x")))).toMatch(/is outside workspace/);
    expect(await answer(view.ls.exists(at("sub/dangling")))).toBe(false);
    expect(await answer(view.ls.stat(at("sub/deep/er/c.txt")))).toEqual({ size: 3, dir: false });
    expect(view.view()).toBe(userns ? "ready" : "none");
  });

  it("asks the policy of every path it answers, denied directories above included", async () => {
    const base = tempDir("pno-view-policy-");
    dirs.push(base);
    const root = makeTree(path.join(base, "root"), {
      "ok/a.txt": "a",
      "ok/key.pem": "k",
      "secrets/inner/b.txt": "b",
      "deep/secrets/c.txt": "c",
      "deep/fine/d.txt": "d",
    });
    const fs = createBoundFs(root, { policy: { denyRead: ["*.pem", "secrets/"] } });
    await fs.ls.exists(path.join(root, "ok/a.txt"));
    expect(await viewBecomes(fs, userns ? "ready" : "none")).toBe(userns ? "ready" : "none");
    const at = (rel) => path.join(root, rel);
    // Twice: the second time the directories above are known readable.
    for (let round = 0; round < 2; round++) {
      expect(await answer(fs.ls.stat(at("ok/a.txt")))).toEqual({ size: 1, dir: false });
      expect(await answer(fs.ls.exists(at("deep/fine/d.txt")))).toBe(true);
      for (const denied of ["ok/key.pem", "secrets", "secrets/inner/b.txt", "deep/secrets", "deep/secrets/c.txt"]) {
        for (const op of ["stat", "exists"]) {
          await expect(fs.ls[op](at(denied)), `${op} ${denied}`).rejects.toMatchObject({ rule: expect.any(String) });
        }
      }
    }
    expect(fs.view()).toBe(userns ? "ready" : "none");
  });

  it("never answers about a file outside while a directory on the path is swapped for a symlink out", async () => {
    const base = tempDir("pno-view-race-");
    dirs.push(base);
    // The secret's size differs from the inside file's: a stat of it would show.
    const { outside, root } = swapTrees(base, "SECRET, AND LONGER");
    const fs = await withView(root);
    const swapper = spawn(process.execPath, [path.join(import.meta.dirname, "helpers", "swapper.js"), root, outside], {
      stdio: "ignore",
    });
    const seen = { inside: 0, refused: 0, missing: 0 };
    try {
      // Until both outcomes were met many times (the swapper alternates every few microseconds).
      for (let i = 0; i < 200_000 && (seen.inside < 500 || seen.refused + seen.missing < 500); i++) {
        const dir = path.join(root, i % 2 ? "swap" : "swapdir");
        await fs.ls.stat(path.join(dir, "f.txt")).then(
          (st) => {
            expect(st.size).toBe("INSIDE".length);
            seen.inside++;
          },
          (e) => (e.message.includes("is outside workspace") ? seen.refused++ : seen.missing++),
        );
        expect(await fs.ls.exists(path.join(dir, "outside-marker")).catch(() => false)).toBe(false);
      }
    } finally {
      swapper.kill("SIGKILL");
    }
    expect(seen.inside).toBeGreaterThanOrEqual(500);
    expect(seen.refused + seen.missing).toBeGreaterThanOrEqual(500);
    expect(fs.view()).toBe(userns ? "ready" : "none");
  }, 60_000);

  it.skipIf(!isRoot || !userns)(
    "a mount made beneath the root retires the view: the mount's files are seen",
    async () => {
      const base = tempDir("pno-view-mount-");
      dirs.push(base);
      const root = makeTree(path.join(base, "root"), { "mnt/under.txt": "hidden by the mount" });
      const fs = await withView(root);
      expect(await fs.ls.exists(path.join(root, "mnt/under.txt"))).toBe(true);
      const mnt = path.join(root, "mnt");
      expect(spawnSync("mount", ["-t", "tmpfs", "tmpfs", mnt]).status).toBe(0);
      try {
        writeFileSync(path.join(mnt, "over.txt"), "on the mount");
        // The mount table's watcher retires the view; the next call asks for another, which a mount
        // beneath the root refuses (the copy would show what the mount hides).
        expect(await viewBecomes(fs, "unasked")).toBe("unasked");
        expect(await fs.ls.exists(path.join(mnt, "over.txt"))).toBe(true);
        expect(await fs.ls.exists(path.join(mnt, "under.txt"))).toBe(false);
        expect((await fs.ls.stat(path.join(mnt, "over.txt"))).size).toBe("on the mount".length);
        expect(await viewBecomes(fs, "none")).toBe("none");
        expect(await fs.ls.exists(path.join(mnt, "over.txt"))).toBe(true);
        // A root made while the mount is there has no view.
        const later = createBoundFs(root);
        await later.ls.stat(mnt);
        expect(await viewBecomes(later, "none")).toBe("none");
        expect(await later.ls.exists(path.join(mnt, "under.txt"))).toBe(false);
      } finally {
        // Lazily: the root's recently used directories (the resolution's, without a view) hold the mount.
        spawnSync("umount", ["-l", mnt]);
      }
      expect(statSync(path.join(mnt, "under.txt")).size).toBe("hidden by the mount".length);
    },
    60_000,
  );

  it.skipIf(!nobody.argv || !userns)(
    "is made for an unprivileged user too",
    async () => {
      const dir = tempDirFor("nobody", "pno-view-nobody-");
      const script = path.join(tempDirFor("root", "pno-view-script-"), "view.mjs");
      writeFileSync(
        script,
        `const { createBoundFs } = await import(process.argv[2]);
       import { mkdirSync, writeFileSync } from "node:fs";
       const root = process.argv[3];
       mkdirSync(root + "/sub/deep", { recursive: true });
       writeFileSync(root + "/sub/deep/f.txt", "four");
       const fs = createBoundFs(root);
       await fs.ls.stat(root + "/sub");
       for (let i = 0; i < 2000 && fs.view() !== "ready"; i++) await new Promise((r) => setTimeout(r, 5));
       const st = await fs.ls.stat(root + "/sub/deep/f.txt");
       console.log(JSON.stringify({ view: fs.view(), size: st.size, uid: process.getuid() }));`,
        { mode: 0o644 },
      );
      mkdirSync(path.dirname(script), { recursive: true });
      const [file, ...args] = [...nodeArgvAs("nobody"), script, staged("index.js"), dir];
      const run = spawnSync(file, args, { encoding: "utf8", cwd: "/" });
      expect(run.stderr).toBe("");
      expect(JSON.parse(run.stdout)).toEqual({ view: "ready", size: 4, uid: 65534 });
    },
    60_000,
  );
});
