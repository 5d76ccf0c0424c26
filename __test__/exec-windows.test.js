// The exec on Windows (crates/core/src/exec/windows.rs): one ordered stream, exit codes, env and cwd,
// the whole tree (grandchildren started detached included) killed on abort and timeout and when Node
// dies (the Job object's kill-on-close), a finished command's background processes left running, bounded
// memory under a flood into a slow consumer, pi's shell lookup and its texts, pi 1.6's PowerShell
// operations, and pi's bash tool with our operations against pi's own.
//
// The shell: under wine (scripts/test-windows.sh) brush-shell, a bash-compatible shell cross-built for
// Windows (no Git Bash exists there), named by PI_NATIVE_OPS_WIN_BASH; on a Windows runner, Git Bash as pi
// finds it. The commands use only what both have; the processes whose lives are checked are this Node
// (process.execPath) running fixture scripts, so no coreutils are needed.
import { spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { createBashOperations, createNativeTools, createPowerShellOperations } from "pi-native-ops";
import { collect, waitFor } from "./bash-helpers.js";
import { isPi1, pi, runTool } from "./helpers/pi.js";
import { underWine, windows } from "./helpers/windows.js";

const describeWindows = windows ? describe : describe.skip;
const shellPath = process.env.PI_NATIVE_OPS_WIN_BASH || undefined;
const dir = windows ? mkdtempSync(path.join(tmpdir(), "pno-exec-")) : "";
afterAll(() => {
  // Retried: a process of the last test may still be letting go of the directory (EBUSY).
  if (dir) rmSync(dir, { recursive: true, force: true, maxRetries: 20 });
});

/** A fixture script in `dir`; returns the command that runs it with this Node (bash single-quoted). */
function script(name, source) {
  const file = path.join(dir, name);
  writeFileSync(file, source);
  return (...args) => [process.execPath, file, ...args].map((a) => `'${a}'`).join(" ");
}

const node = windows ? `'${process.execPath}'` : "";
// cmd.exe's switches untouched: Git Bash (MSYS2) would turn an argument `/c` into the path `C:/`.
const cmd = "MSYS_NO_PATHCONV=1 cmd";
// Prints PID=<pid>, then lives until killed; with "spawn", first starts a detached copy of itself (a
// grandchild in a new process group, outside the shell's console) and prints its PID too; with a file
// name, writes its pid there once it runs.
const sleeper = windows
  ? script(
      "sleeper.js",
      `const { spawn } = require("node:child_process");
      const arg = process.argv[2];
      if (arg === "spawn") {
        const child = spawn(process.execPath, [__filename], { detached: true, stdio: ["ignore", "inherit", "inherit"] });
        child.unref();
      }
      console.log("PID=" + process.pid);
      if (arg && arg !== "spawn") require("node:fs").writeFileSync(arg + ".tmp", String(process.pid)), require("node:fs").renameSync(arg + ".tmp", arg);
      setInterval(() => {}, 1 << 30);`,
    )
  : () => "";

function pidsIn(text) {
  return [...text.matchAll(/PID=(\d+)/g)].map((m) => Number(m[1]));
}

/** Whether a process lives (Node's kill 0 on Windows: an exit code of STILL_ACTIVE). */
function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const ops = windows ? createBashOperations({ shellPath }) : undefined;

describeWindows("createBashOperations on Windows", () => {
  it("keeps stdout and stderr in arrival order on one stream", async () => {
    const out = collect();
    const result = await ops.exec("echo one; echo two >&2; echo three; echo four >&2", dir, out);
    expect(result).toEqual({ exitCode: 0 });
    expect(out.text()).toBe("one\ntwo\nthree\nfour\n");
    for (const chunk of out.chunks) expect(Buffer.isBuffer(chunk)).toBe(true);
  });

  it("returns the shell's exit code, and a child's through it", async () => {
    expect(await ops.exec("exit 7", dir, { onData() {} })).toEqual({ exitCode: 7 });
    expect(await ops.exec(`${cmd} /c exit 5`, dir, { onData() {} })).toEqual({ exitCode: 5 });
    expect(await ops.exec(`${node} -e "process.exit(42)"`, dir, { onData() {} })).toEqual({ exitCode: 42 });
  });

  it("passes the command through the command line exactly (quotes, backslashes, a trailing backslash)", async () => {
    const out = collect();
    await ops.exec(`echo "a \\"b\\" c" 'd\\e' "f\\\\"; echo 'C:\\dir\\'`, dir, out);
    expect(out.text()).toBe('a "b" c d\\e f\\\nC:\\dir\\\n');
  });

  it("runs in cwd with the given env as the whole environment", async () => {
    const show = script("show.js", 'console.log(process.cwd() + "|" + process.env.FOO + "|" + process.env.PNO_UNSET);');
    const sub = path.join(dir, "sub dir");
    mkdirSync(sub, { recursive: true });
    const env = { ...process.env, FOO: "bar", PNO_UNSET: undefined };
    process.env.PNO_UNSET = "inherited";
    try {
      const out = collect();
      await ops.exec(show(), sub, { ...out, env });
      expect(out.text().trim()).toBe(`${sub}|bar|undefined`);
      // Without env: this process's environment.
      const inherited = collect();
      await ops.exec(show(), sub, inherited);
      expect(inherited.text().trim()).toBe(`${sub}|undefined|inherited`);
    } finally {
      delete process.env.PNO_UNSET;
    }
  });

  it("abort mid-run kills the whole tree, a detached grandchild included", async () => {
    const out = collect();
    const controller = new AbortController();
    const run = ops.exec(`${sleeper()} & ${sleeper("spawn")} & wait`, dir, {
      onData: (chunk) => {
        out.onData(chunk);
        if (pidsIn(out.text()).length === 3) controller.abort();
      },
      signal: controller.signal,
    });
    await expect(run).rejects.toThrow("aborted");
    const pids = pidsIn(out.text());
    expect(pids).toHaveLength(3);
    // The exec settles once the job has no process left.
    for (const pid of pids) expect(isAlive(pid), `pid ${pid}`).toBe(false);
  });

  it("timeout kills the whole tree and rejects timeout:<n>", async () => {
    const out = collect();
    await expect(ops.exec(`${sleeper("spawn")} & wait`, dir, { ...out, timeout: 3 })).rejects.toThrow(/^timeout:3$/);
    const pids = pidsIn(out.text());
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(isAlive(pid), `pid ${pid}`).toBe(false);
  });

  it("a grandchild started with cmd's start /b dies with the tree", async () => {
    const out = collect();
    const controller = new AbortController();
    const run = ops.exec(`${cmd} /c start /b ${sleeper()}; ${sleeper()}`, dir, {
      onData: (chunk) => {
        out.onData(chunk);
        if (pidsIn(out.text()).length === 2) controller.abort();
      },
      signal: controller.signal,
    });
    await expect(run).rejects.toThrow("aborted");
    const pids = pidsIn(out.text());
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(isAlive(pid), `pid ${pid}`).toBe(false);
  });

  it("settles when the shell exits, leaving a background child that holds the pipe running (as pi does)", async () => {
    const pidFile = path.join(dir, "bg.pid");
    rmSync(pidFile, { force: true });
    // The shell exits once the child runs (it wrote its pid file); the child keeps the output pipe open.
    const result = await ops.exec(`${sleeper(pidFile)} & while [ ! -s '${pidFile}' ]; do :; done; echo started`, dir, {
      onData() {},
    });
    expect(result).toEqual({ exitCode: 0 });
    const pid = Number(readFileSync(pidFile, "utf8"));
    expect(isAlive(pid)).toBe(true);
    process.kill(pid);
    expect(await waitFor(() => !isAlive(pid))).toBe(true);
  });

  it("kills the command's tree when Node dies mid-run (the job's kill-on-close)", async () => {
    const program = `import { createBashOperations } from "pi-native-ops";
      createBashOperations({ shellPath: ${JSON.stringify(shellPath)} }).exec(${JSON.stringify(`${sleeper("spawn")} & wait`)},
        ${JSON.stringify(dir)}, { onData: (b) => { process.stdout.write(b);
          if ((String(b).match(/PID=/g) || []).length >= 1) setTimeout(() => process.kill(process.pid, "SIGKILL"), 200); } });`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", program], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    child.stdout.on("data", (d) => (stdout += d));
    await new Promise((resolve) => child.on("close", resolve));
    const pids = pidsIn(stdout);
    expect(pids.length).toBeGreaterThanOrEqual(1);
    expect(await waitFor(() => !pids.some(isAlive))).toBe(true);
  });

  it("streams 50 MB into a slow consumer without running ahead of it (backpressure)", async () => {
    const progress = path.join(dir, "progress");
    const total = 50 * 1024 * 1024;
    // The producer records how much it has written (fixed width, at offset 0) after every write.
    const flood = script(
      "flood.js",
      `const fs = require("node:fs");
      const progress = fs.openSync(process.argv[2], "w");
      const block = Buffer.alloc(64 * 1024, 120);
      for (let written = 0; written < ${total}; ) {
        written += fs.writeSync(1, block);
        fs.writeSync(progress, String(written).padStart(12, "0"), 0);
      }`,
    );
    const pause = new Int32Array(new SharedArrayBuffer(4));
    globalThis.gc?.();
    const baseline = process.memoryUsage().rss;
    let peak = baseline;
    let bytes = 0;
    let maxAhead = 0;
    const result = await ops.exec(flood(progress), dir, {
      onData: (chunk) => {
        bytes += chunk.length;
        let written = 0;
        try {
          written = Number(readFileSync(progress, "utf8")) || 0;
        } catch {}
        maxAhead = Math.max(maxAhead, written - bytes);
        Atomics.wait(pause, 0, 0, 1); // a consumer slower than the producer
        peak = Math.max(peak, process.memoryUsage().rss);
      },
    });
    expect(result).toEqual({ exitCode: 0 });
    expect(bytes).toBe(total);
    console.log(
      `flood: ${total >> 20} MiB, producer at most ${(maxAhead / 1024).toFixed(0)} KiB ahead, ` +
        `peak RSS growth ${((peak - baseline) / 1024 ** 2).toFixed(1)} MiB`,
    );
    // What may be written but not consumed: the pipe (64 KiB), the chunk being read and the one being
    // delivered (256 KiB each), one block in flight: far below the 50 MB an unbounded buffer would hold.
    expect(maxAhead).toBeLessThan(2 * 1024 * 1024);
  }, 300_000);

  it("refuses a missing shellPath and a missing cwd with pi's texts", async () => {
    const missing = path.join(dir, "no-such-bash.exe");
    await expect(createBashOperations({ shellPath: missing }).exec("echo", dir, { onData() {} })).rejects.toThrow(
      `Custom shell path not found: ${missing}`,
    );
    const gone = path.join(dir, "gone");
    await expect(ops.exec("echo", gone, { onData() {} })).rejects.toThrow(
      `Working directory does not exist: ${gone}\nCannot execute bash commands.`,
    );
  });

  it("finds bash as pi does: Git Bash under ProgramFiles, else pi's 'No bash shell found' text", async () => {
    const saved = { pf: process.env.ProgramFiles, pf86: process.env["ProgramFiles(x86)"], path: process.env.PATH };
    const pf = path.join(dir, "pf");
    const pf86 = path.join(dir, "pf86");
    mkdirSync(pf, { recursive: true });
    mkdirSync(pf86, { recursive: true });
    try {
      process.env.ProgramFiles = pf;
      process.env["ProgramFiles(x86)"] = pf86;
      process.env.PATH = path.join(dir, "empty-path");
      const text =
        "No bash shell found. Options:\n  1. Install Git for Windows: https://git-scm.com/download/win\n" +
        "  2. Add your bash to PATH (Cygwin, MSYS2, etc.)\n  3. Set shellPath in settings.json\n\n" +
        `Searched Git Bash in:\n  ${pf}\\Git\\bin\\bash.exe\n  ${pf86}\\Git\\bin\\bash.exe`;
      const err = await createBashOperations()
        .exec("echo", dir, { onData() {} })
        .catch((e) => e);
      expect(err.message).toBe(text);
      // pi's own local operations say the same.
      const theirs = await pi
        .createLocalBashOperations()
        .exec("echo", dir, { onData() {} })
        .catch((e) => e);
      expect(theirs.message).toBe(text);
      if (shellPath) {
        // A bash in the (x86) Git's place is found there.
        mkdirSync(path.join(pf86, "Git", "bin"), { recursive: true });
        copyFileSync(shellPath, path.join(pf86, "Git", "bin", "bash.exe"));
        const out = collect();
        expect(await createBashOperations().exec("echo found", dir, out)).toEqual({ exitCode: 0 });
        expect(out.text()).toBe("found\n");
      }
    } finally {
      process.env.ProgramFiles = saved.pf;
      process.env["ProgramFiles(x86)"] = saved.pf86;
      process.env.PATH = saved.path;
    }
  });

  it("refuses a sandbox: it is Linux-only", async () => {
    const sandboxed = createBashOperations({ shellPath, sandbox: { root: dir } });
    await expect(sandboxed.exec("echo", dir, { onData() {} })).rejects.toMatchObject({ code: "ESANDBOX" });
  });
});

describeWindows("pi's bash tool on Windows with native operations", () => {
  async function run(operations, params) {
    const tool = pi.createBashTool(dir, operations ? { operations } : { shellPath });
    const r = await runTool(tool, params);
    return r.error === undefined ? { failed: r.isError ?? false, text: r.text } : { failed: true, text: r.error };
  }
  const cases = [
    ["plain output", { command: "echo hello; echo world >&2" }],
    ["no output", { command: "true" }],
    ["non-zero exit", { command: "echo failing; exit 3" }],
    ["large output", { command: "for ((i = 1; i <= 3000; i++)); do echo line $i; done" }],
  ];
  for (const [name, params] of cases) {
    it(`matches pi's local operations: ${name}`, async () => {
      const scrub = (r) => ({ ...r, text: r.text.replace(/[^\s[\]]*pi-bash-[^\s\]]+/g, "<file>") });
      expect(scrub(await run(ops, params))).toEqual(scrub(await run(undefined, params)));
    });
  }

  it("createNativeTools wires bash (and with pi 1.6, powershell) to the native exec", async () => {
    const tools = createNativeTools(dir, { bash: shellPath ? { shellPath } : {} });
    const r = await runTool(tools.bash, { command: "echo wired" });
    expect(r.text).toBe("wired\n");
    expect("powershell" in tools).toBe(isPi1);
  });
});

describeWindows("createPowerShellOperations", () => {
  it.runIf(isPi1)("refuses as pi's own do when no PowerShell is found", async () => {
    const saved = { path: process.env.PATH, pf: process.env.ProgramFiles, root: process.env.SystemRoot };
    try {
      process.env.PATH = path.join(dir, "empty-path");
      process.env.ProgramFiles = path.join(dir, "pf-none");
      process.env.SystemRoot = path.join(dir, "root-none");
      const ours = await createPowerShellOperations()
        .exec("Get-Date", dir, { onData() {} })
        .catch((e) => e);
      const theirs = await pi
        .createLocalPowerShellOperations()
        .exec("Get-Date", dir, { onData() {} })
        .catch((e) => e);
      expect(ours.message).toBe(
        "No PowerShell executable found. Install PowerShell or add powershell.exe/pwsh.exe to PATH.",
      );
      expect(ours.message).toBe(theirs.message);
    } finally {
      process.env.PATH = saved.path;
      process.env.ProgramFiles = saved.pf;
      process.env.SystemRoot = saved.root;
    }
  });

  // A stand-in that prints the arguments it was given (helpers/argv-echo.c; wine has no PowerShell), as
  // pwsh.exe and as powershell.exe: what our operations start is exactly what pi's own start.
  const argvEcho = process.env.PI_NATIVE_OPS_WIN_ARGV || undefined;
  it.runIf(isPi1 && argvEcho)(
    "starts PowerShell as pi does: pi's lookup and arguments, the UTF-8 prefix, Windows PowerShell's exit suffix",
    async () => {
      const saved = { path: process.env.PATH, pf: process.env.ProgramFiles };
      const commands = ['Write-Output "a \\"b\\"" \'c:\\dir\\\' héllo ✓\nGet-Date', "dir `"];
      try {
        process.env.ProgramFiles = path.join(dir, "pf-none");
        for (const name of ["pwsh.exe", "powershell.exe"]) {
          const bin = path.join(dir, `bin-${name}`);
          mkdirSync(bin, { recursive: true });
          copyFileSync(argvEcho, path.join(bin, name));
          // System32 too: pi's lookup runs where.exe from there.
          process.env.PATH = `${bin};${path.join(process.env.SystemRoot, "System32")}`;
          for (const command of commands) {
            const ours = collect();
            const theirs = collect();
            expect(await createPowerShellOperations().exec(command, dir, ours)).toEqual({ exitCode: 0 });
            if (!underWine) await pi.createLocalPowerShellOperations().exec(command, dir, theirs);
            const argv = ours.text().split("\x1e").slice(0, -1);
            expect(argv[0]).toBe(path.join(bin, name));
            expect(argv.slice(1, 6)).toEqual([
              "-NoProfile",
              "-NonInteractive",
              "-ExecutionPolicy",
              "Bypass",
              "-Command",
            ]);
            const prefix = "try { [Console]::OutputEncoding=[System.Text.Encoding]::UTF8 } catch {}\n";
            expect(argv[6].slice(0, prefix.length + command.length)).toBe(`${prefix}${command}`);
            expect(argv[6].endsWith("\nexit 1")).toBe(name === "powershell.exe" && !command.endsWith("`"));
            // Under wine, pi's own lookup cannot find a PowerShell on PATH: it asks where.exe, a stub there
            // that finds nothing (and pi falls back to wine's stub powershell.exe under SystemRoot).
            if (!underWine) expect(ours.text()).toBe(theirs.text());
          }
        }
        // A missing cwd: pi's refusal names PowerShell.
        const gone = path.join(dir, "gone");
        await expect(createPowerShellOperations().exec("Get-Date", gone, { onData() {} })).rejects.toThrow(
          `Working directory does not exist: ${gone}\nCannot execute PowerShell commands.`,
        );
      } finally {
        process.env.PATH = saved.path;
        process.env.ProgramFiles = saved.pf;
      }
    },
  );

  it("rejects unknown options", () => {
    expect(() => createPowerShellOperations({ shellPath: "x" })).toThrow(/unknown option "shellPath"/);
  });
});

describe.skipIf(windows)("createPowerShellOperations off Windows", () => {
  it("rejects every command in pi's words", async () => {
    await expect(createPowerShellOperations().exec("Get-Date", "/", { onData() {} })).rejects.toThrow(
      "The powershell tool is only available on Windows.",
    );
  });
});
