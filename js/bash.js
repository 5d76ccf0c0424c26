// BashOperations (and pi 1.6's PowerShellOperations) backed by the native exec (src/exec.rs): one pipe
// for stdout+stderr, output delivered with backpressure, the whole process tree killed on abort/timeout
// (a Job object on Windows), and nothing left running if Node dies. Validation and the timeout/abort
// strings follow pi 1.6.0's createLocalBashOperations; shell resolution (unix, Windows, PowerShell), the
// working directory check and their errors are the core's (crates/core/src/exec/preflight.rs), reached
// through the native spawn.
import { realpathSync, statSync } from "node:fs";
import path from "node:path";
import { checkObject, checkPath, checkString } from "./args.js";
import { checkOnPolicyEvent, checkPolicy, deliver, eventOf } from "./policy-events.js";
import { native } from "./native.js";
import { giveHelper } from "./server-binary.js";

const MAX_TIMEOUT_MS = 2_147_483_647;
const MAX_TIMEOUT_SECONDS = MAX_TIMEOUT_MS / 1000;

function resolveTimeoutMs(timeout) {
  if (timeout === undefined) return undefined;
  if (!Number.isFinite(timeout) || timeout <= 0) {
    throw new Error("Invalid timeout: must be a finite number of seconds");
  }
  const timeoutMs = timeout * 1000;
  if (timeoutMs > MAX_TIMEOUT_MS) {
    throw new Error(`Invalid timeout: maximum is ${MAX_TIMEOUT_SECONDS} seconds`);
  }
  return timeoutMs;
}

/** Validates exec's arguments (as pi's local exec would fail on them); also used by the remote exec. */
export function checkExecArguments(command, cwd, execOptions) {
  if (typeof command !== "string") throw new TypeError("exec: command must be a string");
  if (command.includes("\0")) throw new TypeError("exec: command must not contain NUL bytes");
  if (typeof cwd !== "string") throw new TypeError("exec: cwd must be a string");
  if (execOptions === null || typeof execOptions !== "object") {
    throw new TypeError("exec: options must be an object with an onData function");
  }
  const { onData, signal, timeout, env } = execOptions;
  if (typeof onData !== "function") throw new TypeError("exec: options.onData must be a function");
  if (signal !== undefined && (signal === null || typeof signal.aborted !== "boolean")) {
    throw new TypeError("exec: options.signal must be an AbortSignal");
  }
  if (env !== undefined && (env === null || typeof env !== "object")) {
    throw new TypeError("exec: options.env must be an object");
  }
  const timeoutMs = resolveTimeoutMs(timeout);
  return { onData, signal, timeout, env, timeoutMs };
}

/** Environment object → KEY=VALUE list, the way child_process builds it (undefined values dropped). */
export function envEntries(env) {
  const entries = [];
  for (const key of Object.keys(env)) {
    const value = env[key];
    if (value === undefined) continue;
    const entry = `${key}=${value}`;
    if (entry.includes("\0")) throw new TypeError(`env entry "${key}" must not contain NUL bytes`);
    entries.push(entry);
  }
  return entries;
}

const SANDBOX_KEYS = [
  "root",
  "runtimeRoot",
  "network",
  "readOnly",
  "readWrite",
  "env",
  "mode",
  "maxProcesses",
  "tmpSize",
  "policy",
  "onPolicyEvent",
];
const NETWORK_KEYS = ["allow", "headers"];

/**
 * `network`: a boolean, or `{ allow, headers? }` (the allow-list proxy), into the native fields. The
 * entries themselves are checked by the core (a bad one throws ESANDBOX naming it).
 */
function checkNetwork(network, what) {
  if (typeof network === "boolean") return { network };
  if (network === null || typeof network !== "object" || Array.isArray(network)) {
    throw new TypeError(`${what} must be a boolean or { allow: string[], headers?: object }`);
  }
  for (const key of Object.keys(network)) {
    if (!NETWORK_KEYS.includes(key)) throw new TypeError(`${what}: unknown option "${key}"`);
  }
  const { allow, headers = {} } = network;
  if (!Array.isArray(allow) || !allow.every((host) => typeof host === "string")) {
    throw new TypeError(`${what}.allow must be an array of host names`);
  }
  checkObject(headers, `${what}.headers`);
  const networkHeaders = [];
  for (const [host, fields] of Object.entries(headers)) {
    checkObject(fields, `${what}.headers[${JSON.stringify(host)}]`);
    for (const [name, value] of Object.entries(fields)) {
      if (typeof value !== "string") {
        throw new TypeError(`${what}.headers[${JSON.stringify(host)}].${name} must be a string`);
      }
      networkHeaders.push([host, name, value]);
    }
  }
  return { network: false, networkAllow: [...allow], networkHeaders };
}

function checkPathList(list, what) {
  if (!Array.isArray(list)) throw new TypeError(`${what} must be an array of absolute paths`);
  return list.map((p, i) => path.resolve(checkPath(p, `${what}[${i}]`)));
}

/**
 * Validates `createBashOperations`'s `sandbox` option into the native request's form: `root` an
 * existing directory, paths absolute, `env` as KEY=VALUE entries. Symlinks are left for the core to
 * resolve, once (it refuses one a sandboxed command could have planted).
 */
export function checkSandboxOptions(sandbox, what = "createBashOperations: sandbox") {
  checkObject(sandbox, what);
  for (const key of Object.keys(sandbox)) {
    if (!SANDBOX_KEYS.includes(key)) throw new TypeError(`${what}: unknown option "${key}"`);
  }
  const { runtimeRoot, network = false, readOnly = [], readWrite = [], env = {}, mode = "auto" } = sandbox;
  checkString(sandbox.root, `${what}.root`);
  const root = path.resolve(sandbox.root);
  try {
    if (!statSync(realpathSync(root)).isDirectory()) throw new Error("not a directory");
  } catch {
    throw new TypeError(`${what}.root must be an existing directory, got ${JSON.stringify(sandbox.root)}`);
  }
  // Absent: the core's default.
  if (runtimeRoot !== undefined) checkPath(runtimeRoot, `${what}.runtimeRoot`);
  const networkFields = checkNetwork(network, `${what}.network`);
  checkObject(env, `${what}.env`);
  for (const [key, value] of Object.entries(env)) {
    if (typeof value !== "string") throw new TypeError(`${what}.env.${key} must be a string`);
    if (key === "" || key.includes("=")) throw new TypeError(`${what}.env: invalid name ${JSON.stringify(key)}`);
  }
  // The core's mode names (crates/core/src/exec/sandbox/mod.rs, `Mode::NAMES`).
  const modes = native.sandboxModes();
  if (!modes.includes(mode)) {
    throw new TypeError(
      `${what}.mode must be one of ${modes.map((m) => `"${m}"`).join(", ")}, got ${JSON.stringify(mode)}`,
    );
  }
  const { maxProcesses } = sandbox;
  if (
    maxProcesses !== undefined &&
    !(Number.isInteger(maxProcesses) && maxProcesses > 0 && maxProcesses <= 2 ** 31 - 1)
  ) {
    throw new TypeError(`${what}.maxProcesses must be a positive integer`);
  }
  // The rules themselves are the core's to judge (a bad one throws when the handle is made).
  const policy = checkPolicy(sandbox.policy, `${what}.policy`);
  const onPolicyEvent = checkOnPolicyEvent(sandbox.onPolicyEvent, `${what}.onPolicyEvent`);
  const { tmpSize } = sandbox;
  if (tmpSize !== undefined && !(Number.isSafeInteger(tmpSize) && tmpSize > 0)) {
    throw new TypeError(`${what}.tmpSize must be a positive integer (bytes)`);
  }
  return {
    root,
    runtimeRoot: runtimeRoot === undefined ? undefined : path.resolve(runtimeRoot),
    ...networkFields,
    readOnly: checkPathList(readOnly, `${what}.readOnly`),
    readWrite: checkPathList(readWrite, `${what}.readWrite`),
    env: envEntries(env),
    mode,
    maxProcesses,
    tmpSize,
    policy,
    onPolicyEvent,
  };
}

/**
 * The `onPolicyEvent` the native side calls: the binding's event as the documented plain object
 * (policy-events.js: its keys in order, `rule` null when none); a callback that throws is ignored.
 */
function policyEventHandler(onPolicyEvent) {
  if (onPolicyEvent === undefined) return undefined;
  return (e) => deliver(onPolicyEvent, eventOf({ ...e, rule: e.rule ?? null }));
}

function noSandboxInBinary() {
  return Object.assign(
    new Error("sandbox unavailable: this pi-native-ops binary has no sandbox; install or build a newer one"),
    { code: "ESANDBOX" },
  );
}

/** What this machine offers for `createBashOperations({ sandbox })`: see bash.d.ts. */
export function sandboxSupport() {
  if (typeof native.sandboxSupport !== "function") throw noSandboxInBinary();
  giveHelper();
  const s = native.sandboxSupport();
  // The binding leaves absent what is none; the documented shape says null.
  return {
    ...s,
    kernel: s.kernel ?? null,
    namespacesError: s.namespacesError ?? null,
    landlockError: s.landlockError ?? null,
    auto: s.auto ?? null,
    enforces: { namespaces: s.enforces?.namespaces ?? null, landlock: s.enforces?.landlock ?? null },
  };
}

/**
 * The exec of one shell tool over the native spawn: `kind` "bash" or "powershell" (which shell runs, with
 * which arguments, and pi's refusals are the core's: crates/core/src/exec/preflight.rs).
 */
function nativeExec({ kind, shellPath, sandbox, sandboxHandle, onPolicy }) {
  return async (command, cwd, execOptions) => {
    const { onData, signal, timeout, env, timeoutMs } = checkExecArguments(command, cwd, execOptions);
    if (signal?.aborted) throw new Error("aborted");
    // An addon built before the sandbox would ignore request.sandbox and run the command unconfined.
    if (sandbox && typeof native.sandboxSupport !== "function") throw noSandboxInBinary();
    // Sandboxed, the caller's env (pi passes the agent's whole environment, API keys included) never
    // reaches the shell: it gets the sandbox's clean environment plus sandbox.env.
    const request = sandbox
      ? { kind, shell: shellPath, command, cwd, sandbox }
      : { kind, shell: shellPath, command, cwd, env: env === undefined ? undefined : envEntries(env) };

    return new Promise((resolve, reject) => {
      let execution;
      let timedOut = false;
      let consumerError;
      let timer;
      const onAbort = () => execution?.kill();
      const onEvent = (chunk, exitCode) => {
        if (chunk) {
          if (consumerError !== undefined) return;
          try {
            onData(chunk);
          } catch (err) {
            consumerError = err;
            execution?.kill();
          }
          return;
        }
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (consumerError !== undefined) reject(consumerError);
        else if (signal?.aborted) reject(new Error("aborted"));
        else if (timedOut) reject(new Error(`timeout:${timeout}`));
        else resolve({ exitCode: exitCode ?? null });
      };
      try {
        // pi's missing-shell and missing-cwd errors and Node's `spawn <shell> <CODE>`: the core's.
        if (sandboxHandle) {
          execution = sandboxHandle.spawn(request, onEvent, onPolicy);
        } else {
          execution = native.bashSpawn(request, onEvent, onPolicy);
        }
      } catch (err) {
        reject(err);
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          timedOut = true;
          execution.kill();
        }, timeoutMs);
        timer.unref?.();
      }
    });
  };
}

/**
 * Native BashOperations for pi's `createBashTool(cwd, { operations })`.
 * @param {{ shellPath?: string, sandbox?: object }} [options]
 */
export function createBashOperations(options = {}) {
  checkObject(options, "createBashOperations: options");
  const { shellPath } = options;
  if (shellPath !== undefined && typeof shellPath !== "string") {
    throw new TypeError("createBashOperations: shellPath must be a string");
  }
  const checked = options.sandbox === undefined ? undefined : checkSandboxOptions(options.sandbox);
  const { onPolicyEvent, ...sandboxFields } = checked ?? {};
  const sandbox = checked && sandboxFields;
  const onPolicy = policyEventHandler(onPolicyEvent);
  if (sandbox) giveHelper();
  // Made now: the configured paths are resolved here, once, so that nothing a command plants later
  // redirects them (an unusable one throws ESANDBOX). What every command shares (namespaces mode:
  // the template namespaces with the root built) is made by the first exec and kept by this handle
  // until these operations are collected. On Windows there is none: the core refuses a sandboxed exec.
  const sandboxHandle =
    sandbox && process.platform !== "win32" && typeof native.BashSandboxHandle === "function"
      ? new native.BashSandboxHandle(sandbox, onPolicy)
      : undefined;
  return { exec: nativeExec({ kind: "bash", shellPath, sandbox, sandboxHandle, onPolicy }) };
}

/**
 * Native PowerShellOperations (pi 1.6's `PowerShellOperations`, the shape of BashOperations) for pi's
 * `createPowerShellTool(cwd, { operations })`: PowerShell found, started and its command wrapped as
 * pi's `createLocalPowerShellOperations` does (Windows only; elsewhere exec rejects in pi's words).
 */
export function createPowerShellOperations(options = {}) {
  checkObject(options, "createPowerShellOperations: options");
  const [unknown] = Object.keys(options);
  if (unknown !== undefined) throw new TypeError(`createPowerShellOperations: unknown option "${unknown}"`);
  return { exec: nativeExec({ kind: "powershell" }) };
}
