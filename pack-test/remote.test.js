// Runs inside the fresh project scripts/pack-test.sh installs from the tarballs: the remote server ships in
// the platform package, serverBinaryPath() finds it there, and it serves a workspace to connect().
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { expect, it } from "vitest";
import { connect, createRemoteTools, serverBinaryPath } from "pi-native-ops";

const require = createRequire(import.meta.url);

it("serverBinaryPath() is the platform package's executable, and the main package ships none", () => {
  const platformDir = dirname(require.resolve("pi-native-ops-linux-x64-gnu/package.json"));
  const mainDir = dirname(require.resolve("pi-native-ops/package.json"));
  expect(serverBinaryPath()).toBe(join(platformDir, "pi-native-ops-server"));
  expect(statSync(serverBinaryPath()).mode & 0o111).toBe(0o111);
  expect(readdirSync(mainDir).filter((name) => name.startsWith("pi-native-ops-server"))).toEqual([]);
  // Linux servers are static: the same binary serves either libc.
  expect(serverBinaryPath({ platform: "linux", arch: "x64" })).toBe(serverBinaryPath());
});

it("the installed server serves a workspace to connect() and pi's tools", async () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "pack-test-remote-")));
  writeFileSync(join(root, "hello.txt"), "hello from the server\n");
  const child = spawn(serverBinaryPath(), ["--root", root], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  try {
    const connection = await connect(child);
    expect(String(await connection.fs.read.readFile(join(root, "hello.txt")))).toBe("hello from the server\n");
    const tools = createRemoteTools(root, { connection });
    const grep = await tools.grep.execute("g", { pattern: "hello" });
    expect(grep.content[0].text).toBe("hello.txt:1: hello from the server");
    const bash = await tools.bash.execute("b", { command: "pwd" });
    expect(bash.content[0].text).toBe(`${root}\n`);
    await connection.close();
    expect(await exited).toBe(0);
  } finally {
    child.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  }
});
