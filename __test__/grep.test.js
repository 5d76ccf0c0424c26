// The native grep tool against pi 1.6.0's stock grep tool (rg 15), recorded in __test__/grep/goldens.json
// by scripts/record-golden-grep.js. Exact text where stock's order is deterministic, line sets otherwise.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGrepTool, createGrepToolDefinition, grep } from "pi-native-ops";
import { isPi1, pi, runTool } from "./helpers/pi.js";
import { removeTree } from "./helpers/tree.js";
import { indexed, makeFs, makeGrepTool } from "./helpers/face.js";
import { CASES, makeFixture } from "./grep/fixture.js";
import goldens from "./grep/goldens.json" with { type: "json" };

let dir;
beforeAll(() => {
  dir = realpathSync(mkdtempSync(path.join(tmpdir(), "grep-test-")));
  makeFixture(dir);
});
afterAll(() => removeTree(dir));

async function outcome(tool, params, root) {
  const r = await runTool(tool, params);
  return r.error === undefined
    ? { text: r.text, details: r.details ?? null }
    : // On Windows pi shows the path it resolved, with `\`: the goldens (Linux) have `/`.
      { error: r.error.replaceAll(root, "<root>").replaceAll(path.sep, "/") };
}

const lineSet = (text) => text.split("\n").sort();

describe("grep tool matches stock pi + rg", () => {
  for (const c of CASES) {
    const golden = goldens.cases[c.name];
    for (const mode of ["host", "runtimeRoot"]) {
      it(`${c.name} (${mode})`, async () => {
        const runtime = "/workspace";
        const tool =
          mode === "host" ? await makeGrepTool(dir) : await makeGrepTool(runtime, { root: dir, runtimeRoot: runtime });
        // On Windows pi resolves the runtime root `/workspace` on the current drive.
        const got = await outcome(tool, c.params, mode === "host" ? dir : path.resolve(runtime));
        if (c.exact || golden.error) expect(got).toEqual(golden);
        else {
          expect(lineSet(got.text)).toEqual(lineSet(golden.text));
          expect(got.details).toEqual(golden.details);
        }
      });
    }
  }

  it("prints the same text every time, files in path order", async () => {
    const tool = await makeGrepTool(dir);
    const a = await runTool(tool, { pattern: "needle", path: "src" });
    const b = await runTool(tool, { pattern: "needle", path: "src" });
    expect(a.text).toBe(b.text);
    expect(a.text.split("\n").map((l) => l.split(":")[0])).toEqual(["a.ts", "b.ts", "b.ts", "deep/c.txt", "sub/x.txt"]);
  });
});

describe("tool metadata", () => {
  it("takes schema, texts and renderers from the installed pi", () => {
    const stock = pi.createGrepToolDefinition(dir);
    const ours = createGrepToolDefinition(dir);
    for (const key of ["name", "label", "description", "promptSnippet"]) expect(ours[key]).toBe(stock[key]);
    // 0.73.1 builds its renderers per call: compare their code.
    for (const key of ["renderCall", "renderResult"]) expect(String(ours[key])).toBe(String(stock[key]));
    expect(JSON.stringify(ours.parameters)).toBe(JSON.stringify(stock.parameters));
    const tool = createGrepTool(dir);
    const stockTool = pi.createGrepTool(dir);
    expect(Object.keys(tool).sort()).toEqual(Object.keys(stockTool).sort());
    expect(JSON.stringify(tool.parameters)).toBe(JSON.stringify(stockTool.parameters));
  });
});

describe("abort stops the native search", () => {
  // 200 files of 512 KiB, and a pattern with no literal for the search to skip ahead on: the whole search
  // takes about a hundred times longer than the few ms before the abort below.
  const FILES = 200;
  const SLOW = "(a|b|c|d|e|f|g)+[0-9]{3}[a-f]{2}";
  let tree;
  beforeAll(() => {
    tree = realpathSync(mkdtempSync(path.join(tmpdir(), "grep-abort-")));
    const body = Buffer.alloc(512 * 1024, "abcdefghij klmnopq rstuvwxyz 0123456789 éàü ÅΩж\n");
    for (let i = 0; i < FILES; i++) writeFileSync(path.join(tree, `f${String(i).padStart(3, "0")}.txt`), body);
  });
  afterAll(() => rmSync(tree, { recursive: true, force: true }));

  const cpuMs = (since) => {
    const { user, system } = process.cpuUsage(since);
    return (user + system) / 1000;
  };

  it("settles only after the native search stopped, having searched few of the files", async () => {
    // What the whole search costs in CPU, from a search of 10 of the files.
    const before = process.cpuUsage();
    expect((await grep({ pattern: SLOW, path: tree, glob: "f00?.txt" })).matchCount).toBe(0);
    const wholeSearchCpuMs = (cpuMs(before) * FILES) / 10;

    const ac = new AbortController();
    const search = grep({ pattern: SLOW, path: tree, signal: ac.signal });
    setTimeout(() => ac.abort(), 5);
    const err = await search.then(
      () => null,
      (e) => e,
    );
    expect(err?.message).toBe("Operation aborted");
    expect(typeof err.filesSearched).toBe("number");
    expect(err.filesSearched).toBeLessThan(FILES / 2);

    // Settled means stopped: no search goes on using CPU behind the rejected promise.
    const after = process.cpuUsage();
    await new Promise((r) => setTimeout(r, 500));
    expect(cpuMs(after)).toBeLessThan(wholeSearchCpuMs / 4);
  });

  it("pi's tool rejects the same way", async () => {
    const ac = new AbortController();
    const run = (await makeGrepTool(tree)).execute("t", { pattern: SLOW }, ac.signal);
    setTimeout(() => ac.abort(), 5);
    await expect(run).rejects.toMatchObject({ message: "Operation aborted", filesSearched: expect.any(Number) });
  });
});

describe("deliberate improvements and safety", () => {
  let repo;
  beforeAll(() => {
    repo = realpathSync(mkdtempSync(path.join(tmpdir(), "grep-imp-")));
    mkdirSync(path.join(repo, ".git"));
    writeFileSync(path.join(repo, ".git/config"), "needle in git internals\n");
    mkdirSync(path.join(repo, "plain"));
    writeFileSync(path.join(repo, "plain/.gitignore"), "skip.txt\n");
    writeFileSync(path.join(repo, "plain/skip.txt"), "needle skipped\n");
    writeFileSync(path.join(repo, "plain/keep.txt"), "needle kept\n");
    writeFileSync(path.join(repo, "many.txt"), "needle\n".repeat(200_000));
  });
  // removeTree: under wine the Linux side removes it (wine's recursive rm trips on handles the GC has not closed yet).
  afterAll(() => removeTree(repo));

  it("never searches .git internals and honours .gitignore outside git", async () => {
    const tool = await makeGrepTool(repo);
    expect(await runTool(tool, { pattern: "git internals" })).toMatchObject({ text: "No matches found" });
    const outside = realpathSync(mkdtempSync(path.join(tmpdir(), "grep-nogit-")));
    writeFileSync(path.join(outside, ".gitignore"), "skip.txt\n");
    writeFileSync(path.join(outside, "skip.txt"), "needle\n");
    writeFileSync(path.join(outside, "keep.txt"), "needle\n");
    expect(await runTool(await makeGrepTool(outside), { pattern: "needle" })).toMatchObject({
      text: "keep.txt:1: needle",
    });
    rmSync(outside, { recursive: true, force: true });
  });

  it("refuses paths outside the bound root as outside; a missing one inside is not found", async () => {
    const tool = await makeGrepTool(repo, { root: path.join(repo, "plain") });
    await expect(tool.execute("t", { pattern: "x", path: repo })).rejects.toThrow(
      `path "${repo}" is outside workspace`,
    );
    // The path as pi's grep resolves it: on Windows pi 1.6 roots `/etc` on the current drive (`Z:\etc`),
    // pi 0.73 keeps it as given.
    const etc = path.sep === "\\" && isPi1 ? path.resolve("/etc") : "/etc";
    await expect(tool.execute("t", { pattern: "x", path: "/etc" })).rejects.toThrow(
      `path "${etc}" is outside workspace`,
    );
    const missing = path.join(repo, "plain", "missing");
    await expect(tool.execute("t", { pattern: "x", path: missing })).rejects.toThrow(`Path not found: ${missing}`);
    const fs = await makeFs(path.join(repo, "plain"));
    expect(await fs.grep.isDirectory(path.join(repo, "plain"))).toBe(true);
    await expect(fs.grep.isDirectory(repo)).rejects.toThrow("outside workspace");
    await expect(fs.grep.isDirectory(path.join(repo, "plain/nope"))).rejects.toMatchObject({ code: "ENOENT" });
    expect(await fs.grep.readFile(path.join(repo, "plain/keep.txt"))).toBe("needle kept\n");
  });

  it("an already-aborted signal rejects without searching", async () => {
    const tool = await makeGrepTool(repo);
    await expect(tool.execute("t", { pattern: "needle" }, AbortSignal.abort())).rejects.toThrow("Operation aborted");
    await expect(grep({ pattern: "needle", path: repo, signal: AbortSignal.abort() })).rejects.toMatchObject({
      message: "Operation aborted",
      filesSearched: 0,
    });
  });

  it("rejects bad arguments with clear errors", async () => {
    const tool = await makeGrepTool(repo);
    await expect(tool.execute("t", { pattern: 5 })).rejects.toThrow(TypeError);
    await expect(tool.execute("t", { pattern: "x", limit: "3" })).rejects.toThrow("limit must be a number");
    await expect(grep(null)).rejects.toThrow(TypeError);
  });

  it("plain grep() returns structured lines", async () => {
    const r = await grep({ pattern: "needle", path: path.join(repo, "plain"), context: 1 });
    expect(r).toEqual({
      matches: [{ path: "keep.txt", lineNumber: 1, text: "needle kept", isContext: false }],
      matchCount: 1,
      matchLimitReached: undefined,
      linesTruncated: false,
    });
    const limited = await grep({ pattern: "needle", path: path.join(repo, "many.txt"), limit: 2 });
    expect(limited.matches.map((m) => m.lineNumber)).toEqual([1, 2]);
    expect(limited.matchLimitReached).toBe(2);
  });
});

// A FIFO never hangs grep. A walk skips it (as ripgrep skips special files); one named as the
// search path is searched as ripgrep searches it, waiting for its data only until the search is aborted.
describe.runIf(process.platform === "linux")("FIFOs", () => {
  let root;
  let fifo;
  let writer;
  beforeAll(() => {
    root = realpathSync(mkdtempSync(path.join(tmpdir(), "grep-fifo-")));
    writeFileSync(path.join(root, "a.txt"), "needle in a file\n");
    fifo = path.join(root, "pipe.fifo");
    execFileSync("mkfifo", [fifo]);
  });
  afterAll(() => {
    writer?.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  });

  /** How many open descriptors of the FIFO the processes `pids` (default: all) hold. */
  function openers(pids = readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    let n = 0;
    for (const pid of pids) {
      let fds = [];
      try {
        fds = readdirSync(`/proc/${pid}/fd`);
      } catch {
        continue;
      }
      for (const fd of fds) {
        try {
          if (readlinkSync(`/proc/${pid}/fd/${fd}`) === fifo) n++;
        } catch {}
      }
    }
    return n;
  }

  const tick = () => new Promise((r) => setTimeout(r, 10));

  /** A writer holding the FIFO open (read-write, so its open does not wait for a reader), then `script` once told on stdin. */
  async function holdOpen(script) {
    writer = spawn("bash", ["-c", `exec 3<>'${fifo}'; read go; ${script}`], { stdio: ["pipe", "ignore", "inherit"] });
    while (openers([writer.pid]) < 1) await tick();
    return writer;
  }

  /** Ends the writer, and waits until no process holds the FIFO. */
  async function release(w) {
    w.kill("SIGKILL");
    while (openers() > 0) await tick();
  }

  it("a walk skips the FIFO and answers", async () => {
    const w = await holdOpen("sleep 60");
    const tool = await makeGrepTool(root);
    expect(await runTool(tool, { pattern: "needle" })).toMatchObject({ text: "a.txt:1: needle in a file" });
    await release(w);
  });

  it("the FIFO named as the path waits for data while a writer holds it, and an abort settles it", async () => {
    const w = await holdOpen("sleep 60");
    const tool = await makeGrepTool(root);
    const ac = new AbortController();
    const run = tool.execute("t", { pattern: "needle", path: fifo }, ac.signal);
    // Aborted once the search is waiting on the FIFO (it holds a descriptor of it beside the writer's).
    while (openers() < 2) await tick();
    ac.abort();
    await expect(run).rejects.toThrow("Operation aborted");
    // It answers the next call.
    expect(await runTool(tool, { pattern: "needle" })).toMatchObject({ text: "a.txt:1: needle in a file" });
    await release(w);
  });

  // Not in the index re-run, which searches twice to compare: a FIFO's data is read once.
  it.skipIf(indexed)("the FIFO named as the path is searched as ripgrep searches it, to its writers' end", async () => {
    const w = await holdOpen("printf 'first\\nneedle in a fifo\\n' >&3; exec 3>&-; sleep 60");
    const tool = await makeGrepTool(root);
    const run = runTool(tool, { pattern: "needle", path: fifo });
    while (openers() < 2) await tick();
    w.stdin.write("go\n");
    expect(await run).toMatchObject({ text: "pipe.fifo:2: needle in a fifo" });
    await release(w);
  });
});
