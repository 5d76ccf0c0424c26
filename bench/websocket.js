// The WebSocket transport (`pi-native-ops-server --listen` + connectWebSocket, on loopback): per-call cost
// against the stdio remote, exec flood against local exec, kernel grep/find against in-process, and how
// long a resume takes after the connection is cut (a loopback TCP proxy in between, cut on demand).
// "native" is the WebSocket side in every row; "stock" is what it is compared with (named in the note).
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { compare, median, timeBoth } from "./lib.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const GiB = 1024 ** 3;
/** Cuts measured for the resume row. */
const RESUMES = 50;

/** `--listen 127.0.0.1:0` on `root`, its token in its environment: `{ port, token, stop() }`. */
async function listen(bin, root) {
  const token = randomBytes(24).toString("base64url");
  const child = spawn(bin, ["--root", root, "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, PI_NATIVE_OPS_TOKEN: token },
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const address = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = /^listening on (\S+)\n/.exec(out);
      if (m) resolve(m[1]);
    });
    child.once("exit", (code) => reject(new Error(`server exited ${code} before listening`)));
  });
  return { port: Number(address.split(":").pop()), token, exited, child };
}

/** A server on `root` and a WebSocket connection to it (through `via(port)`'s port when given). */
async function startServer(native, root, via) {
  const server = await listen(native.serverBinaryPath(), root);
  const port = via ? await via(server.port) : server.port;
  const connection = await native.connectWebSocket(`ws://127.0.0.1:${port}/`, { token: server.token });
  return {
    connection,
    async stop() {
      await connection.close();
      await server.exited;
    },
  };
}

/** The stdio server, as bench/remote.js starts it. */
async function startStdio(native, root) {
  const child = spawn(native.serverBinaryPath(), ["--root", root], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const connection = await native.connect(child);
  return {
    connection,
    async stop() {
      await connection.close();
      await exited;
    },
  };
}

/** A loopback TCP proxy to `port`: `{ port, cut(), close() }`; cut() destroys the connections through it. */
async function proxyTo(port) {
  const pairs = new Set();
  const server = net.createServer((client) => {
    client.setNoDelay(true);
    const upstream = net.connect(port, "127.0.0.1");
    upstream.setNoDelay(true);
    const pair = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    for (const s of pair) {
      s.on("error", () => {});
      s.on("close", () => {
        pairs.delete(pair);
        for (const t of pair) t.destroy();
      });
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: server.address().port,
    cut() {
      for (const pair of pairs) for (const s of pair) s.destroy();
      pairs.clear();
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** readFile 4 KB and stat over the WebSocket against the same calls over the stdio remote. */
async function perCall(native, rows) {
  const dir = path.join(here, ".corpus", "remote-small");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "file4k.txt");
  writeFileSync(file, `${"x".repeat(4095)}\n`);
  const ws = await startServer(native, dir);
  const stdio = await startStdio(native, dir);
  try {
    const local = native.createBoundFs(dir);
    for (const [name, op] of [
      ["readFile 4 KB", (fs) => () => fs.read.readFile(file)],
      ["stat", (fs) => () => fs.ls.stat(file)],
    ]) {
      const row = await compare(`websocket ${name}`, "small files", op(ws.connection.fs), op(stdio.connection.fs), {
        runs: 2000,
        warmup: 200,
      });
      const [localMs] = await timeBoth([op(local)], 500);
      rows.push({
        ...row,
        target: "≤ 0.3 ms median",
        note: `${row.nativeMs <= 0.3 ? "met" : "NOT met"}; overhead over in-process ${(row.nativeMs - localMs).toFixed(3)} ms; stock = the stdio remote`,
      });
    }
  } finally {
    await ws.stop();
    await stdio.stop();
  }
}

/** 1 GiB of command output over the WebSocket against local exec. */
async function flood(ctx, rows) {
  const server = await startServer(ctx.native, "/tmp");
  try {
    const local = ctx.native.createBashOperations();
    const one = async (ops) => {
      let bytes = 0;
      const t = performance.now();
      await ops.exec(`head -c ${GiB} /dev/zero`, "/tmp", {
        onData: (chunk) => {
          bytes += chunk.length;
        },
      });
      if (bytes !== GiB) throw new Error(`flood delivered ${bytes} bytes`);
      return performance.now() - t;
    };
    const remote = [];
    const inProcess = [];
    for (let i = 0; i < 3; i++) {
      remote.push(await one(server.connection.bash));
      inProcess.push(await one(local));
    }
    const nativeMs = median(remote);
    const stockMs = median(inProcess);
    const throughput = stockMs / nativeMs;
    rows.push({
      operation: "websocket exec: 1 GiB through onData",
      corpus: "-",
      nativeMs,
      stockMs,
      ratio: nativeMs / stockMs,
      target: "≥ 0.7× local throughput",
      note: `median of 3 each; throughput ${throughput.toFixed(2)}× local exec (${(GiB / 2 ** 20 / (nativeMs / 1000)).toFixed(0)} MiB/s): ${throughput >= 0.7 ? "met" : "NOT met"}; stock = local createBashOperations`,
    });
  } finally {
    await server.stop();
  }
}

const SEARCHES = [
  ["grep", "rare literal", { pattern: "Linus Torvalds", literal: true }],
  ["grep", "ignoreCase + glob", { pattern: "mutex_lock", ignoreCase: true, glob: "*.c" }],
  ["grep", "no match", { pattern: "qqzzxx_no_such_thing" }],
  ["find", "name glob *.c", { pattern: "*.c" }],
  ["find", "every Makefile (limit 100000)", { pattern: "**/Makefile", limit: 100_000 }],
  ["find", "no match", { pattern: "*.qqzzxx" }],
];

/** grep and find over the WebSocket against the same tools in-process, on the kernel corpus. */
async function searches(ctx, rows) {
  const dir = ctx.corpora.kernel;
  if (!dir) {
    rows.push({
      operation: "websocket grep/find vs in-process",
      corpus: "kernel",
      nativeMs: null,
      stockMs: null,
      ratio: null,
      target: "≤ 1.15×",
      note: "kernel corpus not present",
    });
    return;
  }
  const server = await startServer(ctx.native, dir);
  try {
    const remote = ctx.native.createRemoteTools(dir, { connection: server.connection });
    const local = ctx.native.createNativeTools(dir);
    const ratios = [];
    for (const [tool, label, params] of SEARCHES) {
      const run = (tools) => () => tools[tool].execute("bench", params);
      const [a, b] = [await run(remote)(), await run(local)()];
      const same = JSON.stringify(a.content) === JSON.stringify(b.content);
      const [nativeMs, stockMs] = await timeBoth([run(remote), run(local)], 7);
      ratios.push(nativeMs / stockMs);
      rows.push({
        operation: `websocket ${tool}: ${label}`,
        corpus: "kernel",
        nativeMs,
        stockMs,
        ratio: nativeMs / stockMs,
        target: "≤ 1.15×",
        note: `stock = the same tool in-process${same ? "" : "; OUTPUTS DIFFER"}`,
      });
    }
    rows.push({
      operation: "websocket grep/find: median of the six",
      corpus: "kernel",
      nativeMs: null,
      stockMs: null,
      ratio: median(ratios),
      target: "≤ 1.15×",
      note: "the target is on each row; this is their median",
    });
  } finally {
    await server.stop();
  }
}

/**
 * Resume after a cut: the connection is cut, then a stat is timed (redial, HELLOs, replay, the call);
 * against the same stat uncut.
 */
async function resume(ctx, rows) {
  let proxy;
  const server = await startServer(ctx.native, "/tmp", async (port) => {
    proxy = await proxyTo(port);
    return proxy.port;
  });
  try {
    const fs = server.connection.fs;
    const stat = () => fs.ls.stat("/tmp");
    for (let i = 0; i < 50; i++) await stat();
    const cut = [];
    for (let i = 0; i < RESUMES; i++) {
      proxy.cut();
      const t = performance.now();
      await stat();
      cut.push(performance.now() - t);
    }
    const [uncutMs] = await timeBoth([stat], 200);
    const nativeMs = median(cut);
    const worst = Math.max(...cut);
    rows.push({
      operation: "websocket: a call right after a cut (resume)",
      corpus: "-",
      nativeMs,
      stockMs: uncutMs,
      ratio: nativeMs / uncutMs,
      target: "≤ 50 ms",
      note: `median of ${RESUMES} cuts, worst ${worst.toFixed(1)} ms: ${nativeMs <= 50 ? "met" : "NOT met"}; stock = the same stat uncut`,
    });
  } finally {
    await server.stop();
    await proxy?.close();
  }
}

export async function bench(ctx) {
  const rows = [];
  let bin;
  try {
    bin = ctx.native.serverBinaryPath();
  } catch (err) {
    return [
      {
        operation: "websocket",
        corpus: "-",
        nativeMs: null,
        stockMs: null,
        ratio: null,
        target: "",
        note: `not measured: ${err.message.split("\n")[0]} (scripts/build-server.sh)`,
      },
    ];
  }
  if (!existsSync(bin)) return rows;
  await perCall(ctx.native, rows);
  await resume(ctx, rows);
  await flood(ctx, rows);
  await searches(ctx, rows);
  return rows;
}
