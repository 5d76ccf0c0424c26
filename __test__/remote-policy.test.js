// The policy on the remote face: connect({ policy, onPolicyEvent }) and connectWebSocket send
// the policy before any call, the server's core compiles it (over the server's own --policy) and enforces
// it, refusals come back as the core's Protected error with its rule, and onPolicyEvent receives the
// refusals of the file tools and the server's event frames. The client's side against the fake server
// (helpers/fake-server.js), where the test scripts the server's frames; the rest against the real server
// over stdio and over a WebSocket.
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, connectWebSocket, createBoundFs, createRemoteToolDefinitions } from "pi-native-ops";
import { serverPath } from "./helpers/face.js";
import { fakeServer } from "./helpers/fake-server.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";
import { hasListen, startListening } from "./helpers/ws-server.js";

let base;
let dir;
beforeAll(() => {
  base = tempDir("pno-remote-policy-");
  dir = makeTree(path.join(base, "root"), {
    "a.txt": "alpha needle\n",
    ".env": "KEY=needle\n",
    "secrets/token.txt": "needle\n",
    "src/main.js": "needle()\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/hooks/.keep": "",
  });
});
afterAll(() => removeTree(base));

/** Waits until `predicate()` holds, polling once per event-loop turn (no wall-clock assertion). */
async function until(predicate) {
  while (!predicate()) await new Promise((resolve) => setImmediate(resolve));
}

async function failure(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}

/** What a caller can see of an error: its class, message, and own properties in order. */
const shape = (err) => ({
  class: err?.constructor?.name,
  message: err?.message,
  props: Object.fromEntries(Object.keys(err ?? {}).map((k) => [k, err[k]])),
});

/** The Protected refusal's frame fields, as the server sends the core's error. */
const protectedFields = (p, rule) => ({ kind: "Protected", message: `path "${p}" is protected by policy`, rule });

describe("the client's side (a scripted server)", () => {
  it("sends the policy as the first call, in the hello's write, asking for events with a callback", async () => {
    const server = fakeServer(dir);
    const policy = { denyRead: [".env", "secrets/"], denyWrite: ["dist/"], protect: false };
    const conn = await connect(server.transport, { policy, onPolicyEvent: () => {} });
    expect(server.frames.slice(0, 2)).toEqual([
      expect.objectContaining({ t: "hello" }),
      { t: "call", id: 1, op: "policy", ...policy, events: true },
    ]);
    expect(server.writes.length).toBe(1);
    await conn.close();
  });

  it("sends only what was given; without policy or callback, no policy call (the server's default applies)", async () => {
    let server = fakeServer(dir);
    let conn = await connect(server.transport, { policy: { denyRead: ["*.pem"] } });
    expect(server.frames[1]).toEqual({ t: "call", id: 1, op: "policy", denyRead: ["*.pem"], events: false });
    await conn.close();
    server = fakeServer(dir);
    conn = await connect(server.transport, { onPolicyEvent: () => {} });
    expect(server.frames[1]).toEqual({ t: "call", id: 1, op: "policy", events: true });
    await conn.close();
    server = fakeServer(dir);
    conn = await connect(server.transport);
    await conn.fs.ls.exists(path.join(dir, "a.txt"));
    expect(server.frames.map((f) => f.op ?? f.t)).toEqual(["hello", "exists"]);
    await conn.close();
  });

  it("options of the wrong type are TypeErrors before anything is sent", async () => {
    for (const [options, message] of [
      [{ policy: [".env"] }, "options.policy must be an object"],
      [{ policy: null }, "options.policy must be an object"],
      [{ policy: { denyRead: ".env" } }, "options.policy.denyRead must be an array of strings"],
      [{ policy: { denyWrite: [1] } }, "options.policy.denyWrite must be an array of strings"],
      [{ policy: { protect: "yes" } }, "options.policy.protect must be a boolean"],
      [{ policy: { denyRaed: [".env"] } }, "options.policy.denyRaed is not a policy option"],
      [{ onPolicyEvent: "log" }, "options.onPolicyEvent must be a function"],
    ]) {
      const server = fakeServer(dir);
      const err = await failure(connect(server.transport, options));
      expect(err).toBeInstanceOf(TypeError);
      expect(err.message).toContain(message);
      expect(server.frames).toEqual([]);
    }
    await expect(connectWebSocket("ws://127.0.0.1:9/", { token: "t", policy: { protect: 1 } })).rejects.toThrow(
      TypeError,
    );
  });

  it("the remote tools refuse a policy of their own: the connection's is the one enforced", async () => {
    const server = fakeServer(dir);
    const connection = await connect(server.transport);
    for (const key of ["policy", "onPolicyEvent"]) {
      expect(() => createRemoteToolDefinitions(dir, { connection, [key]: {} })).toThrow(
        `${key}: give it to connect(transport, { ${key} })`,
      );
    }
    await connection.close();
  });

  it("a policy the server refuses fails connect with the server's error, and closes the connection", async () => {
    const message = "policy.denyRead: invalid rule \"a{b\": error parsing glob 'a{b': unclosed alternate group";
    const server = fakeServer(dir, {
      intercept: (call, s) => {
        if (call.op !== "policy") return false;
        s.send({ t: "error", id: call.id, error: { kind: "InvalidGlob", message } });
        return true;
      },
    });
    const err = await failure(connect(server.transport, { policy: { denyRead: ["a{b"] } }));
    expect(shape(err)).toEqual({ class: "Error", message, props: {} });
    await until(() => server.ended);
  });

  it("event frames reach onPolicyEvent in the contract's shape and order; a drop count as { dropped, time }", async () => {
    const server = fakeServer(dir);
    const events = [];
    const conn = await connect(server.transport, { onPolicyEvent: (e) => events.push(e) });
    server.send({
      t: "event",
      command: "cat .env",
      allowed: false,
      time: 1764787200000.5,
      rule: ".env",
      path: "/workspace/.env",
      access: "read",
      tool: "bash",
      extra: "not part of the shape",
    });
    server.send({
      t: "event",
      tool: "bash",
      access: "connect",
      host: "example.com",
      port: 443,
      rule: null,
      allowed: false,
      time: 2,
      command: "curl example.com",
    });
    server.send({ t: "eventsDropped", count: 7 });
    await until(() => events.length === 3);
    expect(events[0]).toEqual({
      tool: "bash",
      access: "read",
      path: "/workspace/.env",
      rule: ".env",
      allowed: false,
      time: 1764787200000.5,
      command: "cat .env",
    });
    expect(Object.keys(events[0])).toEqual(["tool", "access", "path", "rule", "allowed", "time", "command"]);
    expect(Object.keys(events[1])).toEqual(["tool", "access", "host", "port", "rule", "allowed", "time", "command"]);
    expect(events[1].rule).toBeNull();
    expect(events[2]).toEqual({ dropped: 7, time: expect.any(Number) });
    await conn.close();
  });

  it("a callback that throws or rejects stops nothing: later events, calls and answers go on", async () => {
    const server = fakeServer(dir);
    let calls = 0;
    const conn = await connect(server.transport, {
      onPolicyEvent: (e) => {
        calls++;
        if (e.time === 1) throw new Error("callback bug");
        return Promise.reject(new Error("async callback bug"));
      },
    });
    server.send({ t: "event", tool: "bash", access: "write", path: "/w/x", rule: "x", allowed: false, time: 1 });
    server.send({ t: "event", tool: "bash", access: "write", path: "/w/x", rule: "x", allowed: false, time: 2 });
    await until(() => calls === 2);
    expect((await conn.fs.read.readFile(path.join(dir, "a.txt"))).toString()).toBe("alpha needle\n");
    await conn.close();
  });

  it("the Protected error keeps its rule (after path's place) and each tool's refusal is one event", async () => {
    const refused = new Set([".env", "secrets", "locked.txt"].map((n) => path.join(dir, n)));
    const rules = { ".env": ".env", secrets: "secrets/", "locked.txt": "locked.txt" };
    const server = fakeServer(dir, {
      intercept: (call, s) => {
        const target = call.path ?? call.cwd;
        if (!refused.has(target)) return false;
        // locked.txt is a denied write only: reading it is allowed.
        if (path.basename(target) === "locked.txt" && call.op === "access" && call.mode === "r") return false;
        s.send({ t: "error", id: call.id, error: protectedFields(target, rules[path.basename(target)]) });
        return true;
      },
    });
    const events = [];
    const conn = await connect(server.transport, { onPolicyEvent: (e) => events.push(e) });
    const env = path.join(dir, ".env");
    const secrets = path.join(dir, "secrets");
    const locked = path.join(dir, "locked.txt");
    const err = await failure(conn.fs.read.readFile(env));
    expect(shape(err)).toEqual({
      class: "Error",
      message: `path "${env}" is protected by policy`,
      props: { rule: ".env" },
    });
    const refusals = [
      [() => conn.fs.read.readFile(env), "read", "read", env],
      [() => conn.fs.read.access(env), "read", "read", env],
      [() => conn.fs.read.detectImageMimeType(env), "read", "read", env],
      [() => conn.fs.write.writeFile(locked, "x"), "write", "write", locked],
      [() => conn.fs.write.mkdir(locked), "write", "write", locked],
      [() => conn.fs.edit.readFile(env), "edit", "read", env],
      [() => conn.fs.edit.writeFile(locked, "x"), "edit", "write", locked],
      [() => conn.fs.edit.access(locked), "edit", "write", locked],
      // What cannot be read either is refused as a read (the server's "r" answer says so).
      [() => conn.fs.edit.access(env), "edit", "read", env],
      [() => conn.fs.ls.readdir(secrets), "ls", "read", secrets],
      [() => conn.fs.ls.stat(secrets), "ls", "read", secrets],
      [() => conn.fs.ls.exists(secrets), "ls", "read", secrets],
      [() => conn.fs.find.glob("*", secrets, {}), "find", "read", secrets],
      [() => conn.fs.find.exists(secrets), "find", "read", secrets],
      [() => conn.fs.grep.readFile(env), "grep", "read", env],
      [() => conn.fs.grep.isDirectory(secrets), "grep", "read", secrets],
    ];
    for (const [run, tool, access, p] of refusals) {
      events.length = 0;
      const e = await failure(run());
      expect(e.rule, tool).toBe(rules[path.basename(p)]);
      expect(events).toEqual([{ tool, access, path: p, rule: e.rule, allowed: false, time: expect.any(Number) }]);
      expect(Object.keys(events[0])).toEqual(["tool", "access", "path", "rule", "allowed", "time"]);
    }
    // A stream's refusal comes as its error.
    events.length = 0;
    const stream = conn.fs.read.createReadStream(env);
    await expect(stream.next()).rejects.toThrow("is protected by policy");
    expect(events).toMatchObject([{ tool: "read", access: "read", path: env, rule: ".env" }]);
    // The grep tool's search.
    events.length = 0;
    const grep = createRemoteToolDefinitions(dir, { connection: conn }).grep;
    await expect(
      grep.execute("c1", { pattern: "x", path: "secrets" }, undefined, undefined, { cwd: dir }),
    ).rejects.toThrow("is protected by policy");
    expect(events).toMatchObject([{ tool: "grep", access: "read", path: secrets, rule: "secrets/" }]);
    // Other failures are no events.
    events.length = 0;
    await failure(conn.fs.read.readFile(path.join(dir, "missing")));
    await failure(conn.fs.ls.stat("/etc/passwd"));
    expect(events).toEqual([]);
    await conn.close();
  });
});

const bin = serverPath();
const TRANSPORTS = bin && hasListen(bin) ? ["stdio", "websocket"] : ["stdio"];

describe.skipIf(!bin).each(TRANSPORTS)("the real server over %s", (transport) => {
  const opened = [];
  afterAll(async () => {
    await Promise.all(opened.splice(0).map((close) => close()));
  });

  /** A connection to a new server on `root` with `options` (and `args` for the server). */
  async function open(options, args = []) {
    if (transport === "stdio") {
      const { spawn } = await import("node:child_process");
      const child = spawn(bin, ["--root", dir, ...args], { stdio: ["pipe", "pipe", "inherit"] });
      const exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
      opened.push(async () => {
        child.kill("SIGKILL");
        await exited;
      });
      const connection = await connect(child, options);
      return { connection, exited };
    }
    const listening = await startListening(bin, { root: dir, args });
    opened.push(() => listening.close());
    const connection = await connectWebSocket(listening.url, { token: listening.token, ...options });
    return { connection, exited: listening.exited.then((r) => r.code) };
  }

  it("a policy is taken, calls go on, and a throwing onPolicyEvent harms nothing", async () => {
    const { connection } = await open({
      policy: { denyRead: [".env"], denyWrite: ["dist/"], protect: true },
      onPolicyEvent: () => {
        throw new Error("callback bug");
      },
    });
    expect((await connection.fs.read.readFile(path.join(dir, "a.txt"))).toString()).toBe("alpha needle\n");
    await connection.fs.read.readFile(path.join(dir, ".env")).catch(() => {});
    expect(await connection.fs.ls.exists(path.join(dir, "src"))).toBe(true);
    await connection.close();
  });

  it("a bad rule fails connect with the core's text", async () => {
    const err = await failure(open({ policy: { denyRead: ["ok", "a{b"] } }));
    expect(err.constructor).toBe(Error);
    expect(err.message).toMatch(/^policy\.denyRead: invalid rule "a\{b": /);
    expect(Object.keys(err)).toEqual([]);
  });

  it.runIf(process.platform === "linux")(
    "a server started with --index builds it again under a client's own policy, and searches read it",
    async () => {
      const { connection } = await open({ policy: { denyRead: ["*.pem"] }, index: true }, ["--index"]);
      expect((await connection.fs.index.ready).state).toBe("ready");
      const found = await connection.fs.find.glob("**/*.js", dir, { ignore: [], limit: 100 });
      expect(found).toEqual([path.join(dir, "src/main.js")]);
      expect((await connection.fs.index.stats()).state).toBe("ready");
      await connection.close();
    },
  );

  it("the index of a --index server leaves out what the client's policy denies", async () => {
    const policy = { denyRead: ["src/", ".env", "secrets/"] };
    const { connection } = await open({ policy, index: true }, ["--index"]);
    expect((await connection.fs.index.ready).state).toBe("ready");
    expect(await connection.fs.find.glob("**/*.js", dir, { ignore: [], limit: 100 })).toEqual([]);
    expect((await connection.grep({ pattern: "needle", path: dir })).matches.map((m) => m.path)).toEqual(["a.txt"]);
    await connection.close();
  });

  it("a bad rule fails as createBoundFs fails with it", async () => {
    const policy = { denyWrite: ["[z-a]"] };
    let local;
    try {
      createBoundFs(dir, { policy });
    } catch (err) {
      local = err;
    }
    const remote = await failure(open({ policy }));
    expect(shape(remote)).toEqual(shape(local));
  });

  it("denied reads are refused with the Protected error and one event each", async () => {
    const events = [];
    const { connection } = await open({
      policy: { denyRead: [".env", "secrets/"] },
      onPolicyEvent: (e) => events.push(e),
    });
    const env = path.join(dir, ".env");
    const err = await failure(connection.fs.read.readFile(env));
    expect(shape(err)).toEqual({
      class: "Error",
      message: `path "${env}" is protected by policy`,
      props: { rule: ".env" },
    });
    expect(events).toEqual([
      { tool: "read", access: "read", path: env, rule: ".env", allowed: false, time: expect.any(Number) },
    ]);
    // Listing, finding and searching skip them silently.
    events.length = 0;
    expect(await connection.fs.ls.readdir(dir)).not.toContain(".env");
    const found = await connection.fs.find.glob("**/*", dir, { ignore: [], limit: 1000 });
    expect(found.some((p) => p.includes("secrets") || p.endsWith(".env"))).toBe(false);
    const grep = await connection.grep({ pattern: "needle", path: dir });
    expect(grep.matches.map((m) => m.path).sort()).toEqual(["a.txt", "src/main.js"]);
    expect(events).toEqual([]);
    await connection.close();
  });

  it("with no policy the protected defaults hold: no git hook is written", async () => {
    const { connection } = await open({});
    const hook = path.join(dir, ".git/hooks/pre-commit");
    const err = await failure(connection.fs.write.writeFile(hook, "#!/bin/sh\n"));
    expect(shape(err)).toEqual({
      class: "Error",
      message: `path "${hook}" is protected by policy`,
      props: { rule: "**/.git/hooks/" },
    });
    await connection.close();
  });

  it("the server's --policy holds whatever the client's policy says", async () => {
    const file = path.join(base, `pinned-${transport}.json`);
    writeFileSync(file, JSON.stringify({ denyRead: ["secrets/"], protect: true }));
    const events = [];
    const { connection } = await open(
      { policy: { denyRead: ["!secrets/token.txt"], protect: false }, onPolicyEvent: (e) => events.push(e) },
      ["--policy", file],
    );
    const token = path.join(dir, "secrets/token.txt");
    expect((await failure(connection.fs.read.readFile(token))).rule).toBe("secrets/");
    expect((await failure(connection.fs.write.writeFile(path.join(dir, ".git/config"), "x"))).rule).toBe(
      "**/.git/config",
    );
    expect(events.map((e) => [e.tool, e.access, e.rule])).toEqual([
      ["read", "read", "secrets/"],
      ["write", "write", "**/.git/config"],
    ]);
    await connection.close();
  });
});
