// Remote mode, the client side of docs/protocol.md: one byte stream to a pi-native-ops-server turned back
// into the Operations createBoundFs() and createBashOperations() return, and into pi's seven tools. The
// server decides everything the core decides (bound, ignore rules, error texts); this side validates
// arguments as the local functions do, frames calls, and converts answers. The framing is
// js/remote-connection.js, the operations js/remote-operations.js, the binary's lookup js/server-binary.js.
import { checkIndexOption, checkObject } from "./args.js";
import { grepToolDefinitionWith, grepWith } from "./grep.js";
import { piOf } from "./pi.js";
import { checkOnPolicyEvent, checkPolicy } from "./policy-events.js";
import { CLIENT_VERSION, Connection, closedError, PROTOCOL_VERSION } from "./remote-connection.js";
import { remoteBashOperations, remoteFs, remoteIndex, remoteSearch } from "./remote-operations.js";
import { assembleTools } from "./tools.js";

export { serverBinaryPath } from "./server-binary.js";

/** Where a connection keeps the search behind its grep tool (for createRemoteTools, not public API). */
const searchKey = Symbol("pi-native-ops remote search");

/** Validates connect()'s `forwardEnv`: false (default), true, or a function choosing the environment. */
function checkForwardEnv(value) {
  if (value === undefined || value === false) return false;
  if (value === true || typeof value === "function") return value;
  throw new TypeError("forwardEnv must be a boolean or a function");
}

/**
 * Connects to a pi-native-ops-server over `transport` and completes the handshake.
 * Environment: by default a command runs in the server's environment, and the `env` pi passes to exec
 * (this machine's whole environment, API keys included) is not sent; `forwardEnv: true` sends it, and a
 * function `(env) => env | undefined` chooses what is sent.
 * Policy: `policy` is sent before any call and enforced by the server's core (over the server's own
 * `--policy`, which it can only add to); none given, the protected defaults apply. `onPolicyEvent` receives
 * each refusal of a file tool and the events the server reports. The shell is held to the policy only
 * when the server runs with `--sandbox` (its refusals then arrive as events with tool "bash"); without it,
 * commands are not confined by the policy. `server.sandbox` says which (null: unconfined), and
 * `requireSandbox: true` fails connect (code `ERR_PI_NATIVE_OPS_UNSANDBOXED`) with a server without it.
 */
export async function connect(transport, options = {}) {
  checkObject(options);
  const forwardEnv = checkForwardEnv(options.forwardEnv);
  const index = checkIndexOption(options.index, "options.index", { cache: false });
  const policy = checkPolicy(options.policy, "options.policy");
  const onPolicyEvent = checkOnPolicyEvent(options.onPolicyEvent, "options.onPolicyEvent");
  const { signal, requireSandbox = false } = options;
  if (typeof requireSandbox !== "boolean") throw new TypeError("options.requireSandbox must be a boolean");
  if (signal !== undefined && (signal === null || typeof signal.aborted !== "boolean")) {
    throw new TypeError("options.signal must be an AbortSignal");
  }
  const conn = new Connection(transport);
  conn.onPolicyEvent = onPolicyEvent;
  const onAbort = () => conn.fail("connect was aborted");
  let policyCall = null;
  try {
    await new Promise((resolve, reject) => {
      conn.handshake = { resolve, reject };
      if (conn.closedReason !== null) reject(closedError(conn.closedReason));
      conn.send({ t: "hello", protocol: PROTOCOL_VERSION, client: CLIENT_VERSION });
      // In the hello's write, before any call: the server fixes the connection's policy from it.
      if (policy !== undefined || onPolicyEvent !== undefined) {
        policyCall = conn.call("policy", { ...policy, events: onPolicyEvent !== undefined });
        policyCall.catch(() => {});
      }
      if (signal?.aborted) onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
    });
    if (requireSandbox && conn.server.sandbox === null) {
      conn.fail("the server does not sandbox its commands");
      throw Object.assign(new Error(UNSANDBOXED), { code: "ERR_PI_NATIVE_OPS_UNSANDBOXED" });
    }
    if (policyCall !== null) {
      try {
        await policyCall;
      } catch (err) {
        // A rule the core refuses fails connect with the core's error, as createBoundFs throws it.
        conn.fail("the policy was refused");
        throw err;
      }
    }
  } finally {
    conn.handshake = null;
    signal?.removeEventListener("abort", onAbort);
  }
  const fs = remoteFs(conn);
  if (index !== null) fs.index = remoteIndex(conn, index);
  const bash = remoteBashOperations(conn, { forwardEnv });
  const search = remoteSearch(conn);
  return {
    server: { ...conn.server },
    fs,
    bash,
    /** BashOperations running `shellPath` (a path on the server) instead of the shell pi would find. */
    createBashOperations(bashOptions = {}) {
      checkObject(bashOptions, "createBashOperations: options");
      const { shellPath } = bashOptions;
      if (shellPath !== undefined && typeof shellPath !== "string") {
        throw new TypeError("createBashOperations: shellPath must be a string");
      }
      // Never silently unsandboxed: the server has no sandbox option.
      if (bashOptions.sandbox !== undefined) throw new TypeError(REMOTE_SANDBOX);
      return remoteBashOperations(conn, { shellPath, forwardEnv });
    },
    /** grep() on the server; a relative `path` resolves against `cwd`, default the server's root. */
    grep: (grepOptions) => grepWith(search, grepOptions, conn.server.root),
    /** @internal the search behind the grep tool */
    [searchKey]: search,
    /** Ends the stream: the server kills its running commands and exits; pending calls reject. */
    close: () => conn.fail("closed by the client"),
  };
}

const REMOTE_SANDBOX =
  "sandbox is the server's option over a remote connection: start pi-native-ops-server with --sandbox " +
  "(connect's requireSandbox refuses a server without it), or run the server itself in a sandbox (a container)";

const UNSANDBOXED =
  "remote server runs commands unsandboxed, and connect was given requireSandbox: " +
  "start pi-native-ops-server with --sandbox";

function wireRemote(cwd, options, kind) {
  if (typeof cwd !== "string" || cwd.length === 0) throw new TypeError("cwd must be a non-empty string");
  checkObject(options);
  if (options.sandbox !== undefined || options.bash?.sandbox !== undefined) throw new TypeError(REMOTE_SANDBOX);
  // The connection owns the server's index; an option here that did nothing would mislead.
  if (options.index !== undefined) {
    throw new TypeError("index: give it to connect(transport, { index }), whose connection the tools use");
  }
  for (const key of ["policy", "onPolicyEvent"]) {
    if (options[key] !== undefined) {
      throw new TypeError(`${key}: give it to connect(transport, { ${key} }), whose server enforces it for the tools`);
    }
  }
  const { connection, bash = {} } = options;
  const pi = piOf(options.pi);
  if (!connection || typeof connection[searchKey] !== "function") {
    throw new TypeError("options.connection must be a connection made by connect()");
  }
  checkObject(bash, "options.bash");
  const { shellPath, ...bashToolOptions } = bash;
  const operations = shellPath === undefined ? connection.bash : connection.createBashOperations({ shellPath });
  const grep = grepToolDefinitionWith(cwd, connection[searchKey], pi);
  return assembleTools(cwd, kind, { fs: connection.fs, operations, bashToolOptions, grep, pi });
}

/** Like createNativeTools(cwd), each tool running on the connection's server; `cwd` is a server path. */
export function createRemoteTools(cwd, options) {
  return wireRemote(cwd, options ?? {}, "Tool");
}

/** The same as tool definitions, for pi extensions that call `registerTool`. */
export function createRemoteToolDefinitions(cwd, options) {
  return wireRemote(cwd, options ?? {}, "ToolDefinition");
}
