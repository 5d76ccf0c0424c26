// A hostile repository or pattern never aborts, hangs or bloats the agent: rule files that are devices, FIFOs
// or huge, gitfiles pointing anywhere, globs and policy rules past the regex size bound, and an exit while a
// search runs. Each scenario runs in a child Node process (helpers/hostile-child.js), locally and through a
// server, so a failure kills or hangs the child, never the test runner; memory is asserted with wide margins,
// never time.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it, vi } from "vitest";
import { serverPath } from "./helpers/face.js";
import { piName } from "./helpers/pi.js";

const child = path.join(path.dirname(fileURLToPath(import.meta.url)), "helpers/hostile-child.js");
const base = fs.mkdtempSync(path.join(os.tmpdir(), "pno-hostile-"));
afterAll(() => fs.rmSync(base, { recursive: true, force: true }));

/** A child's resident memory bound: far above what any scenario needs (~150 MiB), far below a runaway. */
const MAX_RSS_MIB = 1024;
/** A hang guard, far above any scenario's time on a busy machine: reaching it means the child hung. */
const HUNG_MS = 120_000;
// A test outlives its child's hang guard, so a hang is reported as one.
vi.setConfig({ testTimeout: HUNG_MS + 60_000 });

let made = 0;
/** A fresh directory holding `files` (path → content; a trailing `/` makes a directory). */
function tree(files) {
  const dir = path.join(base, `t${made++}`);
  fs.mkdirSync(dir);
  for (const [rel, content] of Object.entries(files)) {
    const p = path.join(dir, rel);
    if (rel.endsWith("/")) fs.mkdirSync(p, { recursive: true });
    else {
      fs.mkdirSync(path.dirname(p), { recursive: true });
      fs.writeFileSync(p, content);
    }
  }
  return dir;
}

function mkfifo(p) {
  fs.mkdirSync(path.dirname(p), { recursive: true });
  if (spawnSync("mkfifo", [p]).status !== 0) throw new Error(`mkfifo ${p} failed`);
}

/**
 * Runs `scenario` in a child: `{ code, signal, out, results, grewMiB, index }` (`results` etc. from its
 * JSON line, when it printed one).
 */
function runChild(scenario, { cwd = base } = {}) {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [child], {
      cwd,
      env: { ...process.env, PI_NATIVE_OPS_PI: piName },
      stdio: ["pipe", "pipe", "inherit"],
      // Its own process group, its server included, all killed if it hangs.
      detached: true,
    });
    proc.stdin.end(JSON.stringify({ maxRssMiB: MAX_RSS_MIB, ...scenario }));
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
    });
    const guard = setTimeout(() => {
      out += "\nHUNG";
      process.kill(-proc.pid, "SIGKILL");
    }, HUNG_MS);
    proc.on("close", (code, signal) => {
      clearTimeout(guard);
      const line = out.split("\n").find((l) => l.startsWith("{"));
      resolve({ code, signal, out, ...(line ? JSON.parse(line) : {}) });
    });
  });
}

/** Asserts the child ended by itself, within its memory bound, and printed its results. */
function expectClean(got) {
  expect(got.out).not.toMatch(/BLOAT|HUNG/);
  expect({ code: got.code, signal: got.signal }).toEqual({ code: 0, signal: null });
  expect(got.results).toBeDefined();
}

const canRemote = process.platform === "linux" && serverPath() !== null;
const faces = canRemote ? ["local", "remote"] : ["local"];

describe.runIf(process.platform === "linux")("hostile rule files", () => {
  describe.each(faces)("%s", (face) => {
    it("an ancestor .gitignore linked to /dev/zero reads as no rules: no growth, grep, find and the index answer", async () => {
      const top = tree({ ".git/": "", "sub/a.txt": "hello\n", "sub/b.log": "hello\n" });
      fs.symlinkSync("/dev/zero", path.join(top, ".gitignore"));
      const cwd = path.join(top, "sub");
      const got = await runChild({
        face,
        cwd,
        index: face === "local",
        calls: [
          { tool: "grep", params: { pattern: "hello" } },
          { tool: "find", params: { pattern: "*" } },
        ],
      });
      expectClean(got);
      expect(got.results).toEqual([{ text: "a.txt:1: hello\nb.log:1: hello" }, { text: "a.txt\nb.log" }]);
      if (face === "local") expect(got.index).toBe("ready");
    });

    it("a FIFO ancestor .ignore and a gitfile whose commondir is a FIFO never block: abort ends the call, exit returns", async () => {
      const top = tree({ "sub/a.txt": "hello\n", "sub/.git": "gitdir: evil\n" });
      mkfifo(path.join(top, ".ignore"));
      // `gitdir: evil` is relative to sub (a FIFO commondir there), never to the process's directory
      // (one there too).
      mkfifo(path.join(top, "sub/evil/commondir"));
      const elsewhere = tree({});
      mkfifo(path.join(elsewhere, "evil/commondir"));
      const cwd = path.join(top, "sub");
      const got = await runChild(
        {
          face,
          cwd,
          calls: [
            { tool: "grep", params: { pattern: "hello" }, abort: true },
            { tool: "find", params: { pattern: "*" }, abort: true },
            { tool: "grep", params: { pattern: "hello" } },
            { tool: "find", params: { pattern: "*.txt" } },
          ],
        },
        { cwd: elsewhere },
      );
      expectClean(got);
      expect(got.results.slice(2)).toEqual([{ text: "a.txt:1: hello" }, { text: "a.txt" }]);
    });

    it("a gitfile's git directory is relative to the gitfile: its exclude file applies", async () => {
      const t = tree({
        "ws/sub/secret.txt": "",
        "ws/sub/kept.txt": "",
        "ws/sub/.git": "gitdir: ../../wt\n",
        "wt/commondir": "../common\n",
        "common/info/exclude": "secret.txt\n",
      });
      const cwd = path.join(t, "ws");
      const got = await runChild({ face, cwd, calls: [{ tool: "find", params: { pattern: "*.txt" } }] });
      expectClean(got);
      expect(got.results).toEqual([{ text: "sub/kept.txt" }]);
    });

    it("an ignore file past 5,000 globs gives no rules, and compiles none (no growth)", async () => {
      const lines = Array.from({ length: 50_000 }, (_, i) => `src/*/x${i}?.rs`);
      const cwd = tree({ ".gitignore": `${lines.join("\n")}\n*.log\n`, "a.txt": "", "b.log": "" });
      const got = await runChild({ face, cwd, calls: [{ tool: "find", params: { pattern: "*" } }] });
      expectClean(got);
      expect(got.results).toEqual([{ text: ".gitignore\na.txt\nb.log" }]);
      // Compiled, these globs held ~400 MiB; left out, nothing of the kind.
      if (face === "local") expect(got.grewMiB).toBeLessThan(150);
    });

    it("a .gitignore that is a symlink inside the workspace is not applied (as git >= 2.32; a difference from fd and rg)", async () => {
      const cwd = tree({ "rules.txt": "*.log\n", "a.txt": "", "b.log": "" });
      fs.symlinkSync("rules.txt", path.join(cwd, ".gitignore"));
      const got = await runChild({ face, cwd, calls: [{ tool: "find", params: { pattern: "*" } }] });
      expectClean(got);
      expect(got.results).toEqual([{ text: ".gitignore\na.txt\nb.log\nrules.txt" }]);
    });
  });
});

describe.runIf(process.platform !== "win32")("globs and rules past the regex size bound", () => {
  describe.each(faces)("%s", (face) => {
    it("find with a pattern of 150,000 `a` or 100,000 `*` is an error in fd's words, naming the pattern's start", async () => {
      const cwd = tree({ "a.txt": "" });
      const got = await runChild({
        face,
        cwd,
        calls: [
          { tool: "find", params: { pattern: "a".repeat(150_000) } },
          { tool: "find", params: { pattern: "*".repeat(100_000) } },
          { tool: "find", params: { pattern: "*.txt" } },
        ],
      });
      expectClean(got);
      const [as, stars, after] = got.results;
      expect(as.error).toBe(
        `invalid glob pattern "${"a".repeat(100)}… (150000 bytes)": Compiled regex exceeds size limit of 10485760 bytes.`,
      );
      expect(stars.error).toBe(
        `invalid glob pattern "${"*".repeat(100)}… (100000 bytes)": Compiled regex exceeds size limit of 10485760 bytes.`,
      );
      expect(after).toEqual({ text: "a.txt" });
    });

    it("a deny rule of 100,000 `*` is an error where the policy is given, naming the rule's start", async () => {
      const cwd = tree({ "a.txt": "" });
      const rule = `${"*".repeat(100_000)}/x`;
      const got = await runChild({ face, cwd, policy: { denyRead: [rule] }, calls: [] });
      expectClean(got);
      expect(got.results).toHaveLength(1);
      expect(got.results[0].error).toBe(
        `policy.denyRead: invalid rule "${"*".repeat(100)}… (100002 bytes)": Compiled regex exceeds size limit of 10485760 bytes.`,
      );
    });
  });
});

describe.runIf(process.platform === "linux")("exit", () => {
  it("process.exit() returns while a long grep runs: the search stops at the exit", async () => {
    // 2 GB of text (one 20 MB file, 100 names) no line of which matches, through a regex the lazy DFA
    // cannot run (Unicode word boundaries over non-ASCII text, ~1-2 MB/s a thread): many minutes of
    // work, which the exit would otherwise wait for.
    const cwd = tree({});
    const letters = "abcdéfghij ";
    let seed = 1;
    const line = () => {
      let s = "";
      for (let i = 0; i < 1000; i++) {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        s += letters[seed % letters.length];
      }
      return `${s}\n`;
    };
    const block = Array.from({ length: 1000 }, line).join("");
    fs.writeFileSync(path.join(cwd, "f0.txt"), block.repeat(20));
    for (let i = 1; i < 100; i++) fs.linkSync(path.join(cwd, "f0.txt"), path.join(cwd, `f${i}.txt`));
    const got = await runChild({
      cwd,
      exitWhileSearching: true,
      calls: [{ tool: "grep", params: { pattern: "(?:\\b\\w+\\b\\s){8}[0-9]" } }],
    });
    expect(got.out).not.toMatch(/BLOAT|HUNG/);
    expect({ code: got.code, signal: got.signal }).toEqual({ code: 7, signal: null });
  });
});
