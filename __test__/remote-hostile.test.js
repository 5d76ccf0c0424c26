// A hostile server cannot hurt the agent's process (the policy log's bounds are in
// remote-hostile-log.test.js): over stdio and over a WebSocket, the real client against servers that send
// sizes it did not ask for, never answer a cancel, overrun the credit window, or drop every connection
// right after a valid HELLO. Memory is the client's own, measured in a child Node with a small heap (its
// peak RSS from /proc); deadlines are waited on as conditions (vitest's timeout catches a hang).
import { createServer } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { WebSocketServer } from "ws";
import { connect, connectWebSocket, createRemoteTools } from "pi-native-ops";
import { hostileChild, hostileStdio, hostileWebSocket, MAX_DATA_BYTES, TOKEN } from "./helpers/hostile-server.js";
import { frame } from "./helpers/fake-server.js";

const MiB = 1024 * 1024;
/** docs/protocol.md, "The client's bounds". */
const MAX_ANSWER_BYTES = 8 * MiB;
const CLOSED = /^remote connection closed: /;
/**
 * The client's peak RSS growth allowed while a hostile server sends 256 MiB it should not hold: the
 * transport's buffers of what it drops wait for a GC (external memory), a held flood is the flood.
 */
const BOUND_MIB = 100;

const cleanups = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** `{ "t":"ok","id":id,"names":[{},{},…] }`: JSON.parse's costliest shape (21 bytes of heap per byte), `bytes` long. */
function emptyObjects(id, bytes) {
  const head = Buffer.from(`{"t":"ok","id":${id},"names":[`);
  const tail = Buffer.from("{}]}");
  const body = Buffer.alloc(bytes - head.length - tail.length - ((bytes - head.length - tail.length) % 3), "{},");
  return Buffer.concat([head, body, tail]);
}

/** Sends `bytes` of payload as one frame whose header is `header`, a piece at a time (never whole in memory). */
async function sendFlood(server, header, bytes) {
  const json = Buffer.from(JSON.stringify(header));
  const prefix = Buffer.alloc(8);
  prefix.writeUInt32BE(json.length, 0);
  prefix.writeUInt32BE(bytes, 4);
  await server.write(Buffer.concat([prefix, json]));
  const piece = Buffer.alloc(MAX_DATA_BYTES - 64, 0x61);
  for (let left = bytes; left > 0; left -= piece.length)
    await server.write(piece.subarray(0, Math.min(left, piece.length)));
}

const answersExists = (call, server) => {
  if (call.op === "exists") server.send({ t: "ok", id: call.id, exists: true });
};

/** A child client for `action`, its peak RSS before the hostile part (KiB). */
async function child(kind, action, heapMiB, onCall) {
  const c = await hostileChild(kind, action, heapMiB, onCall);
  cleanups.push(() => c.close());
  expect(await c.next(), c.stderr()).toEqual({ connected: true });
  return { c, baseline: c.peakKiB() };
}

for (const kind of ["stdio", "ws"]) {
  describe(`a hostile server over ${kind}: the client's memory stays bounded`, () => {
    it("1. an inPayload answer of 48 MiB of empty objects fails its call and the connection; a 256 MiB heap survives", async () => {
      let sent;
      const { c, baseline } = await child(kind, "readdir", 256, (call, server) => {
        if (call.op !== "readdir") return;
        sent = sendInPayload(server, call.id, emptyObjects(call.id, 48 * MiB));
      });
      const report = await c.next();
      expect(report, `the client died: ${JSON.stringify(c.exited())} ${c.stderr().slice(-500)}`).not.toBe(null);
      expect(report.result.error).toMatch(/^remote connection closed: protocol violation: an answer of \d+ bytes/);
      expect(report.after.error).toMatch(CLOSED);
      await sent;
      const growthMiB = (c.peakKiB() - baseline) / 1024;
      console.log(`${kind}: 48 MiB inPayload answer refused, client peak RSS growth ${growthMiB.toFixed(1)} MiB`);
      expect(growthMiB).toBeLessThan(BOUND_MIB);
    });

    it("1. the largest inPayload answer the client takes, of the costliest shape, parses in a 256 MiB heap", async () => {
      let count;
      const { c } = await child(kind, "readdir", 256, (call, server) => {
        if (call.op === "exists") return answersExists(call, server);
        if (call.op !== "readdir") return;
        const answer = emptyObjects(call.id, MAX_ANSWER_BYTES);
        count = JSON.parse(answer.toString()).names.length;
        sendInPayload(server, call.id, answer);
      });
      const report = await c.next();
      expect(report, `the client died: ${JSON.stringify(c.exited())} ${c.stderr().slice(-500)}`).not.toBe(null);
      expect(report).toEqual({ result: { value: count }, after: { value: true } });
    });

    it("3. a 256 MiB data frame for an id nobody asked is dropped as it arrives; the call goes on", async () => {
      let flood;
      const { c, baseline } = await child(kind, "exists", 256, (call, server) => {
        if (call.op !== "exists") return;
        if (flood === undefined) {
          flood = sendFlood(server, { t: "data", id: call.id + 1000 }, 256 * MiB).then(() =>
            server.send({ t: "ok", id: call.id, exists: true }),
          );
        } else answersExists(call, server);
      });
      const report = await c.next();
      expect(report, `the client died: ${JSON.stringify(c.exited())}`).not.toBe(null);
      expect(report).toEqual({ result: { value: true }, after: { value: true } });
      const growthMiB = (c.peakKiB() - baseline) / 1024;
      console.log(`${kind}: 256 MiB frame for an unknown id, client peak RSS growth ${growthMiB.toFixed(1)} MiB`);
      expect(growthMiB).toBeLessThan(BOUND_MIB);
    });

    it("4. a readStream server that ignores the credit window is a protocol violation; the queue stays within it", async () => {
      let flood;
      const { c, baseline } = await child(kind, "readStream", 256, (call, server) => {
        if (call.op !== "readStream") return answersExists(call, server);
        // 1 MiB data frames, never waiting for a credit: 256 MiB while the consumer takes one chunk.
        flood = (async () => {
          const chunk = Buffer.alloc(MiB, 0x62);
          for (let i = 0; i < 256; i++) await server.send({ t: "data", id: call.id }, chunk);
          await server.send({ t: "ok", id: call.id });
        })();
      });
      expect((await c.next()).first).toBeGreaterThan(0);
      await flood;
      c.go();
      const report = await c.next();
      expect(report, `the client died: ${JSON.stringify(c.exited())}`).not.toBe(null);
      expect(report.result.error).toMatch(/^remote connection closed: protocol violation: call \d+ was sent \d+ bytes/);
      expect(report.after.error).toMatch(CLOSED);
      const growthMiB = (c.peakKiB() - baseline) / 1024;
      console.log(`${kind}: credit window overrun by 252 MiB, client peak RSS growth ${growthMiB.toFixed(1)} MiB`);
      expect(growthMiB).toBeLessThan(BOUND_MIB);
    });
  });
}

/** Sends `answer` (a whole answer) as the payload of `{"t":"ok","id":id,"inPayload":true}`. */
async function sendInPayload(server, id, answer) {
  const json = Buffer.from(JSON.stringify({ t: "ok", id, inPayload: true }));
  const prefix = Buffer.alloc(8);
  prefix.writeUInt32BE(json.length, 0);
  prefix.writeUInt32BE(answer.length, 4);
  await server.write(Buffer.concat([prefix, json]));
  for (let at = 0; at < answer.length; at += MAX_DATA_BYTES - 64) {
    await server.write(answer.subarray(at, at + MAX_DATA_BYTES - 64));
  }
}

/** A client in this process against `onCall`, over `kind`. */
async function inProcess(kind, onCall) {
  if (kind === "stdio") {
    const { server, transport } = hostileStdio(onCall);
    const connection = await connect(transport);
    cleanups.push(() => connection.close());
    return { server, connection };
  }
  const hostile = await hostileWebSocket(onCall);
  cleanups.push(() => hostile.close());
  const connection = await connectWebSocket(hostile.url, { token: TOKEN });
  cleanups.push(() => connection.close());
  return { server: hostile.server, connection };
}

for (const kind of ["stdio", "ws"]) {
  describe(`a hostile server over ${kind} that never answers a cancel: local deadlines are local`, () => {
    // Every exec runs forever and every grep never ends; cancels are read and ignored.
    const silent = () => {};

    it("2. exec with a timeout rejects `timeout:<n>`, as the local exec does", async () => {
      const { server, connection } = await inProcess(kind, silent);
      const err = await connection.bash.exec("sleep 100", "/workspace", { onData() {}, timeout: 0.05 }).catch((e) => e);
      expect(err).toBeInstanceOf(Error);
      expect(err.message).toBe("timeout:0.05");
      // The cancel went out.
      expect(server.frames.some((f) => f.t === "cancel")).toBe(true);
    });

    it("2. an aborted exec rejects `aborted`, and an aborted grep `Operation aborted`", async () => {
      const { server, connection } = await inProcess(kind, silent);
      const controller = new AbortController();
      const run = connection.bash.exec("sleep 100", "/workspace", { onData() {}, signal: controller.signal });
      const { grep } = createRemoteTools("/workspace", { connection });
      const grepAbort = new AbortController();
      const search = grep.execute("g", { pattern: "x" }, grepAbort.signal);
      await waitUntil(() => server.frames.filter((f) => f.t === "call" && f.op !== "policy").length === 2);
      controller.abort();
      grepAbort.abort();
      const [execErr, grepErr] = await Promise.all([run.catch((e) => e), search.catch((e) => e)]);
      expect(execErr.message).toBe("aborted");
      expect(grepErr.message).toBe("Operation aborted");
      expect(server.frames.filter((f) => f.t === "cancel")).toHaveLength(2);
    });

    it("2. a session whose cancelled calls keep going unanswered is torn down", async () => {
      const { connection } = await inProcess(kind, silent);
      for (let i = 1; i <= 3; i++) {
        const err = await connection.bash
          .exec("sleep 100", "/workspace", { onData() {}, timeout: 0.01 })
          .catch((e) => e);
        expect(err.message).toBe("timeout:0.01");
      }
      await expect(connection.fs.ls.exists("/workspace/a")).rejects.toThrow(
        "remote connection closed: the server answered none of 3 cancelled calls",
      );
    });

    it("2. a cancel answered late settles nothing twice, and the connection goes on", async () => {
      const late = [];
      const { connection } = await inProcess(kind, (call, server) => {
        if (call.op === "exec") late.push(() => server.send({ t: "ok", id: call.id, exitCode: null, killed: true }));
        else answersExists(call, server);
      });
      for (let i = 0; i < 5; i++) {
        const err = await connection.bash
          .exec("sleep 100", "/workspace", { onData() {}, timeout: 0.01 })
          .catch((e) => e);
        expect(err.message).toBe("timeout:0.01");
        // Each answered after its call settled on its own.
        await late.shift()();
      }
      expect(await connection.fs.ls.exists("/workspace/a")).toBe(true);
    });
  });
}

describe("the client's bounds, at their edges (stdio, in this process)", () => {
  /** A server answering `readdir` with `answer(id)` as an inPayload answer, `stat` with a stray payload. */
  const edges = (answer) => (call, server) => {
    if (call.op === "readdir") sendInPayload(server, call.id, answer(call.id));
    else if (call.op === "stat") server.send({ t: "ok", id: call.id, size: 1, isFile: true }, Buffer.alloc(3 * MiB));
    else answersExists(call, server);
  };
  /** `{"t":"ok","id":id,"names":["aaa…"]}` of exactly `bytes`. */
  const names = (id, bytes) => {
    const head = `{"t":"ok","id":${id},"names":["`;
    const tail = '"]}';
    return Buffer.from(head + "a".repeat(bytes - head.length - tail.length) + tail);
  };

  it("an inPayload answer of exactly 8 MiB is taken; one byte more fails the call and the connection", async () => {
    const { connection } = await inProcess(
      "stdio",
      edges((id) => names(id, MAX_ANSWER_BYTES)),
    );
    expect(await connection.fs.ls.readdir("/workspace")).toHaveLength(1);
    const over = await inProcess(
      "stdio",
      edges((id) => names(id, MAX_ANSWER_BYTES + 1)),
    );
    await expect(over.connection.fs.ls.readdir("/workspace")).rejects.toThrow(
      `remote connection closed: protocol violation: an answer of ${MAX_ANSWER_BYTES + 1} bytes to call 1, over the client's limit of ${MAX_ANSWER_BYTES}`,
    );
  });

  it("a payload on an answer that carries none is dropped: the call is answered, the connection goes on", async () => {
    const { connection } = await inProcess(
      "stdio",
      edges(() => null),
    );
    expect((await connection.fs.ls.stat("/workspace/a")).isFile()).toBe(true);
    expect(await connection.fs.ls.exists("/workspace/a")).toBe(true);
  });

  it("a data frame over 1 MiB is a protocol violation, even within the window", async () => {
    const { connection } = await inProcess("stdio", (call, server) => {
      if (call.op === "exec") server.send({ t: "data", id: call.id }, Buffer.alloc(MiB + 1));
    });
    const err = await connection.bash.exec("true", "/workspace", { onData() {} }).catch((e) => e);
    expect(err.message).toMatch(
      /^remote connection closed: protocol violation: a data frame of 1048577 bytes for call \d+, over 1 MiB$/,
    );
  });
});

/** Waits (on the event loop, never a deadline) until `condition()` holds. */
async function waitUntil(condition) {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * A WebSocket server whose every connection gets a valid HELLO (the same session) and `then(ws)`:
 * `{ url, connections, close() }`.
 */
async function sessionServer(then) {
  const http = createServer();
  const wss = new WebSocketServer({
    server: http,
    perMessageDeflate: false,
    handleProtocols: () => "pi-native-ops.v1",
  });
  const s = { connections: 0 };
  wss.on("connection", (ws) => {
    s.connections++;
    ws.on("error", () => {});
    ws.send(Buffer.concat([Buffer.of(0x01), Buffer.alloc(16, 9), Buffer.alloc(8)]));
    then(ws, s.connections);
  });
  await new Promise((resolve) => http.listen(0, "127.0.0.1", resolve));
  s.url = `ws://127.0.0.1:${http.address().port}/`;
  s.close = async () => {
    for (const ws of wss.clients) ws.terminate();
    wss.close();
    http.closeAllConnections?.();
    await new Promise((resolve) => http.close(resolve));
  };
  cleanups.push(() => s.close());
  return s;
}

const PROTOCOL_HELLO = frame({ t: "hello", protocol: 1, server: "0.0.0-hostile", root: "/workspace", platform: "x" });

describe("5. a WebSocket server that drops every connection right after a valid HELLO", () => {
  it("is redialled with backoff, and the session is lost once the grace period passes without progress", async () => {
    const GRACE_MS = 3000;
    const server = await sessionServer((ws, n) => {
      ws.on("message", (data) => {
        // The first connection serves the protocol's hello and drops once the call comes; every later
        // one is dropped right after the HELLOs.
        if (n > 1) ws.terminate();
        else if (data[0] === 0x01) ws.send(Buffer.concat([Buffer.of(0x02), PROTOCOL_HELLO]));
        else if (data.includes('"op":"exists"')) ws.terminate();
      });
    });
    const connection = await connectWebSocket(server.url, { token: TOKEN, graceMs: GRACE_MS });
    // Never answered: the server drops the connection, then every redial.
    const err = await connection.fs.ls.exists("/workspace/a").catch((e) => e);
    expect(err.message).toMatch(/^remote connection closed: .*WebSocket session lost: no resume within 3000 ms/);
    // 50 ms doubling to 1 s: within the 3 s grace at most 1 + 5 + 2 redials (the count can only be
    // smaller on a slower machine); an immediate redial after each HELLO makes hundreds.
    console.log(`redials within the grace period: ${server.connections - 1}`);
    expect(server.connections - 1).toBeLessThanOrEqual(9);
  });

  it("a message over 1 MiB is fatal to the session (no redial), and the pending call rejects", async () => {
    const server = await sessionServer((ws, n) => {
      ws.once("message", () => {
        ws.send(Buffer.concat([Buffer.of(0x02), PROTOCOL_HELLO]));
        if (n === 1) ws.on("message", () => ws.send(Buffer.alloc(MAX_DATA_BYTES + 2, 0x02)));
      });
    });
    const connection = await connectWebSocket(server.url, { token: TOKEN, graceMs: 60_000 });
    const err = await connection.fs.ls.exists("/workspace/a").catch((e) => e);
    expect(err.message).toMatch(/^remote connection closed: .*Max payload size exceeded/);
    expect(server.connections).toBe(1);
  });
});
