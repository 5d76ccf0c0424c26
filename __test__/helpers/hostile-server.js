// Hostile servers for the client (remote-hostile.test.js): a stand-in for pi-native-ops-server that greets correctly, then
// answers calls as each test scripts it, over stdio or over a WebSocket session (the session layer's side
// of the server: HELLO, DATA; it never acknowledges). The client runs in this process (its deadlines) or
// in a child Node with a small heap (its memory, read from /proc by the test, never from the clock).
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import path from "node:path";
import { PassThrough } from "node:stream";
import { WebSocketServer } from "ws";
import { frame, frameReader } from "./fake-server.js";

const HELLO = 0x01;
const DATA = 0x02;
/** The DATA payload the session layer allows (1 MiB). */
export const MAX_DATA_BYTES = 1024 * 1024;
export const TOKEN = "hostile-token";
const CLIENT = path.join(import.meta.dirname, "hostile-client.js");

const HELLO_FRAME = frame({ t: "hello", protocol: 1, server: "0.0.0-hostile", root: "/workspace", platform: "x" });

/**
 * The server's half of the protocol: `onCall(call, server)` answers each call (the `policy` call is answered
 * ok). `server.write(bytes)` resolves once the bytes are handed on (backpressure), `server.send(header,
 * payload)` writes one frame, `server.frames` holds every frame the client sent.
 */
function protocolSide(onCall) {
  const server = { frames: [], write: null };
  server.send = (header, payload) => server.write(frame(header, payload));
  const read = frameReader((header) => {
    server.frames.push(header);
    if (header.t !== "call") return;
    if (header.op === "policy") return server.send({ t: "ok", id: header.id, pinned: null });
    onCall(header, server);
  });
  return { server, read };
}

/** Writes `bytes` to a Node stream, resolving once they are taken (its buffer under its high-water mark). */
function writer(stream) {
  return (bytes) =>
    new Promise((resolve) => {
      if (stream.destroyed || stream.writableEnded) return resolve();
      if (stream.write(bytes)) return resolve();
      const done = () => {
        stream.off("drain", done);
        stream.off("close", done);
        resolve();
      };
      stream.on("drain", done);
      stream.on("close", done);
    });
}

/** A hostile stdio server for a client in this process: `{ server, transport }`. */
export function hostileStdio(onCall) {
  const toServer = new PassThrough();
  const toClient = new PassThrough();
  const { server, read } = protocolSide(onCall);
  server.write = writer(toClient);
  toServer.on("data", read);
  server.write(HELLO_FRAME);
  return { server, transport: { readable: toClient, writable: toServer } };
}

/**
 * A hostile WebSocket server on loopback (any token): the session layer's HELLO, then the protocol in DATA
 * messages of at most 1 MiB. `{ server, url, connections, close() }`.
 */
export async function hostileWebSocket(onCall) {
  const { server, read } = protocolSide(onCall);
  const http = createServer();
  const wss = new WebSocketServer({
    server: http,
    perMessageDeflate: false,
    handleProtocols: () => "pi-native-ops.v1",
  });
  const hostile = { server, connections: 0, url: "" };
  let socket = null;
  server.write = async (bytes) => {
    for (let at = 0; at < bytes.length; at += MAX_DATA_BYTES) {
      const ws = socket;
      if (ws === null || ws.readyState !== ws.OPEN) return;
      const piece = bytes.subarray(at, at + MAX_DATA_BYTES);
      await new Promise((resolve) => ws.send(Buffer.concat([Buffer.of(DATA), piece]), resolve));
    }
  };
  wss.on("connection", (ws) => {
    hostile.connections++;
    socket = ws;
    ws.on("error", () => {});
    ws.send(Buffer.concat([Buffer.of(HELLO), Buffer.alloc(16, 7), Buffer.alloc(8)]));
    let greeted = false;
    ws.on("message", (data) => {
      if (data[0] === HELLO && !greeted) {
        greeted = true;
        server.write(HELLO_FRAME);
      } else if (data[0] === DATA) read(data.subarray(1));
    });
  });
  await new Promise((resolve) => http.listen(0, "127.0.0.1", resolve));
  hostile.url = `ws://127.0.0.1:${http.address().port}/`;
  hostile.close = async () => {
    for (const ws of wss.clients) ws.terminate();
    wss.close();
    http.closeAllConnections?.();
    await new Promise((resolve) => http.close(resolve));
  };
  return hostile;
}

/**
 * The client in a child Node with `heapMiB` of old space, doing `action` (hostile-client.js) against a
 * hostile server over `kind` ("stdio" or "ws"). `{ server, child, next(), go(), peakKiB(), close() }`:
 * `next()` resolves the child's next report, null once it exited.
 */
export async function hostileChild(kind, action, heapMiB, onCall) {
  let hostile = null;
  let server;
  const args = [`--max-old-space-size=${heapMiB}`, CLIENT, kind, action];
  if (kind === "ws") {
    hostile = await hostileWebSocket(onCall);
    server = hostile.server;
    args.push(hostile.url, TOKEN);
  }
  const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "pipe", "ipc"] });
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  child.stdin.on("error", () => {});
  if (kind === "stdio") {
    const side = protocolSide(onCall);
    server = side.server;
    server.write = writer(child.stdin);
    child.stdout.on("data", side.read);
    server.write(HELLO_FRAME);
  }
  const reports = [];
  const waiting = [];
  let exited = false;
  const flush = () => {
    while (waiting.length && (reports.length || exited)) waiting.shift()(reports.shift() ?? null);
  };
  child.on("message", (m) => {
    reports.push(m);
    flush();
  });
  child.on("exit", (code, signal) => {
    exited = { code, signal };
    flush();
  });
  return {
    server,
    child,
    hostile,
    stderr: () => stderr,
    exited: () => exited,
    next: () =>
      new Promise((resolve) => {
        waiting.push(resolve);
        flush();
      }),
    go: () => child.connected && child.send("go"),
    /** The child's peak resident memory so far (VmHWM), in KiB. */
    peakKiB: () => Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1] ?? 0),
    async close() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await new Promise((resolve) => child.once("exit", resolve));
      }
      await hostile?.close();
    },
  };
}
