// One side of the 1 GiB read benchmark in its own process: prints time and peak RSS as JSON.
import path from "node:path";

const [side, json] = process.argv.slice(2);
const params = JSON.parse(json);
const { requirePi } = await import("../js/pi.js");
const { module: pi } = requirePi();
const baselineMiB = process.resourceUsage().maxRSS / 1024;
const dir = path.dirname(params.path);
let operations;
if (side === "native") {
  const { createBoundFs } = await import("pi-native-ops");
  operations = createBoundFs(dir).read;
}
const tool = pi.createReadTool(dir, operations ? { operations } : undefined);
const t0 = performance.now();
const result = await tool.execute("bench", params, undefined, undefined);
const ms = performance.now() - t0;
if (!result.content[0].text.includes("0123456789")) throw new Error("unexpected read result");
console.log(JSON.stringify({ ms, maxRssMiB: process.resourceUsage().maxRSS / 1024, baselineMiB }));
