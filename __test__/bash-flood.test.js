// 1 GiB into a slow consumer: the command is slowed by backpressure, Node's memory stays flat.
import { expect, it } from "vitest";
import { createBashOperations } from "pi-native-ops";

const GiB = 1024 ** 3;

it("streams 1 GiB to a slow consumer with bounded RSS growth", async () => {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  globalThis.gc?.();
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  let bytes = 0;
  let calls = 0;
  const result = await createBashOperations().exec(`head -c ${GiB} /dev/zero`, "/tmp", {
    onData: (chunk) => {
      bytes += chunk.length;
      if (++calls % 64 === 0) {
        Atomics.wait(pause, 0, 0, 2); // a consumer slower than the producer
        peak = Math.max(peak, process.memoryUsage().rss);
      }
    },
  });
  expect(result).toEqual({ exitCode: 0 });
  expect(bytes).toBe(GiB);
  const growthMiB = (peak - baseline) / 1024 ** 2;
  console.log(`flood: ${calls} chunks, peak RSS growth ${growthMiB.toFixed(1)} MiB`);
  expect(growthMiB).toBeLessThan(80);
}, 120_000);
