// Races and crashes: what is opened is what was checked, and a killed writer never tears a file.
import { spawn } from "node:child_process";
import { chmodSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createBoundFs } from "pi-native-ops";
import { removeTree, snapshot, swapTrees, tempDir } from "./helpers/tree.js";

const helper = (name) => path.join(import.meta.dirname, "helpers", name);
const dirs = [];
afterAll(() => dirs.forEach(removeTree));

describe("symlink swap race", () => {
  it("never reads, writes or lists outside while components are swapped", async () => {
    const base = tempDir("pno-race-");
    dirs.push(base);
    const { outside, root } = swapTrees(base);
    const before = snapshot(outside);
    const fs = createBoundFs(root);
    const swapper = spawn(process.execPath, [helper("swapper.js"), root, outside], { stdio: "ignore" });
    const counts = { read: 0, listed: 0, written: 0, refused: 0, other: 0 };
    const tally = (e) => (e.message.includes("is outside workspace") ? counts.refused++ : counts.other++);
    try {
      const until = Date.now() + 3000;
      let i = 0;
      while (Date.now() < until) {
        for (const d of ["swap", "swapdir"]) {
          const dir = path.join(root, d);
          await fs.read.readFile(path.join(dir, "f.txt")).then((b) => {
            expect(b.toString()).toBe("INSIDE");
            counts.read++;
          }, tally);
          await fs.ls.readdir(dir).then((names) => {
            expect(names).not.toContain("outside-marker");
            counts.listed++;
          }, tally);
          await fs.write.writeFile(path.join(dir, `w${i % 4}.txt`), "written").then(() => counts.written++, tally);
          await fs.write.mkdir(path.join(dir, "made", "deeper")).then(() => counts.written++, tally);
          await fs.ls.stat(path.join(dir, "f.txt")).then(() => counts.read++, tally);
        }
        i++;
      }
    } finally {
      swapper.kill("SIGKILL");
    }
    expect(snapshot(outside)).toEqual(before);
    // The race really ran both ways: some operations got in, some were refused.
    expect(counts.read).toBeGreaterThan(0);
    expect(counts.refused).toBeGreaterThan(0);
  }, 30_000);
});

/** Runs a writer child over `file` and SIGKILLs it `delay` ms after it starts writing (never, if null). */
async function runWriter(script, file, size, delay) {
  const child = spawn(process.execPath, [helper(script), file, String(size)], { stdio: ["ignore", "pipe", "inherit"] });
  let started = 0;
  await new Promise((resolve) => {
    child.stdout.on("data", (d) => {
      if (!started && d.toString().includes("go")) {
        started = Date.now();
        if (delay !== null) setTimeout(() => child.kill("SIGKILL"), delay);
      }
    });
    child.on("exit", resolve);
  });
  return Date.now() - started;
}

/** Kills a writer at delays spread over one whole write; classifies what each kill left behind. */
async function killMidWrite(script, runs) {
  const dir = tempDir("pno-atomic-");
  dirs.push(dir);
  const file = path.join(dir, "big.txt");
  const size = 32 * 1024 * 1024;
  const old = "A".repeat(size);
  writeFileSync(file, old);
  chmodSync(file, 0o640);
  const duration = await runWriter(script, file, size, null);
  const outcomes = { old: 0, new: 0, torn: 0 };
  for (let run = 0; run < runs; run++) {
    writeFileSync(file, old);
    await runWriter(script, file, size, Math.round((duration * run) / runs));
    const content = readFileSync(file, "latin1");
    if (content === old) outcomes.old++;
    else if (content.length === size && content === "B".repeat(size)) outcomes.new++;
    else outcomes.torn++;
    expect(statSync(file).mode & 0o777).toBe(0o640);
  }
  return outcomes;
}

describe("atomic write", () => {
  it("a writer killed mid-write leaves the old or the new content, never a torn file", async () => {
    const outcomes = await killMidWrite("atomic-writer.js", 20);
    expect(outcomes.torn).toBe(0);
    expect(outcomes.old).toBeGreaterThan(0);
  }, 120_000);

  it("control: the same kills do tear Node's own non-atomic writeFile", async () => {
    const outcomes = await killMidWrite("plain-writer.js", 12);
    expect(outcomes.torn).toBeGreaterThan(0);
  }, 120_000);
});
