// WebSocket servers for the suites: `pi-native-ops-server --listen` when the built server has it, else a
// loopback fake of its side of the session contract (docs/websocket.md: HELLO, DATA,
// ACK, replay, grace) in front of the stdio server, written apart from the client's session layer so that
// one does not hide the other's mistakes. Also a TCP proxy that cuts its connections on demand.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import net from "node:net";
import { WebSocketServer } from "ws";

const HELLO = 0x01;
const DATA = 0x02;
const ACK = 0x03;
const MAX_DATA_BYTES = 1024 * 1024;
const ACK_EVERY_BYTES = 256 * 1024;
const ACK_DELAY_MS = 50;
const REPLAY_BYTES = 8 * 1024 * 1024;

/** Whether `bin` knows --listen (its help says so). */
export function hasListen(bin) {
  const help = spawnSync(bin, ["--help"], { encoding: "utf8" });
  return `${help.stdout}${help.stderr}`.includes("--listen");
}

export const newToken = () => randomBytes(24).toString("base64url");

/**
 * Starts the real `bin --listen 127.0.0.1:0` with the token in its environment: `{ url, token, child,
 * exited, close() }` once it printed its address.
 */
export async function startListening(bin, { root, token = newToken(), args = [], stderr = "inherit" }) {
  const child = spawn(bin, ["--root", root, "--listen", "127.0.0.1:0", ...args], {
    stdio: ["ignore", "pipe", stderr],
    env: { ...process.env, PI_NATIVE_OPS_TOKEN: token },
  });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const address = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = /^listening on (\S+)\n/.exec(out);
      if (m) resolve(m[1]);
    });
    child.once("exit", (code) => reject(new Error(`server exited (${code}) before listening: ${out}`)));
  });
  return {
    url: `ws://${address}/`,
    token,
    child,
    exited,
    async close() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

/**
 * The fake: a WebSocket server on loopback serving one session at a time, each session a stdio server
 * child (`bin --root root ...args`). `{ url, token, sessions, close() }`; `sessions` counts sessions begun.
 */
export async function startFake(
  bin,
  { root, token = newToken(), args = [], graceMs = 60_000, host = "127.0.0.1", port = 0, onEnd = () => {} },
) {
  let session = null;
  const fake = { token, sessions: 0, url: "" };
  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: 1 + MAX_DATA_BYTES,
    handleProtocols: (offered) => (offered.has("pi-native-ops.v1") ? "pi-native-ops.v1" : false),
  });
  const http = createServer((_req, res) => res.writeHead(426).end());
  const refuse = (socket, status) => {
    socket.end(`HTTP/1.1 ${status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
  };
  http.on("upgrade", (req, socket, head) => {
    socket.on("error", () => {});
    const offered = String(req.headers["sec-websocket-protocol"] ?? "")
      .split(",")
      .map((s) => s.trim());
    const authorized =
      req.headers.authorization === `Bearer ${token}` || offered.includes(`pi-native-ops.token.${token}`);
    if (!authorized) return refuse(socket, 401);
    const id = new URL(req.url, "http://x").searchParams.get("session");
    if (id === null && session !== null) return refuse(socket, 409);
    if (id !== null && (session === null || session.id !== id)) return refuse(socket, 404);
    wss.handleUpgrade(req, socket, head, (ws) => {
      if (id === null) {
        session = begin();
        fake.sessions++;
      }
      session.attach(ws);
    });
  });

  function begin() {
    const child = spawn(bin, ["--root", root, ...args], { stdio: ["pipe", "pipe", "inherit"] });
    const s = {
      id: randomBytes(16).toString("hex"),
      child,
      ws: null,
      ready: false,
      sent: 0,
      acked: 0,
      wire: 0,
      replay: [],
      received: 0,
      ackedReceived: 0,
      ackTimer: null,
      graceTimer: null,
      ended: false,
    };
    const end = () => {
      if (s.ended) return;
      s.ended = true;
      clearTimeout(s.graceTimer);
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      if (session === s) session = null;
      onEnd();
    };
    const replayed = () => s.sent - s.acked;
    const pump = () => {
      if (!s.ready) return;
      while (s.wire < s.sent) {
        let skip = s.wire - s.acked;
        const parts = [Buffer.of(DATA)];
        let n = 0;
        for (const c of s.replay) {
          if (skip >= c.length) {
            skip -= c.length;
            continue;
          }
          const piece = c.subarray(skip, skip + MAX_DATA_BYTES - n);
          skip = 0;
          parts.push(piece);
          n += piece.length;
          if (n === MAX_DATA_BYTES) break;
        }
        s.wire += n;
        s.ws.send(Buffer.concat(parts));
      }
    };
    const agree = (r) => {
      if (r < s.acked || r > s.sent) return false;
      let drop = r - s.acked;
      s.acked = r;
      while (drop > 0) {
        if (s.replay[0].length <= drop) drop -= s.replay.shift().length;
        else {
          s.replay[0] = s.replay[0].subarray(drop);
          drop = 0;
        }
      }
      if (replayed() < REPLAY_BYTES) child.stdout.resume();
      return true;
    };
    const ack = () => {
      clearTimeout(s.ackTimer);
      s.ackTimer = null;
      if (s.ready && s.received > s.ackedReceived) {
        s.ws.send(Buffer.concat([Buffer.of(ACK), u64(s.received)]));
        s.ackedReceived = s.received;
      }
    };
    child.stdout.on("data", (chunk) => {
      s.replay.push(chunk);
      s.sent += chunk.length;
      if (replayed() >= REPLAY_BYTES) child.stdout.pause();
      pump();
    });
    child.stdout.on("end", () => {
      // The server's stream ended: the session is over once its last bytes are out.
      s.ws?.close(1000);
      end();
    });
    child.stdin.on("error", () => {});
    s.attach = (ws) => {
      if (s.ws) s.ws.terminate();
      clearTimeout(s.graceTimer);
      s.ws = ws;
      s.ready = false;
      ws.send(Buffer.concat([Buffer.of(HELLO), Buffer.from(s.id, "hex"), u64(s.received)]));
      s.ackedReceived = s.received;
      ws.on("message", (data, isBinary) => {
        if (ws !== s.ws) return;
        if (!isBinary) return ws.close(1003);
        if (data[0] === HELLO && !s.ready && data.length === 9) {
          if (!agree(Number(data.readBigUInt64LE(1)))) return ws.close(1008);
          s.wire = s.acked;
          s.ready = true;
          pump();
        } else if (data[0] === DATA && s.ready) {
          s.received += data.length - 1;
          child.stdin.write(data.subarray(1));
          if (s.received - s.ackedReceived >= ACK_EVERY_BYTES) ack();
          else s.ackTimer ??= setTimeout(ack, ACK_DELAY_MS);
        } else if (data[0] === ACK && s.ready && data.length === 9) {
          if (!agree(Number(data.readBigUInt64LE(1)))) return ws.close(1008);
        } else ws.close(1002);
      });
      ws.on("error", () => {});
      ws.on("close", (code) => {
        if (ws !== s.ws) return;
        s.ws = null;
        s.ready = false;
        if (code === 1000) {
          child.stdin.end();
          return end();
        }
        s.graceTimer = setTimeout(end, graceMs);
      });
    };
    return s;
  }

  await new Promise((resolve) => http.listen(port, host, resolve));
  fake.address = `${host}:${http.address().port}`;
  fake.url = `ws://${fake.address}/`;
  fake.close = async () => {
    if (session) {
      const { child } = session;
      session.ws?.terminate();
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await new Promise((resolve) =>
        child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("exit", resolve),
      );
      session = null;
    }
    wss.close();
    http.closeAllConnections?.();
    await new Promise((resolve) => http.close(resolve));
  };
  return fake;
}

function u64(n) {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(n));
  return b;
}

/**
 * A loopback TCP proxy to `target` (host:port). `cut()` destroys every connection through it at once
 * (the next bytes in flight, wherever in a frame they are, are lost); `cutAfter(n)` cuts once `n` more
 * bytes have passed in either direction. `{ url, port, cuts, bytes, cut(), cutAfter(n), close() }`.
 */
export async function cuttingProxy(targetPort) {
  const pairs = new Set();
  const frozen = new Set();
  let budget = Number.POSITIVE_INFINITY;
  const proxy = { cuts: 0, bytes: 0, connections: 0, rearm: null };
  const cutAll = () => {
    if (pairs.size === 0) return;
    proxy.cuts++;
    for (const [a, b] of pairs) {
      a.destroy();
      b.destroy();
    }
    pairs.clear();
  };
  const count = (n) => {
    proxy.bytes += n;
    budget -= n;
    if (budget <= 0) {
      budget = proxy.rearm ? proxy.rearm() : Number.POSITIVE_INFINITY;
      cutAll();
      return false;
    }
    return true;
  };
  const server = net.createServer((client) => {
    proxy.connections++;
    const upstream = net.connect(targetPort, "127.0.0.1");
    const pair = [client, upstream];
    pairs.add(pair);
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ]) {
      from.on("data", (d) => {
        // The bytes that pass before a cut are those within the budget: a cut lands mid-message.
        const room = budget;
        if (room < d.length) to.write(d.subarray(0, Math.max(0, room)));
        // Backpressure, so that the bytes counted are those handed on, not a backlog a cut throws away.
        if (count(d.length) && !to.write(d)) {
          from.pause();
          to.once("drain", () => from.resume());
        }
      });
      from.on("error", () => {});
      from.on("close", () => {
        pairs.delete(pair);
        to.destroy();
      });
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  proxy.port = server.address().port;
  proxy.url = `ws://127.0.0.1:${proxy.port}/`;
  proxy.cut = cutAll;
  proxy.cutAfter = (n) => {
    budget = n;
  };
  /** Cuts again and again, each time after `next()` more bytes (re-armed at every cut) until stopped. */
  proxy.cutEvery = (next) => {
    proxy.rearm = next;
    budget = next();
  };
  /** Stops forwarding on every connection, leaving the sockets open: a half-dead connection. */
  proxy.freeze = () => {
    for (const pair of pairs) {
      for (const s of pair) {
        s.pause();
        frozen.add(s);
      }
    }
    pairs.clear();
  };
  proxy.stopCutting = () => {
    proxy.rearm = null;
    budget = Number.POSITIVE_INFINITY;
  };
  proxy.close = async () => {
    cutAll();
    for (const s of frozen) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  };
  return proxy;
}
