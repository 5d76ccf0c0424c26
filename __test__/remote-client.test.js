// The remote client's own behaviour (js/remote.js): handshake, framing, coalescing, flow control,
// errors rebuilt from their fields, lifecycle. Against an in-process fake server (helpers/fake-server.js)
// where the test must script or observe the server's side; the parity suites run the real server.
import { spawn, spawnSync } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Duplex, PassThrough } from "node:stream";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  connect,
  createBoundFs,
  createNativeToolDefinitions,
  createRemoteToolDefinitions,
  createRemoteTools,
  serverBinaryPath,
} from "pi-native-ops";
import { fakeServer, frame, frameReader, WINDOW } from "./helpers/fake-server.js";
import { runTool } from "./helpers/pi.js";

const MiB = 1024 * 1024;
const version = JSON.parse(
  await import("node:fs").then((m) => m.readFileSync(new URL("../package.json", import.meta.url))),
).version;

let dir;
beforeAll(() => {
  dir = realpathSync(mkdtempSync(path.join(tmpdir(), "remote-client-")));
  mkdirSync(path.join(dir, "src"));
  for (let i = 0; i < 50; i++) writeFileSync(path.join(dir, "src", `f${i}.txt`), `file ${i}\nneedle ${i}\n`);
  writeFileSync(path.join(dir, "big.bin"), Buffer.alloc(16 * MiB, 7));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Waits until `predicate()` holds, polling once per event-loop turn (no wall-clock assertion). */
async function until(predicate) {
  while (!predicate()) await new Promise((resolve) => setImmediate(resolve));
}

/** The rejection of `promise` (fails the test if it resolves). */
async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}

const errorFields = (e) => ({
  message: e.message,
  code: e.code,
  errno: e.errno,
  syscall: e.syscall,
  path: e.path,
  keys: Object.keys(e),
});

describe("handshake", () => {
  it("sends its hello without waiting for the server's and answers the server's facts", async () => {
    const server = fakeServer(dir, { hello: false });
    const pending = connect(server.transport);
    await until(() => server.frames.length > 0);
    expect(server.frames[0]).toEqual({ t: "hello", protocol: 1, client: version });
    server.send({ t: "hello", protocol: 1, server: "9.9.9", root: "/workspace", platform: "linux-arm64" });
    const conn = await pending;
    // A server older than hello's sandbox says nothing: unconfined, as far as the client can tell.
    expect(conn.server).toEqual({
      protocol: 1,
      version: "9.9.9",
      root: "/workspace",
      platform: "linux-arm64",
      sandbox: null,
    });
    expect(conn.fs.root).toBe("/workspace");
    expect(conn.fs.runtimeRoot).toBe("/workspace");
    await conn.close();
  });

  it("reads hello's sandbox, and fails on a malformed one", async () => {
    const sandboxed = fakeServer(dir, { hello: { sandbox: { mode: "landlock", network: ["a.example"] } } });
    const conn = await connect(sandboxed.transport, { requireSandbox: true });
    expect(conn.server.sandbox).toEqual({ mode: "landlock", network: ["a.example"] });
    await conn.close();
    for (const sandbox of [{ mode: 3, network: false }, { mode: null, network: [1] }, { mode: null }, "namespaces"]) {
      const server = fakeServer(dir, { hello: { sandbox } });
      const err = await rejection(connect(server.transport));
      expect(err.message, JSON.stringify(sandbox)).toBe(
        "remote connection closed: protocol violation: hello with a malformed sandbox",
      );
    }
  });

  it("rejects a server of another protocol, naming both versions, and closes the stream", async () => {
    const server = fakeServer(dir, { hello: { protocol: 2, server: "0.2.0" } });
    const err = await rejection(connect(server.transport));
    expect(err.message).toBe(
      `remote protocol mismatch: client pi-native-ops ${version} speaks protocol 1, server pi-native-ops-server 0.2.0 speaks protocol 2`,
    );
    await until(() => server.ended);
  });

  it("rejects when the stream ends before the hello, and when the connect signal aborts", async () => {
    const server = fakeServer(dir, { hello: false });
    const pending = connect(server.transport);
    server.die();
    expect((await rejection(pending)).message).toBe("remote connection closed: the stream ended");

    const silent = fakeServer(dir, { hello: false });
    const controller = new AbortController();
    const waiting = connect(silent.transport, { signal: controller.signal });
    controller.abort();
    expect((await rejection(waiting)).message).toBe("remote connection closed: connect was aborted");
    await until(() => silent.ended);
  });

  it("takes a Duplex and { readable, writable } web streams as transports", async () => {
    const server = fakeServer(dir);
    const duplex = Duplex.from({ readable: server.transport.readable, writable: server.transport.writable });
    const viaDuplex = await connect(duplex);
    expect((await viaDuplex.fs.read.readFile("/workspace/src/f1.txt")).toString()).toBe("file 1\nneedle 1\n");
    await viaDuplex.close();

    const web = fakeServer(dir);
    const viaWeb = await connect({
      readable: Duplex.toWeb(web.transport.readable).readable,
      writable: Duplex.toWeb(web.transport.writable).writable,
    });
    expect(await viaWeb.fs.ls.exists("/workspace/src/f2.txt")).toBe(true);
    await viaWeb.close();
    await until(() => web.ended);
  });

  it("refuses what is no transport", async () => {
    await expect(connect({})).rejects.toThrow(TypeError);
    await expect(connect({ readable: true, writable: true })).rejects.toThrow(/Duplex stream/);
    await expect(connect(fakeServer(dir).transport, { forwardEnv: "yes" })).rejects.toThrow(/forwardEnv/);
  });
});

describe("calls", () => {
  it("many calls in flight complete correctly when answered in reverse order", async () => {
    const server = fakeServer(dir, { reverse: 100 });
    const conn = await connect(server.transport);
    const calls = [];
    for (let i = 0; i < 50; i++) {
      calls.push(conn.fs.read.readFile(`/workspace/src/f${i}.txt`).then((b) => b.toString()));
      calls.push(conn.fs.ls.stat(`/workspace/src/f${i}.txt`).then((s) => [s.isFile(), s.size]));
    }
    const results = await Promise.all(calls);
    for (let i = 0; i < 50; i++) {
      expect(results[2 * i]).toBe(`file ${i}\nneedle ${i}\n`);
      expect(results[2 * i + 1]).toEqual([true, `file ${i}\nneedle ${i}\n`.length]);
    }
    const ids = server.frames.filter((f) => f.t === "call").map((f) => f.id);
    expect(new Set(ids).size).toBe(100);
    await conn.close();
  });

  it("frames queued in one turn of the event loop go out as one write", async () => {
    const server = fakeServer(dir);
    const conn = await connect(server.transport);
    const before = server.writes.length;
    // Some calls are made after an await: still the same turn of the event loop.
    const calls = [];
    for (let i = 0; i < 20; i++) calls.push(conn.fs.ls.exists(`/workspace/src/f${i}.txt`));
    await Promise.resolve();
    for (let i = 20; i < 40; i++)
      calls.push(
        (async () => {
          await null;
          return conn.fs.ls.exists(`/workspace/src/f${i}.txt`);
        })(),
      );
    expect(await Promise.all(calls)).toEqual(Array(40).fill(true));
    expect(server.writes.length - before).toBe(1);
    await conn.close();
  });

  it("reads frames cut anywhere: one byte at a time", async () => {
    const toClient = new PassThrough();
    const toServer = new PassThrough();
    const bytes = Buffer.concat([
      frame({ t: "hello", protocol: 1, server: "x", root: "/w", platform: "p" }),
      frame({ t: "ok", id: 1 }, Buffer.from("payload \0\xff bytes", "latin1")),
    ]);
    const pending = connect({ readable: toClient, writable: toServer });
    const feed = (async () => {
      for (const byte of bytes) {
        toClient.write(Buffer.from([byte]));
        await new Promise((resolve) => setImmediate(resolve));
      }
    })();
    const conn = await pending;
    const content = await conn.fs.read.readFile("/w/a");
    await feed;
    expect(content).toEqual(Buffer.from("payload \0\xff bytes", "latin1"));
    await conn.close();
  });

  it("waits for 'drain' when the writable is full, then writes what queued meanwhile as one", async () => {
    const server = fakeServer(dir);
    const writable = server.transport.writable;
    const conn = await connect(server.transport);
    // A writable that reports itself full once: the client must hold further frames until 'drain'.
    const write = writable.write;
    let full = true;
    writable.write = (data, ...rest) => {
      write(data, ...rest);
      if (!full) return true;
      full = false;
      return false;
    };
    const first = conn.fs.read.readFile("/workspace/src/f1.txt");
    await until(() => !full);
    const before = server.writes.length;
    const rest = [conn.fs.ls.exists("/workspace/src/f2.txt"), conn.fs.ls.exists("/workspace/src/f3.txt")];
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(server.writes.length).toBe(before);
    writable.emit("drain");
    await Promise.all([first, ...rest]);
    expect(server.writes.length).toBe(before + 1);
    await conn.close();
  });
});

describe("errors", () => {
  it("keep the local error's message, code, errno, syscall and path", async () => {
    const local = createBoundFs(dir, { runtimeRoot: "/workspace" });
    const conn = await connect(fakeServer(dir).transport);
    for (const [op, p] of [
      ["readFile", "/workspace/missing.txt"],
      ["readFile", "/workspace/src"],
      ["readFile", "/etc/passwd"],
      ["stat", "/workspace/nope"],
      ["readdir", "/workspace/big.bin"],
    ]) {
      const ops = op === "readFile" ? "read" : "ls";
      const localError = await rejection(local[ops][op](p));
      const remoteError = await rejection(conn.fs[ops][op](p));
      expect(remoteError).toBeInstanceOf(Error);
      expect(errorFields(remoteError), `${op} ${p}`).toEqual(errorFields(localError));
    }
    // The refusal has no code, so pi's edit tool shows the model the message.
    const refusal = await rejection(conn.fs.edit.access("/etc/passwd"));
    expect(refusal.message).toBe('path "/etc/passwd" is outside workspace');
    expect("code" in refusal).toBe(false);
    await conn.close();
  });

  it("an answer moved into its payload (inPayload) is taken in its header's place", async () => {
    const names = Array.from({ length: 40_000 }, (_, i) => `entry-${String(i).padStart(5, "0")}-padding-padding-pad`);
    const server = fakeServer(dir, {
      exec: (call) => {
        const answer = { t: "ok", id: call.id, exitCode: 3, killed: false, names };
        server.send({ t: "ok", id: call.id, inPayload: true }, Buffer.from(JSON.stringify(answer)));
      },
    });
    const conn = await connect(server.transport);
    expect(await conn.bash.exec("x", "/workspace", { onData() {} })).toEqual({ exitCode: 3 });
    expect(await conn.fs.ls.exists("/workspace/src")).toBe(true);
    await conn.close();
  });

  it("an answer whose header is over 1 MiB fails only its call; the connection goes on", async () => {
    const huge = "x".repeat(2 * MiB);
    let calls = 0;
    const server = fakeServer(dir, {
      exec: (call) => {
        calls++;
        // The first answer's header is over the limit, its payload too; the second is a plain one.
        if (calls === 1) server.send({ t: "ok", id: call.id, exitCode: 0, killed: false, huge }, Buffer.alloc(MiB, 1));
        else server.ok(call.id, { exitCode: 0, killed: false });
      },
    });
    const conn = await connect(server.transport);
    const err = await rejection(conn.bash.exec("x", "/workspace", { onData() {} }));
    expect(err.message).toMatch(/^remote call: the server's answer header of \d+ bytes exceeds the protocol's 1 MiB$/);
    expect(await conn.bash.exec("y", "/workspace", { onData() {} })).toEqual({ exitCode: 0 });
    expect(await conn.fs.read.readFile("/workspace/src/f1.txt")).toEqual(Buffer.from("file 1\nneedle 1\n"));
    // A header over the limit that names no call (no id first) ends the connection, as any header
    // that is no message.
    server.send(`{"x":"${huge}"}`);
    await expect(conn.fs.ls.exists("/workspace/src")).rejects.toThrow(/^remote connection closed: protocol violation/);
    await conn.close();
  });

  it("argument errors are the local TypeErrors, thrown before anything is sent", async () => {
    const server = fakeServer(dir);
    const conn = await connect(server.transport);
    await until(() => server.frames.length === 1); // the client's hello
    const calls = server.frames.length;
    await expect(conn.fs.read.readFile("relative")).rejects.toThrow(TypeError);
    await expect(conn.fs.write.writeFile("/workspace/x", 42)).rejects.toThrow(
      "content must be a string or Buffer, got number",
    );
    await expect(conn.fs.find.glob("*", "/workspace", { limit: -1 })).rejects.toThrow(
      "options.limit must be a number >= 0, got -1",
    );
    await expect(conn.bash.exec(1, "/workspace", { onData() {} })).rejects.toThrow("exec: command must be a string");
    await expect(conn.bash.exec("true", "/workspace", { onData() {}, timeout: -1 })).rejects.toThrow(
      "Invalid timeout: must be a finite number of seconds",
    );
    await new Promise((resolve) => setImmediate(resolve));
    expect(server.frames.length).toBe(calls);
    await conn.close();
  });
});

describe("lifecycle", () => {
  it("when the server dies, every pending call rejects at once and every later call the same way", async () => {
    const server = fakeServer(dir, { reverse: 1000 }); // holds every answer
    const conn = await connect(server.transport);
    const pending = [
      conn.fs.read.readFile("/workspace/src/f1.txt"),
      conn.fs.ls.readdir("/workspace/src"),
      conn.bash.exec("sleep 100", "/workspace", { onData() {} }),
      conn.grep({ pattern: "needle" }),
    ];
    const reader = conn.fs.read.createReadStream("/workspace/big.bin")[Symbol.asyncIterator]();
    pending.push(reader.next());
    await until(() => server.frames.filter((f) => f.t === "call").length === 5);
    server.die();
    for (const p of pending) expect((await rejection(p)).message).toBe("remote connection closed: the stream ended");
    expect((await rejection(conn.fs.ls.exists("/workspace"))).message).toBe(
      "remote connection closed: the stream ended",
    );
    expect((await rejection(conn.fs.find.glob("*", "/workspace"))).message).toBe(
      "remote connection closed: the stream ended",
    );
  });

  it("close() ends the stream, rejects pending calls and later ones", async () => {
    const server = fakeServer(dir, { reverse: 1000 });
    const conn = await connect(server.transport);
    const pending = conn.fs.read.readFile("/workspace/src/f1.txt");
    await until(() => server.frames.some((f) => f.t === "call"));
    await conn.close();
    expect(server.ended).toBe(true);
    expect((await rejection(pending)).message).toBe("remote connection closed: closed by the client");
    expect((await rejection(conn.fs.ls.stat("/workspace"))).message).toBe(
      "remote connection closed: closed by the client",
    );
    await conn.close(); // twice is harmless
  });

  it("a frame with impossible lengths or a header that is no JSON object closes the connection", async () => {
    for (const [bytes, reason] of [
      [Buffer.from([0, 0, 0, 0, 0, 0, 0, 0]), "protocol violation: frame lengths out of range (header 0, payload 0)"],
      [
        // Over the header limit, and naming no call in its first bytes.
        Buffer.concat([Buffer.from([0, 0x20, 0, 0, 0, 0, 0, 0]), Buffer.alloc(64, "{")]),
        "protocol violation: a frame header of 2097152 bytes (over the 1 MiB limit)",
      ],
      [
        Buffer.from([0x40, 0, 0, 1, 0, 0, 0, 0]),
        "protocol violation: frame lengths out of range (header 1073741825, payload 0)",
      ],
      [
        Buffer.from([0, 0, 0, 1, 0x40, 0, 0, 1]),
        "protocol violation: frame lengths out of range (header 1, payload 1073741825)",
      ],
      [frame("[1,2]"), "protocol violation: a frame header is not a JSON object"],
      [frame("{nope"), "protocol violation: a frame header is not a JSON object"],
    ]) {
      const server = fakeServer(dir, { reverse: 1000 });
      const conn = await connect(server.transport);
      const pending = conn.fs.read.readFile("/workspace/src/f1.txt");
      server.transport.readable.write(bytes);
      expect((await rejection(pending)).message).toBe(`remote connection closed: ${reason}`);
      await until(() => server.ended);
    }
  });

  it("an error frame without an id ends the connection with the server's message", async () => {
    const server = fakeServer(dir, { reverse: 1000 });
    const conn = await connect(server.transport);
    const pending = conn.fs.ls.exists("/workspace");
    server.send({ t: "error", error: { kind: "Protocol", message: "frame header is not JSON" } });
    expect((await rejection(pending)).message).toBe("remote connection closed: server error: frame header is not JSON");
  });
});

describe("streams", () => {
  it("createReadStream credits chunks as they are taken, so at most the window waits unread", async () => {
    const server = fakeServer(dir);
    const conn = await connect(server.transport);
    const iterator = conn.fs.read.createReadStream("/workspace/big.bin")[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.value.length).toBe(MiB);
    const id = server.frames.find((f) => f.op === "readStream").id;
    const stream = server.streams.get(id);
    // The consumer holds: the server stops once the window is full.
    await until(() => stream.sent === stream.credited + WINDOW);
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(stream.sent).toBe(stream.credited + WINDOW);
    expect(stream.sent).toBeLessThan(16 * MiB);
    let total = first.value.length;
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
      expect(next.value.every((b) => b === 7)).toBe(true);
      total += next.value.length;
    }
    expect(total).toBe(16 * MiB);
    await conn.close();
  });

  it("leaving a read stream early cancels it; a missing file throws the local error", async () => {
    const server = fakeServer(dir);
    const conn = await connect(server.transport);
    for await (const chunk of conn.fs.read.createReadStream("/workspace/big.bin")) {
      expect(chunk.length).toBe(MiB);
      break;
    }
    const id = server.frames.find((f) => f.op === "readStream").id;
    await until(() => server.frames.some((f) => f.t === "cancel" && f.id === id));
    const missing = conn.fs.read.createReadStream("/workspace/none");
    const err = await rejection(missing[Symbol.asyncIterator]().next());
    expect([err.code, err.syscall, err.path]).toEqual(["ENOENT", "open", "/workspace/none"]);
    await conn.close();
  });
});

describe("exec", () => {
  /** An exec that sends `chunks` data frames (respecting credits) and, once cancelled, ends killed. */
  const scripted =
    (chunks, size = 0) =>
    (call, server) => {
      const stream = server.streams.get(call.id);
      let sentChunks = 0;
      let done = false;
      const finish = (fields) => {
        if (done) return;
        done = true;
        server.ok(call.id, fields);
      };
      const pump = () => {
        while (!done && sentChunks < chunks && stream.sent - stream.credited < WINDOW) {
          const bytes = Buffer.from(`chunk ${sentChunks++}\n`.padEnd(size));
          stream.sent += bytes.length;
          server.send({ t: "data", id: call.id }, bytes);
        }
        if (sentChunks === chunks) finish({ exitCode: 0, killed: false });
      };
      server.onCredit = pump;
      server.onCancel = (h) => h.id === call.id && finish({ exitCode: null, killed: true });
      pump();
    };

  it("streams output to onData, credits each chunk, resolves the exit code", async () => {
    const server = fakeServer(dir, { exec: scripted(3) });
    const conn = await connect(server.transport);
    const seen = [];
    const result = await conn.bash.exec("anything", "/workspace", { onData: (b) => seen.push(b.toString()) });
    expect(result).toEqual({ exitCode: 0 });
    expect(seen.join("")).toBe("chunk 0\nchunk 1\nchunk 2\n");
    const id = server.frames.find((f) => f.op === "exec").id;
    await until(() => server.streams.get(id).credited === server.streams.get(id).sent);
    await conn.close();
  });

  it("hands a data frame's bytes to onData as they arrive, before the rest of the frame, and credits them", async () => {
    let call;
    const server = fakeServer(dir, {
      exec: (c) => {
        call = c;
      },
    });
    const conn = await connect(server.transport);
    const seen = [];
    const run = conn.bash.exec("x", "/workspace", { onData: (b) => seen.push(b.toString()) });
    await until(() => call !== undefined);
    const bytes = frame({ t: "data", id: call.id }, Buffer.from("first half|second half"));
    const cut = bytes.length - "second half".length;
    server.transport.readable.write(bytes.subarray(0, cut));
    await until(() => seen.join("") === "first half|");
    await until(() => server.streams.get(call.id).credited === "first half|".length);
    server.transport.readable.write(bytes.subarray(cut));
    await until(() => seen.join("") === "first half|second half");
    server.ok(call.id, { exitCode: 0 });
    expect(await run).toEqual({ exitCode: 0 });
    await until(() => server.streams.get(call.id).credited === "first half|second half".length);
    await conn.close();
  });

  it("abort sends cancel and rejects with `aborted` once the server reports the tree gone", async () => {
    const server = fakeServer(dir, { exec: scripted(Infinity, 64 * 1024) });
    const conn = await connect(server.transport);
    const controller = new AbortController();
    let chunks = 0;
    const run = conn.bash.exec("yes", "/workspace", {
      onData: () => {
        if (++chunks === 10) controller.abort();
      },
      signal: controller.signal,
    });
    expect((await rejection(run)).message).toBe("aborted");
    const id = server.frames.find((f) => f.op === "exec").id;
    expect(server.frames.some((f) => f.t === "cancel" && f.id === id)).toBe(true);
    // Already aborted: nothing is sent.
    const calls = server.frames.filter((f) => f.t === "call").length;
    await expect(conn.bash.exec("true", "/workspace", { onData() {}, signal: controller.signal })).rejects.toThrow(
      "aborted",
    );
    await new Promise((resolve) => setImmediate(resolve));
    expect(server.frames.filter((f) => f.t === "call").length).toBe(calls);
    await conn.close();
  });

  it("timeout sends cancel and rejects with timeout:<seconds>", async () => {
    const server = fakeServer(dir, { exec: () => {} });
    server.onCancel = (h) => server.ok(h.id, { exitCode: null, killed: true });
    const conn = await connect(server.transport);
    expect((await rejection(conn.bash.exec("sleep 100", "/workspace", { onData() {}, timeout: 0.05 }))).message).toBe(
      "timeout:0.05",
    );
    expect(server.frames.some((f) => f.t === "cancel")).toBe(true);
    await conn.close();
  });

  it("a throwing onData cancels the command and is what exec rejects with", async () => {
    const server = fakeServer(dir, { exec: scripted(Infinity, 64 * 1024) });
    const conn = await connect(server.transport);
    const boom = new Error("consumer failed");
    const err = await rejection(
      conn.bash.exec("yes", "/workspace", {
        onData: () => {
          throw boom;
        },
      }),
    );
    expect(err).toBe(boom);
    expect(server.frames.some((f) => f.t === "cancel")).toBe(true);
    await conn.close();
  });

  it("does not send this machine's environment unless asked to", async () => {
    const calls = [];
    const exec = (call, server) => {
      calls.push(call);
      server.ok(call.id, { exitCode: 0, killed: false });
    };
    const env = { SECRET_API_KEY: "sk-123", PATH: "/usr/bin" };
    const run = async (options) => {
      const conn = await connect(fakeServer(dir, { exec }).transport, options);
      await conn.bash.exec("env", "/workspace", { onData() {}, env });
      await conn.close();
      return calls.at(-1);
    };
    expect((await run()).env).toBeNull();
    expect((await run({ forwardEnv: true })).env).toEqual(["SECRET_API_KEY=sk-123", "PATH=/usr/bin"]);
    expect((await run({ forwardEnv: (e) => ({ PATH: e.PATH }) })).env).toEqual(["PATH=/usr/bin"]);
    expect((await run({ forwardEnv: () => undefined })).env).toBeNull();
    const conn = await connect(fakeServer(dir, { exec }).transport);
    await conn.createBashOperations({ shellPath: "/bin/sh" }).exec("true", "/w", { onData() {} });
    expect(calls.at(-1)).toMatchObject({ command: "true", cwd: "/w", shell: "/bin/sh", env: null });
    await conn.close();
  });
});

describe("tools", () => {
  it("the seven tools run remotely; grep's output is the local tool's, byte for byte", async () => {
    const conn = await connect(fakeServer(dir).transport);
    const remote = createRemoteToolDefinitions("/workspace", { connection: conn });
    const local = createNativeToolDefinitions("/workspace", { root: dir, runtimeRoot: "/workspace" });
    expect(Object.keys(remote)).toEqual(Object.keys(local));
    for (const params of [
      { pattern: "needle" },
      { pattern: "needle 4", limit: 3, context: 1 },
      { pattern: "NEEDLE", ignoreCase: true, glob: "f1*" },
      { pattern: "zzz" },
    ]) {
      expect(await runTool(remote.grep, params)).toEqual(await runTool(local.grep, params));
    }
    expect(await runTool(remote.ls, { path: "src", limit: 5 })).toEqual(
      await runTool(local.ls, { path: "src", limit: 5 }),
    );
    expect(await runTool(remote.find, { pattern: "*.txt", limit: 4 })).toEqual(
      await runTool(local.find, { pattern: "*.txt", limit: 4 }),
    );
    expect(await runTool(remote.read, { path: "src/f3.txt" })).toEqual(
      await runTool(local.read, { path: "src/f3.txt" }),
    );
    expect(await runTool(remote.read, { path: "/etc/passwd" })).toEqual(
      await runTool(local.read, { path: "/etc/passwd" }),
    );
    const agentTools = createRemoteTools("/workspace", { connection: conn });
    expect(agentTools.grep.name).toBe("grep");
    expect(await runTool(agentTools.grep, { pattern: "needle 7" })).toEqual(
      await runTool(local.grep, { pattern: "needle 7" }),
    );
    const grepped = await conn.grep({ pattern: "needle 1", path: "src", limit: 2 });
    expect(grepped.matchLimitReached).toBe(2);
    expect(grepped.matches.map((m) => m.path)).toEqual(["f1.txt", "f10.txt"]);
    await conn.close();
  });

  it("an aborted grep sends cancel and rejects with `Operation aborted` and how far it got", async () => {
    const server = fakeServer(dir, { reverse: 1000 }); // the search never answers by itself
    server.onCancel = (h) =>
      server.send({ t: "error", id: h.id, error: { kind: "Aborted", message: "Operation aborted", filesSearched: 3 } });
    const conn = await connect(server.transport);
    const controller = new AbortController();
    const search = conn.grep({ pattern: "needle", signal: controller.signal });
    await until(() => server.frames.some((f) => f.op === "grep"));
    controller.abort();
    const err = await rejection(search);
    expect([err.message, err.filesSearched]).toEqual(["Operation aborted", 3]);
    const id = server.frames.find((f) => f.op === "grep").id;
    expect(server.frames.filter((f) => f.t === "cancel").map((f) => f.id)).toEqual([id]);
    const tool = createRemoteToolDefinitions("/workspace", { connection: conn }).grep;
    expect(await runTool(tool, { pattern: "x" }, { signal: controller.signal })).toEqual({
      error: "Operation aborted",
    });
    await conn.close();
  });

  it("refuses options without a connection made by connect()", () => {
    expect(() => createRemoteTools("/workspace", {})).toThrow(
      "options.connection must be a connection made by connect()",
    );
    expect(() => createRemoteToolDefinitions("/workspace", { connection: { fs: {} } })).toThrow(TypeError);
  });
});

describe("serverBinaryPath", () => {
  it("finds the server in the platform packages of an install, for this machine and for another", () => {
    const repo = fileURLToPath(new URL("..", import.meta.url));
    const addon = readdirSync(repo).find((name) => /^pi-native-ops\..+\.node$/.test(name));
    const suffix = addon.slice("pi-native-ops.".length, -".node".length);
    // As npm lays it out: the package's files, and the platform packages as its dependencies.
    const pkg = path.join(dir, "install", "node_modules", "pi-native-ops");
    mkdirSync(path.join(pkg, "js"), { recursive: true });
    for (const file of ["package.json", "index.js", "native.cjs"])
      copyFileSync(path.join(repo, file), path.join(pkg, file));
    for (const file of readdirSync(path.join(repo, "js")))
      copyFileSync(path.join(repo, "js", file), path.join(pkg, "js", file));
    // The package's dependencies (ws) beside it, as npm installs them.
    const { dependencies = {} } = JSON.parse(readFileSync(path.join(repo, "package.json"), "utf8"));
    for (const dep of Object.keys(dependencies))
      symlinkSync(path.join(repo, "node_modules", dep), path.join(dir, "install", "node_modules", dep));
    const platformPackage = (name, files) => {
      const at = path.join(dir, "install", "node_modules", `pi-native-ops-${name}`);
      mkdirSync(at, { recursive: true });
      copyFileSync(path.join(repo, "npm", name, "package.json"), path.join(at, "package.json"));
      for (const [file, from] of files)
        from ? copyFileSync(from, path.join(at, file)) : writeFileSync(path.join(at, file), "");
      return at;
    };
    const here = platformPackage(suffix, [
      [addon, path.join(repo, addon)],
      ["pi-native-ops-server", null],
    ]);
    const other = platformPackage("linux-arm64-musl", [["pi-native-ops-server", null]]);
    const probe = `import { serverBinaryPath } from "pi-native-ops";
      const code = (target) => { try { serverBinaryPath(target); } catch (e) { return e.code; } };
      console.log(JSON.stringify([serverBinaryPath(), serverBinaryPath({ platform: "linux", arch: "arm64" }), code({ platform: "darwin", arch: "arm64" })]));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", probe], {
      cwd: path.join(dir, "install"),
      encoding: "utf8",
      env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: "" },
    });
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout)).toEqual([
      path.join(here, "pi-native-ops-server"),
      path.join(other, "pi-native-ops-server"),
      "ERR_PI_NATIVE_OPS_NO_SERVER",
    ]);
  });

  it("throws naming the platform, what was tried and the fix when no binary is there", () => {
    let err;
    try {
      serverBinaryPath({ platform: "freebsd", arch: "riscv64" });
    } catch (e) {
      err = e;
    }
    expect(err.code).toBe("ERR_PI_NATIVE_OPS_NO_SERVER");
    expect(err.message).toContain("no pi-native-ops-server binary for freebsd-riscv64");
    expect(err.message).toContain("pi-native-ops-server.freebsd-riscv64");
    expect(err.message).toContain('install the platform package "pi-native-ops-freebsd-riscv64"');
    expect(err.message).toContain("scripts/build-server.sh");
  });
});

/** The server binary serverBinaryPath() finds (scripts/build-server.sh puts it at the repo root), or null. */
function serverPath() {
  try {
    return serverBinaryPath();
  } catch {
    return null;
  }
}

/** The real server over `root` as a child process, connected through `{ stdin, stdout }`. */
async function realServer(root, options) {
  const child = spawn(serverPath(), ["--root", root], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const writes = [];
  const write = child.stdin.write.bind(child.stdin);
  child.stdin.write = (data, ...rest) => {
    writes.push(data.length);
    return write(data, ...rest);
  };
  const conn = await connect(child, options);
  return { child, conn, exited, writes };
}

describe.skipIf(!serverPath())("against the real server", () => {
  it("handshakes over a child process and answers many concurrent calls in one write", async () => {
    const { conn, exited, writes } = await realServer(dir);
    expect(conn.server).toEqual({
      protocol: 1,
      version,
      root: dir,
      platform: `${process.platform}-${process.arch}`,
      sandbox: null,
    });
    const before = writes.length;
    const calls = [];
    for (let i = 0; i < 50; i++) {
      calls.push(conn.fs.read.readFile(path.join(dir, "src", `f${i}.txt`)).then((b) => b.toString()));
      calls.push(conn.fs.find.exists(path.join(dir, "src", `f${i}.txt`)));
    }
    const results = await Promise.all(calls);
    expect(writes.length - before).toBe(1);
    for (let i = 0; i < 50; i++) expect(results.slice(2 * i, 2 * i + 2)).toEqual([`file ${i}\nneedle ${i}\n`, true]);
    await conn.close();
    expect(await exited).toEqual({ code: 0, signal: null });
  });

  it("errors keep the local error's fields", async () => {
    const local = createBoundFs(dir);
    const { conn } = await realServer(dir);
    const cases = [
      (fs) => fs.read.readFile(path.join(dir, "missing.txt")),
      (fs) => fs.read.readFile(path.join(dir, "src")),
      (fs) => fs.edit.access("/etc/passwd"),
      (fs) => fs.ls.stat(path.join(dir, "nope")),
      (fs) => fs.ls.readdir(path.join(dir, "big.bin")),
      (fs) => fs.ls.exists("/etc"),
      (fs) => fs.find.glob("a{", dir),
      (fs) => fs.write.writeFile(path.join(dir, "big.bin", "x"), "x"),
    ];
    for (const run of cases)
      expect(errorFields(await rejection(run(conn.fs))), String(run)).toEqual(errorFields(await rejection(run(local))));
    await conn.close();
  });

  it("createReadStream streams a file whole; leaving early cancels and the connection goes on", async () => {
    const { conn } = await realServer(dir);
    let total = 0;
    for await (const chunk of conn.fs.read.createReadStream(path.join(dir, "big.bin"))) {
      expect(chunk.every((b) => b === 7)).toBe(true);
      total += chunk.length;
    }
    expect(total).toBe(16 * MiB);
    for await (const _chunk of conn.fs.read.createReadStream(path.join(dir, "big.bin"))) break;
    expect((await conn.fs.read.readFile(path.join(dir, "src", "f1.txt"))).toString()).toBe("file 1\nneedle 1\n");
    await conn.close();
  });

  it("exec streams output and exit codes; abort and timeout kill the command", async () => {
    const { conn } = await realServer(dir);
    const out = [];
    expect(await conn.bash.exec("printf 'a\\nb'; exit 3", dir, { onData: (b) => out.push(b) })).toEqual({
      exitCode: 3,
    });
    expect(Buffer.concat(out).toString()).toBe("a\nb");
    const controller = new AbortController();
    const aborted = conn.bash.exec("echo started; sleep 100", dir, {
      onData: () => controller.abort(),
      signal: controller.signal,
    });
    expect((await rejection(aborted)).message).toBe("aborted");
    expect((await rejection(conn.bash.exec("sleep 100", dir, { onData() {}, timeout: 0.2 }))).message).toBe(
      "timeout:0.2",
    );
    const missingCwd = await rejection(conn.bash.exec("true", path.join(dir, "none"), { onData() {} }));
    expect(missingCwd.message).toBe(
      `Working directory does not exist: ${path.join(dir, "none")}\nCannot execute bash commands.`,
    );
    const env = await conn.bash.exec("echo ${PI_REMOTE_SECRET:-unset}", dir, {
      onData: (b) => out.push(b),
      env: { ...process.env, PI_REMOTE_SECRET: "sk-1" },
    });
    expect(env.exitCode).toBe(0);
    expect(out.at(-1).toString()).toBe("unset\n");
    await conn.close();
  });

  it("closing mid-exec rejects the exec and the server exits", async () => {
    const { conn, exited } = await realServer(dir);
    const run = conn.bash.exec("echo go; sleep 100", dir, { onData: () => conn.close() });
    expect((await rejection(run)).message).toBe("remote connection closed: closed by the client");
    expect(await exited).toEqual({ code: 0, signal: null });
  });
});

// Frame reader sanity for the helper itself.
it("the fake's frame reader splits what frame() joins", () => {
  const got = [];
  const read = frameReader((h, p) => got.push([h, p.toString()]));
  read(Buffer.concat([frame({ a: 1 }, Buffer.from("x")), frame({ b: 2 })]));
  expect(got).toEqual([
    [{ a: 1 }, "x"],
    [{ b: 2 }, ""],
  ]);
});
