// Runs one search with pi's grep tool in this process, natively or through a server (`remote`), and
// prints what the search added to the peak RSS of the process doing it (this one, or the server), in
// MiB, with the end of the text the model would read: `node grep-peak.js <dir> <params json> [remote]`.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect, createGrepTool, createRemoteTools, serverBinaryPath } from "pi-native-ops";

const [dir, json, remote] = process.argv.slice(2);
const params = JSON.parse(json);

/** VmHWM of a process, in MiB: its peak resident set. */
const peakOf = (pid) => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;

let result;
let grownMiB;
if (remote) {
  const child = spawn(serverBinaryPath(), ["--root", dir], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const connection = await connect({ readable: child.stdout, writable: child.stdin });
  const { grep } = createRemoteTools(dir, { connection });
  const before = peakOf(child.pid);
  result = await grep.execute("peak", params);
  grownMiB = peakOf(child.pid) - before;
  await connection.close();
  await exited;
} else {
  const { grep } = { grep: createGrepTool(dir) };
  const before = process.resourceUsage().maxRSS / 1024;
  result = await grep.execute("peak", params);
  grownMiB = process.resourceUsage().maxRSS / 1024 - before;
}
const text = result.content[0].text;
console.log(JSON.stringify({ grownMiB, bytes: text.length, tail: text.slice(-200) }));
