// The loader as a user's install sees it: the package's JS files copied into a temporary package
// directory (no repo, no node_modules of ours), loaded by a child node process.
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
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
  for (const file of ["package.json", "native.cjs", "js/native.js"]) copyFileSync(join(repo, file), join(dir, file));
  writeFileSync(join(dir, "probe.mjs"), PROBE);
  return dir;
}

function probe(dir, env = {}) {
  const childEnv = { ...process.env, ...env };
  if (!("NAPI_RS_NATIVE_LIBRARY_PATH" in env)) delete childEnv.NAPI_RS_NATIVE_LIBRARY_PATH;
  const child = spawnSync(process.execPath, ["probe.mjs"], { cwd: dir, env: childEnv, encoding: "utf8", timeout: 30_000 });
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
