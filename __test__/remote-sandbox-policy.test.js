// The policy in the remote shell: a server started with `--sandbox MODE` runs every command in the
// core's sandbox, held to the connection's policy (the client's over the server's `--policy`), and sends the
// shell's refusals as event frames, which reach onPolicyEvent with tool "bash" and the command. Without
// `--sandbox` the same commands run unconfined (the documented difference: the policy then holds for the file
// tools only). Over stdio as root and as nobody, and over a WebSocket; both sandbox modes where this machine
// enforces a policy in them. Every outcome is judged on the host side.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import * as pno from "pi-native-ops";
import { connect, connectWebSocket } from "pi-native-ops";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serverPath } from "./helpers/face.js";
import { mkdirAs, nobody, tempDirFor, writeFileAs } from "./helpers/nobody.js";
import { hasListen, startListening } from "./helpers/ws-server.js";

const bin = process.platform === "linux" ? serverPath() : null;
const support = bin ? pno.sandboxSupport() : null;
const modes = [
  ...(support?.enforces.namespaces && support.userNotification ? ["namespaces"] : []),
  ...(support?.enforces.landlock && support.userNotification ? ["landlock"] : []),
];
const runs = [
  ...["root", ...(nobody.argv ? ["nobody"] : [])].map((user) => ({ transport: "stdio", user })),
  ...(bin && hasListen(bin) ? [{ transport: "websocket", user: "root" }] : []),
];
const SECRET = "KEY=needle-secret";
const HOOK_RULE = "**/.git/hooks/";

const cleanup = [];
afterAll(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

/** A workspace owned by `user`: a secret `.env` and a git hooks directory. */
function workspace(user) {
  const root = tempDirFor(user, "pno-remote-sandbox-");
  cleanup.push(() => rmSync(root, { recursive: true, force: true }));
  writeFileAs(user, path.join(root, ".env"), `${SECRET}\n`);
  writeFileAs(user, path.join(root, "a.txt"), "free\n");
  mkdirAs(user, path.join(root, ".git"));
  mkdirAs(user, path.join(root, ".git/hooks"));
  return root;
}

/**
 * A connection to a new server on `root` (as `user`, over `transport`) with `args`, collecting events:
 * `{ connection, events }`.
 */
async function open({ transport, user }, root, args, extra = {}) {
  const events = [];
  const options = { policy: { denyRead: [".env"] }, onPolicyEvent: (e) => events.push(e), ...extra };
  if (transport === "websocket") {
    const listening = await startListening(bin, { root, args });
    cleanup.push(() => listening.close());
    const connection = await connectWebSocket(listening.url, { token: listening.token, ...options });
    cleanup.push(() => connection.close());
    return { connection, events };
  }
  const argv = [...(user === "nobody" ? nobody.argv : []), bin, "--root", root, ...args];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  cleanup.push(async () => {
    child.kill("SIGKILL");
    await exited;
  });
  const connection = await connect(child, options);
  cleanup.push(() => connection.close());
  return { connection, events };
}

/** Runs `command` in `cwd`: `{ exitCode, output }`, or `{ error, code }` when exec rejects. */
async function run(connection, command, cwd) {
  let output = "";
  try {
    const { exitCode } = await connection.bash.exec(command, cwd, { onData: (d) => (output += d) });
    return { exitCode, output };
  } catch (err) {
    return { error: err.message, code: err.code };
  }
}

const READ = "cat .env";
const HOOK = "echo 'touch /tmp/pwned' > .git/hooks/pre-commit";

describe.skipIf(!bin).each(runs)("the remote shell over $transport as $user", (how) => {
  it.each(modes)("--sandbox %s holds the client's policy in bash and reports each refusal", async (mode) => {
    const root = workspace(how.user);
    // Namespaces mode shows the workspace at the runtime root; Landlock mode sees the host's paths.
    const cwd = mode === "namespaces" ? "/workspace" : root;
    const args = ["--sandbox", mode, ...(mode === "namespaces" ? ["--runtime-root", cwd] : [])];
    const { connection, events } = await open(how, root, args, { requireSandbox: true });
    // The hello says how commands run, so a client can require it.
    expect(connection.server.sandbox).toEqual({ mode, network: false });
    const read = await run(connection, READ, cwd);
    expect(read.exitCode).not.toBe(0);
    expect(read.output).not.toContain(SECRET);
    const hook = await run(connection, HOOK, cwd);
    expect(hook.exitCode).not.toBe(0);
    expect(existsSync(path.join(root, ".git/hooks/pre-commit"))).toBe(false);
    // Each command's events come before its answer.
    const event = (access, rel, rule, command) => ({
      tool: "bash",
      access,
      path: path.posix.join(cwd, rel),
      rule,
      allowed: false,
      time: expect.any(Number),
      command,
    });
    expect(events).toEqual([
      event("read", ".env", ".env", READ),
      event("write", ".git/hooks/pre-commit", HOOK_RULE, HOOK),
    ]);
    expect(Object.keys(events[0])).toEqual(["tool", "access", "path", "rule", "allowed", "time", "command"]);
    // What the policy leaves alone works.
    expect(await run(connection, "cat a.txt && echo made > b.txt", cwd)).toEqual({ exitCode: 0, output: "free\n" });
    expect(readFileSync(path.join(root, "b.txt"), "utf8")).toBe("made\n");
    // The file tools hold the same policy.
    await expect(connection.fs.read.readFile(path.join(cwd, ".env"))).rejects.toThrow("is protected by policy");
    // An aborted sandboxed command is killed as an unsandboxed one, and the sandbox serves the next.
    const controller = new AbortController();
    const aborted = connection.bash.exec("echo started; sleep 100", cwd, {
      onData: () => controller.abort(),
      signal: controller.signal,
    });
    await expect(aborted).rejects.toThrow("aborted");
    expect(await run(connection, "echo next", cwd)).toEqual({ exitCode: 0, output: "next\n" });
  });

  it("without --sandbox the shell is not confined by the policy (the file tools still are)", async () => {
    const root = workspace(how.user);
    const { connection, events } = await open(how, root, []);
    expect(connection.server.sandbox).toBe(null);
    expect(await run(connection, READ, root)).toEqual({ exitCode: 0, output: `${SECRET}\n` });
    expect(await run(connection, HOOK, root)).toEqual({ exitCode: 0, output: "" });
    expect(existsSync(path.join(root, ".git/hooks/pre-commit"))).toBe(true);
    expect(events).toEqual([]);
    await expect(connection.fs.read.readFile(path.join(root, ".env"))).rejects.toThrow("is protected by policy");
  });

  it("requireSandbox refuses a server without --sandbox before any call", async () => {
    const root = workspace(how.user);
    const refused = open(how, root, [], { requireSandbox: true });
    await expect(refused).rejects.toMatchObject({
      code: "ERR_PI_NATIVE_OPS_UNSANDBOXED",
      message: expect.stringContaining("remote server runs commands unsandboxed"),
    });
    await expect(open(how, root, [], { requireSandbox: "yes" })).rejects.toThrow(
      "options.requireSandbox must be a boolean",
    );
  });

  it.runIf(modes.includes("landlock"))(
    "a sandbox the server cannot make fails each command with ESANDBOX, and none runs unsandboxed",
    async () => {
      const root = workspace(how.user);
      // Landlock mode cannot show the workspace elsewhere than where it is.
      const { connection } = await open(how, root, ["--sandbox", "landlock", "--runtime-root", "/workspace"], {
        requireSandbox: true,
      });
      // Never unconfined, so it passes requireSandbox.
      expect(connection.server.sandbox).toEqual({ mode: "landlock", network: false });
      for (let i = 0; i < 2; i++) {
        const result = await run(connection, "echo ran > ran.txt", "/workspace");
        expect(result).toEqual({ error: expect.stringContaining("Landlock"), code: "ESANDBOX" });
      }
      expect(existsSync(path.join(root, "ran.txt"))).toBe(false);
      expect((await connection.fs.read.readFile("/workspace/a.txt")).toString()).toBe("free\n");
    },
  );
});

const hasCurl = existsSync("/usr/bin/curl");

describe.skipIf(!bin || !modes.includes("namespaces") || !hasCurl)("--sandbox-network on the server", () => {
  let port;
  let web;
  const how = { transport: "stdio", user: "root" };
  beforeAll(async () => {
    web = http.createServer((req, res) => {
      res.setHeader("Connection", "close");
      res.end(`hello ${req.url}\n`);
    });
    await new Promise((resolve) => web.listen(0, "127.0.0.1", resolve));
    port = web.address().port;
  });
  afterAll(() => web.close());

  const connects = (events) =>
    events.map(({ tool, access, host, port, rule, allowed }) => ({ tool, access, host, port, rule, allowed }));

  it("an allow-list reaches listed names through the proxy, refuses the rest, and reports each connection", async () => {
    const root = workspace(how.user);
    // A loopback server: its port, and its address listed (loopback is reached only then).
    const allow = [`localhost:${port}`, `127.0.0.1:${port}`];
    const args = [
      "--sandbox",
      "namespaces",
      "--runtime-root",
      "/workspace",
      "--sandbox-network",
      JSON.stringify(allow),
    ];
    const { connection, events } = await open(how, root, args);
    expect(connection.server.sandbox).toEqual({ mode: "namespaces", network: allow });
    const byName = `curl -sS http://localhost:${port}/a`;
    expect(await run(connection, byName, "/workspace")).toEqual({ exitCode: 0, output: "hello /a\n" });
    expect(connects(events)).toEqual([
      { tool: "bash", access: "connect", host: "localhost", port, rule: `localhost:${port}`, allowed: true },
    ]);
    expect(events[0].command).toBe(byName);
    events.length = 0;
    const byAddress = `curl -sS -o /dev/null -w '%{http_code}' --noproxy '' http://127.0.0.2:${port}/b`;
    expect(await run(connection, byAddress, "/workspace")).toEqual({ exitCode: 0, output: "403" });
    expect(connects(events)).toEqual([
      { tool: "bash", access: "connect", host: "127.0.0.2", port, rule: null, allowed: false },
    ]);
    // No route but through the proxy.
    const direct = `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo reached || echo refused`;
    expect(await run(connection, direct, "/workspace")).toEqual({ exitCode: 0, output: "refused\n" });
  });

  it("false (the default) leaves no way out; true is the host's network", async () => {
    const direct = `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo reached || echo refused`;
    for (const [net, expected] of [
      [[], "refused\n"],
      [["--sandbox-network", "false"], "refused\n"],
      [["--sandbox-network", "true"], "reached\n"],
    ]) {
      const root = workspace(how.user);
      const { connection, events } = await open(how, root, [
        "--sandbox",
        "namespaces",
        "--runtime-root",
        "/workspace",
        ...net,
      ]);
      expect(await run(connection, direct, "/workspace"), net.join(" ")).toEqual({ exitCode: 0, output: expected });
      expect(events).toEqual([]);
    }
  });
});
