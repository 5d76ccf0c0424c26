// A smoke run of the addon through the package, for a Node of another architecture (an arm64 Node under
// qemu-aarch64, from scripts/test-aarch64.sh): read, write, edit, ls, find, grep and bash, each checked.
// vitest itself cannot run there (its bundler's native packages are this machine's architecture).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createBashOperations, createBoundFs, glob, grep } from "../index.js";

const root = mkdtempSync(path.join(tmpdir(), "pno-arm64-"));
try {
  writeFileSync(path.join(root, "a.txt"), "alpha\nneedle one\n");
  const fs = createBoundFs(root);
  assert.equal((await fs.read.readFile(path.join(root, "a.txt"))).toString(), "alpha\nneedle one\n");
  await fs.write.mkdir(path.join(root, "sub"));
  await fs.write.writeFile(path.join(root, "sub/b.rs"), "fn needle() {}\n");
  assert.equal(await fs.ls.exists(path.join(root, "sub/b.rs")), true);
  assert.deepEqual((await fs.ls.readdir(root)).sort(), ["a.txt", "sub"]);
  assert.equal((await fs.ls.stat(path.join(root, "sub"))).isDirectory(), true);
  await assert.rejects(fs.read.readFile("/etc/passwd"), /outside/);
  assert.deepEqual(await glob("**/*.rs", root), [path.join(root, "sub/b.rs")]);
  const found = await grep({ pattern: "needle", path: root, fs });
  assert.equal(found.matchCount, 2);
  const chunks = [];
  const { exitCode } = await createBashOperations().exec("echo $((6*7)); uname -m", root, {
    onData: (d) => chunks.push(d),
  });
  assert.equal(exitCode, 0);
  assert.match(Buffer.concat(chunks).toString(), /^42\n/);
  console.log(`arm64 addon smoke: ok (${process.platform}-${process.arch}, Node ${process.version})`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
