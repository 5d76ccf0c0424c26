// Runs sandboxed commands as root (in this process) and as `nobody` (a child Node process dropped to
// nobody/nogroup with setpriv), so one suite proves the sandbox's refusals for both users. Each run
// takes the same input and gives the same JSON-able results: for each command its output, exit code
// or the error it rejected with. The child loads the package and this helper from a staged copy
// (helpers/staged.js): nobody cannot read a checkout in a private directory.
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { removeStaged, staged } from "./staged.js";

const NOBODY_UID = 65534;
const NOGROUP_GID = 65534;

/** The setpriv prefix that drops to nobody, or null (and why) when this process cannot. */
export const nobody = (() => {
  if (process.getuid?.() !== 0) return { argv: null, why: "not root: cannot drop to nobody" };
  const probe = spawnSync("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", "true"]);
  if (probe.status !== 0)
    return { argv: null, why: `setpriv --reuid=nobody failed: ${probe.error?.message ?? probe.stderr}` };
  return { argv: ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"], why: null };
})();

/** The directories `tempDirFor` made in this test file, removed by `removeScripts`. */
const tempDirs = new Set();

/** A fresh temp directory owned by nobody (when running as root), `mode` on it; removed by `removeScripts`. */
export function tempDirFor(user, prefix, mode = 0o755) {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(dir);
  chmodSync(dir, mode);
  if (user === "nobody") chownSync(dir, NOBODY_UID, NOGROUP_GID);
  return dir;
}

/** Makes the directory `dir` and hands it to `user`. */
export function mkdirAs(user, dir, mode = 0o755) {
  mkdirSync(dir, { mode });
  chmodSync(dir, mode);
  if (user === "nobody") chownSync(dir, NOBODY_UID, NOGROUP_GID);
}

/** Writes `content` to `file` and hands it to `user`. */
export function writeFileAs(user, file, content, mode = 0o644) {
  writeFileSync(file, content, { mode });
  chmodSync(file, mode);
  if (user === "nobody") chownSync(file, NOBODY_UID, NOGROUP_GID);
}

/**
 * Runs `commands` ({ command, cwd, env?, abortOn?, timeout?, sandbox? }, or an array of them run at once) one after
 * another through `pno.createBashOperations({ sandbox })`: `[{ output, exitCode } | { output, error, code }]`, or
 * `[{ created: false, error, code }]` when createBashOperations throws. `abortOn`: abort once the output contains
 * that text; `sandbox`: options merged over the shared ones, for a command run through other operations (made once).
 * Shared by both users' runs.
 */
export async function execAll(pno, sandbox, commands) {
  // `onPolicyEvent: "collect"` (JSON-able, for nobody's run too): each result gets the policy events that
  // arrived while its command ran, as `events` (commands run at once: `{ all: [results], events }`).
  let events;
  if (sandbox?.onPolicyEvent === "collect") {
    events = [];
    sandbox = { ...sandbox, onPolicyEvent: (event) => events.push(event) };
  }
  let ops;
  try {
    ops = pno.createBashOperations({ sandbox });
  } catch (err) {
    // Refused when made: one result, no command run.
    return [{ created: false, error: err.message, code: err.code ?? null }];
  }
  // A command's own `sandbox` (merged over this one) runs through operations of its own, made once.
  const others = new Map();
  const opsFor = (extra) => {
    if (!extra) return ops;
    const key = JSON.stringify(extra);
    if (!others.has(key)) others.set(key, pno.createBashOperations({ sandbox: { ...sandbox, ...extra } }));
    return others.get(key);
  };
  const results = [];
  // An array of commands runs them at the same time through the same operations: an array of results.
  for (const entry of commands) {
    const result = await (Array.isArray(entry) ? Promise.all(entry.map(one)) : one(entry));
    if (events) {
      // An event is queued before its command's end: one turn of the loop delivers whatever is left.
      await new Promise((resolve) => setImmediate(resolve));
      // An array's own properties would not survive JSON (nobody's run): a run at once is { all, events }.
      if (Array.isArray(result)) {
        results.push({ all: result, events: events.splice(0) });
        continue;
      }
      result.events = events.splice(0);
    }
    results.push(result);
  }
  return results;

  async function one({ command, cwd, env, abortOn, timeout, sandbox: extra }) {
    let output = "";
    const controller = new AbortController();
    const onData = (chunk) => {
      output += chunk.toString("utf8");
      if (abortOn && output.includes(abortOn)) controller.abort();
    };
    try {
      const { exitCode } = await opsFor(extra).exec(command, cwd, { onData, env, timeout, signal: controller.signal });
      return { output, exitCode };
    } catch (err) {
      return { output, error: err.message, code: err.code ?? null };
    }
  }
}

// The child exits when the test process is gone (a test that timed out, vitest killed), so that its
// exec's supervisor sees Node go and kills the sandboxed tree.
const childScript = `
import { readFileSync } from "node:fs";
const parent = process.ppid;
setInterval(() => process.ppid !== parent && process.exit(1), 200).unref();
const { pkg, helper, sandbox, commands } = JSON.parse(readFileSync(0, "utf8"));
const pno = await import(pkg);
const { execAll } = await import(helper);
process.stdout.write(JSON.stringify(await execAll(pno, sandbox, commands)));
`;
let scriptPath;
let scripts;
const children = new Set();
// setpriv execs node in place, so the child is the nobody Node itself: ending it ends its exec trees.
process.once("exit", () => {
  for (const child of children) child.kill("SIGKILL");
  if (scripts) rmSync(scripts, { recursive: true, force: true });
});

/**
 * Removes the child scripts, the directories `tempDirFor` made and the staged copy (each test file's
 * afterAll: vitest may end a worker without "exit").
 */
export function removeScripts() {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
  if (scripts) rmSync(scripts, { recursive: true, force: true });
  scripts = undefined;
  scriptPath = undefined;
  removeStaged();
}

/** The argv that runs Node as `user` ("root": this process's Node), for a child that loads staged files. */
export function nodeArgvAs(user) {
  if (user !== "nobody") return [process.execPath];
  if (!nobody.argv) throw new Error(nobody.why);
  return [...nobody.argv, process.execPath];
}

/** This process's directory of child scripts (readable by nobody), removed at exit. */
function scriptDir() {
  scripts ??= tempDirFor("root", "pno-nobody-script-");
  return scripts;
}

const streamScript = `
import { readFileSync } from "node:fs";
const parent = process.ppid;
setInterval(() => process.ppid !== parent && process.exit(1), 200).unref();
const { pkg, sandbox, command, cwd } = JSON.parse(readFileSync(0, "utf8"));
const pno = await import(pkg);
await pno.createBashOperations({ sandbox }).exec(command, cwd, { onData: (c) => process.stdout.write(c) });
`;

/**
 * Starts one sandboxed exec in a separate Node process run as `user`, its output on the child's stdout:
 * for killing that Node and watching the sandboxed tree go with it.
 */
export function startExecAs(user, sandbox, command, cwd) {
  const file = path.join(scriptDir(), "stream.mjs");
  writeFileSync(file, streamScript, { mode: 0o644 });
  const argv = [...nodeArgvAs(user), file];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"], cwd: "/" });
  children.add(child);
  child.on("close", () => children.delete(child));
  child.stdin.end(JSON.stringify({ pkg: staged("index.js"), sandbox, command, cwd }));
  return child;
}

/** execAll as `user` ("root": in this process; "nobody": in a child Node process run by setpriv). */
export async function execAllAs(user, pno, sandbox, commands) {
  if (user === "root") return execAll(pno, sandbox, commands);
  if (!scriptPath) {
    scriptPath = path.join(scriptDir(), "run.mjs");
    writeFileSync(scriptPath, childScript, { mode: 0o644 });
  }
  const [file, ...args] = [...nodeArgvAs("nobody"), scriptPath];
  // The child's environment is this process's: a fake API key set here must not reach its sandbox.
  const child = spawn(file, args, { stdio: ["pipe", "pipe", "pipe"], cwd: "/" });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => {
    stdout += d;
  });
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  const exited = new Promise((resolve) => child.on("close", resolve));
  children.add(child);
  exited.then(() => children.delete(child));
  const job = { pkg: staged("index.js"), helper: staged("__test__/helpers/nobody.js"), sandbox, commands };
  child.stdin.end(JSON.stringify(job));
  const code = await exited;
  if (code !== 0) throw new Error(`nobody's run exited ${code}: ${stderr}`);
  return JSON.parse(stdout);
}
