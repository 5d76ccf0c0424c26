// pi >= 1.5 streams offset/limit reads through ReadOperations.createReadStream: a huge file is read
// through pi's own read tool in bounded memory.
import { closeSync, openSync, writeSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createBoundFs } from "pi-native-ops";
import { isPi1, pi, runTool } from "./helpers/pi.js";
import { removeTree, tempDir } from "./helpers/tree.js";

const dir = tempDir("pno-stream-");
afterAll(() => removeTree(dir));

describe.skipIf(!isPi1)("streamed read (pi >= 1.5)", () => {
  it("reads near the end of a 512 MiB file with offset/limit in bounded memory", async () => {
    const file = path.join(dir, "huge.txt");
    const line = (n) => `line ${String(n).padStart(9, "0")} ${"x".repeat(84)}\n`; // 100 bytes
    const lines = Math.floor((512 * 1024 * 1024) / 100);
    const fd = openSync(file, "w");
    for (let n = 1; n <= lines; n += 10_000) {
      writeSync(fd, Array.from({ length: Math.min(10_000, lines - n + 1) }, (_, i) => line(n + i)).join(""));
    }
    closeSync(fd);

    const tool = pi.createReadTool(dir, { operations: createBoundFs(dir).read });
    globalThis.gc?.();
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
    let result;
    try {
      result = await runTool(tool, { path: "huge.txt", offset: lines - 1, limit: 2 });
    } finally {
      clearInterval(sampler);
    }
    expect(result.error).toBeUndefined();
    const { text } = result;
    expect(text).toContain(line(lines - 1).trim());
    expect(text).toContain(line(lines).trim());
    const growthMiB = (peak - before) / 2 ** 20;
    expect(growthMiB).toBeLessThan(48);
  }, 120_000);
});
