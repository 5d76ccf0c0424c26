// The loader as a user's install sees it: the package's JS files copied into a temporary package
// directory (no repo, no node_modules of ours), loaded by a child node process.
import { spawnSync } from "node:child_process";
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
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const repo = fileURLToPath(new URL("..", import.meta.url));
const binaryName = readdirSync(repo).find((name) => /^pi-native-ops\..+\.node$/.test(name));
const suffix = binaryName?.slice("pi-native-ops.".length, -".node".length);

// Imports js/native.js and prints what loaded (or the error) as one JSON line.
const PROBE = `
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
try {
  const { native } = await import("./js/native.js");
  const loaded = Object.keys(require.cache).filter((file) => file.endsWith(".node"));
  const functions = Object.keys(native).filter((name) => typeof native[name] === "function");
  console.log(JSON.stringify({ functions, loaded }));
} catch (err) {
  console.log(JSON.stringify({ message: err.message, code: err.code }));
}
`;

/** A package directory holding the JS loader files and no binary. */
function bareCopy(parent, name) {
  const dir = join(parent, name);
  mkdirSync(join(dir, "js"), { recursive: true });
  for (const file of ["package.json", "native.cjs", "js/native.js", "js/platforms.js"])
    copyFileSync(join(repo, file), join(dir, file));
  writeFileSync(join(dir, "probe.mjs"), PROBE);
  return dir;
}

function probe(dir, env = {}) {
  const childEnv = { ...process.env, ...env };
  if (!("NAPI_RS_NATIVE_LIBRARY_PATH" in env)) delete childEnv.NAPI_RS_NATIVE_LIBRARY_PATH;
  const child = spawnSync(process.execPath, ["probe.mjs"], {
    cwd: dir,
    env: childEnv,
    encoding: "utf8",
    timeout: 30_000,
  });
  expect(child.status, child.stderr).toBe(0);
  return JSON.parse(child.stdout.trim().split("\n").pop());
}

describe("native loader", () => {
  let scratch;
  let bare;
  let installed;
  let override;

  beforeAll(() => {
    expect(binaryName, "build the addon first (npx napi build --platform)").toBeDefined();
    scratch = realpathSync(mkdtempSync(join(tmpdir(), "pi-native-ops-loader-")));
    bare = bareCopy(scratch, "bare");
    // As npm lays it out: the platform package as a dependency of the main package.
    installed = bareCopy(scratch, "installed");
    const platformDir = join(installed, "node_modules", `pi-native-ops-${suffix}`);
    mkdirSync(platformDir, { recursive: true });
    copyFileSync(join(repo, "npm", suffix, "package.json"), join(platformDir, "package.json"));
    copyFileSync(join(repo, binaryName), join(platformDir, binaryName));
    mkdirSync(join(scratch, "elsewhere"));
    override = join(scratch, "elsewhere", "custom-name.node");
    copyFileSync(join(repo, binaryName), override);
  });

  afterAll(() => {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("loads the binary from the platform package when none sits beside native.cjs", () => {
    const result = probe(installed);
    expect(result.functions.length).toBeGreaterThan(0);
    expect(result.loaded).toEqual([join(installed, "node_modules", `pi-native-ops-${suffix}`, binaryName)]);
  });

  it("honours NAPI_RS_NATIVE_LIBRARY_PATH, even over an installed platform package", () => {
    for (const dir of [bare, installed]) {
      const result = probe(dir, { NAPI_RS_NATIVE_LIBRARY_PATH: override });
      expect(result.functions.length).toBeGreaterThan(0);
      expect(result.loaded).toEqual([override]);
    }
  });

  it("when no binary fits, throws an error naming the platform, what was tried and the fix", () => {
    const result = probe(bare);
    expect(result.code).toBe("ERR_PI_NATIVE_OPS_NO_BINARY");
    expect(result.message).toContain(`for ${suffix} (Node ${process.versions.node})`);
    expect(result.message).toContain(`Cannot find module './${binaryName}'`);
    expect(result.message).toContain(`Cannot find module 'pi-native-ops-${suffix}'`);
    expect(result.message).toMatch(/Fix: .*optional dependency "pi-native-ops-[^"]+".*npm install/);
    expect(result.message).toContain("NAPI_RS_NATIVE_LIBRARY_PATH");
    expect(result.message).not.toMatch(/wasi/i);
  });

  it("when NAPI_RS_NATIVE_LIBRARY_PATH points at nothing usable, says so and how to fix it", () => {
    const bogus = join(scratch, "no-such-dir", "pi-native-ops.node");
    const missing = probe(installed, { NAPI_RS_NATIVE_LIBRARY_PATH: bogus });
    expect(missing.code).toBe("ERR_PI_NATIVE_OPS_NO_BINARY");
    expect(missing.message).toContain(`Cannot find module '${bogus}'`);
    expect(missing.message).toContain(`NAPI_RS_NATIVE_LIBRARY_PATH is set to "${bogus}"`);
    expect(missing.message).toContain("or unset it");

    const garbage = join(scratch, "elsewhere", "garbage.node");
    writeFileSync(garbage, "not a shared library");
    const broken = probe(bare, { NAPI_RS_NATIVE_LIBRARY_PATH: garbage });
    expect(broken.code).toBe("ERR_PI_NATIVE_OPS_NO_BINARY");
    expect(broken.message).toContain(garbage);
  });
});

// pi is loaded only by the tool factories: importing the package for its Operations must not pay for
// it. PI_NATIVE_OPS_PI points at a stand-in pi (on NODE_PATH) that records being loaded.
const FAKE_PI = `
globalThis.__fakePiLoads = (globalThis.__fakePiLoads ?? 0) + 1;
const tool = (name) => () => ({ name, execute: async () => ({ content: [] }) });
for (const kind of ["Tool", "ToolDefinition"]) {
  for (const name of ["Read", "Bash", "Edit", "Write", "Grep", "Find", "Ls"]) exports["create" + name + kind] = tool(name);
}
`;

describe("pi loading", () => {
  let scratch;
  beforeAll(() => {
    scratch = realpathSync(mkdtempSync(join(tmpdir(), "pi-native-ops-lazy-")));
    mkdirSync(join(scratch, "modules", "fake-pi"), { recursive: true });
    writeFileSync(join(scratch, "modules", "fake-pi", "package.json"), '{ "name": "fake-pi", "main": "index.cjs" }');
    writeFileSync(join(scratch, "modules", "fake-pi", "index.cjs"), FAKE_PI);
    // As a dependent project sees the package: node_modules/pi-native-ops (a link to this checkout).
    mkdirSync(join(scratch, "app", "node_modules"), { recursive: true });
    symlinkSync(repo, join(scratch, "app", "node_modules", "pi-native-ops"));
  });
  afterAll(() => {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  const run = (args, env) =>
    spawnSync(process.execPath, args, {
      cwd: join(scratch, "app"),
      env: { ...process.env, ...env },
      encoding: "utf8",
      timeout: 60_000,
    });

  for (const [how, args] of [
    ["import", ["--input-type=module", "-e", 'main(await import("pi-native-ops"))']],
    ["require", ["-e", 'main(require("pi-native-ops"))']],
  ]) {
    it(`${how}: the package loads without pi; the first tool factory call loads it once`, () => {
      const main = `function main(m) {
        const before = globalThis.__fakePiLoads ?? 0;
        m.createBoundFs(${JSON.stringify(scratch)}); m.createBashOperations();
        const afterOps = globalThis.__fakePiLoads ?? 0;
        const tools = m.createNativeTools(${JSON.stringify(scratch)});
        m.createNativeToolDefinitions(${JSON.stringify(scratch)});
        console.log(JSON.stringify({ before, afterOps, after: globalThis.__fakePiLoads ?? 0, names: Object.keys(tools) }));
      }`;
      const child = run([...args.slice(0, -1), `${main}\n${args.at(-1)}`], {
        NODE_PATH: join(scratch, "modules"),
        PI_NATIVE_OPS_PI: "fake-pi",
      });
      expect(child.status, child.stderr).toBe(0);
      expect(JSON.parse(child.stdout.trim().split("\n").pop())).toEqual({
        before: 0,
        afterOps: 0,
        after: 1,
        names: ["read", "bash", "edit", "write", "grep", "find", "ls"],
      });
    });
  }

  // The CommonJS consumer with the real pi: vitest runs once on Node 20 with pi 0.73.1 and once on
  // Node 22 with pi 1.6.0, so both get this; PI_NATIVE_OPS_PI is passed through.
  it("a CommonJS project requires the package and gets pi's real tools", () => {
    const script = `
      const { createNativeTools, createBoundFs } = require("pi-native-ops");
      const fs = createBoundFs(${JSON.stringify(scratch)});
      const tools = createNativeTools(${JSON.stringify(scratch)});
      tools.ls.execute("id", { path: "." }).then((r) => console.log(JSON.stringify({ text: r.content[0].text, ls: typeof fs.ls.stat })));
    `;
    const child = run(["-e", script], {});
    expect(child.status, child.stderr).toBe(0);
    expect(child.stderr).not.toMatch(/ExperimentalWarning/);
    expect(JSON.parse(child.stdout.trim().split("\n").pop())).toEqual({ text: "app/\nmodules/", ls: "function" });
  });

  it("names every candidate and why it failed when no pi can be loaded", () => {
    const child = run(
      [
        "-e",
        'try { require("pi-native-ops").createNativeTools("/tmp") } catch (e) { console.log(JSON.stringify(e.message)) }',
      ],
      {
        PI_NATIVE_OPS_PI: "no-such-pi",
      },
    );
    expect(child.status, child.stderr).toBe(0);
    const message = JSON.parse(child.stdout.trim().split("\n").pop());
    expect(message).toMatch(
      /^pi-native-ops: this needs pi-coding-agent, and none could be loaded:\n {2}no-such-pi: Cannot find package 'no-such-pi'\n/,
    );
  });
});

// The WebSocket face and the cloud adapters (and `ws` under them) load at their first call, not at
// import: a resolve hook in the child records every module the package's import resolves.
const RESOLVE_LOG_HOOK = `
import { appendFileSync } from "node:fs";
let log;
export function initialize(data) { log = data.log; }
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  appendFileSync(log, result.url + "\\n");
  return result;
}
`;

describe("remote faces loading", () => {
  let scratch;
  beforeAll(() => {
    scratch = realpathSync(mkdtempSync(join(tmpdir(), "pi-native-ops-lazy-faces-")));
    writeFileSync(join(scratch, "hooks.mjs"), RESOLVE_LOG_HOOK);
    writeFileSync(
      join(scratch, "register.mjs"),
      `import { register } from "node:module";
register("./hooks.mjs", import.meta.url, { data: { log: ${JSON.stringify(join(scratch, "resolved.log"))} } });`,
    );
    mkdirSync(join(scratch, "app", "node_modules"), { recursive: true });
    symlinkSync(repo, join(scratch, "app", "node_modules", "pi-native-ops"));
  });
  afterAll(() => {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("importing the package loads neither ws nor the remote client nor its faces; each call loads its face", () => {
    const script = `
      import { readFileSync } from "node:fs";
      const log = ${JSON.stringify(join(scratch, "resolved.log"))};
      const loaded = () => {
        const urls = readFileSync(log, "utf8");
        return {
          ws: urls.includes("/node_modules/ws/"),
          websocket: urls.includes("/js/websocket.js"),
          sandboxes: urls.includes("/js/sandboxes.js"),
          remote: urls.includes("/js/remote.js"),
        };
      };
      const m = await import("pi-native-ops");
      const atImport = loaded();
      const errors = {};
      // The remote tools before any connect: the remote face is loaded then (by require, which the resolve
      // hook does not see), and says what it needs.
      try { m.createRemoteTools("/workspace", {}); } catch (e) { errors.createRemoteTools = e.constructor.name + ": " + e.message; }
      for (const [name, arg] of [["connectWebSocket", 42], ["connectE2B", null], ["connectDaytona", {}], ["connectVercelSandbox", {}]]) {
        await m[name](arg).catch((e) => { errors[name] = e.constructor.name + ": " + e.message; });
      }
      console.log(JSON.stringify({ atImport, afterCalls: loaded(), errors }));
    `;
    const child = spawnSync(
      process.execPath,
      ["--import", join(scratch, "register.mjs"), "--input-type=module", "-e", script],
      { cwd: join(scratch, "app"), encoding: "utf8", timeout: 60_000 },
    );
    expect(child.status, child.stderr).toBe(0);
    expect(JSON.parse(child.stdout.trim().split("\n").pop())).toEqual({
      atImport: { ws: false, websocket: false, sandboxes: false, remote: false },
      afterCalls: { ws: true, websocket: true, sandboxes: true, remote: true },
      errors: {
        createRemoteTools: "TypeError: options.connection must be a connection made by connect()",
        connectWebSocket: "TypeError: url must be a string or a URL",
        connectE2B: "TypeError: E2B: the sandbox object has no files.write() (not a E2B sandbox?)",
        connectDaytona: "TypeError: Daytona: the sandbox object has no fs.uploadFile() (not a Daytona sandbox?)",
        connectVercelSandbox: "TypeError: Vercel: the sandbox object has no writeFiles() (not a Vercel sandbox?)",
      },
    });
  });

  it("the package's named exports are the same functions' names and arities as the modules behind them", async () => {
    const pkg = await import("pi-native-ops");
    const websocket = await import("../js/websocket.js");
    const sandboxes = await import("../js/sandboxes.js");
    const remote = await import("../js/remote.js");
    for (const [name, impl] of [
      ["connect", remote.connect],
      ["connectWebSocket", websocket.connectWebSocket],
      ["connectE2B", sandboxes.connectE2B],
      ["connectDaytona", sandboxes.connectDaytona],
      ["connectVercelSandbox", sandboxes.connectVercelSandbox],
    ]) {
      expect(pkg[name].name, name).toBe(impl.name);
      expect(pkg[name].length, name).toBe(impl.length);
      expect(pkg[name].constructor.name, name).toBe("AsyncFunction");
    }
    for (const name of ["createRemoteTools", "createRemoteToolDefinitions"]) {
      expect(pkg[name].name, name).toBe(remote[name].name);
      expect(pkg[name].length, name).toBe(remote[name].length);
      expect(pkg[name].constructor.name, name).toBe("Function");
    }
  });
});

describe("module structure", () => {
  it("the JS modules import each other without cycles, argument checks from js/args.js", () => {
    const dir = join(repo, "js");
    const imports = {};
    for (const file of readdirSync(dir).filter((name) => name.endsWith(".js"))) {
      const source = readFileSync(join(dir, file), "utf8");
      imports[file] = [...source.matchAll(/^import .* from "\.\/([\w-]+\.js)";$/gm)].map((m) => m[1]);
    }
    const cycle = (file, path = []) => {
      if (path.includes(file)) return [...path, file];
      for (const next of imports[file] ?? []) {
        const found = cycle(next, [...path, file]);
        if (found) return found;
      }
      return null;
    };
    for (const file of Object.keys(imports)) expect(cycle(file), file).toBeNull();
    expect(imports["args.js"]).toEqual([]);
    for (const file of ["fs.js", "find.js", "grep.js", "bash.js", "tools.js"])
      expect(imports[file], file).toContain("args.js");
  });
});
