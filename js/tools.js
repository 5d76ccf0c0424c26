// One-call wiring: all seven of pi's tools, each built by the installed pi's own factory with this
// package's operations (and our grep tool, since pi's grep cannot be redirected).
import { createBashOperations } from "./bash.js";
import { createBoundFs } from "./fs.js";
import { createGrepTool, createGrepToolDefinition } from "./grep.js";
import { requirePi } from "./pi.js";

function wire(cwd, options, kind) {
  if (typeof cwd !== "string" || cwd.length === 0) throw new TypeError("cwd must be a non-empty string");
  if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
  const { module: pi } = requirePi();
  const { root = cwd, runtimeRoot, bash = {} } = options;
  const fs = createBoundFs(root, runtimeRoot === undefined ? {} : { runtimeRoot });
  const { shellPath, ...bashToolOptions } = bash;
  const operations = createBashOperations(shellPath === undefined ? {} : { shellPath });
  const make = (name) => pi[`create${name}${kind}`];
  return {
    read: make("Read")(cwd, { operations: fs.read }),
    bash: make("Bash")(cwd, { ...bashToolOptions, operations }),
    edit: make("Edit")(cwd, { operations: fs.edit }),
    write: make("Write")(cwd, { operations: fs.write }),
    grep: (kind === "Tool" ? createGrepTool : createGrepToolDefinition)(cwd, { fs }),
    find: make("Find")(cwd, { operations: fs.find }),
    ls: make("Ls")(cwd, { operations: fs.ls }),
  };
}

/** Like pi's `createAllTools(cwd)`: `{ read, bash, edit, write, grep, find, ls }` on native operations. */
export function createNativeTools(cwd, options = {}) {
  return wire(cwd, options, "Tool");
}

/** The same as tool definitions, for pi extensions that call `registerTool`. */
export function createNativeToolDefinitions(cwd, options = {}) {
  return wire(cwd, options, "ToolDefinition");
}
