// Remote mode on the cloud sandboxes: each adapter puts pi-native-ops-server in the VM (uploaded once per
// binary: skipped when the same bytes are there), starts it with `--listen` on a port the platform exposes,
// the token in its environment only (SDKs record and show argv), and dials the platform's URL for that port
// with connectWebSocket. Duck-typed on each SDK's objects: no SDK is a dependency of this package (they are
// devDependencies, for the tests).
//   Vercel Sandbox (@vercel/sandbox 3): writeFiles, runCommand({ detached, env }), domain(port)
//   E2B (e2b 2): files.write, commands.run(cmd, { background, envs }), getHost(port), trafficAccessToken
//   Daytona (@daytonaio/sdk): fs.uploadFile, process.executeCommand / sessions, getPreviewLink(port)
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { checkObject, checkString } from "./args.js";
import { checkOnPolicyEvent, checkPolicy } from "./policy-events.js";
import { serverBinaryPath } from "./remote.js";
import { connectWebSocket } from "./websocket.js";

/** The port the server listens on in the VM unless told (the sandbox must expose it). */
const DEFAULT_PORT = 8765;
/** Where the binary goes in the VM unless told: a fixed path, so a second connect finds it and skips the upload. */
const DEFAULT_SERVER_PATH = "/tmp/pi-native-ops-server";
/** How long the first dial retries while the server starts and the platform's proxy answers 502. */
const DEFAULT_START_TIMEOUT_MS = 30_000;
/** The header E2B's proxy reads its traffic access token from (a sandbox created with secure access). */
const E2B_TRAFFIC_HEADER = "e2b-traffic-access-token";
/** The header Daytona's preview proxy reads the preview link's token from. */
const DAYTONA_PREVIEW_HEADER = "x-daytona-preview-token";
/**
 * How often Daytona is asked whether the starting server has exited (its SDK has no wait for a session
 * command): a server that dies at start is reported within a second.
 */
const DAYTONA_EXIT_POLL_MS = 250;
/** The most of a server's stderr an early exit's error quotes. */
const STDERR_SHOWN_CHARS = 4096;

/** `uname -m` in the VM -> Node's arch name. */
const ARCHES = { x86_64: "x64", amd64: "x64", aarch64: "arm64", arm64: "arm64" };

/** A shell word: the paths the adapters put in command lines (never the token). */
const quote = (s) => `'${String(s).replaceAll("'", "'\\''")}'`;

/** The shell line that prints the VM's architecture, then the binary's SHA-256 or `none`. */
const probeScript = (serverPath) =>
  `uname -m; sha256sum ${quote(serverPath)} 2>/dev/null | cut -d' ' -f1 || true; echo none`;

/** The adapters' own options, validated; the rest are connectWebSocket's (and connect's). */
function adapterOptions(options, name) {
  checkObject(options, `${name}: options`);
  const {
    root,
    port = DEFAULT_PORT,
    runtimeRoot,
    serverPath = DEFAULT_SERVER_PATH,
    binary,
    token = randomBytes(24).toString("base64url"),
    host = "0.0.0.0",
    serverArgs = [],
    startTimeoutMs = DEFAULT_START_TIMEOUT_MS,
    ...rest
  } = options;
  checkString(root, `${name}: options.root`);
  // Before the server is started in the sandbox (connect() checks them again).
  checkPolicy(rest.policy, `${name}: options.policy`);
  checkOnPolicyEvent(rest.onPolicyEvent, `${name}: options.onPolicyEvent`);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new TypeError(`${name}: options.port must be a port number`);
  checkString(serverPath, `${name}: options.serverPath`);
  if (binary !== undefined) checkString(binary, `${name}: options.binary`);
  if (runtimeRoot !== undefined) checkString(runtimeRoot, `${name}: options.runtimeRoot`);
  if (!Array.isArray(serverArgs) || !serverArgs.every((a) => typeof a === "string")) {
    throw new TypeError(`${name}: options.serverArgs must be an array of strings`);
  }
  const argv = ["--root", root, "--listen", `${host}:${port}`];
  if (runtimeRoot !== undefined) argv.push("--runtime-root", runtimeRoot);
  if (rest.graceMs !== undefined) argv.push("--grace", String(Math.ceil(rest.graceMs / 1000)));
  argv.push(...serverArgs);
  return { port, serverPath, binary, token, argv, startTimeoutMs, connectOptions: rest };
}

/** The local binary for the VM's `uname -m` and its SHA-256. */
function localBinary(binary, unameM) {
  const arch = ARCHES[unameM];
  if (!binary && !arch) throw new Error(`pi-native-ops: no server build for the sandbox's architecture ${unameM}`);
  const file = binary ?? serverBinaryPath({ platform: "linux", arch });
  const bytes = readFileSync(file);
  return { bytes, hash: createHash("sha256").update(bytes).digest("hex") };
}

/** Parses probeScript's output: `{ unameM, hash }` (hash null when the binary is absent). */
function parseProbe(output) {
  const [unameM = "", hash = "none"] = String(output).trim().split("\n");
  return { unameM: unameM.trim(), hash: /^[0-9a-f]{64}$/.test(hash.trim()) ? hash.trim() : null };
}

/** The error of a server that exited before it listened: its exit code and what it wrote to stderr. */
function earlyExit({ code, stderr } = {}) {
  const said = String(stderr ?? "")
    .trim()
    .slice(0, STDERR_SHOWN_CHARS);
  return new Error(
    `pi-native-ops: the server in the sandbox exited${code == null ? "" : ` (${code})`} before it listened${said ? `: ${said}` : ""}`,
  );
}

/**
 * The common life of an adapter: check, probe, upload unless the same binary is there, start, dial; on a
 * failed dial the started command is stopped. close() ends the session, then stops the command. A
 * platform's `start` returns `{ stop, exited }`: `exited` resolves to `{ code, stderr }` when the server
 * exits (it may stop watching once `watching` aborts: the dial is over), or is null where it cannot tell.
 */
async function launch(platform, opts) {
  const { check, run, upload, start, endpoint } = platform;
  await check?.(opts.port);
  const { unameM, hash } = parseProbe(await run(probeScript(opts.serverPath)));
  const { bytes, hash: want } = localBinary(opts.binary, unameM);
  if (hash !== want) {
    // Beside it, then renamed over it: a server still running the old file (ETXTBSY) does not stop that.
    const upload_ = `${opts.serverPath}.upload`;
    await upload(upload_, bytes);
    await run(`chmod 755 ${quote(upload_)} && mv -f ${quote(upload_)} ${quote(opts.serverPath)}`);
  }
  const watching = new AbortController();
  const { stop, exited } = await start(
    opts.serverPath,
    opts.argv,
    { PI_NATIVE_OPS_TOKEN: opts.token },
    watching.signal,
  );
  // A server that exits before it listens (a wrong root, a binary that cannot run) fails the dial at once
  // where the SDK can tell, rather than after startTimeoutMs of refused dials.
  const dial = new AbortController();
  const userSignal = opts.connectOptions.signal;
  const onUserAbort = () => dial.abort();
  userSignal?.addEventListener("abort", onUserAbort, { once: true });
  if (userSignal?.aborted) dial.abort();
  let early = null;
  exited?.then(
    (how) => {
      if (watching.signal.aborted) return;
      early = earlyExit(how);
      dial.abort();
    },
    (err) => {
      if (watching.signal.aborted) return;
      early = new Error(`pi-native-ops: the server in the sandbox failed before it listened: ${err?.message ?? err}`);
      dial.abort();
    },
  );
  let connection;
  try {
    const { url, headers } = await endpoint(opts.port);
    connection = await connectWebSocket(url, {
      connectTimeoutMs: opts.startTimeoutMs,
      ...opts.connectOptions,
      signal: dial.signal,
      headers: { ...headers, ...opts.connectOptions.headers },
      token: opts.token,
    });
  } catch (err) {
    // Whether the server had exited when the dial failed: one that exits after (a refused policy ends
    // the session) is no cause.
    const cause = early;
    await stop().catch(() => {});
    throw cause ?? err;
  } finally {
    watching.abort();
    userSignal?.removeEventListener("abort", onUserAbort);
  }
  const close = connection.close;
  connection.close = async () => {
    await close();
    // The server exits when its session ends; stopping the command covers one that did not.
    await stop().catch(() => {});
  };
  return connection;
}

/** A setup command's output, or an Error naming it and its exit code (E2B's run throws on its own). */
function checked(exitCode, output, what) {
  if (typeof exitCode === "number" && exitCode !== 0) {
    throw new Error(
      `pi-native-ops: in the sandbox, \`${what}\` exited with ${exitCode}: ${String(output ?? "").trim()}`,
    );
  }
  return output;
}

function need(object, names, what) {
  for (const name of names) {
    const fn = name.split(".").reduce((o, k) => o?.[k], object);
    if (typeof fn !== "function")
      throw new TypeError(`${what}: the sandbox object has no ${name}() (not a ${what} sandbox?)`);
  }
}

/**
 * A connection to pi-native-ops-server in a Vercel Sandbox (`@vercel/sandbox`, created with `ports`
 * including `port`, checked first): uploads the server for the VM's architecture with writeFiles (once),
 * starts it detached with the token in `env`, dials `sandbox.domain(port)`. close() ends the session and
 * the command.
 */
export async function connectVercelSandbox(sandbox, options = {}) {
  need(sandbox, ["writeFiles", "runCommand", "domain"], "Vercel");
  const opts = adapterOptions(options, "connectVercelSandbox");
  return launch(
    {
      check: (port) => {
        try {
          sandbox.domain(port);
        } catch (err) {
          throw new Error(
            `pi-native-ops: the Vercel sandbox does not expose port ${port} (${err?.message ?? err}): give it in \`ports\` at Sandbox.create, or pass the \`port\` option of one it exposes`,
          );
        }
      },
      run: async (line) => {
        const done = await sandbox.runCommand({ cmd: "sh", args: ["-c", line] });
        const out = typeof done.stdout === "function" ? await done.stdout() : done.stdout;
        return checked(done.exitCode, out, line);
      },
      upload: (file, content) => sandbox.writeFiles([{ path: file, content, mode: 0o755 }]),
      start: async (serverPath, args, env) => {
        const command = await sandbox.runCommand({ cmd: serverPath, args, env, detached: true });
        const exited =
          typeof command.wait === "function"
            ? command.wait().then(async (done) => {
                const logs = typeof done?.stderr === "function" ? done : command;
                const stderr = typeof logs.stderr === "function" ? await logs.stderr().catch(() => "") : "";
                return { code: done?.exitCode, stderr };
              })
            : null;
        return { stop: () => command.kill("SIGKILL"), exited };
      },
      endpoint: async (port) => ({ url: sandbox.domain(port), headers: {} }),
    },
    opts,
  );
}

/**
 * A connection to pi-native-ops-server in an E2B sandbox (`e2b`): uploads with files.write (once), starts
 * it in the background with the token in `envs`, dials `https://<getHost(port)>` (`http://` for a sandbox
 * in E2B's debug mode, whose hosts are `localhost:PORT`), with the sandbox's traffic access token when it
 * has one. close() ends the session and the command.
 */
export async function connectE2B(sandbox, options = {}) {
  need(sandbox, ["files.write", "commands.run", "getHost"], "E2B");
  const opts = adapterOptions(options, "connectE2B");
  return launch(
    {
      run: async (line) => {
        try {
          return (await sandbox.commands.run(`sh -c ${quote(line)}`)).stdout;
        } catch (err) {
          // E2B throws CommandExitError for a non-zero exit: its code and stderr say what failed.
          if (typeof err?.exitCode !== "number") throw err;
          return checked(err.exitCode, err.stderr || err.stdout, line);
        }
      },
      upload: async (file, content) => {
        await sandbox.files.write(
          file,
          content.buffer.slice(content.byteOffset, content.byteOffset + content.byteLength),
        );
      },
      start: async (serverPath, args, envs) => {
        const handle = await sandbox.commands.run([serverPath, ...args].map(quote).join(" "), {
          background: true,
          envs,
          timeoutMs: 0,
        });
        // wait() resolves on exit 0 and rejects with CommandExitError (exitCode, stderr) otherwise.
        const exited =
          typeof handle.wait === "function"
            ? handle.wait().then(
                (done) => ({ code: done?.exitCode, stderr: done?.stderr }),
                (err) => {
                  if (typeof err?.exitCode !== "number") throw err;
                  return { code: err.exitCode, stderr: err.stderr };
                },
              )
            : null;
        return { stop: () => handle.kill(), exited };
      },
      endpoint: async (port) => {
        const host = sandbox.getHost(port);
        const scheme = sandbox.connectionConfig?.debug === true ? "http" : "https";
        const url = /^[a-z]+:\/\//.test(host) ? host : `${scheme}://${host}`;
        const token = sandbox.trafficAccessToken;
        return { url, headers: typeof token === "string" && token ? { [E2B_TRAFFIC_HEADER]: token } : {} };
      },
    },
    opts,
  );
}

/**
 * A connection to pi-native-ops-server in a Daytona sandbox (`@daytonaio/sdk`): uploads with
 * fs.uploadFile (once), starts it in a process session, dials the preview link of `port` with its token.
 * Session commands take no environment, so the token goes through a file (mode 0600) that the starting
 * shell reads into the server's environment and deletes. close() ends the session and the process session.
 */
export async function connectDaytona(sandbox, options = {}) {
  need(
    sandbox,
    [
      "fs.uploadFile",
      "process.executeCommand",
      "process.createSession",
      "process.executeSessionCommand",
      "getPreviewLink",
    ],
    "Daytona",
  );
  const opts = adapterOptions(options, "connectDaytona");
  const sessionId = `pi-native-ops-${randomBytes(6).toString("hex")}`;
  return launch(
    {
      run: async (line) => {
        const done = await sandbox.process.executeCommand(`sh -c ${quote(line)}`);
        return checked(done.exitCode, done.result, line);
      },
      upload: (file, content) => sandbox.fs.uploadFile(content, file),
      start: async (serverPath, args, env, watching) => {
        const tokenFile = `${serverPath}.${sessionId}.token`;
        const made = await sandbox.process.executeCommand(`sh -c ${quote(`umask 077; : > ${quote(tokenFile)}`)}`);
        checked(made.exitCode, made.result, "creating the token file");
        await sandbox.fs.uploadFile(Buffer.from(env.PI_NATIVE_OPS_TOKEN), tokenFile);
        await sandbox.process.createSession(sessionId);
        const line =
          `PI_NATIVE_OPS_TOKEN=$(cat ${quote(tokenFile)}); rm -f ${quote(tokenFile)}; export PI_NATIVE_OPS_TOKEN; ` +
          `exec ${[serverPath, ...args].map(quote).join(" ")}`;
        const { cmdId } = await sandbox.process.executeSessionCommand(sessionId, {
          command: `sh -c ${quote(line)}`,
          runAsync: true,
        });
        const stop = async () => {
          if (typeof sandbox.process.deleteSession === "function") await sandbox.process.deleteSession(sessionId);
        };
        const canWatch = typeof cmdId === "string" && typeof sandbox.process.getSessionCommand === "function";
        return { stop, exited: canWatch ? daytonaExit(sandbox.process, sessionId, cmdId, watching) : null };
      },
      endpoint: async (port) => {
        const link = await sandbox.getPreviewLink(port);
        return { url: link.url, headers: link.token ? { [DAYTONA_PREVIEW_HEADER]: link.token } : {} };
      },
    },
    opts,
  );
}

/**
 * Resolves to `{ code, stderr }` once Daytona reports the session command exited (asked every
 * DAYTONA_EXIT_POLL_MS, until `watching` aborts); stays pending after that.
 */
function daytonaExit(proc, sessionId, cmdId, watching) {
  return new Promise((resolve, reject) => {
    let timer = null;
    const done = () => clearTimeout(timer);
    watching.addEventListener("abort", done, { once: true });
    const ask = async () => {
      try {
        const command = await proc.getSessionCommand(sessionId, cmdId);
        if (watching.aborted) return;
        if (typeof command?.exitCode !== "number") {
          timer = setTimeout(ask, DAYTONA_EXIT_POLL_MS);
          return;
        }
        let stderr = "";
        if (typeof proc.getSessionCommandLogs === "function") {
          const logs = await proc.getSessionCommandLogs(sessionId, cmdId).catch(() => null);
          stderr = logs?.stderr || logs?.output || "";
        }
        watching.removeEventListener("abort", done);
        resolve({ code: command.exitCode, stderr });
      } catch (err) {
        watching.removeEventListener("abort", done);
        if (!watching.aborted) reject(err);
      }
    };
    ask();
  });
}
