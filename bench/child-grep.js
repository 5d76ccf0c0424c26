// The native side of grep's memory figure, in its own process: runs one search through the native
// grep tool and prints this process's peak RSS and its RSS before the search, as JSON.
const [dir, json] = process.argv.slice(2);
const { createGrepTool } = await import("pi-native-ops");
const tool = createGrepTool(dir);
const baselineMiB = process.resourceUsage().maxRSS / 1024;
await tool.execute("bench", JSON.parse(json));
console.log(JSON.stringify({ maxRssMiB: process.resourceUsage().maxRSS / 1024, baselineMiB }));
