// The sandbox adapters (js/sandboxes.js) against each platform: the real @vercel/sandbox, e2b and
// @daytonaio/sdk SDKs on local fakes of their APIs (helpers/fake-vercel.js, helpers/fake-e2b-envd.js,
// helpers/fake-daytona.js); a temp dir for the uploads, local processes for the commands, a loopback URL
// for the port. Each adapter must upload once (a second connect finds the same bytes and skips), put the
// token only in the environment (never in argv), connect, and stop what it started on close. The "VM" runs
// the uploaded binary itself: the real pi-native-ops-server --listen.
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Daytona } from "@daytonaio/sdk";
import { Sandbox as VercelSandbox } from "@vercel/sandbox";
import { Sandbox as E2BSandbox } from "e2b";
import { connectDaytona, connectE2B, connectVercelSandbox } from "pi-native-ops";
import { startFakeDaytona } from "./helpers/fake-daytona.js";
import { startFakeEnvd } from "./helpers/fake-e2b-envd.js";
import { startFakeVercel } from "./helpers/fake-vercel.js";
import { serverPath } from "./helpers/face.js";

const bin = serverPath();

let vm;
beforeAll(() => {
  vm = realpathSync(mkdtempSync(path.join(tmpdir(), "remote-sandboxes-")));
});
/** The fake platforms started (E2B's daemons, Daytona's APIs), closed at the end. */
const platforms = [];
afterAll(async () => {
  delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
  for (const platform of platforms) await platform.close();
  rmSync(vm, { recursive: true, force: true });
});

/**
 * A loopback port free right now, below Linux's ephemeral range (32768 and up): the ports other test
 * files' servers get from `listen(0)` never collide with it between this check and its use.
 */
async function freePort() {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    const server = net.createServer();
    const free = await new Promise((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => resolve(true));
    });
    if (!free) continue;
    await new Promise((resolve) => server.close(resolve));
    if (!vercelPorts.includes(port)) return port;
  }
}

/**
 * The ports the tests' servers listen on, free when the file starts, taken in turn: a Vercel sandbox
 * exposes only the ports it was created with, so each is created with all of them.
 */
const vercelPorts = [];
beforeAll(async () => {
  while (vercelPorts.length < 16) vercelPorts.push(await freePort());
});
let portsTaken = 0;
const nextPort = async () => vercelPorts[portsTaken++ % vercelPorts.length];

/** What a fake saw: uploads, started commands (argv, env), kills, and the processes it ran. */
function newLog() {
  return { uploads: [], started: [], kills: 0, children: [] };
}

/** The words of a line the adapters quote ('a' 'b' ...). */
const words = (line) => [...line.matchAll(/'((?:[^']|'\\'')*)'/g)].map((m) => m[1].replaceAll("'\\''", "'"));

/**
 * The real @vercel/sandbox SDK's Sandbox (`Sandbox.create` with `ports`), its API a local fake
 * (helpers/fake-vercel.js, reached through the SDK's `fetch` option): uploads, commands, their exits and
 * logs, and domain(port)'s routes come from the SDK's own code. The routes' URLs are the fake's TLS edge on
 * 127.0.0.1, whose certificate is self-signed: certificates are not checked while these tests run.
 */
async function fakeVercel(log, ports) {
  const api = await startFakeVercel({
    onUpload: (file) => log.uploads.push(file),
    onStart: (cmd, args, env, child) => {
      log.started.push({ argv: [cmd, ...args], env });
      child.exited = new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
      log.children.push(child);
    },
    onKill: () => {
      log.kills++;
    },
  });
  platforms.push(api);
  process.env.NODE_TLS_REJECT_UNAUTHORIZED = "0";
  // A sandbox exposes the ports it is created with; the shared tests dial a fresh port each time.
  return VercelSandbox.create({
    token: "token",
    teamId: "team_test",
    projectId: "prj_test",
    ports: ports ?? vercelPorts,
    fetch: api.fetch,
  });
}

/**
 * The real e2b SDK's Sandbox in E2B's debug mode (its getHost gives `localhost:PORT`, plain http), its
 * daemon a local fake (helpers/fake-e2b-envd.js): uploads, commands and their exits go through the SDK.
 */
async function fakeE2B(log) {
  const envd = await startFakeEnvd({
    onUpload: (file) => log.uploads.push(file),
    onStart: (line, envs, child) => {
      child.stderrText = "";
      child.stderr.on("data", (d) => {
        child.stderrText += d;
      });
      child.exited = new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
      // The adapter's setup lines run `sh -c …`; the server's is its quoted argv.
      if (line.startsWith("sh -c ")) return;
      log.started.push({ argv: words(line), env: envs });
      log.children.push(child);
    },
    onSignal: () => {
      log.kills++;
    },
  });
  platforms.push(envd);
  const sandbox = await E2BSandbox.create({ debug: true, sandboxUrl: envd.url });
  return Object.assign(sandbox, { trafficAccessToken: "traffic-token" });
}

/**
 * The real @daytonaio/sdk's Sandbox (`daytona.get`), its API and toolbox a local fake
 * (helpers/fake-daytona.js): uploads, the session command, its exit code and logs go through the SDK.
 */
async function fakeDaytona(log) {
  const fake = await startFakeDaytona("sb-test", {
    onUpload: (file) => log.uploads.push(file),
    onExec: (command, child) => {
      // The server's command line, as the shell execs it: its argv.
      const line = words(command)[0];
      log.started.push({ argv: words(line.slice(line.indexOf("exec ") + 5)), env: {} });
      child.exited = new Promise((resolve) => child.once("close", (code, signal) => resolve({ code, signal })));
      log.children.push(child);
    },
    onDeleteSession: () => {
      log.kills++;
    },
  });
  platforms.push(fake);
  // No event stream: the SDK polls (there is no socket to fake).
  const daytona = new Daytona({ apiKey: "key", apiUrl: fake.apiUrl, target: "local", useDeprecatedPolling: true });
  return daytona.get("sb-test");
}

const adapters = [
  ["connectVercelSandbox", connectVercelSandbox, fakeVercel],
  ["connectE2B", connectE2B, fakeE2B],
  ["connectDaytona", connectDaytona, fakeDaytona],
];

describe.each(adapters)("%s", (name, connectTo, fake) => {
  it("uploads once, keeps the token out of argv, connects, and stops the server on close", async () => {
    const log = newLog();
    const sandbox = await fake(log);
    const remotePath = path.join(vm, `${name}-server`);
    const token = `tok-${name}-0123456789`;
    const opts = { root: vm, serverPath: remotePath, binary: bin, token, host: "127.0.0.1" };

    for (const round of [1, 2]) {
      const connection = await connectTo(sandbox, { ...opts, port: await nextPort() });
      // The same binary is there after the first round: no second upload.
      expect(log.uploads.filter((f) => f === `${remotePath}.upload`)).toEqual([`${remotePath}.upload`]);
      const started = log.started[round - 1];
      expect(started.argv).toContain("--listen");
      expect(JSON.stringify(started.argv)).not.toContain(token);
      if (name !== "connectDaytona") expect(started.env).toEqual({ PI_NATIVE_OPS_TOKEN: token });
      // Daytona's token went through a file the starting shell deleted.
      expect(readdirSync(vm).filter((f) => f.endsWith(".token"))).toEqual([]);
      expect(connection.server.root).toBe(vm);
      writeFileSync(path.join(vm, "hello.txt"), `round ${round}`);
      expect((await connection.fs.read.readFile(path.join(vm, "hello.txt"))).toString()).toBe(`round ${round}`);
      await connection.close();
      expect(await log.children[round - 1].exited).toBeDefined();
      expect(log.kills).toBe(round);
    }

    // Other bytes at the path: uploaded again.
    // (Unlinked first: the last server may still be running the old file.)
    rmSync(remotePath);
    writeFileSync(remotePath, "not the server");
    const connection = await connectTo(sandbox, { ...opts, port: await nextPort() });
    expect(log.uploads.filter((f) => f === `${remotePath}.upload`)).toEqual([
      `${remotePath}.upload`,
      `${remotePath}.upload`,
    ]);
    await connection.close();
    await log.children[2].exited;
  });

  it("reports a setup command that fails in the sandbox (the upload cannot be moved into place)", async () => {
    const log = newLog();
    // A directory where the binary should go, holding a directory of the upload's name: mv fails.
    const remotePath = path.join(vm, `${name}-dir`, "server");
    mkdirSync(path.join(remotePath, "server.upload"), { recursive: true });
    await expect(
      connectTo(await fake(log), {
        root: vm,
        serverPath: remotePath,
        binary: bin,
        host: "127.0.0.1",
        port: await nextPort(),
      }),
    ).rejects.toThrow(/exited with (code )?[1-9]/);
    expect(log.started).toEqual([]);
  });

  it("fails at once when the server exits before it listens, with its exit code and stderr", async () => {
    const log = newLog();
    // A "server" that dies at start as a real one does on a bad root: a message on stderr, exit 2.
    const dies = path.join(vm, `${name}-dies.sh`);
    writeFileSync(dies, "#!/bin/sh\necho 'pi-native-ops-server: --root: No such file or directory' >&2\nexit 2\n");
    chmodSync(dies, 0o755);
    const failing = connectTo(await fake(log), {
      root: vm,
      serverPath: path.join(vm, `${name}-dying`),
      binary: dies,
      host: "127.0.0.1",
      port: await nextPort(),
      // Far longer than any test waits: only the exit can end the dial in time.
      startTimeoutMs: 600_000,
    });
    await expect(failing).rejects.toThrow(
      "the server in the sandbox exited (2) before it listened: pi-native-ops-server: --root: No such file or directory",
    );
    expect(log.kills).toBe(1);
  });

  it("passes policy and onPolicyEvent to the server, type-checked before anything starts", async () => {
    const log = newLog();
    const sandbox = await fake(log);
    await expect(connectTo(sandbox, { root: vm, policy: { denyRead: ".env" } })).rejects.toThrow(
      `${name}: options.policy.denyRead must be an array of strings`,
    );
    await expect(connectTo(sandbox, { root: vm, onPolicyEvent: true })).rejects.toThrow(TypeError);
    expect(log.started).toEqual([]);
    const opts = { root: vm, serverPath: path.join(vm, `${name}-policy`), binary: bin, host: "127.0.0.1" };
    // The server's core compiled it: its refusal of a rule is connect's error.
    await expect(
      connectTo(sandbox, { ...opts, port: await nextPort(), policy: { denyRead: ["a{b"] } }),
    ).rejects.toThrow(/^policy\.denyRead: invalid rule "a\{b"/);
    expect(log.kills).toBe(1);
    const connection = await connectTo(sandbox, {
      ...opts,
      port: await nextPort(),
      policy: { denyRead: ["*.pem"] },
      onPolicyEvent: () => {},
    });
    writeFileSync(path.join(vm, "policy.txt"), "ok");
    expect((await connection.fs.read.readFile(path.join(vm, "policy.txt"))).toString()).toBe("ok");
    await connection.close();
  });

  it("says what is missing from an object that is not such a sandbox", async () => {
    await expect(connectTo({}, { root: "/" })).rejects.toThrow(/the sandbox object has no/);
    await expect(connectTo(await fake(newLog()), {})).rejects.toThrow(/options.root/);
  });
});

describe("connectVercelSandbox: the port", () => {
  it("is checked before anything is uploaded: it must be in `ports` at Sandbox.create", async () => {
    const log = newLog();
    // The SDK's own Sandbox, created exposing another port than the adapter's default (8765).
    const sandbox = await fakeVercel(log, [await nextPort()]);
    expect(() => sandbox.domain(8765)).toThrow("No route for port 8765");
    await expect(
      connectVercelSandbox(sandbox, { root: vm, serverPath: path.join(vm, "vercel-port"), binary: bin }),
    ).rejects.toThrow(
      "the Vercel sandbox does not expose port 8765 (No route for port 8765): give it in `ports` at Sandbox.create",
    );
    expect(log.uploads).toEqual([]);
    expect(log.started).toEqual([]);
    expect((await sandbox.stop()).status).toBe("stopped");
  });
});

describe("connectE2B: E2B's debug mode", () => {
  it("dials the SDK's localhost:PORT host over plain http", async () => {
    const log = newLog();
    const sandbox = await fakeE2B(log);
    const port = await nextPort();
    expect(sandbox.getHost(port)).toBe(`localhost:${port}`);
    const connection = await connectE2B(sandbox, {
      root: vm,
      serverPath: path.join(vm, "e2b-debug-server"),
      binary: bin,
      host: "127.0.0.1",
      port,
    });
    expect(connection.server.root).toBe(vm);
    await connection.close();
  });
});
