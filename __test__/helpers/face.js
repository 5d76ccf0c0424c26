// The face under test. The parity suites build their fs and bash objects here: locally by default, and
// through a remote connection to a spawned `pi-native-ops-server` when PI_NATIVE_OPS_FACE=remote
// (scripts/test.sh runs those suites a second time that way), so one suite proves both faces give the
// same results; PI_NATIVE_OPS_FACE=websocket makes that connection with connectWebSocket to the server's
// --listen (helpers/ws-server.js: the fake in front of the stdio server while the built server has no
// --listen). Servers started here are closed in the calling file's afterAll.
//
// PI_NATIVE_OPS_INDEX=1 (scripts/test.sh runs the find and grep suites a second time that way) turns
// the warm search index on for every fs made here, built before the fs is handed out, and checks every
// search made through it: the index must still be ready afterwards (one that stepped aside would make the
// re-run prove nothing), and its result must equal, byte for byte, that of the same search through an fs
// without an index over the same tree. Indexes made here are closed in the calling file's afterAll.
// PI_NATIVE_OPS_INDEX_CACHE=1 besides makes each such index the persisted one: built with a cache
// directory, closed (saved), and started again from its cache file, which must be restored.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import { afterAll } from "vitest";
import * as pno from "pi-native-ops";
import { hasListen, startFake, startListening } from "./ws-server.js";

const FACES = ["local", "remote", "websocket"];
export const face = FACES.includes(process.env.PI_NATIVE_OPS_FACE) ? process.env.PI_NATIVE_OPS_FACE : "local";
export const isRemote = face !== "local";
export const indexed = process.env.PI_NATIVE_OPS_INDEX === "1";

// One indexed fs per root (and runtime root), shared by the file's tests: each index holds an inotify
// instance, of which a user has only max_user_instances (128 by default) across all its processes.
const indexes = new Map();
afterAll(async () => {
  const all = [...indexes.values()];
  indexes.clear();
  await Promise.all(all.map(async (made) => (await made.catch(() => null))?.index.close()));
});

/** What a search gave: `{ value }`, or `{ error }` (the thrown value). */
async function settle(promise) {
  try {
    return { value: await promise };
  } catch (error) {
    return { error };
  }
}

/** A settled search as compared: its value, or its error's message and code (what the suites look at). */
const shown = (r) => ("error" in r ? { error: r.error?.message, code: r.error?.code } : r);

/**
 * Runs `search` on the indexed object and on its unindexed twin; throws unless the index is still ready
 * and both gave the same result. Skipped for aborted searches (how far each got before stopping differs).
 */
async function crossChecked(index, signal, onIndexed, onPlain) {
  const got = await settle(onIndexed());
  if (!signal?.aborted) {
    const stats = await index.stats();
    if (stats.state !== "ready") {
      throw new Error(`index mode: the index is ${stats.state} (${stats.reason}) after a search, not ready`);
    }
    const plain = await settle(onPlain());
    if (!signal?.aborted && !isDeepStrictEqual(shown(got), shown(plain))) {
      const [a, b] = [got, plain].map((r) => JSON.stringify(shown(r)));
      throw new Error(`index mode: indexed and unindexed searches differ:\n${a}\n${b}`);
    }
  }
  if ("error" in got) throw got.error;
  return got.value;
}

/** createBoundFs(root, opts) with the index on and built (ready), its find.glob cross-checked; one per root. */
function indexedFs(root, opts) {
  const key = JSON.stringify([root, opts.runtimeRoot ?? null]);
  if (!indexes.has(key)) indexes.set(key, makeIndexedFs(root, opts));
  return indexes.get(key);
}

async function makeIndexedFs(root, opts) {
  let index = true;
  if (process.env.PI_NATIVE_OPS_INDEX_CACHE === "1") {
    index = { cache: mkdtempSync(path.join(tmpdir(), "pno-index-cache-")) };
    const first = pno.createBoundFs(root, { ...opts, index });
    await first.index.ready;
    await first.index.close();
  }
  const fs = pno.createBoundFs(root, { ...opts, index });
  const stats = await fs.index.ready;
  if (index !== true && stats.state === "ready" && stats.cache !== "restored") {
    throw new Error(`index cache mode: the index of ${root} was not restored (${stats.cache})`);
  }
  if (stats.state !== "ready") {
    await fs.index.close();
    throw new Error(`index mode: the index of ${root} is ${stats.state} (${stats.reason})`);
  }
  let plain;
  const glob = fs.find.glob;
  fs.find.glob = (...args) =>
    crossChecked(
      fs.index,
      undefined,
      () => glob(...args),
      () => {
        plain ??= pno.createBoundFs(root, opts);
        return plain.find.glob(...args);
      },
    );
  return fs;
}

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
 * replaces the whole command line (`[file, ...args]`), for servers started inside namespaces; `connect`
 * are more options for connect() (`policy`, `onPolicyEvent`).
 * close() ends the connection and waits for the child to exit.
 */
export async function startServer(root, { args = [], spawnArgs, stderr = "inherit", connect = {} } = {}) {
  const bin = serverPath();
  if (!spawnArgs && !bin) throw new Error("no pi-native-ops-server binary: run scripts/build-server.sh");
  if (face === "websocket" && !spawnArgs) return startWebSocketServer(bin, root, args, stderr, connect);
  const [file, ...argv] = spawnArgs ?? [bin, "--root", root, ...args];
  const child = spawn(file, argv, { stdio: ["pipe", "pipe", stderr] });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  // forwardEnv: the suites compare with local exec, which runs in the env pi passes.
  const connection = await pno.connect(
    { readable: child.stdout, writable: child.stdin },
    { forwardEnv: true, ...connect },
  );
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

/** startServer's WebSocket twin: the same `{ connection, exited, close() }` over connectWebSocket. */
async function startWebSocketServer(bin, root, args, stderr, connect) {
  const listening = hasListen(bin)
    ? await startListening(bin, { root, args, stderr })
    : await startFake(bin, { root, args });
  const connection = await pno.connectWebSocket(listening.url, {
    token: listening.token,
    forwardEnv: true,
    ...connect,
  });
  const server = {
    child: listening.child ?? null,
    connection,
    exited: listening.exited ?? Promise.resolve({ code: 0, signal: null }),
    async close() {
      open.delete(server);
      await connection.close();
      await listening.close();
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
  if (!isRemote) return indexed ? indexedFs(root, opts) : pno.createBoundFs(root, opts);
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
  const opts = runtimeRoot === undefined ? {} : { runtimeRoot };
  if (indexed) {
    // Always over a bound fs here: the index belongs to one.
    const fs = await indexedFs(root, opts);
    const tool = pno.createGrepTool(cwd, { fs });
    const plain = pno.createGrepTool(cwd, { fs: pno.createBoundFs(root, opts) });
    return {
      ...tool,
      execute: (id, params, signal, ...rest) =>
        crossChecked(
          fs.index,
          signal,
          () => tool.execute(id, params, signal, ...rest),
          () => plain.execute(id, params, signal, ...rest),
        ),
    };
  }
  if (root === cwd && runtimeRoot === undefined) return pno.createGrepTool(cwd);
  return pno.createGrepTool(cwd, { fs: pno.createBoundFs(root, opts) });
}
