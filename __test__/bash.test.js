import { describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createBashOperations } from "pi-native-ops";
import { isRemote, makeBash } from "./helpers/face.js";
import { collect, isAlive, pidsIn, waitFor } from "./bash-helpers.js";

const ops = await makeBash();
const cwd = "/tmp";

describe("createBashOperations exec", () => {
  it("streams output while the command runs, in chunks whose concatenation is the output", async () => {
    // The command goes on only once onData has created `flag` on seeing its first line, which it can
    // only have seen while the command was still running (it gives up after 30 s: 1500 polls of 20 ms).
    const flag = path.join(tmpdir(), `pno-stream-${process.pid}`);
    rmSync(flag, { force: true });
    const out = collect();
    const command =
      `echo first; i=0; while [ ! -e '${flag}' ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done; ` +
      `[ -e '${flag}' ] || echo gave up; rm -f '${flag}'; seq 1 100`;
    const result = await ops.exec(command, cwd, {
      onData: (chunk) => {
        out.onData(chunk);
        if (out.text().startsWith("first\n")) writeFileSync(flag, "");
      },
    });
    expect(result).toEqual({ exitCode: 0 });
    expect(out.text()).toBe(`first\n${Array.from({ length: 100 }, (_, i) => `${i + 1}\n`).join("")}`);
    expect(out.chunks.length).toBeGreaterThanOrEqual(2);
    for (const chunk of out.chunks) expect(Buffer.isBuffer(chunk)).toBe(true);
  });

  it("keeps stdout and stderr in arrival order", async () => {
    const out = collect();
    await ops.exec("echo one; echo two >&2; echo three; echo four >&2", cwd, out);
    expect(out.text()).toBe("one\ntwo\nthree\nfour\n");
  });

  it("returns the shell's exit code, 128 + signal when killed by one", async () => {
    expect(await ops.exec("exit 7", cwd, { onData() {} })).toEqual({ exitCode: 7 });
    expect(await ops.exec("kill -9 $$", cwd, { onData() {} })).toEqual({ exitCode: 137 });
  });

  it("runs in cwd with the given env as the whole environment and stdin at /dev/null", async () => {
    const out = collect();
    await ops.exec('pwd; echo "[$FOO][${HOME-unset}]"; cat; echo done', "/usr", {
      ...out,
      env: { FOO: "bar", PATH: process.env.PATH, SKIP: undefined },
    });
    expect(out.text()).toBe("/usr\n[bar][unset]\ndone\n");
  });

  // Remotely, a command without env runs in the server's environment (docs/protocol.md, exec).
  it.skipIf(isRemote)("inherits the process environment when env is absent", async () => {
    process.env.PI_NATIVE_OPS_BASH_TEST = "inherited";
    const out = collect();
    await ops.exec("echo $PI_NATIVE_OPS_BASH_TEST", cwd, out);
    delete process.env.PI_NATIVE_OPS_BASH_TEST;
    expect(out.text()).toBe("inherited\n");
  });

  it("uses shellPath", async () => {
    const out = collect();
    await (await makeBash({ shellPath: "/bin/sh" })).exec("echo $0", cwd, out);
    expect(out.text()).toBe("/bin/sh\n");
    await expect((await makeBash({ shellPath: "/no/such/shell" })).exec("true", cwd, out)).rejects.toThrow(
      "Custom shell path not found: /no/such/shell",
    );
  });

  it("rejects bad input clearly", async () => {
    const onData = () => {};
    await expect(ops.exec(42, cwd, { onData })).rejects.toThrow(TypeError);
    await expect(ops.exec("a\0b", cwd, { onData })).rejects.toThrow(TypeError);
    await expect(ops.exec("true", cwd, {})).rejects.toThrow("onData must be a function");
    await expect(ops.exec("true", cwd)).rejects.toThrow(TypeError);
    for (const timeout of [0, -1, NaN, Infinity, "5"]) {
      await expect(ops.exec("true", cwd, { onData, timeout })).rejects.toThrow(
        "Invalid timeout: must be a finite number of seconds",
      );
    }
    await expect(ops.exec("true", cwd, { onData, timeout: 3e6 })).rejects.toThrow(
      "Invalid timeout: maximum is 2147483.647 seconds",
    );
    await expect(ops.exec("true", "/definitely/missing", { onData })).rejects.toThrow(
      "Working directory does not exist: /definitely/missing\nCannot execute bash commands.",
    );
    expect(() => createBashOperations({ shellPath: 1 })).toThrow(TypeError);
  });

  it("rejects with the error of an onData that throws, and kills the command", async () => {
    const boom = new Error("boom");
    const out = collect();
    const onData = (chunk) => {
      out.onData(chunk);
      if (pidsIn(out.text()).length > 0) throw boom;
    };
    await expect(ops.exec("echo PID=$$; exec yes", cwd, { onData })).rejects.toBe(boom);
    const [pid] = pidsIn(out.text());
    expect(pid).toBeGreaterThan(0);
    expect(await waitFor(() => !isAlive(pid)), `pid ${pid} still running`).toBe(true);
  });

  it("rejects an already-aborted signal before spawning", async () => {
    const out = collect();
    await expect(ops.exec("echo ran", cwd, { ...out, signal: AbortSignal.abort() })).rejects.toThrow("aborted");
    expect(out.chunks).toEqual([]);
  });

  it("abort mid-run kills the whole tree, setsid grandchildren included", async () => {
    const out = collect();
    const controller = new AbortController();
    const command =
      "sleep 60 & echo PID=$!; setsid sh -c 'echo PID=$$; exec sleep 60' & " +
      "sh -c 'trap \"\" TERM; echo PID=$$; sleep 60' & wait";
    const run = ops.exec(command, cwd, {
      onData: (chunk) => {
        out.onData(chunk);
        if (pidsIn(out.text()).length === 3) controller.abort();
      },
      signal: controller.signal,
    });
    await expect(run).rejects.toThrow("aborted");
    const pids = pidsIn(out.text());
    expect(pids).toHaveLength(3);
    for (const pid of pids) expect(isAlive(pid), `pid ${pid}`).toBe(false);
  });

  it("timeout kills a tree that ignores SIGTERM and rejects timeout:<n>", async () => {
    const out = collect();
    const started = performance.now();
    await expect(
      ops.exec("trap '' TERM; setsid sh -c 'trap \"\" TERM; echo PID=$$; sleep 60' & echo PID=$$; wait", cwd, {
        ...out,
        timeout: 0.5,
      }),
    ).rejects.toThrow(/^timeout:0\.5$/);
    // Not early: a lower bound on a monotonic clock, which no load can make fail (timers never fire early).
    expect(performance.now() - started).toBeGreaterThanOrEqual(450);
    const pids = pidsIn(out.text());
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(isAlive(pid), `pid ${pid}`).toBe(false);
  });

  it("settles soon after the shell exits even while a background child holds the pipes", async () => {
    const out = collect();
    const result = await ops.exec("echo start; sleep 30 & echo PID=$!", cwd, out);
    expect(result).toEqual({ exitCode: 0 });
    const [pid] = pidsIn(out.text());
    // Settled while the child still runs (holding the pipes): it did not wait for them to close.
    expect(isAlive(pid)).toBe(true); // left running, as pi does
    process.kill(pid, "SIGKILL");
  });

  it("keeps reading output that a background child writes right after the shell exits", async () => {
    const out = collect();
    // The child writes once the shell has exited and been reaped (kill -0 fails), with no pause between.
    await ops.exec(
      "(while kill -0 $$ 2>/dev/null; do :; done; echo late1; echo late2; echo late3) & echo early",
      cwd,
      out,
    );
    expect(out.text()).toBe("early\nlate1\nlate2\nlate3\n");
  });

  it("delivers every onData call before the promise settles", async () => {
    let settled = false;
    let lateCalls = 0;
    const promise = ops.exec("head -c 3000000 /dev/zero", cwd, {
      onData: () => {
        if (settled) lateCalls++;
      },
    });
    await promise;
    settled = true;
    await new Promise((r) => setTimeout(r, 100));
    expect(lateCalls).toBe(0);
  });

  // This process's own lifecycle with a local exec; the remote one is remote-faults.test.js's.
  it.skipIf(isRemote)("a node process that runs one exec exits on its own", async () => {
    const script = `import { createBashOperations } from "pi-native-ops";
      const r = await createBashOperations().exec("echo hi", "/tmp", { onData: (b) => process.stdout.write(b) });
      console.log("exit", r.exitCode);`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    child.stdout.on("data", (d) => (stdout += d));
    const code = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error("node did not exit on its own"));
      }, 10_000);
      child.on("exit", (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    expect(code).toBe(0);
    expect(stdout).toBe("hi\nexit 0\n");
  });

  it.skipIf(isRemote)("kills the command's tree when node dies mid-run", async () => {
    const script = `import { createBashOperations } from "pi-native-ops";
      createBashOperations().exec("setsid sh -c 'echo PID=$$; exec sleep 60' & echo PID=$$; wait", "/tmp",
        { onData: (b) => { process.stdout.write(b); if (String(b).includes("PID=")) setTimeout(() => process.kill(process.pid, "SIGKILL"), 100); } });`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    child.stdout.on("data", (d) => (stdout += d));
    await new Promise((resolve) => child.on("close", resolve));
    const pids = pidsIn(stdout);
    expect(pids.length).toBeGreaterThanOrEqual(1);
    // The orphaned supervisor notices node's death and kills the tree: poll, generously.
    await waitFor(() => !pids.some(isAlive));
    for (const pid of pids) expect(isAlive(pid), `pid ${pid}`).toBe(false);
  });
});
