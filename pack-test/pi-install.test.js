// Runs inside the fresh project scripts/pack-test.sh installs from the tarballs: a pi user's set-up,
// `pi install npm:pi-native-ops`, with pi's own install command into a scratch HOME, from the two
// tarballs (and the main package's dependencies) served by a loopback npm registry (nothing reaches the real registry or the real HOME); then
// pi runs with the installed package and its tools are the native ones.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { MODEL, PROVIDER, runPi, scratchPiHome, startFakeModel } from "./fake-model.js";

const piName = process.env.PI_NATIVE_OPS_PI ?? "@earendil-works/pi-coding-agent";
const cli = join(import.meta.dirname, "node_modules", piName, "dist", "cli.js");
const tarballs = (process.env.PACK_TEST_TARBALLS ?? "").split(":").filter(Boolean);

/** A registry serving each tarball's package at its version (packument and tarball), nothing else. */
async function startRegistry(files) {
  const packuments = new Map();
  const bodies = new Map();
  const server = http.createServer((req, res) => {
    const name = decodeURIComponent(req.url.slice(1));
    if (packuments.has(name)) {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(packuments.get(name)));
    } else if (bodies.has(req.url)) {
      res.writeHead(200, { "content-type": "application/octet-stream" }).end(bodies.get(req.url));
    } else {
      res.writeHead(404).end("{}");
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/`;
  for (const file of files) {
    const manifest = JSON.parse(execFileSync("tar", ["-xzOf", file, "package/package.json"], { encoding: "utf8" }));
    const body = readFileSync(file);
    const path = `/tarballs/${basename(file)}`;
    bodies.set(path, body);
    const dist = {
      tarball: `${url}${path.slice(1)}`,
      shasum: createHash("sha1").update(body).digest("hex"),
      integrity: `sha512-${createHash("sha512").update(body).digest("base64")}`,
    };
    packuments.set(manifest.name, {
      name: manifest.name,
      "dist-tags": { latest: manifest.version },
      versions: { [manifest.version]: { ...manifest, dist } },
    });
  }
  return { url, close: () => new Promise((resolve) => server.close(resolve)) };
}

let registry;
let model;
const dirs = [];
beforeAll(async () => {
  // The pi CLI under test: pi 1.6 on Node 22, pi 0.73.1 on Node 20.
  registry = await startRegistry(tarballs);
  model = await startFakeModel((request) => {
    const results = request.messages.filter((m) => m.role === "tool").length;
    return results === 0 ? { tool: "read", args: { path: "../outside.txt" } } : { text: "done" };
  });
});
afterAll(async () => {
  await registry?.close();
  await model?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** A scratch run directory and pi's environment: the loopback registry, a scratch HOME and npm cache. */
function scratch() {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), "pack-test-pi-install-")));
  dirs.push(dir);
  mkdirSync(join(dir, "ws"));
  writeFileSync(join(dir, "outside.txt"), "secret\n");
  const env = {
    ...scratchPiHome(dir, model.url),
    npm_config_registry: registry.url,
    npm_config_cache: join(dir, "npm-cache"),
    npm_config_audit: "false",
    npm_config_fund: "false",
  };
  // pi installs packages from the registry: only the loopback one above.
  delete env.PI_OFFLINE;
  return { dir, env };
}

/** Runs pi on the script (a read of ../outside.txt) and gives what each tool returned. */
async function readOutside(dir, env, args) {
  const run = await runPi(
    process.execPath,
    cli,
    ["--mode", "json", "--no-session", "--provider", PROVIDER, "--model", MODEL, "go", ...args],
    { cwd: join(dir, "ws"), env },
  );
  // npm says what it added (the -e install); nothing else, no error.
  expect(run.stderr).not.toMatch(/error|warn/i);
  return run.stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line))
    .filter((e) => e.type === "tool_execution_end")
    .map((e) => [e.toolName, e.isError, e.result.content[0].text]);
}

it(`pi install npm:pi-native-ops (${piName}), then pi runs the native tools`, async () => {
  // The main and the platform tarball, then the main package's dependencies (ws).
  expect(tarballs.length, "PACK_TEST_TARBALLS names the main and the platform tarball").toBeGreaterThanOrEqual(2);
  const { dir, env } = scratch();
  const install = await runPi(process.execPath, cli, ["install", "npm:pi-native-ops"], { cwd: dir, env });
  expect(install.stderr + install.stdout).not.toMatch(/error/i);
  expect(install.code).toBe(0);
  const settings = JSON.parse(readFileSync(join(dir, "home", ".pi", "agent", "settings.json"), "utf8"));
  expect(settings.packages).toContain("npm:pi-native-ops");
  expect(await readOutside(dir, env, ["--offline"])).toEqual([
    ["read", true, `path "${join(dir, "outside.txt")}" is outside workspace`],
  ]);
}, 300_000);

it(`pi -e npm:pi-native-ops (${piName}): for one run, nothing installed`, async () => {
  expect(tarballs.length).toBeGreaterThanOrEqual(2);
  const { dir, env } = scratch();
  expect(await readOutside(dir, env, ["-e", "npm:pi-native-ops"])).toEqual([
    ["read", true, `path "${join(dir, "outside.txt")}" is outside workspace`],
  ]);
  const settings = JSON.parse(readFileSync(join(dir, "home", ".pi", "agent", "settings.json"), "utf8"));
  expect(settings.packages).toBeUndefined();
}, 300_000);
