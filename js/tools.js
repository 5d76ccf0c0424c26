// One-call wiring: all seven of pi's tools, each built by the installed pi's own factory with this
// package's operations (and our grep tool, since pi's grep cannot be redirected).
import path from "node:path";
import { createBashOperations, createPowerShellOperations } from "./bash.js";
import { createBoundFs } from "./fs.js";
import { createGrepToolDefinition, grepToolOf } from "./grep.js";
import { checkObject } from "./args.js";
import { native } from "./native.js";
import { checkPolicy } from "./policy-events.js";
import { piOf } from "./pi.js";

/**
 * pi words the find limit notice shorter when it runs custom operations (`[4 results limit reached]`)
 * than over fd (`[4 results limit reached. Use limit=8 for more, or refine pattern]`); the model gets
 * stock pi's text, which tells it how to ask for more.
 */
function withStockLimitNotice(tool) {
  const execute = tool.execute;
  return {
    ...tool,
    async execute(...args) {
      const result = await execute.apply(tool, args);
      const limit = result?.details?.resultLimitReached;
      const part = result?.content?.[0];
      if (typeof limit !== "number" || part?.type !== "text") return result;
      const short = `\n\n[${limit} results limit reached`;
      const at = part.text.lastIndexOf(short);
      const end = at + short.length;
      // A pi that already gives the longer text is left alone.
      if (at < 0 || part.text.startsWith(". Use limit=", end)) return result;
      const text = `${part.text.slice(0, end)}. Use limit=${limit * 2} for more, or refine pattern${part.text.slice(end)}`;
      return { ...result, content: [{ ...part, text }, ...result.content.slice(1)] };
    },
  };
}

/**
 * The bash sandbox of the tools' options: `sandbox: true` is the defaults, an object is merged with the
 * tools' `root` and `runtimeRoot`, so the file tools and the shell see one workspace at one path.
 */
function sandboxOf(options, root, runtimeRoot) {
  const { sandbox, policy, onPolicyEvent } = options;
  if (sandbox === undefined || sandbox === false) return undefined;
  if (sandbox !== true && (sandbox === null || typeof sandbox !== "object")) {
    throw new TypeError("sandbox must be true or an object of createBashOperations' sandbox options");
  }
  const own = sandbox === true ? {} : sandbox;
  for (const [key, value] of [
    ["root", root],
    ["runtimeRoot", runtimeRoot],
  ]) {
    if (own[key] !== undefined && path.resolve(own[key]) !== path.resolve(value)) {
      throw new TypeError(`sandbox.${key} (${own[key]}) differs from the tools' ${key} (${value}); give it once`);
    }
  }
  // One policy for the file tools and the shell: given once, or the same twice.
  // The same once the core has given both its defaults (`protect` among them).
  if (
    own.policy !== undefined &&
    policy !== undefined &&
    !native.samePolicy(checkPolicy(own.policy), checkPolicy(policy))
  ) {
    throw new TypeError("sandbox.policy differs from the tools' policy; give it once");
  }
  if (own.onPolicyEvent !== undefined && onPolicyEvent !== undefined && own.onPolicyEvent !== onPolicyEvent) {
    throw new TypeError("sandbox.onPolicyEvent differs from the tools' onPolicyEvent; give it once");
  }
  const shared = {
    ...(policy === undefined ? {} : { policy }),
    ...(onPolicyEvent === undefined ? {} : { onPolicyEvent }),
  };
  return { ...own, root, runtimeRoot, ...shared };
}

function wire(cwd, options, kind) {
  if (typeof cwd !== "string" || cwd.length === 0) throw new TypeError("cwd must be a non-empty string");
  checkObject(options);
  const pi = piOf(options.pi);
  const { bash = {} } = options;
  const sandboxObject = options.sandbox !== null && typeof options.sandbox === "object" ? options.sandbox : {};
  const root = options.root ?? sandboxObject.root ?? cwd;
  // Without a runtimeRoot anywhere, the workspace keeps its host path, for the file tools and the shell.
  const runtimeRoot = options.runtimeRoot ?? sandboxObject.runtimeRoot;
  const sandbox = sandboxOf(options, path.resolve(root), path.resolve(runtimeRoot ?? root));
  // The file tools take the policy given to the tools, or else the sandbox's (checked equal when both).
  const policy = options.policy ?? sandboxObject.policy;
  const onPolicyEvent = options.onPolicyEvent ?? sandboxObject.onPolicyEvent;
  const fs = createBoundFs(root, {
    ...(runtimeRoot === undefined ? {} : { runtimeRoot }),
    ...(options.index === undefined ? {} : { index: options.index }),
    ...(policy === undefined ? {} : { policy }),
    ...(onPolicyEvent === undefined ? {} : { onPolicyEvent }),
  });
  const { shellPath, sandbox: misplaced, ...bashToolOptions } = bash;
  if (misplaced !== undefined) throw new TypeError("bash.sandbox: give the sandbox as the tools' own `sandbox` option");
  const operations = createBashOperations({
    ...(shellPath === undefined ? {} : { shellPath }),
    ...(sandbox === undefined ? {} : { sandbox }),
  });
  if (process.platform === "win32") return windowsTools(cwd, kind, { fs, operations, bashToolOptions, pi });
  const tools = assembleTools(cwd, kind, {
    fs,
    operations,
    bashToolOptions,
    grep: createGrepToolDefinition(cwd, { fs, pi }),
    pi,
  });
  // Not enumerable: callers take the tools as Object.values(tools).
  if (fs.index !== undefined) Object.defineProperty(tools, "index", { value: fs.index });
  return tools;
}

/**
 * The write tool's operations: pi makes the file's directory, then writes the file. Here the file is
 * written first and its directory made only when missing, so a write the core refuses (outside the
 * workspace, denied by the policy) is refused naming the file as pi resolved it, not a directory it
 * would have had to create.
 */
function writeToolOperations(ops) {
  return {
    mkdir: async () => {},
    writeFile: async (p, content) => {
      try {
        return await ops.writeFile(p, content);
      } catch (err) {
        // ENOTDIR: a file where a directory should be; mkdir says EEXIST, as stock pi's does.
        if (err?.code !== "ENOENT" && err?.code !== "ENOTDIR") throw err;
      }
      await ops.mkdir(path.dirname(p));
      return ops.writeFile(p, content);
    },
  };
}

/**
 * The seven tools of `kind` ("Tool" or "ToolDefinition") from the installed pi's factories over `fs`'s
 * operations and bash's `operations`, with `grep` (our grep tool's definition) in pi's grep's place.
 * `pi` is the pi module (validated by piOf). Shared by the local tools here and the remote ones (remote.js).
 */
export function assembleTools(cwd, kind, { fs, operations, bashToolOptions, grep, pi }) {
  const make = (name) => pi[`create${name}${kind}`];
  return {
    read: make("Read")(cwd, { operations: fs.read }),
    bash: make("Bash")(cwd, { ...bashToolOptions, operations }),
    edit: make("Edit")(cwd, { operations: fs.edit }),
    write: make("Write")(cwd, { operations: writeToolOperations(fs.write) }),
    grep: kind === "Tool" ? grepToolOf(cwd, grep, pi) : grep,
    find: withStockLimitNotice(make("Find")(cwd, { operations: fs.find })),
    ls: make("Ls")(cwd, { operations: fs.ls }),
  };
}

/**
 * Windows: read, write, edit, ls, grep and find on the bounded fs, bash on the native exec. With a pi that
 * has the powershell tool (1.6), `powershell` too, on the native exec: pi's tool set has it, and on Windows
 * only can it run (elsewhere pi's own refuses every command, so it is not offered there).
 */
function windowsTools(cwd, kind, { fs, operations, bashToolOptions, pi }) {
  const make = (name) => pi[`create${name}${kind}`];
  const grep = createGrepToolDefinition(cwd, { fs, pi });
  const tools = {
    read: make("Read")(cwd, { operations: fs.read }),
    bash: make("Bash")(cwd, { ...bashToolOptions, operations }),
    edit: make("Edit")(cwd, { operations: fs.edit }),
    write: make("Write")(cwd, { operations: writeToolOperations(fs.write) }),
    grep: kind === "Tool" ? grepToolOf(cwd, grep, pi) : grep,
    find: withStockLimitNotice(make("Find")(cwd, { operations: fs.find })),
    ls: make("Ls")(cwd, { operations: fs.ls }),
  };
  if (typeof make("PowerShell") === "function") {
    tools.powershell = make("PowerShell")(cwd, { operations: createPowerShellOperations() });
  }
  return tools;
}

/** Like pi's `createAllTools(cwd)`: `{ read, bash, edit, write, grep, find, ls }` on native operations. */
export function createNativeTools(cwd, options = {}) {
  return wire(cwd, options, "Tool");
}

/** The same as tool definitions, for pi extensions that call `registerTool`. */
export function createNativeToolDefinitions(cwd, options = {}) {
  return wire(cwd, options, "ToolDefinition");
}
