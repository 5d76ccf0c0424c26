// connectWebSocket (js/websocket.js): the resumable session between connect() and a server's --listen.
// Against the built server when it has --listen, else the fake of its side (helpers/ws-server.js), always
// through a loopback TCP proxy that cuts connections wherever a byte count lands: mid-frame, mid-flood,
// mid-grep, during a write. Every call's result must equal, byte for byte, that of an uncut connection.
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectWebSocket } from "pi-native-ops";
import { serverPath } from "./helpers/face.js";
import { cuttingProxy, hasListen, newToken, startFake, startListening } from "./helpers/ws-server.js";

const MiB = 1024 * 1024;
const bin = serverPath();
const real = bin !== null && hasListen(bin);

let dir;
const cleanups = [];
beforeAll(() => {
  dir = realpathSync(mkdtempSync(path.join(tmpdir(), "remote-ws-")));
  // A tree for grep and glob: many files, many matches, so an answer spans several frames.
  for (let d = 0; d < 20; d++) {
    mkdirSync(path.join(dir, "src", `d${d}`), { recursive: true });
    for (let f = 0; f < 20; f++) {
      const lines = Array.from({ length: 200 }, (_, i) => `line ${i} of ${d}/${f} ${i % 7 === 0 ? "needle" : "hay"}`);
      writeFileSync(path.join(dir, "src", `d${d}`, `f${f}.txt`), `${lines.join("\n")}\n`);
    }
  }
  const big = Buffer.alloc(6 * MiB);
  for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24;
  writeFileSync(path.join(dir, "big.bin"), big);
});
afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  rmSync(dir, { recursive: true, force: true });
});

/** A server for `dir` (the real one or the fake), and a cutting proxy in front of it. */
async function serve(options = {}) {
  const server = real
    ? await startListening(bin, { root: dir, ...options })
    : await startFake(bin, { root: dir, ...options });
  const proxy = await cuttingProxy(Number(new URL(server.url).port));
  cleanups.push(
    () => server.close(),
    () => proxy.close(),
  );
  return { server, proxy };
}

/** A seeded generator (mulberry32): the cut points are the same in every run. */
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The results with each Buffer as its length and SHA-256 (vitest compares big Buffers byte by byte, slowly). */
function digest(value) {
  if (Buffer.isBuffer(value))
    return `${value.length} bytes, sha256 ${createHash("sha256").update(value).digest("hex")}`;
  if (Array.isArray(value)) return value.map(digest);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, digest(v)]));
  }
  return value;
}

/** Runs exec and gathers everything onData got, in order. */
async function exec(conn, command) {
  const chunks = [];
  const { exitCode } = await conn.bash.exec(command, dir, { onData: (d) => chunks.push(Buffer.from(d)) });
  return { exitCode, output: Buffer.concat(chunks) };
}

/** The workload: every kind of call, some large in each direction, several at once. */
async function workload(conn, tag) {
  const written = Buffer.alloc(5 * MiB);
  for (let i = 0; i < written.length; i++) written[i] = (i * 31 + tag.length) & 0xff;
  const results = {};
  const [flood, numbers, big, grep, glob] = await Promise.all([
    exec(conn, "head -c 12000000 /dev/zero | tr '\\0' 'x' | fold -w 99"),
    exec(conn, "seq 1 200000"),
    conn.fs.read.readFile(path.join(dir, "big.bin")),
    conn.grep({ pattern: "needle", path: dir, limit: 100000 }),
    conn.fs.find.glob("**/*.txt", dir, { limit: 100000 }),
  ]);
  Object.assign(results, { flood, numbers, big, grep, glob });
  const target = path.join(dir, `written-${tag}.bin`);
  await conn.fs.write.writeFile(target, written);
  results.writtenBack = (await conn.fs.read.readFile(target)).equals(written);
  results.stat = (await conn.fs.ls.stat(target)).size;
  const streamed = [];
  for await (const chunk of conn.fs.read.createReadStream(path.join(dir, "big.bin"))) streamed.push(Buffer.from(chunk));
  results.streamed = Buffer.concat(streamed);
  results.readdir = (await conn.fs.ls.readdir(path.join(dir, "src"))).sort();
  return results;
}

describe(`connectWebSocket (${real ? "pi-native-ops-server --listen" : "the fake of --listen: the built server has none"})`, () => {
  it("gives every call the same bytes through a proxy that cuts the connection again and again", async () => {
    const { server, proxy } = await serve();
    const uncutServer = await serve();
    const uncut = await connectWebSocket(uncutServer.server.url, { token: uncutServer.server.token });
    const expected = await workload(uncut, "a");
    await uncut.close();

    const conn = await connectWebSocket(proxy.url, { token: server.token });
    const next = random(26);
    // Between 64 KiB and 3 MiB of traffic (both ways, upgrades included) between cuts: some cuts come
    // before a whole 1 MiB message got through (it is resent), most after.
    proxy.cutEvery(() => 64 * 1024 + Math.floor(next() * 3 * MiB));
    const got = await workload(conn, "a");
    proxy.stopCutting();
    expect(proxy.cuts).toBeGreaterThanOrEqual(10);
    expect(got.writtenBack).toBe(true);
    expect(digest(got)).toEqual(digest(expected));
    await conn.close();
  });

  it("close() ends the session: the server's side ends", async () => {
    const { server } = await serve();
    const conn = await connectWebSocket(server.url, { token: server.token });
    await conn.fs.ls.stat(dir);
    await conn.close();
    if (real) expect(await server.exited).toEqual({ code: 0, signal: null });
    await expect(conn.fs.ls.stat(dir)).rejects.toThrow("remote connection closed: closed by the client");
  });

  it("refuses a wrong or missing token with the server's 401, and a second session with its 409", async () => {
    const { server } = await serve();
    await expect(connectWebSocket(server.url, { token: "wrong" })).rejects.toThrow(
      /refused the token \(401\): it is missing or wrong/,
    );
    const conn = await connectWebSocket(server.url, { token: server.token, tokenIn: "protocol" });
    await expect(connectWebSocket(server.url, { token: server.token })).rejects.toThrow(
      /already has a session \(409\)/,
    );
    expect((await conn.fs.ls.stat(dir)).isDirectory()).toBe(true);
    await conn.close();
  });

  it("rejects pending calls with `remote connection closed: …` once no resume succeeds within graceMs", async () => {
    const { server, proxy } = await serve();
    const conn = await connectWebSocket(proxy.url, { token: server.token, graceMs: 300 });
    let started;
    const begun = new Promise((resolve) => {
      started = resolve;
    });
    const pending = conn.bash.exec("echo started; sleep 600", dir, { onData: () => started() });
    await begun;
    // The proxy goes away: every redial is refused until the grace passes.
    await proxy.close();
    await expect(pending).rejects.toThrow(
      /^remote connection closed: .*WebSocket session lost: no resume within 300 ms/,
    );
    await expect(conn.fs.ls.stat(dir)).rejects.toThrow(/^remote connection closed: /);
  });

  it("takes a connection that went silent for a drop (pings unanswered) and resumes on a new one", async () => {
    const { server, proxy } = await serve();
    const conn = await connectWebSocket(proxy.url, { token: server.token, pingIntervalMs: 50 });
    await conn.fs.ls.stat(dir);
    const before = proxy.connections;
    // The old socket stays open but carries nothing: the server must take the resume over it.
    proxy.freeze();
    expect((await conn.fs.ls.stat(dir)).isDirectory()).toBe(true);
    expect(proxy.connections).toBeGreaterThan(before);
    await conn.close();
  });

  it("close() during a drop resolves once the session cannot be resumed, and ends it when it can", async () => {
    const { server, proxy } = await serve();
    const conn = await connectWebSocket(proxy.url, { token: server.token, graceMs: 300 });
    await conn.fs.ls.stat(dir);
    await proxy.close();
    await conn.close();
    await expect(conn.fs.ls.stat(dir)).rejects.toThrow("remote connection closed: closed by the client");

    // A drop the redial repairs: the close goes out on the resumed socket, and the server's session ends.
    const again = await serve();
    const resumed = await connectWebSocket(again.proxy.url, { token: again.server.token });
    await resumed.fs.ls.stat(dir);
    again.proxy.cut();
    await resumed.close();
    if (real) expect(await again.server.exited).toEqual({ code: 0, signal: null });
  });

  it.runIf(real)("connects and resumes while unauthenticated connections hold every place they may", async () => {
    const { server, proxy } = await serve({ args: ["--grace", "8"] });
    const { port } = new URL(server.url);
    // 100 connections that send half an upgrade and stop, each opened again when the server drops it.
    let turnedAway = 0;
    let stopped = false;
    const open = new Set();
    const attack = () => {
      if (stopped) return;
      const socket = net.connect(Number(port), "127.0.0.1", () => socket.write("GET / HTTP/1.1\r\nHost: x\r\nUpgr"));
      open.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => {
        open.delete(socket);
        turnedAway++;
        setTimeout(attack, 50);
      });
    };
    for (let i = 0; i < 100; i++) attack();
    cleanups.push(() => {
      stopped = true;
      for (const socket of open) socket.destroy();
    });
    // Once some are turned away, every place the server keeps for them is taken.
    while (turnedAway === 0) await new Promise((r) => setTimeout(r, 10));
    const conn = await connectWebSocket(proxy.url, { token: server.token, graceMs: 4000 });
    expect((await conn.fs.ls.stat(dir)).isDirectory()).toBe(true);
    const before = proxy.connections;
    proxy.cut();
    expect((await conn.fs.ls.stat(dir)).isDirectory()).toBe(true);
    expect(proxy.connections).toBeGreaterThan(before);
    await conn.close();
  });

  it("checks its arguments", async () => {
    await expect(connectWebSocket("ws://127.0.0.1:1/", {})).rejects.toThrow(TypeError);
    await expect(connectWebSocket("ws://127.0.0.1:1/", { token: "a b" })).rejects.toThrow(/PI_NATIVE_OPS_TOKEN/);
    await expect(connectWebSocket("ftp://x/", { token: newToken() })).rejects.toThrow(/ws:, wss:, http: or https:/);
    await expect(connectWebSocket("ws://127.0.0.1:1/", { token: newToken(), graceMs: -1 })).rejects.toThrow(/graceMs/);
    // Nothing listens on port 1: the first dial gives up after connectTimeoutMs with the reason.
    await expect(connectWebSocket("ws://127.0.0.1:1/", { token: newToken(), connectTimeoutMs: 0 })).rejects.toThrow(
      /could not connect within 0 ms \(connect ECONNREFUSED/,
    );
  });
});
