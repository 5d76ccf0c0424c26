// A CommonJS project's use of the package: require() it (ESM loaded through require(esm)), use the
// Operations without pi, then pi's tools. Prints one JSON line for pi-tools.test.js to check.
const { mkdtempSync, realpathSync, writeFileSync } = require("node:fs");
const { tmpdir } = require("node:os");
const { join } = require("node:path");
const { createBoundFs, createNativeTools, glob } = require("pi-native-ops");

async function main() {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "pack-test-cjs-")));
  writeFileSync(join(root, "hello.txt"), "hello from CommonJS\n");
  const fs = createBoundFs(root);
  const read = (await fs.read.readFile(join(root, "hello.txt"))).toString();
  const found = await glob("*.txt", root);
  const tools = createNativeTools(root);
  const grep = (await tools.grep.execute("cjs-1", { pattern: "CommonJS" })).content[0].text;
  const ls = (await tools.ls.execute("cjs-2", { path: "/etc" }).catch((err) => ({ content: [{ text: err.message }] })))
    .content[0].text;
  console.log(JSON.stringify({ read, found: found.map((p) => p.slice(root.length)), grep, ls }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
