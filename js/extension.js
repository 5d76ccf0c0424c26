// pi-native-ops as a pi extension (`pi install npm:pi-native-ops`, `pi -e npm:pi-native-ops`): the seven
// built-in tools and the user's `!` commands run on the native operations. The tools are pi's own
// definitions (the model sees a stock pi); what runs them is chosen at session_start by the flags and
// the "pi-native-ops" entry of pi's settings.json.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createBashOperations, sandboxSupport } from "./bash.js";
import { createPolicyLog } from "./policy-log.js";
import { createNativeToolDefinitions } from "./tools.js";

const NAMES = ["read", "bash", "edit", "write", "grep", "find", "ls"];
const STATUS = "pi-native-ops";
/** The most of a remote command's stderr kept to explain its failure: enough for ssh's message. */
const STDERR_KEPT_BYTES = 4096;

const FLAGS = {
  "native-sandbox": {
    type: "boolean",
    default: false,
    description: "pi-native-ops: run bash in a sandbox (with --native-remote: require the server's --sandbox)",
  },
  "native-sandbox-mode": {
    type: "string",
    description: "pi-native-ops: sandbox mode: auto (default), namespaces or landlock",
  },
  "native-sandbox-network": {
    type: "boolean",
    default: false,
    description: "pi-native-ops: let sandboxed bash use the host's network",
  },
  "native-sandbox-ro": {
    type: "string",
    description: `pi-native-ops: extra host paths sandboxed bash may read ("${path.delimiter}"-separated)`,
  },
  "native-sandbox-rw": {
    type: "string",
    description: `pi-native-ops: extra host paths sandboxed bash may write ("${path.delimiter}"-separated)`,
  },
  "native-sandbox-allow": {
    type: "string",
    description:
      'pi-native-ops: hosts sandboxed bash may reach through the allow-list proxy (","-separated: "registry.npmjs.org,*.github.com,localhost:3000,127.0.0.1:3000"; ports 80 and 443 unless one is named)',
  },
  "native-deny-read": {
    type: "string",
    description:
      'pi-native-ops: paths no tool (nor sandboxed bash) may read, gitignore lines (","-separated: ".env,*.pem")',
  },
  "native-deny-write": {
    type: "string",
    description: 'pi-native-ops: paths no tool (nor sandboxed bash) may write, gitignore lines (","-separated)',
  },
  "native-no-protect": {
    type: "boolean",
    default: false,
    description: "pi-native-ops: drop the protected defaults (.git/hooks, .git/config, .envrc, ...)",
  },
  "native-policy-log": {
    type: "string",
    description: "pi-native-ops: append each policy event (refusals, proxy connections) to this file as a JSON line",
  },
  "native-index": {
    type: "boolean",
    default: false,
    description: "pi-native-ops: keep a warm search index of the workspace for find and grep",
  },
  "native-remote": {
    type: "string",
    description:
      'pi-native-ops: run the tools on a pi-native-ops-server started by this shell command, e.g. "ssh host pi-native-ops-server --root /srv/w"',
  },
};

/**
 * How to import each name of pi's package. pi's loader maps these names to the pi that runs when it
 * transpiles the importing file, which it does for the TypeScript entry (extension.ts) and not for a
 * JavaScript ES module: imported from here, a name resolves through node_modules, to whatever copy is
 * there, or to none. The legacy name first: every pi that supports extensions maps it.
 */
const BY_NAME = [
  ["@mariozechner/pi-coding-agent", () => import("@mariozechner/pi-coding-agent")],
  ["@earendil-works/pi-coding-agent", () => import("@earendil-works/pi-coding-agent")],
];

/**
 * The pi module of the pi running this session: the tools must be built by it (its classes, its
 * renderers, its key bindings, its wording), never by another copy. A candidate is pi's own when the
 * session's manager is an instance of its SessionManager; a copy found elsewhere is refused, not used.
 */
async function hostPi(importers, ctx) {
  const failures = [];
  for (const [name, load] of importers) {
    let module;
    try {
      module = await load();
    } catch (err) {
      failures.push(`${name}: ${String(err?.message ?? err).split("\n")[0]}`);
      continue;
    }
    const own = typeof module.SessionManager === "function" && ctx.sessionManager instanceof module.SessionManager;
    if (own) return module;
    failures.push(`${name}: resolves to a copy of pi other than the one running this extension`);
  }
  throw new Error(`cannot find the module of the pi that runs this extension:\n  ${failures.join("\n  ")}`);
}

/** A flag's value as a path list, or undefined when not given. */
function pathList(value) {
  if (value === undefined || value === "") return undefined;
  return value.split(path.delimiter).filter((p) => p !== "");
}

/**
 * A list option: the settings' array, then the flag's `,`-separated entries after it (a rule with a
 * comma, e.g. `*.{pem,key}`, goes in settings.json); undefined when neither gives one.
 */
function listOf(fromSettings, fromFlag) {
  const flagged = fromFlag === undefined ? [] : fromFlag.split(",").filter((entry) => entry.trim() !== "");
  if (fromSettings === undefined && flagged.length === 0) return undefined;
  return [...(fromSettings ?? []), ...flagged];
}

/** The settings entry's name in pi's settings.json, and its keys with the flag each one matches. */
const SETTINGS_KEY = "pi-native-ops";
const SETTINGS = {
  sandbox: ["boolean", "native-sandbox"],
  sandboxMode: ["string", "native-sandbox-mode"],
  sandboxNetwork: ["boolean", "native-sandbox-network"],
  sandboxReadOnly: ["paths", "native-sandbox-ro"],
  sandboxReadWrite: ["paths", "native-sandbox-rw"],
  sandboxAllow: ["list", "native-sandbox-allow"],
  denyRead: ["list", "native-deny-read"],
  denyWrite: ["list", "native-deny-write"],
  protect: ["boolean", "native-no-protect"],
  policyLog: ["string", "native-policy-log"],
  index: ["boolean", "native-index"],
  remote: ["string", "native-remote"],
};

/**
 * pi's settings: pi 1.x gives the merged global and project settings; pi 0.x has no such call, so its
 * global settings file is read (a sandbox asked for there is never ignored).
 */
function piSettings(api) {
  if (typeof api.getSettings === "function") return api.getSettings();
  const agentDir = process.env.PI_CODING_AGENT_DIR || path.join(os.homedir(), ".pi", "agent");
  try {
    return JSON.parse(readFileSync(path.join(agentDir, "settings.json"), "utf8"));
  } catch (err) {
    if (err.code === "ENOENT") return {};
    throw new Error(`cannot read ${path.join(agentDir, "settings.json")}: ${err.message}`);
  }
}

/** The `"pi-native-ops"` settings entry, checked, as flag values (undefined where not set). */
function readSettings(api) {
  const entry = piSettings(api)?.[SETTINGS_KEY];
  if (entry === undefined) return {};
  const where = `settings "${SETTINGS_KEY}"`;
  if (entry === null || typeof entry !== "object" || Array.isArray(entry)) {
    throw new Error(`${where} must be an object (keys: ${Object.keys(SETTINGS).join(", ")})`);
  }
  const values = {};
  for (const [key, value] of Object.entries(entry)) {
    if (!(key in SETTINGS)) {
      throw new Error(`${where}: unknown key "${key}" (keys: ${Object.keys(SETTINGS).join(", ")})`);
    }
    const [type, flag] = SETTINGS[key];
    const array = type === "paths" || type === "list";
    const ok = array ? Array.isArray(value) && value.every((p) => typeof p === "string") : typeof value === type;
    const wanted = { paths: "an array of paths", list: "an array of strings" }[type] ?? `a ${type}`;
    if (!ok) throw new Error(`${where}.${key} must be ${wanted}`);
    // `protect: false` is what --native-no-protect says.
    values[flag] = type === "paths" ? value.join(path.delimiter) : key === "protect" ? !value : value;
  }
  return values;
}

/**
 * The options of a session: the settings entry, then the flags over it (a boolean flag can only turn
 * an option on), checked before anything starts.
 */
function readOptions(api) {
  const settings = readSettings(api);
  const flag = (name) => api.getFlag(name) ?? settings[name];
  const on = (name) => api.getFlag(name) === true || settings[name] === true;
  const options = {
    sandbox: on("native-sandbox"),
    mode: flag("native-sandbox-mode"),
    network: on("native-sandbox-network"),
    readOnly: pathList(flag("native-sandbox-ro")),
    readWrite: pathList(flag("native-sandbox-rw")),
    index: on("native-index"),
    remote: flag("native-remote"),
    allow: listOf(settings["native-sandbox-allow"], api.getFlag("native-sandbox-allow")),
    denyRead: listOf(settings["native-deny-read"], api.getFlag("native-deny-read")),
    denyWrite: listOf(settings["native-deny-write"], api.getFlag("native-deny-write")),
    protect: !on("native-no-protect"),
    policyLog: flag("native-policy-log"),
  };
  if (options.network && options.allow !== undefined) {
    throw new Error(
      "--native-sandbox-network and --native-sandbox-allow do not combine: the allow-list is the network",
    );
  }
  const sandboxOnly = [
    ["native-sandbox-mode", options.mode !== undefined],
    ["native-sandbox-network", options.network],
    ["native-sandbox-allow", options.allow !== undefined],
    ["native-sandbox-ro", options.readOnly !== undefined],
    ["native-sandbox-rw", options.readWrite !== undefined],
  ];
  for (const [name, given] of sandboxOnly) {
    if (given && !options.sandbox) {
      throw new Error(`--${name} needs --native-sandbox (in settings: "sandbox": true)`);
    }
  }
  if (options.remote !== undefined && options.remote.trim() === "") {
    throw new Error("--native-remote needs the command that starts pi-native-ops-server");
  }
  if (options.remote !== undefined) {
    // The server sandboxes its commands (`--sandbox`); here --native-sandbox only requires that it does.
    for (const [name, given] of sandboxOnly) {
      if (given) {
        throw new Error(
          `--${name} does not apply to --native-remote: give the server's pi-native-ops-server --sandbox [MODE] --sandbox-network NET`,
        );
      }
    }
  }
  return options;
}

/**
 * The session's `policy` (absent when it is all defaults), `onPolicyEvent` (absent without a log) and
 * `closeLog`: the log takes each event as one JSON line, under js/policy-log.js's bounds (the same for a
 * remote server's events and the local guard's); a log that cannot be written loses the event, not the
 * tool call.
 */
function policyOf(options) {
  const given = options.denyRead !== undefined || options.denyWrite !== undefined || !options.protect;
  const policy = given
    ? {
        ...(options.denyRead === undefined ? {} : { denyRead: options.denyRead }),
        ...(options.denyWrite === undefined ? {} : { denyWrite: options.denyWrite }),
        protect: options.protect,
      }
    : undefined;
  const log = options.policyLog;
  const writer = log === undefined || log === "" ? undefined : createPolicyLog(log);
  return { policy, onPolicyEvent: writer?.onPolicyEvent, closeLog: () => writer?.close() };
}

/** Why the sandbox of `mode` cannot run here (the core's reason), or null when it can. */
function sandboxUnavailable(mode = "auto") {
  const support = sandboxSupport();
  if (mode === "auto") {
    if (support.auto !== null) return null;
    return `namespaces mode: ${support.namespacesError}; landlock mode: ${support.landlockError}`;
  }
  // Another value is left to createBashOperations, which names the modes.
  const error = { namespaces: support.namespacesError, landlock: support.landlockError }[mode] ?? null;
  return error === null ? null : `${mode} mode: ${error}`;
}

/** The status line's word on a remote server's sandbox (its hello's): none when it has none. */
function sandboxStatus(sandbox) {
  if (sandbox === null) return "";
  return ` · sandbox ${sandbox.mode ?? "unavailable"}`;
}

/** Starts `command` in a shell and connects to the pi-native-ops-server it runs. */
async function connectRemote(command, { index, signal, requireSandbox, policy, onPolicyEvent }) {
  // The remote client (and its WebSocket library) loads only for a remote session: pi's startup pays for it otherwise.
  const { connect } = await import("./remote.js");
  const child = spawn("/bin/sh", ["-c", command], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    if (stderr.length < STDERR_KEPT_BYTES) stderr += chunk.toString("utf8").slice(0, STDERR_KEPT_BYTES - stderr.length);
  });
  const spawned = new Promise((_, reject) => child.once("error", reject));
  try {
    const options = {
      index,
      signal,
      requireSandbox,
      ...(policy && { policy }),
      ...(onPolicyEvent && { onPolicyEvent }),
    };
    const connection = await Promise.race([connect(child, options), spawned]);
    return { connection, child };
  } catch (err) {
    // What the command said (ssh's reason, a shell's "not found") comes once its pipes close.
    const closed = new Promise((resolve) => {
      child.once("close", (code, sig) => resolve(sig ?? code));
      signal.addEventListener("abort", () => resolve(null), { once: true });
    });
    child.kill("SIGKILL");
    const exit = await closed;
    const said = stderr.trim();
    throw new Error(
      `cannot connect to the remote workspace (${JSON.stringify(command)} exited: ${exit}): ${err.message}${said ? `\n${said}` : ""}`,
    );
  }
}

/** The session's tools and `!` operations from `flags`, in `cwd`. */
async function start(pi, flags, cwd, signal) {
  const { policy, onPolicyEvent, closeLog } = policyOf(flags);
  const policed = { ...(policy && { policy }), ...(onPolicyEvent && { onPolicyEvent }) };
  if (flags.remote !== undefined) {
    const { connection, child } = await connectRemote(flags.remote, {
      index: flags.index || undefined,
      signal,
      requireSandbox: flags.sandbox,
      ...policed,
    });
    const root = connection.server.root;
    const { createRemoteToolDefinitions } = await import("./remote.js");
    const tools = createRemoteToolDefinitions(root, { connection, pi });
    // pi gives `!` commands its own cwd: the same place on the server.
    const toServer = (dir) => {
      const rel = path.relative(cwd, dir);
      const outside = rel === ".." || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel);
      return outside ? root : path.posix.join(root, rel.split(path.sep).join("/"));
    };
    const userBash = { exec: (command, dir, options) => connection.bash.exec(command, toServer(dir), options) };
    // pi 1.x resolves a tool's relative paths against the context's cwd, which is local: give it the
    // server's. The rest of the context reads through to pi's own (methods bound to it).
    const context = (ctx) =>
      ctx &&
      new Proxy(ctx, {
        get(target, key) {
          if (key === "cwd") return toServer(target.cwd ?? cwd);
          const value = Reflect.get(target, key, target);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    const close = async () => {
      closeLog();
      connection.close();
      child.kill();
    };
    return {
      tools,
      userBash,
      close,
      status: `remote ${root}${sandboxStatus(connection.server.sandbox)}${flags.index ? " · index" : ""}${policy ? " · policy" : ""}`,
      remote: { localCwd: cwd, root },
      context,
    };
  }
  let sandbox;
  if (flags.sandbox) {
    const why = sandboxUnavailable(flags.mode);
    if (why !== null) throw new Error(`no bash sandbox on this machine (${why})`);
    sandbox = {
      ...(flags.mode === undefined ? {} : { mode: flags.mode }),
      network: flags.allow === undefined ? flags.network : { allow: flags.allow },
      ...(flags.readOnly === undefined ? {} : { readOnly: flags.readOnly }),
      ...(flags.readWrite === undefined ? {} : { readWrite: flags.readWrite }),
    };
  }
  const tools = createNativeToolDefinitions(cwd, {
    pi,
    ...(sandbox === undefined ? {} : { sandbox }),
    ...(flags.index ? { index: true } : {}),
    ...policed,
  });
  // The same shell as the bash tool: sandboxed the same way, over the same workspace, under the same policy.
  const userBash = createBashOperations(
    sandbox === undefined ? {} : { sandbox: { ...sandbox, ...policed, root: cwd, runtimeRoot: cwd } },
  );
  const close = async () => {
    closeLog();
    await tools.index?.close();
  };
  const parts = ["native tools"];
  if (sandbox !== undefined) parts.push(`sandbox (${flags.mode ?? sandboxSupport().auto})`);
  if (flags.index) parts.push("index");
  if (policy) parts.push("policy");
  return { tools, userBash, close, status: parts.join(" · ") };
}

/**
 * The extension. `importers` are the ways to import pi's package by name, `[name, () => import(name)]`:
 * the entry pi loads (extension.ts) passes its own, which pi's loader maps to the pi that runs.
 */
export function piNativeOpsWith(importers) {
  return function piNativeOps(api) {
    for (const [name, options] of Object.entries(FLAGS)) api.registerFlag(name, options);

    // Found at the first session_start: the module of the pi that runs.
    let pi = null;
    // Set at session_start: a promise of the session's tools (rejecting with why they cannot run).
    let session = null;
    let abort = null;

    const active = () => {
      if (session === null) throw new Error("pi-native-ops: the session has not started");
      return session;
    };

    /**
     * pi's own definitions (name, description, parameters, prompt snippet and guidelines, renderers),
     * each running the session's native tool of that name. Registered once the session has started, a
     * tool keeps pi's choice of whether it is active (pi's defaults, --tools, the user's settings), as
     * the built-in of that name had it; registered while loading, pi would activate all seven.
     */
    const registerTools = (cwd) => {
      for (const name of NAMES) {
        const stock = pi[`create${name[0].toUpperCase()}${name.slice(1)}ToolDefinition`](cwd);
        api.registerTool({
          ...stock,
          async execute(toolCallId, params, signal, onUpdate, ctx) {
            const { tools, context } = await active();
            return tools[name].execute(toolCallId, params, signal, onUpdate, context ? context(ctx) : ctx);
          },
        });
      }
    };

    /** Without pi's module, the built-ins (as pi declares them) are replaced by tools that refuse. */
    const registerRefusals = () => {
      for (const tool of api.getAllTools()) {
        if (!NAMES.includes(tool.name)) continue;
        const { name, description, parameters } = tool;
        api.registerTool({ name, label: name, description, parameters, execute: async () => active() });
      }
    };

    api.on("session_start", async (_event, ctx) => {
      abort = new AbortController();
      const setStatus = (text) => {
        if (ctx.hasUI) ctx.ui.setStatus(STATUS, text);
      };
      const cwd = ctx.cwd ?? process.cwd();
      session = (async () => {
        try {
          pi ??= await hostPi(importers, ctx);
        } catch (err) {
          registerRefusals();
          throw err;
        }
        registerTools(cwd);
        return start(pi, readOptions(api), cwd, abort.signal);
      })();
      try {
        const { status } = await session;
        setStatus(status);
      } catch (err) {
        // Never a silent fallback: every tool and `!` command fails with this until the next session.
        const message = `pi-native-ops: ${err.message}`;
        session = Promise.reject(new Error(message));
        session.catch(() => {});
        setStatus("pi-native-ops: failed");
        if (ctx.hasUI) ctx.ui.notify(message, "error");
        throw new Error(message);
      }
    });

    api.on("session_shutdown", async () => {
      abort?.abort();
      const ending = session;
      session = null;
      if (ending === null) return;
      try {
        await (await ending).close();
      } catch {
        // A session that never started has nothing to close.
      }
    });

    api.on("user_bash", async () => {
      const { userBash } = await active();
      return { operations: userBash };
    });

    api.on("before_agent_start", async (event) => {
      if (session === null) return undefined;
      let remote;
      try {
        ({ remote } = await session);
      } catch {
        return undefined;
      }
      if (remote === undefined) return undefined;
      // The working directory the model is told is the server's (pi 0.x and 1.x word it differently).
      let systemPrompt = event.systemPrompt;
      for (const [local, server] of [
        [`Current working directory: ${remote.localCwd}`, `Current working directory: ${remote.root}`],
        [`<cwd>\n${remote.localCwd}\n</cwd>`, `<cwd>\n${remote.root}\n</cwd>`],
      ]) {
        systemPrompt = systemPrompt.replace(local, server);
      }
      return systemPrompt === event.systemPrompt ? undefined : { systemPrompt };
    });
  };
}

/** The extension as pi-native-ops's own import finds pi, for an application that passes it to pi's SDK. */
export default piNativeOpsWith(BY_NAME);
