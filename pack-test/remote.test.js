// Runs inside the fresh project scripts/pack-test.sh installs from the tarballs: the remote server ships in
// the platform package, serverBinaryPath() finds it there, and it serves a workspace to connect().
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { expect, it } from "vitest";
import { connect, connectWebSocket, createRemoteTools, serverBinaryPath } from "pi-native-ops";

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

it("the installed server's --listen serves connectWebSocket (the ws dependency resolves from the install)", async () => {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "pack-test-ws-")));
  writeFileSync(join(root, "hello.txt"), "hello over a WebSocket\n");
  const token = "pack-test-token-0123456789";
  const child = spawn(serverBinaryPath(), ["--root", root, "--listen", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, PI_NATIVE_OPS_TOKEN: token },
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  try {
    const address = await new Promise((resolve) => {
      let out = "";
      child.stdout.on("data", (d) => {
        out += d;
        const m = /^listening on (\S+)\n/.exec(out);
        if (m) resolve(m[1]);
      });
    });
    const connection = await connectWebSocket(`ws://${address}/`, { token });
    expect(String(await connection.fs.read.readFile(join(root, "hello.txt")))).toBe("hello over a WebSocket\n");
    await connection.close();
    expect(await exited).toBe(0);
  } finally {
    child.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  }
});
