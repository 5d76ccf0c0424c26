// The warm search index when it cannot be trusted or is stopped: a watch limit reached, an
// inotify queue overflow, unreadable directories, the root deleted or moved, close() during a build. In
// every case searches give exactly what they give without an index (helpers/indexed.js compares with a
// fresh unindexed fs over the same tree), the index says what happened, and nothing crashes.
import { spawn } from "node:child_process";
import { readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import * as pno from "pi-native-ops";
import { nobody, nodeArgvAs, removeScripts, tempDirFor } from "./helpers/nobody.js";
import { piName } from "./helpers/pi.js";
import { staged } from "./helpers/staged.js";
import { expectFresh, run, sh, statsUntil, step, workspace } from "./helpers/indexed.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const isRoot = process.getuid?.() === 0;
// The nobody child's staged copy of the package, the helpers and pi (helpers/staged.js).
afterAll(removeScripts);

const BASE = {
  ".gitignore": "build/\n",
  "src/a.ts": "export const a = 1;\n// needle in a\n",
  "src/deep/c.txt": "deep needle\n",
  "src/deep/er/d.txt": "deeper\n",
  "docs/guide.md": "Needle upper\n",
  "build/out.txt": "needle in build\n",
  "top.txt": "needle top\n",
};

const SEARCHES = [
  ["grep", { pattern: "needle" }],
  ["grep", { pattern: "needle", path: "src", context: 1 }],
  ["find", { pattern: "*" }],
  ["find", { pattern: "**/*.txt" }],
];

/** A tree big enough that its build is still running a few event-loop turns after it starts. */
function bigTree() {
  const spec = {};
  for (let d = 0; d < 60; d++) {
    for (let f = 0; f < 80; f++) spec[`d${d}/f${f}.txt`] = `${f ? "hay" : "needle"} ${d}/${f} ${"x ".repeat(150)}\n`;
  }
  return spec;
}

describe.runIf(process.platform === "linux")("the index when it cannot be trusted", () => {
  // The limit is tested through the maxWatches option, not the max_user_watches sysctl: the inotify
  // sysctls are global on this machine (even written as root in a user namespace) and a lowered one
  // would break every other inotify user while it is low; the option takes the same path (a watch
  // refused) in the index.
  it("a watch limit reached by the build: aside with the reason, searches exact", async () => {
    const ws = await workspace(BASE, { index: { maxWatches: 2 }, ready: false });
    const built = await ws.fs.index.ready;
    expect(built.state).toBe("aside");
    expect(built.reason).toMatch(/watch/i);
    await expectFresh(ws, SEARCHES, { state: null });
    // Still aside, or trying again (and failing the same way): never ready with too few watches.
    await step(ws, SEARCHES, () => sh("echo needle new > src/deep/n.txt && mkdir more", ws.root), { state: null });
    const stats = await ws.fs.index.stats();
    expect(stats.state).not.toBe("ready");
  });

  it("a watch limit reached later, by a new directory", async () => {
    // How many watches this tree takes, from an index without a limit.
    const probe = await workspace(BASE);
    const needed = probe.stats.watches;
    expect(needed).toBeGreaterThan(0);
    await probe.fs.index.close();
    const ws = await workspace(BASE, { index: { maxWatches: needed } });
    expect(ws.stats.watches).toBe(needed);
    await step(ws, SEARCHES, () => sh("mkdir -p src/new && echo needle new > src/new/n.txt", ws.root), {
      state: null,
    });
    const stats = await ws.fs.index.stats();
    expect(stats.state).not.toBe("ready");
    if (stats.state === "aside") expect(stats.reason).toMatch(/watch/i);
    await step(ws, SEARCHES, () => sh("echo needle more > src/new/m.txt", ws.root), { state: null });
  });

  // Root only: it lowers the global max_queued_events sysctl for the moment the index's inotify
  // instance is made (the queue size is taken at inotify_init) and restores it at once, in a finally.
  const QUEUE = "/proc/sys/fs/inotify/max_queued_events";
  // The index lives in a child process, stopped (SIGSTOP) while the changes flood in: nothing can
  // drain the queue meanwhile, so it overflows every time (with the index in this process, its thread
  // could keep up with the flood and the test would prove nothing).
  const OVERFLOW_CHILD = `
    const pno = await import(process.argv[1]);
    const readline = await import("node:readline");
    const fs = pno.createBoundFs(process.argv[2], { index: true });
    const say = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
    say(await fs.index.ready);
    for await (const line of readline.createInterface({ input: process.stdin })) {
      if (line === "stats") say(await fs.index.stats());
      else say(await pno.grep({ pattern: line, path: process.argv[2], fs, limit: 100000 }));
    }`;
  it.runIf(isRoot)("an inotify queue overflow: aside, searches exact, ready again", async () => {
    const ws = await workspace(BASE, { index: false, ready: false });
    const saved = readFileSync(QUEUE, "utf8").trim();
    const entry = path.join(here, "..", "index.js");
    const child = spawn(process.execPath, ["--input-type=module", "-e", OVERFLOW_CHILD, entry, ws.root], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    const replies = (async function* () {
      let buffered = "";
      for await (const chunk of child.stdout) {
        buffered += chunk;
        let nl = buffered.indexOf("\n");
        while (nl >= 0) {
          yield JSON.parse(buffered.slice(0, nl));
          buffered = buffered.slice(nl + 1);
          nl = buffered.indexOf("\n");
        }
      }
    })();
    const ask = async (line) => {
      child.stdin.write(`${line}\n`);
      return (await replies.next()).value;
    };
    try {
      let built;
      try {
        // 32 events: far fewer than the 3,000 files created below, each of which makes several.
        writeFileSync(QUEUE, "32");
        // inotify_init runs in the build: wait for the build to end before restoring.
        built = (await replies.next()).value;
      } finally {
        writeFileSync(QUEUE, saved);
      }
      expect(readFileSync(QUEUE, "utf8").trim()).toBe(saved);
      expect(built.state).toBe("ready");
      const unindexed = pno.createBoundFs(ws.root);
      const grepBoth = async (pattern) => {
        const want = await pno.grep({ pattern, path: ws.root, fs: unindexed, limit: 100000 });
        expect(await ask(pattern)).toEqual(JSON.parse(JSON.stringify(want)));
      };
      child.kill("SIGSTOP");
      try {
        await sh("seq 1 3000 | xargs touch && echo needle flood > src/flood.txt", ws.root);
      } finally {
        child.kill("SIGCONT");
      }
      // The next search is exact, and the index stepped aside for the overflow (or is already rebuilding).
      await grepBoth("needle");
      const after = await ask("stats");
      if (after.state === "aside") expect(after.reason).toMatch(/overflow/i);
      else expect(after.state).toBe("building");
      // Rebuilt after its backoff, with the restored queue size, and fresh again.
      let rebuilt = after;
      for (let i = 0; i < 600 && rebuilt.state !== "ready"; i++) {
        await new Promise((r) => setTimeout(r, 50));
        rebuilt = await ask("stats");
      }
      expect(rebuilt.state).toBe("ready");
      expect(rebuilt.files).toBeGreaterThanOrEqual(3000);
      await grepBoth("needle");
      await sh("echo needle after > src/after.txt && rm 1 2 3", ws.root);
      await grepBoth("needle");
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("unreadable directories: the same results as a walk, made readable or unreadable later", async () => {
    // Root reads every directory: the scenario runs as nobody then (a child Node process).
    let phases;
    if (!isRoot) {
      const { unreadableScenario } = await import("./helpers/unreadable-scenario.js");
      const dir = tempDirFor("me", "pno-index-unreadable-");
      try {
        phases = await unreadableScenario(dir);
      } finally {
        await sh(`chmod -R u+rwX '${dir}'`, "/");
        rmSync(dir, { recursive: true, force: true });
      }
    } else {
      expect(nobody.why).toBe(null);
      const dir = tempDirFor("nobody", "pno-index-unreadable-");
      try {
        phases = await runAsNobody(dir);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    expect(phases[0].state, phases[0].reason ?? "").toBe("ready");
    for (const { phase, indexed, plain, state } of phases.slice(1)) {
      expect(indexed, phase).toEqual(plain);
      expect(state, phase).toMatch(/^(ready|aside|building)$/);
    }
    // The unreadable directory's contents were not searched, and were once it opened.
    expect(phases[1].plain[0].text).not.toContain("closed/");
    expect(phases[2].plain[0].text).toContain("closed/b.txt");
  });

  it("the root deleted: the same results and errors as without an index, no crash", async () => {
    const ws = await workspace(BASE);
    // Both fs objects hold the directory as it was, as an open descriptor.
    const plain = pno.createBoundFs(ws.root);
    rmSync(ws.root, { recursive: true });
    expect(await run(ws.fs, ws.root, SEARCHES)).toEqual(await run(plain, ws.root, SEARCHES));
    const glob = (fs) => fs.find.glob("*", ws.root, { ignore: [], limit: 100 }).catch((e) => [e.message, e.code]);
    expect(await glob(ws.fs)).toEqual(await glob(plain));
    const stats = await statsUntil(ws, (s) => s.state !== "ready" && s.state !== "building", 30);
    expect(stats.state).toBe("aside");
    expect(stats.reason).toMatch(/root|delet|gone/i);
    // Another directory at the same path is not the workspace either.
    await sh(`mkdir '${ws.root}' && echo needle > '${ws.root}/n.txt'`, "/");
    expect(await run(ws.fs, ws.root, SEARCHES)).toEqual(await run(plain, ws.root, SEARCHES));
    await ws.fs.index.close();
    expect((await ws.fs.index.stats()).state).toBe("closed");
  });

  it("the root moved: searches follow it as without an index", async () => {
    const ws = await workspace(BASE);
    const plain = pno.createBoundFs(ws.root);
    const moved = `${ws.root}-moved`;
    try {
      renameSync(ws.root, moved);
      expect(await run(ws.fs, ws.root, SEARCHES)).toEqual(await run(plain, ws.root, SEARCHES));
      writeFileSync(`${moved}/src/new.txt`, "needle after the move\n");
      const got = await run(ws.fs, ws.root, SEARCHES);
      expect(got).toEqual(await run(plain, ws.root, SEARCHES));
      expect(got[0].text).toContain("src/new.txt");
      expect((await ws.fs.index.stats()).state).not.toBe("ready");
    } finally {
      rmSync(moved, { recursive: true, force: true });
    }
  });

  it("close() during a build: resolves, ready resolves closed, searches walk", async () => {
    const ws = await workspace(bigTree(), { ready: false });
    const ready = ws.fs.index.ready;
    expect((await ws.fs.index.stats()).state).toBe("building");
    await ws.fs.index.close();
    expect(await ready).toMatchObject({ state: "closed" });
    expect(await ws.fs.index.stats()).toMatchObject({ state: "closed", watches: 0 });
    const searches = [
      ["grep", { pattern: "needle 7/" }],
      ["find", { pattern: "f7*", path: "d7" }],
    ];
    await expectFresh(ws, searches, { state: "closed" });
    await step(ws, searches, () => sh("echo 'needle 7/new' > d7/f7new.txt", ws.root), { state: "closed" });
    // Idempotent, and ready stays resolved.
    await ws.fs.index.close();
    expect((await ws.fs.index.ready).state).toBe("closed");
  });

  it("close() when ready, ready read only after close, and never rejecting", async () => {
    const ws = await workspace(BASE);
    await ws.fs.index.close();
    expect((await ws.fs.index.stats()).state).toBe("closed");
    await step(ws, SEARCHES, () => sh("echo needle late > late.txt", ws.root), { state: "closed" });
    const fresh = pno.createBoundFs(ws.root, { index: true });
    await fresh.index.close();
    expect((await fresh.index.ready).state).toBe("closed");
  });
});

/** unreadableScenario(dir) in a child Node process run as nobody, from the staged copy; its phases. */
function runAsNobody(dir) {
  const script = staged("__test__/helpers/unreadable-scenario.js", { pi: piName });
  const [file, ...args] = [...nodeArgvAs("nobody"), script, dir];
  const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"], cwd: "/" });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => {
    stdout += d;
  });
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    child.on("close", (code) => {
      if (code === 0) resolve(JSON.parse(stdout));
      else reject(new Error(`nobody's run exited ${code}: ${stderr}`));
    });
  });
}
