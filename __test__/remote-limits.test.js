// The remote server's limits from JS through the built package: answers over the 1 MiB
// header limit travel, and short calls are answered while calls that block fill the server. The
// protocol-level cases (a reused id, a client that never reads, the fuzzers) are in the server's
// own tests (crates/server/tests/e2e.rs, crates/server/src/fuzz.rs).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it, onTestFinished } from "vitest";
import { createRemoteTools } from "pi-native-ops";
import { serverPath, startServer } from "./helpers/face.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const root = makeTree(tempDir("pno-limits-"), { "a.txt": "alpha\n" });
afterAll(() => removeTree(root));

// What matters is the answer's size: 6,000 names of 200 bytes are 1.2 MB of JSON, over the 1 MiB header
// limit as the 40,000 entries of the report were (files are slow to create on CI's disks).
const ENTRIES = 6_000;
const NAME_PAD = "p".repeat(188);

function threadsOf(pid) {
  return Number(/Threads:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
}

describe.skipIf(!serverPath())("the server's limits", () => {
  it("a readdir and a glob of 1.2 MB of names arrive whole; the connection goes on", async () => {
    // On a memory file system where there is one: thousands of files are slow to make on disk.
    const base = existsSync("/dev/shm") ? mkdtempSync("/dev/shm/pno-limits-") : root;
    onTestFinished(() => base !== root && rmSync(base, { recursive: true, force: true }));
    const many = path.join(base, "many");
    mkdirSync(many);
    const names = Array.from({ length: ENTRIES }, (_, i) => `entry-${String(i).padStart(5, "0")}-${NAME_PAD}`);
    for (const name of names) writeFileSync(path.join(many, name), "");
    const { connection, close } = await startServer(base);
    try {
      const listed = await connection.fs.ls.readdir(many);
      expect(listed.length).toBe(ENTRIES);
      expect([...listed].sort()).toEqual(names);
      const found = await connection.fs.find.glob("many/*", base, { ignore: [], limit: Infinity });
      expect(found.length).toBe(ENTRIES);
      expect(await connection.fs.ls.exists(path.join(many, names[0]))).toBe(true);
    } finally {
      await close();
    }
  });

  it("a stat is answered while 520 reads of a FIFO and 515 long commands are in flight", async () => {
    const fifo = path.join(root, "fifo");
    expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
    const { child, connection, close } = await startServer(root);
    const blocked = [];
    const fifoReads = [];
    try {
      // A FIFO is refused at once now (ESPIPE, as the core refuses every read of a special file); the
      // commands are what blocks.
      for (let i = 0; i < 520; i++) fifoReads.push(connection.fs.read.readFile(fifo).catch((e) => e));
      for (let i = 0; i < 515; i++)
        blocked.push(connection.bash.exec("sleep 1000", root, { onData() {} }).catch((e) => e));
      const started = performance.now();
      const stat = await connection.fs.ls.stat(path.join(root, "a.txt"));
      const ms = performance.now() - started;
      expect(stat.isFile()).toBe(true);
      // Searches have their own threads too.
      expect(await connection.fs.find.glob("*.txt", root, { ignore: [], limit: Infinity })).toEqual([
        path.join(root, "a.txt"),
      ]);
      const { grep } = createRemoteTools(root, { connection });
      const found = await grep.execute("g", { pattern: "alpha" });
      expect(found.content[0].text).toBe("a.txt:1: alpha");
      // The figure for the record (no timing assertion): the stat waits behind 1,035 calls sent before it.
      console.log(`stat behind 1,035 blocked calls: ${ms.toFixed(1)} ms, server threads ${threadsOf(child.pid)}`);
    } finally {
      // Closing kills every command and fails every call still waiting.
      await close();
    }
    for (const err of await Promise.all(blocked)) expect(err.message).toMatch(/^remote connection closed: /);
    for (const err of await Promise.all(fifoReads)) expect(err.code).toBe("ESPIPE");
  });
});
