// The warm search index is never stale: every change, by whatever means, is seen by the very
// next search. Each step makes one change and searches AT ONCE (no sleep, no polling), through pi's find
// tool and our grep tool over an fs with the index on, and expects the output byte for byte equal to the
// same searches through a fresh fs without an index over the same tree (helpers/indexed.js). Each step
// also expects the output to differ from before the change, so an index that missed the change fails the
// comparison, and expects the index still ready, so a silent step-aside (searches walking live) fails too.
import { execFileSync, spawn } from "node:child_process";
import { linkSync, mkdirSync, renameSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import * as pno from "pi-native-ops";
import { serverPath } from "./helpers/face.js";
import { pi, runTool } from "./helpers/pi.js";
import { expectFresh, reindexed, run, sh, statsUntil, step, workspace } from "./helpers/indexed.js";
import { makeTree, tempDir } from "./helpers/tree.js";

const BASE = {
  ".gitignore": "*.log\nbuild/\n",
  "README.md": "# demo\nnothing to see\n",
  "src/a.ts": "export const a = 1;\n// needle in a\n",
  "src/b.ts": "export const b = 2;\n",
  "src/deep/c.txt": "deep needle\n",
  "src/deep/er/d.txt": "deeper\n",
  "docs/guide.md": "Needle upper\nguide\n",
  "app.log": "needle in a log\n",
  "build/out.txt": "needle in build\n",
  // Files without matches, so that a selective search has files to leave out.
  ...Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`lib/m${i}.ts`, `export const v${i} = ${i};\n`])),
};

// Searches whose output shows the changes made below.
const SEARCHES = [
  ["grep", { pattern: "needle" }],
  ["grep", { pattern: "NEEDLE", ignoreCase: true }],
  ["grep", { pattern: "ne+dle\\s+\\w+", path: "src" }],
  ["find", { pattern: "**/*.txt" }],
  ["find", { pattern: "*" }],
  ["find", { pattern: "*", path: "src" }],
];

const git = (cwd, ...args) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd, stdio: "pipe" });

/** Expects a pi tool call to have succeeded. */
async function ok(call) {
  const r = await call;
  expect(r.error).toBeUndefined();
  return r;
}

describe.runIf(process.platform === "linux")("the index sees every change at the next search", () => {
  it("writes and edits through the Operations and pi's write and edit tools", async () => {
    const ws = await workspace(BASE);
    const write = pi.createWriteTool(ws.root, { operations: ws.fs.write });
    const edit = pi.createEditTool(ws.root, { operations: ws.fs.edit });
    await step(ws, SEARCHES, () => ws.fs.write.writeFile(`${ws.root}/src/new.ts`, "a fresh needle\n"));
    await step(ws, SEARCHES, () => ok(runTool(write, { path: "new/deep/dir/f.txt", content: "needle in new\n" })));
    await step(ws, SEARCHES, () =>
      ok(runTool(edit, { path: "src/b.ts", edits: [{ oldText: "const b = 2", newText: "const needle_b = 2" }] })),
    );
    await step(ws, SEARCHES, () =>
      ok(runTool(edit, { path: "src/a.ts", edits: [{ oldText: "// needle in a", newText: "// gone" }] })),
    );
    // The same once the background thread has re-indexed the changed files.
    await reindexed(ws);
    await expectFresh(ws, SEARCHES);
    await step(ws, SEARCHES, () => ws.fs.write.writeFile(`${ws.root}/src/new.ts`, "nothing now\n"));
    await step(ws, SEARCHES, () => ws.fs.write.writeFile(`${ws.root}/new/deep/dir/f.txt`, "needle twice\nneedle\n"));
  });

  it("echo, sed -i, mv, rm -r, mkdir -p, cp -r and truncation run through bash", async () => {
    const ws = await workspace(BASE);
    const at = (command) => () => sh(command, ws.root);
    await step(ws, SEARCHES, at("echo 'needle by echo' > src/echo.txt"));
    await step(ws, SEARCHES, at("echo 'another needle' >> src/b.ts"));
    await step(ws, SEARCHES, at("sed -i 's/needle/haystack/' src/deep/c.txt"));
    await step(ws, SEARCHES, at("sed -i 's/deeper/needle deeper/' src/deep/er/d.txt"));
    await step(ws, SEARCHES, at("mv src/a.ts src/deep/er/a2.txt"));
    await step(ws, SEARCHES, at("mkdir -p x/y/z x/empty/dir && echo needle xyz > x/y/z/n.txt"));
    await step(ws, SEARCHES, at("echo needle in z > x/y/z/m.txt"));
    await step(ws, SEARCHES, at("rm -r src/deep"));
    // A directory replaced by a file of the same name, then the other way round.
    await step(ws, SEARCHES, at("rm -r x && echo needle x > x"));
    await step(ws, SEARCHES, at("rm x && mkdir -p x && echo needle again > x/n.txt"));
    await step(ws, SEARCHES, at("cp -r src src-copy"));
    await step(ws, SEARCHES, at(": > src-copy/b.ts"));
    await reindexed(ws);
    await expectFresh(ws, SEARCHES);
    await step(ws, SEARCHES, at("rm -r src-copy x"));
  });

  it("git checkout of another branch, and back", async () => {
    const ws = await workspace({
      ".gitignore": "*.log\n",
      "shared.txt": "needle one\n",
      "src/alpha.ts": "export const needle = 'alpha';\n",
      "old/dir/x.txt": "needle old\n",
      "lib/keep.ts": "export {};\n",
    });
    git(ws.root, "init", "-q", "-b", "main");
    git(ws.root, "add", "-A");
    git(ws.root, "commit", "-qm", "main");
    git(ws.root, "checkout", "-qb", "other");
    rmSync(`${ws.root}/old`, { recursive: true });
    rmSync(`${ws.root}/src/alpha.ts`);
    mkdirSync(`${ws.root}/new/deep`, { recursive: true });
    writeFileSync(`${ws.root}/new/deep/y.txt`, "needle y\n");
    writeFileSync(`${ws.root}/src/beta.ts`, "export const needle = 'beta';\n");
    writeFileSync(`${ws.root}/shared.txt`, "needle two\nneedle three\n");
    writeFileSync(`${ws.root}/.gitignore`, "*.tmp\n");
    git(ws.root, "add", "-A");
    git(ws.root, "commit", "-qm", "other");
    git(ws.root, "checkout", "-q", "main");
    // Untracked files in both branches, each ignored in one of them.
    writeFileSync(`${ws.root}/keep.log`, "needle untracked log\n");
    writeFileSync(`${ws.root}/keep.tmp`, "needle untracked tmp\n");
    // The index saw the build before these: search once, then check out.
    await expectFresh(ws, SEARCHES);
    await step(ws, SEARCHES, () => sh("git checkout -q other", ws.root));
    await step(ws, SEARCHES, () => sh("git checkout -q main", ws.root));
    await reindexed(ws);
    await step(ws, SEARCHES, () => sh("git checkout -q other", ws.root));
  });

  it("a renamed directory holding matches, changes inside it afterwards, and moves across the root", async () => {
    const ws = await workspace(BASE);
    const outside = tempDir("pno-index-outside-");
    try {
      mkdirSync(`${outside}/tree/in/deep`, { recursive: true });
      writeFileSync(`${outside}/tree/in/deep/z.txt`, "needle from outside\n");
      const at = (command) => () => sh(command, ws.root);
      await step(ws, SEARCHES, at("mv src lib2"));
      // Events from inside the moved directory now name its new path.
      await step(ws, SEARCHES, at("echo 'needle after move' > lib2/deep/er/new.txt"));
      await step(ws, SEARCHES, at("sed -i 's/deep needle/deep changed/' lib2/deep/c.txt"));
      // A new directory at the old name.
      await step(ws, SEARCHES, at("mkdir src && echo needle src2 > src/s.txt"));
      await step(ws, SEARCHES, at("mv lib2/deep src/deep2"));
      await step(ws, SEARCHES, at("echo needle 2 >> src/deep2/er/d.txt"));
      // Out of the root: gone, and what happens to it there is not seen.
      await step(ws, SEARCHES, at(`mv src '${outside}/gone'`));
      const before = await run(ws.fs, ws.root, SEARCHES);
      await sh("echo needle outside >> gone/s.txt && mkdir gone/more && echo needle > gone/more/m.txt", outside);
      expect(await expectFresh(ws, SEARCHES)).toEqual(before);
      // Into the root from outside: never seen before, and its subdirectories watched from now on.
      await step(ws, SEARCHES, at(`mv '${outside}/tree' incoming`));
      await step(ws, SEARCHES, at("echo needle deep in > incoming/in/deep/z2.txt"));
      // Swapped for a directory by the same name, moved in over it.
      await sh(`mkdir -p swap/in && echo needle swapped > swap/in/w.txt`, outside);
      await step(ws, SEARCHES, at(`rm -r incoming && mv '${outside}/swap' incoming`));
      await step(ws, SEARCHES, at("echo needle after swap > incoming/in/v.txt"));
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("a new, a changed and a removed ignore rule: .gitignore, .ignore, .git/info/exclude", async () => {
    const ws = await workspace({
      ...BASE,
      "gen/g.txt": "needle generated\n",
      "gen/sub/h.txt": "needle h\n",
      "keep.tmp": "needle tmp\n",
    });
    git(ws.root, "init", "-q");
    // Searched once so the index has seen .git appear before the rules below change.
    await expectFresh(ws, SEARCHES);
    const at = (command) => () => sh(command, ws.root);
    await step(ws, SEARCHES, at("echo 'gen/' >> .gitignore"));
    await step(ws, SEARCHES, at("echo '*.tmp' >> .git/info/exclude"));
    await step(ws, SEARCHES, at("echo 'docs/' > .ignore"));
    // Removed again: what the index never listed while ignored is listed, watched and searched now.
    await step(ws, SEARCHES, at("sed -i '/^gen\\/$/d' .gitignore"));
    await step(ws, SEARCHES, at("echo 'needle h2' > gen/sub/h.txt"));
    await step(ws, SEARCHES, at("sed -i '/^build\\/$/d' .gitignore"));
    await step(ws, SEARCHES, at("echo 'needle built' > build/new.txt"));
    await step(ws, SEARCHES, at("rm .ignore"));
    await step(ws, SEARCHES, at(": > .git/info/exclude"));
    // A rule file in a subdirectory, then a negation at the top.
    await step(ws, SEARCHES, at("echo '*.txt' > src/.gitignore"));
    await step(ws, SEARCHES, at("echo '!app.log' >> .gitignore"));
    // A nested repository below, and the top's repository gone.
    await step(ws, SEARCHES, at("echo '*.ts' > lib/.gitignore"));
    await expectFresh(ws, SEARCHES);
    await sh("git init -q lib", ws.root);
    await expectFresh(ws, SEARCHES);
    await sh("rm -rf .git", ws.root);
    await expectFresh(ws, SEARCHES);
    await reindexed(ws);
    await expectFresh(ws, SEARCHES);
  });

  it("rules of the directories above the root, and a repository appearing above it", async () => {
    const ws = await workspace(BASE, { sub: "ws" });
    const atBase = (command) => () => sh(command, ws.base);
    await step(ws, SEARCHES, atBase("echo '*.md' > .gitignore"));
    await atBase("git init -q")();
    await expectFresh(ws, SEARCHES);
    await step(ws, SEARCHES, atBase("echo 'ws/src/deep/' >> .gitignore"));
    await step(ws, SEARCHES, atBase("echo 'lib/' > .ignore"));
    await step(ws, SEARCHES, atBase("echo '*.ts' > .git/info/exclude"));
    await step(ws, SEARCHES, atBase("rm .gitignore .ignore"));
  });

  it("editor saves: write and rename over, a backup rename, a symlink swapped in", async () => {
    const ws = await workspace(BASE);
    const at = (command) => () => sh(command, ws.root);
    await step(ws, SEARCHES, at("printf 'needle atomic\\n' > src/.a.ts.tmp && mv src/.a.ts.tmp src/a.ts"));
    await step(ws, SEARCHES, at("mv src/b.ts src/b.ts~ && printf 'needle vim\\n' > src/b.ts && rm src/b.ts~"));
    await step(ws, SEARCHES, at("mv src/deep src/deep.real && ln -s deep.real src/deep"));
    await step(ws, SEARCHES, at("echo needle behind the link > src/deep.real/l.txt"));
    await step(ws, SEARCHES, at("rm src/deep && mv src/deep.real src/deep"));
    // Node's own calls, no shell.
    await step(ws, SEARCHES, () => renameSync(`${ws.root}/src/deep`, `${ws.root}/deep-top`));
    await step(ws, SEARCHES, () => unlinkSync(`${ws.root}/deep-top/c.txt`));
    await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/deep-top/er/d.txt`, "needle by node\n"));
  });

  it("a file written through a hard link: from outside the root, or through another name inside it", async () => {
    const outside = tempDir("pno-index-link-");
    try {
      // Links made before the build, and one made inside the root after it.
      const ws = await workspace(BASE, {
        setup: (root) => {
          linkSync(`${root}/src/deep/er/d.txt`, `${root}/lib/d-link.txt`);
          linkSync(`${root}/src/b.ts`, `${outside}/b.ts`);
        },
      });
      await step(ws, SEARCHES, () => writeFileSync(`${outside}/b.ts`, "needle through the link\n"));
      await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/lib/d-link.txt`, "needle via the other name\n"));
      await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/src/deep/er/d.txt`, "needle via the first name\n"));
      linkSync(`${ws.root}/src/a.ts`, `${ws.root}/lib/a-link.ts`);
      await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/lib/a-link.ts`, "needle via a new link\n"));
      await step(ws, SEARCHES, () => rmSync(`${ws.root}/lib/a-link.ts`));
      await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/src/a.ts`, "needle after unlink\n"));
      // A later link to a file that had one name, written through the link: the first name, which no
      // event names, holds the new contents too.
      linkSync(`${ws.root}/lib/m3.ts`, `${ws.root}/src/m3-link.ts`);
      await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/src/m3-link.ts`, "needle via a later link\n"));
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  // A hard link made after the build: `ln a/one.txt b/one-link.txt` inside the root after the build, and a write through the new
  // name, with no search between (so the link and the write reach the index in one batch), or with one.
  const LINKED = { "a/one.txt": "one\n", "a/two.txt": "two\n", "b/keep.txt": "keep\n" };
  const LINK_SEARCHES = [
    ["grep", { pattern: "needle" }],
    ["grep", { pattern: "needle", path: "a" }],
  ];

  it("a link made inside the root after the build, written through its new name", async () => {
    const ws = await workspace(LINKED);
    await step(ws, LINK_SEARCHES, async () => {
      await sh("ln a/one.txt b/one-link.txt && echo 'needle one' >> b/one-link.txt", ws.root);
    });
    linkSync(`${ws.root}/a/two.txt`, `${ws.root}/b/two-link.txt`);
    await expectFresh(ws, LINK_SEARCHES);
    await step(ws, LINK_SEARCHES, () => writeFileSync(`${ws.root}/b/two-link.txt`, "needle two\n"));
    // Once re-indexed, the first names are followed through their inodes.
    await reindexed(ws);
    await step(ws, LINK_SEARCHES, () => writeFileSync(`${ws.root}/b/one-link.txt`, "no match now\n"));
    const [all] = await run(ws.fs, ws.root, LINK_SEARCHES);
    expect(all.text.split("\n").sort()).toEqual(["a/two.txt:1: needle two", "b/two-link.txt:1: needle two"]);
  });

  it.runIf(serverPath())("the same through pi-native-ops-server --index", async () => {
    const root = makeTree(tempDir("pno-index-remote-link-"), LINKED);
    const child = spawn(serverPath(), ["--root", root, "--index"], { stdio: ["pipe", "pipe", "inherit"] });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    const connection = await pno.connect({ readable: child.stdout, writable: child.stdin }, { index: true });
    try {
      expect((await connection.fs.index.ready).state).toBe("ready");
      const tools = pno.createRemoteTools(root, { connection });
      const grep = async () => (await runTool(tools.grep, { pattern: "needle" })).text;
      expect(await grep()).toBe("No matches found");
      await sh("ln a/one.txt b/one-link.txt && echo 'needle one' >> b/one-link.txt", root);
      expect((await grep()).split("\n").sort()).toEqual(["a/one.txt:2: needle one", "b/one-link.txt:2: needle one"]);
      expect((await connection.fs.index.stats()).state).toBe("ready");
    } finally {
      await connection.fs.index.close();
      await connection.close();
      await exited;
      rmSync(root, { recursive: true, force: true });
    }
  });

  // KNOWN GAP (reported to the lead, /work/team/tests-findings.md): a link made from OUTSIDE the root
  // after the build changes only the file's link count, an event on its inode that no directory watch
  // hears, so the index never learns the file has another name, and a write through that name is missed.
  // `it.fails` while that holds; make it a plain `it` once the index sees it.
  it.fails("a file written through a hard link made from outside the root after the build", async () => {
    const ws = await workspace(BASE);
    // Every file indexed first: one still dirty (a restored index keeps a file written moments before its
    // save dirty) is searched live, and would see the write.
    await reindexed(ws);
    const outside = tempDir("pno-index-link-");
    try {
      linkSync(`${ws.root}/src/b.ts`, `${outside}/b.ts`);
      await step(ws, SEARCHES, () => writeFileSync(`${outside}/b.ts`, "needle through the link\n"));
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("files beyond maxFileBytes, and UTF-16 files, searched whatever their contents", async () => {
    const ws = await workspace(
      { ...BASE, "big.txt": `${"x".repeat(100)}\nneedle big\n`, "small.txt": "small\n" },
      { index: { maxFileBytes: 64 } },
    );
    const utf16 = (s) => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(s, "utf16le")]);
    await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/small.txt`, `${"y".repeat(100)}\nneedle grown\n`));
    await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/big.txt`, "needle shrunk\n"));
    await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/u16.txt`, utf16("first\r\nneedle in utf16\r\n")));
    await reindexed(ws);
    await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/u16.txt`, utf16("needle changed\r\nneedle\r\n")));
    await step(ws, SEARCHES, () => writeFileSync(`${ws.root}/small.txt`, "needle small again\n"));
  });

  it("large files (256 KiB and up, with exact 5-gram filters) written with a literal their filter lacked", async () => {
    const regs = Array.from({ length: 9000 }, (_, i) => `#define IRQ_SET_AFFINITY_${i} 0x${i.toString(16)}\n`).join("");
    expect(regs.length).toBeGreaterThan(256 * 1024);
    const ws = await workspace({ ...BASE, "regs.h": regs });
    // The filter is made after the build, by the background thread (which may have made it already).
    await statsUntil(ws, (s) => s.unfilteredFiles === 0, 30);
    const searches = [
      ["grep", { pattern: "irq_set_affinity" }],
      ["grep", { pattern: "irq_set_affinity", ignoreCase: true, limit: 3 }],
      ["grep", { pattern: "set_affinity here", literal: true }],
      ["grep", { pattern: "IRQ_SET_AFFINITY_8999 0x" }],
    ];
    const before = await expectFresh(ws, searches);
    expect(before[0].text).not.toContain("regs.h");
    expect(before[1].text).toContain("regs.h");
    await step(ws, searches, () => sh("echo 'irq_set_affinity here' >> regs.h", ws.root));
    await reindexed(ws);
    const after = await expectFresh(ws, searches);
    expect(after[0].text).toContain("regs.h");
    await step(ws, searches, () => sh("sed -i 's/irq_set_affinity here/gone/' regs.h", ws.root));
  });

  it("grep's ignoreCase, literal, glob, context and limit, before and after re-indexing", async () => {
    const ws = await workspace({
      ...BASE,
      "uni.txt": "Kelvin sign: \u212a\nstra\u00dfe\n\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2\n",
      "ctx.txt": `${["l1", "l2", "needle 3", "l4", "needle 5", "l6", "l7"].join("\n")}\n`,
    });
    const searches = [
      ["grep", { pattern: "a.b(c)", literal: true }],
      ["grep", { pattern: "A.B(C)", literal: true, ignoreCase: true }],
      ["grep", { pattern: "needle", glob: "*.ts" }],
      ["grep", { pattern: "needle", glob: "!*.md" }],
      ["grep", { pattern: "needle", glob: "src/**" }],
      ["grep", { pattern: "needle", context: 2 }],
      ["grep", { pattern: "needle", limit: 2 }],
      ["grep", { pattern: "needle", limit: 3, context: 1 }],
      ["grep", { pattern: "\\w+", limit: 5 }],
      ["grep", { pattern: "KELVIN SIGN: K", ignoreCase: true }],
      ["grep", { pattern: "\u03c3\u0390\u03c3\u03c5\u03c6\u03bf\u03c3", ignoreCase: true }],
      ["grep", { pattern: "STRASSE|ΣΊΣΥΦΟΣ", ignoreCase: true }],
      ["grep", { pattern: "needle|haystack" }],
      ["grep", { pattern: "ne.dle [0-9]" }],
      ["grep", { pattern: "(?i)NEEDLE" }],
      ["grep", { pattern: "^needle$" }],
      ["grep", { pattern: "need\\x6ce" }],
      ["grep", { pattern: "literal(" }],
      ["find", { pattern: "*.txt", limit: 2 }],
      ["find", { pattern: "**/deep/**" }],
    ];
    await expectFresh(ws, searches);
    const change = () =>
      sh(
        [
          "printf 'a.b(c) literal\\nA.B(C) upper\\naxb(c) no\\nneedle\\n' > lit.txt",
          "printf 'haystack\\nneedle 9\\nKELVIN SIGN: k\\n' > src/deep/new.txt",
          "sed -i 's/needle 5/haystack 5/' ctx.txt",
          "printf 'needle\\n' >> src/b.ts",
        ].join(" && "),
        ws.root,
      );
    await step(ws, searches, change);
    await reindexed(ws);
    await expectFresh(ws, searches);
    await step(ws, searches, () => sh("rm lit.txt && echo 'literal( here' > lit2.txt", ws.root));
  });

  it("a file rewritten over and over: each search sees the last write", async () => {
    const ws = await workspace(BASE);
    const file = `${ws.root}/src/hot.txt`;
    for (let i = 1; i <= 40; i++) {
      if (i % 2) writeFileSync(file, `token${i}x\n`);
      else await ws.fs.write.writeFile(file, `token${i}x\n`);
      const [now, prev] = await run(ws.fs, ws.root, [
        ["grep", { pattern: `token${i}x` }],
        ["grep", { pattern: `token${i - 1}x` }],
      ]);
      expect(now.text).toBe(`src/hot.txt:1: token${i}x`);
      expect(prev.text).toBe("No matches found");
      // Now and then let the background re-index catch up, so that both its paths are taken.
      if (i % 8 === 0) await reindexed(ws);
    }
  });

  it("a change at once after a large one: seen while the background thread re-indexes the large file", async () => {
    // The background thread drains events too, and mostly wins the race against a search that follows a
    // change at once; while it re-reads a large changed file it drains nothing, so only the search's own
    // drain can show the small change made meanwhile.
    const ws = await workspace(BASE);
    const big = `${ws.root}/big.txt`;
    const file = `${ws.root}/src/hot.txt`;
    for (let i = 1; i <= 20; i++) {
      // 8 MiB of text the n-grams of which take the thread a while (below the 64 MiB default limit).
      writeFileSync(
        big,
        Buffer.alloc(8 << 20, `lorem ipsum ${i} dolor sit amet ${"abcdefghijklmnopqrstuvwxyz".slice(i)}\n`),
      );
      writeFileSync(file, `token${i}x\n`);
      const [now, prev] = await run(ws.fs, ws.root, [
        ["grep", { pattern: `token${i}x` }],
        ["grep", { pattern: `token${i - 1}x` }],
      ]);
      expect(now.text).toBe(`src/hot.txt:1: token${i}x`);
      expect(prev.text).toBe("No matches found");
    }
  });

  it("bursts of new nested directories, removed and made again under the same names, searched at once", async () => {
    const ws = await workspace(BASE);
    const searches = [
      ["grep", { pattern: "burst \\d+ level" }],
      ["find", { pattern: "**/leaf*.txt" }],
      ["find", { pattern: "*", path: "src" }],
    ];
    for (let i = 1; i <= 12; i++) {
      const before = await run(ws.fs, ws.root, searches);
      // In one synchronous burst: the background thread lists these directories while they fill.
      rmSync(`${ws.root}/src/n`, { recursive: true, force: true });
      for (let d = 0; d < 4; d++) {
        const dir = `${ws.root}/src/n/${"abcd"
          .slice(0, d + 1)
          .split("")
          .join("/")}`;
        mkdirSync(dir, { recursive: true });
        writeFileSync(`${dir}/leaf${i % 3}-${d}.txt`, `burst ${i} level ${d}\n`);
      }
      if (i % 4 === 0) renameSync(`${ws.root}/src/n/a/b`, `${ws.root}/src/n/a/moved`);
      const after = await expectFresh(ws, searches);
      expect(after).not.toEqual(before);
    }
  });

  it("searches racing a stream of changes: each answers, and the first after the stream is exact", async () => {
    const ws = await workspace(BASE);
    // 120 rounds of create, write, rename and delete of files and directories, in one shell.
    const stream = sh(
      `for i in $(seq 1 120); do mkdir -p "s/d$((i % 7))/e"; echo "needle $i" > "s/d$((i % 7))/e/f$i.txt"; ` +
        `mv "s/d$((i % 7))/e/f$i.txt" "s/d$(((i + 1) % 7))/g$i.txt"; ` +
        `[ $((i % 5)) = 0 ] && rm -r "s/d$((i % 7))/e"; [ $((i % 11)) = 0 ] && mv s/d1 s/d1x && mv s/d1x s/d1; ` +
        "done; true",
      ws.root,
    );
    let done = false;
    const end = () => {
      done = true;
    };
    stream.then(end, end);
    let searches = 0;
    while (!done) {
      const [grep, find] = await run(ws.fs, ws.root, [
        ["grep", { pattern: "needle \\d+$", limit: 1000 }],
        ["find", { pattern: "**/g*.txt", limit: 1000 }],
      ]);
      expect(grep.error).toBeUndefined();
      expect(find.error).toBeUndefined();
      searches++;
    }
    await stream;
    expect(searches).toBeGreaterThan(0);
    await expectFresh(ws, [...SEARCHES, ["grep", { pattern: "needle \\d+$", limit: 1000 }]]);
    await reindexed(ws);
    await expectFresh(ws, [...SEARCHES, ["find", { pattern: "**/g*.txt", limit: 1000 }]]);
  });

  it("changes made while the index is still being built", async () => {
    // 60 directories of 80 files (4,800 files, about 2 MB): a build that takes long enough for the
    // changes below to land while it runs (the test checks that some did).
    const DIRS = 60;
    const spec = { ".gitignore": "*.log\n" };
    for (let d = 0; d < DIRS; d++) {
      for (let f = 0; f < 80; f++) {
        spec[`d${d}/f${f}.txt`] = `${f === 0 ? "needle" : "hay"} ${d}/${f} ${"lorem ipsum ".repeat(30)}\n`;
      }
    }
    const ws = await workspace(spec, { ready: false });
    const r = ws.root;
    const changes = [];
    for (const d of [0, 1, 30, DIRS - 2, DIRS - 1]) {
      changes.push(
        () => writeFileSync(`${r}/d${d}/new.txt`, `needle new ${d}\n`),
        () => unlinkSync(`${r}/d${d}/f0.txt`),
        () => writeFileSync(`${r}/d${d}/f5.txt`, `needle rewritten ${d}\n`),
        () => renameSync(`${r}/d${d}/f1.txt`, `${r}/d${d}/renamed.txt`),
        () => mkdirSync(`${r}/d${d}/sub/inner`, { recursive: true }),
        () => writeFileSync(`${r}/d${d}/sub/inner/n.txt`, `needle inner ${d}\n`),
        () => writeFileSync(`${r}/d${d}/x.log`, `needle log ${d}\n`),
      );
    }
    changes.push(
      () => renameSync(`${r}/d2`, `${r}/moved2`),
      () => writeFileSync(`${r}/moved2/f7.txt`, "needle moved\n"),
      () => rmSync(`${r}/d3`, { recursive: true }),
      () => writeFileSync(`${r}/.gitignore`, "*.log\nd4/\n"),
      () => writeFileSync(`${r}/d${DIRS - 3}/.ignore`, "f1*\n"),
    );
    let during = 0;
    for (const change of changes) {
      change();
      if ((await ws.fs.index.stats()).state === "building") during++;
    }
    expect(during, "no change landed during the build: make the tree bigger").toBeGreaterThan(0);
    expect((await ws.fs.index.ready).state).toBe("ready");
    const searches = [
      ["grep", { pattern: "needle", limit: 1000 }],
      ["grep", { pattern: "hay 1/1 " }],
      ["find", { pattern: "**/new.txt" }],
      ["find", { pattern: "renamed.txt" }],
      ["find", { pattern: "*", limit: 2000 }],
    ];
    await expectFresh(ws, searches);
    await reindexed(ws);
    await expectFresh(ws, searches);
  });

  it("createNativeTools({ index }): its write, edit and bash tools' changes seen by its find and grep", async () => {
    const root = makeTree(tempDir("pno-index-tools-"), BASE);
    const tools = pno.createNativeTools(root, { index: true });
    try {
      expect((await tools.index.ready).state).toBe("ready");
      // What the model reads from each search, through these tools and through tools without an index.
      const both = async () => {
        const plain = pno.createNativeTools(root);
        const out = { indexed: [], plain: [] };
        for (const [name, params] of SEARCHES) {
          out.indexed.push(await runTool(tools[name], params));
          out.plain.push(await runTool(plain[name], params));
        }
        expect(out.indexed).toEqual(out.plain);
        return out.indexed;
      };
      let before = await both();
      for (const [name, params] of [
        ["write", { path: "src/w.ts", content: "needle written\n" }],
        ["edit", { path: "src/a.ts", edits: [{ oldText: "needle in a", newText: "edited" }] }],
        ["bash", { command: "mkdir -p z/y && echo needle bash > z/y/b.txt && mv src/deep src/moved" }],
      ]) {
        await ok(runTool(tools[name], params));
        const after = await both();
        expect(after).not.toEqual(before);
        before = after;
      }
      expect((await tools.index.stats()).state).toBe("ready");
    } finally {
      await tools.index.close();
      rmSync(root, { recursive: true, force: true });
    }
  });

  it.runIf(serverPath())(
    "a remote connection made with { index }: changes through it seen by its searches",
    async () => {
      const root = makeTree(tempDir("pno-index-remote-"), BASE);
      const child = spawn(serverPath(), ["--root", root], { stdio: ["pipe", "pipe", "inherit"] });
      const exited = new Promise((resolve) => child.once("exit", resolve));
      const connection = await pno.connect({ readable: child.stdout, writable: child.stdin }, { index: true });
      try {
        expect((await connection.fs.index.ready).state).toBe("ready");
        const tools = pno.createRemoteTools(root, { connection });
        const local = pno.createBoundFs(root);
        const both = async () => {
          const got = [];
          for (const [name, params] of SEARCHES) got.push(await runTool(tools[name], params));
          const want = await run(local, root, SEARCHES);
          expect(
            got.map((r) => (r.error !== undefined ? { error: r.error } : { text: r.text, details: r.details ?? null })),
          ).toEqual(want);
          return got;
        };
        let before = await both();
        for (const change of [
          () => connection.fs.write.writeFile(`${root}/src/r.ts`, "needle remote\n"),
          () =>
            connection.bash.exec(
              "sed -i 's/deep needle/x/' src/deep/c.txt && mkdir -p q && echo needle > q/n.txt",
              root,
              { onData() {} },
            ),
          () => sh("mv src/deep src/deep2 && echo needle local > src/deep2/l.txt", root),
        ]) {
          await change();
          const after = await both();
          expect(after).not.toEqual(before);
          before = after;
        }
        expect((await connection.fs.index.stats()).state).toBe("ready");
      } finally {
        await connection.fs.index.close();
        await connection.close();
        await exited;
        rmSync(root, { recursive: true, force: true });
      }
    },
  );
});
