// The face under test. The parity suites build their fs and bash objects here: locally by default, and
// through a remote connection to a spawned `pi-native-ops-server` when PI_NATIVE_OPS_FACE=remote
// (scripts/test.sh runs those suites a second time that way), so one suite proves both faces give the
// same results. Servers started here are closed in the calling file's afterAll.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { afterAll } from "vitest";
import * as pno from "pi-native-ops";

export const face = process.env.PI_NATIVE_OPS_FACE === "remote" ? "remote" : "local";
export const isRemote = face === "remote";

/**
 * The server binary for this machine: PI_NATIVE_OPS_SERVER when set, else what the package reports
 * (`serverBinaryPath()`: the platform package's copy, or the repo checkout's build); null when absent.
 */
export function serverPath() {
  const override = process.env.PI_NATIVE_OPS_SERVER;
  if (override) return override;
  try {
    const p = pno.serverBinaryPath?.();
    return p && existsSync(p) ? p : null;
  } catch {
    return null;
  }
}

const open = new Set();
afterAll(async () => {
  const all = [...open];
  open.clear();
  await Promise.all(all.map((s) => s.close()));
});

/**
 * Spawns a server for `root` and connects to it over the child's stdin/stdout: `{ child, connection,
 * close() }`. `args` are extra server arguments (e.g. `--runtime-root /workspace`); `spawnArgs`
 * replaces the whole command line (`[file, ...args]`), for servers started inside namespaces.
 * close() ends the connection and waits for the child to exit.
 */
export async function startServer(root, { args = [], spawnArgs, stderr = "inherit" } = {}) {
  const bin = serverPath();
  if (!spawnArgs && !bin) throw new Error("no pi-native-ops-server binary: run scripts/build-server.sh");
  const [file, ...argv] = spawnArgs ?? [bin, "--root", root, ...args];
  const child = spawn(file, argv, { stdio: ["pipe", "pipe", stderr] });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  // forwardEnv: the suites compare with local exec, which runs in the env pi passes.
  const connection = await pno.connect({ readable: child.stdout, writable: child.stdin }, { forwardEnv: true });
  const server = {
    child,
    connection,
    exited,
    async close() {
      open.delete(server);
      await connection.close();
      await exited;
    },
  };
  open.add(server);
  return server;
}

const servers = new Map();
function serverFor(root, runtimeRoot) {
  const key = JSON.stringify([root, runtimeRoot ?? null]);
  if (!servers.has(key)) {
    const args = runtimeRoot === undefined ? [] : ["--runtime-root", runtimeRoot];
    const started = startServer(root, { args });
    // A failed start is not cached: the next call reports it again.
    started.catch(() => servers.delete(key));
    servers.set(key, started);
  }
  return servers.get(key);
}
afterAll(() => servers.clear());

/**
 * An fs shaped like `createBoundFs(root, opts)`'s: that object locally; remotely, the `fs` of a
 * connection to a server run with `--root root` (and `--runtime-root` from opts), one per root.
 */
export async function makeFs(root, opts = {}) {
  if (!isRemote) return pno.createBoundFs(root, opts);
  return (await serverFor(root, opts.runtimeRoot)).connection.fs;
}

/**
 * A BashOperations like `createBashOperations(opts)`: that locally; remotely, one from a connection to
 * a server whose root is `/`, so that the suites' working directories (/tmp, /usr) are inside it.
 */
export async function makeBash(opts = {}) {
  if (!isRemote) return pno.createBashOperations(opts);
  const { connection } = await serverFor("/");
  return opts.shellPath === undefined ? connection.bash : connection.createBashOperations(opts);
}

/**
 * Our grep tool for `cwd`, searching `root` (default `cwd`; `runtimeRoot` as createBoundFs takes it):
 * `createGrepTool` locally (given a bound fs only when the root or runtime root differs from cwd, as the
 * suites call it); remotely, `createRemoteTools(cwd, { connection }).grep` on a server for that root.
 */
export async function makeGrepTool(cwd, { root = cwd, runtimeRoot } = {}) {
  if (isRemote) return pno.createRemoteTools(cwd, { connection: (await serverFor(root, runtimeRoot)).connection }).grep;
  if (root === cwd && runtimeRoot === undefined) return pno.createGrepTool(cwd);
  return pno.createGrepTool(cwd, { fs: pno.createBoundFs(root, runtimeRoot === undefined ? {} : { runtimeRoot }) });
}
