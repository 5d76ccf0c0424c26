// Checks what `npm pack --json` put in the two tarballs, and prints their sizes.
// Usage: node scripts/pack-check.js <main-pack.json> <platform-pack.json> <main package.json from the tarball>
// Exits 1 listing every problem found; prints one "size" line per tarball on success.
import { readFileSync } from "node:fs";
import { PREBUILT } from "../js/platforms.js";

const [mainJson, platformJson, mainManifestPath] = process.argv.slice(2);
const [main] = JSON.parse(readFileSync(mainJson, "utf8"));
const [platform] = JSON.parse(readFileSync(platformJson, "utf8"));
const problems = [];

const paths = (pack) => pack.files.map((file) => file.path);

// Main package: the JS loader and wrappers, typings, nothing from the build or the test suite.
const MAIN_REQUIRED = [
  "package.json",
  "index.js",
  "index.d.ts",
  "native.cjs",
  "native.d.ts",
  "js/native.js",
  "js/pi.js",
  "js/pi.d.ts",
  "js/args.js",
  "js/platforms.js",
  "js/extension.js",
  "js/extension.ts",
  "js/websocket.js",
  "js/websocket.d.ts",
  "js/sandboxes.js",
  "js/sandboxes.d.ts",
  "js/policy-events.js",
  "js/policy-events.d.ts",
];
const MAIN_FORBIDDEN = [
  [/\.node$/, "a native binary (belongs in the platform package)"],
  [/^pi-native-ops-server/, "the server binary (belongs in the platform package)"],
  [/^target\//, "cargo's target/ directory"],
  [/^(src|__test__|bench|pack-test|npm|scripts|demo|docs|\.github|\.ci)\//, "a repository-only directory"],
  [/fixture|golden|\.corpus/i, "a test fixture"],
  [/^Cargo\.(toml|lock)$|^build\.rs$|\.rs$/, "Rust sources"],
  [/\.tgz$/, "a tarball"],
];
for (const required of MAIN_REQUIRED) {
  if (!paths(main).includes(required)) problems.push(`${main.name}: missing ${required}`);
}
for (const path of paths(main)) {
  for (const [pattern, what] of MAIN_FORBIDDEN) {
    if (pattern.test(path)) problems.push(`${main.name}: ships ${path}, ${what}`);
  }
}

// The packed manifest must name every platform package at the same version (napi-rs v3 wiring),
// and have no install hooks: users never compile or download anything at install time.
const manifest = JSON.parse(readFileSync(mainManifestPath, "utf8"));
// napi-rs's suffix for a Rust target triple, e.g. x86_64-unknown-linux-gnu -> linux-x64-gnu.
const suffixOf = (triple) => {
  const [arch, , os, abi] = triple.split("-");
  const cpu = { x86_64: "x64", aarch64: "arm64" }[arch] ?? arch;
  if (os === "darwin") return `darwin-${cpu}`;
  if (os === "windows") return `win32-${cpu}-${abi}`;
  return `${os}-${cpu}-${abi}`;
};
const targets = (manifest.napi?.targets ?? []).map(suffixOf);
if (targets.join() !== PREBUILT.join())
  problems.push(`js/platforms.js lists ${PREBUILT.join(", ")}; package.json napi.targets give ${targets.join(", ")}`);
const PLATFORMS = PREBUILT;
for (const suffix of PLATFORMS) {
  const dep = `pi-native-ops-${suffix}`;
  const version = manifest.optionalDependencies?.[dep];
  if (version !== manifest.version)
    problems.push(`${main.name}: optionalDependencies["${dep}"] is ${version}, want ${manifest.version}`);
}
for (const hook of ["preinstall", "install", "postinstall"]) {
  if (manifest.scripts?.[hook]) problems.push(`${main.name}: has a ${hook} script; users must never compile`);
}

// Platform package: exactly its manifest, README, the addon and the remote server (installed executable:
// npm keeps a packed file's exec bits).
const binary = "pi-native-ops.linux-x64-gnu.node";
const server = "pi-native-ops-server";
const expected = ["README.md", binary, "package.json", server].sort();
const got = paths(platform).sort();
if (JSON.stringify(got) !== JSON.stringify(expected)) {
  problems.push(`${platform.name}: expected files ${expected.join(", ")}; got ${got.join(", ")}`);
}
const serverMode = platform.files.find((file) => file.path === server)?.mode;
if (serverMode !== undefined && (serverMode & 0o111) !== 0o111) {
  problems.push(`${platform.name}: ${server} has mode ${serverMode.toString(8)}, not executable`);
}
if (platform.name !== "pi-native-ops-linux-x64-gnu") problems.push(`platform package is named ${platform.name}`);
if (platform.version !== main.version) {
  problems.push(`version mismatch: ${main.name}@${main.version} vs ${platform.name}@${platform.version}`);
}

if (problems.length) {
  for (const problem of problems) console.error(`pack-check: ${problem}`);
  process.exit(1);
}

const kib = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`;
for (const pack of [main, platform]) {
  console.log(
    `size ${pack.name}@${pack.version}: tarball ${kib(pack.size)}, unpacked ${kib(pack.unpackedSize)}, ${pack.entryCount} files`,
  );
}
