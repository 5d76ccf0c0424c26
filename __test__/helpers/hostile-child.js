// Runs one hostile-input scenario in its own Node process (hostile-rules.test.js), where a failure may
// kill, bloat or hang this process but never the test runner. Its stdin is the scenario as JSON:
//   { cwd, root?, face?: "local" | "remote", index?, policy?, calls: [{ tool, params, abort? }],
//     exitWhileSearching?, maxRssMiB? } (with face "remote", a server for `root` does the work)
// It prints one line of JSON, { results, grewMiB } (each result `{ text }` or `{ error }`), then exits 0;
// or, with exitWhileSearching, starts the calls and calls process.exit(7) at once. Past maxRssMiB of
// resident memory (its own, or its server's) it prints `BLOAT <MiB>` and kills itself (an exit would wait for the pool threads).
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import * as pno from "../../index.js";

const scenario = JSON.parse(readFileSync(0, "utf8"));
const mib = (bytes) => Math.round(bytes / 2 ** 20);
const maxRss = () => process.resourceUsage().maxRSS * 1024;

/** The remote face's server, whose memory is watched too. */
let serverPid = null;
const serverRss = () => {
  try {
    const status = readFileSync(`/proc/${serverPid}/status`, "utf8");
    return Number(/VmRSS:\s+(\d+)/.exec(status)[1]) * 1024;
  } catch {
    return 0;
  }
};

if (scenario.maxRssMiB) {
  const watch = setInterval(() => {
    const rss = Math.max(process.memoryUsage.rss(), serverPid ? serverRss() : 0);
    if (rss > scenario.maxRssMiB * 2 ** 20) {
      if (serverPid) process.kill(serverPid, "SIGKILL");
      process.stdout.write(`BLOAT ${mib(rss)}\n`, () => process.kill(process.pid, "SIGKILL"));
      clearInterval(watch);
    }
  }, 10);
  watch.unref();
}

async function tools() {
  const root = scenario.root ?? scenario.cwd;
  if (scenario.face === "remote") {
    const child = spawn(process.env.PI_NATIVE_OPS_SERVER ?? pno.serverBinaryPath(), ["--root", root], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    child.unref();
    serverPid = child.pid;
    const connection = await pno.connect(
      { readable: child.stdout, writable: child.stdin },
      scenario.policy ? { policy: scenario.policy } : {},
    );
    return pno.createRemoteTools(scenario.cwd, { connection });
  }
  const tools = pno.createNativeTools(scenario.cwd, {
    root,
    ...(scenario.index ? { index: true } : {}),
    ...(scenario.policy ? { policy: scenario.policy } : {}),
  });
  // The index reads the rules of the root's ancestors as it starts, with no call made.
  if (scenario.index) scenario.indexStats = await tools.index.ready;
  return tools;
}

async function run(tool, { params, abort }) {
  const controller = new AbortController();
  try {
    const call = tool.execute("hostile", params, controller.signal);
    if (abort) controller.abort();
    const result = await call;
    return { text: result.content.map((c) => c.text ?? "").join("") };
  } catch (err) {
    return { error: err.message };
  }
}

const before = maxRss();
let results;
try {
  const made = await tools();
  if (scenario.exitWhileSearching) {
    for (const call of scenario.calls) run(made[call.tool], call);
    process.exit(7);
  }
  results = [];
  for (const call of scenario.calls) results.push(await run(made[call.tool], call));
} catch (err) {
  results = [{ error: err.message }];
}
process.stdout.write(
  `${JSON.stringify({ results, grewMiB: mib(maxRss() - before), index: scenario.indexStats?.state })}\n`,
  () => process.exit(0),
);
