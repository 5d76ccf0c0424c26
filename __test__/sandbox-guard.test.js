// The machinery that serves a sandboxed command holds nothing the command may not have. The guard (the
// workspace policy, answered on Node's side by seccomp user notification; always on with the protected
// defaults) answers for its caller only: it never opens or follows another process's /proc/<pid>, so
// Node's memory, environment and pipes and the sandbox's init stay out of reach (both modes, root and
// nobody, Node with a pipe for stdin). Git's other ways to run code (commondir, gitfiles, worktrees,
// core.hooksPath, husky) are protected defaults, and bind() of a Unix socket is decided by the policy.
// Every outcome is judged on the host side.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import * as pno from "pi-native-ops";
import { connectWebSocket } from "pi-native-ops";
import { afterAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, nodeArgvAs, removeScripts, tempDirFor } from "./helpers/nobody.js";
import { staged } from "./helpers/staged.js";
import { serverPath } from "./helpers/face.js";
import { hasListen, startListening } from "./helpers/ws-server.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const users = ["root", ...(nobody.argv ? ["nobody"] : [])];
const modes = [
  ...(support?.enforces.namespaces && support.userNotification ? ["namespaces"] : []),
  ...(support?.enforces.landlock && support.userNotification ? ["landlock"] : []),
];
const cleanup = [];
afterAll(() => {
  for (const fn of cleanup.reverse()) fn();
  removeScripts();
});

/** The sandbox options of `mode` over `root` (no policy: the protected defaults), and the commands' cwd. */
function options(mode, root, extra = {}) {
  const sandbox = { root, mode, ...extra };
  if (mode === "landlock") sandbox.runtimeRoot = root;
  return { sandbox, cwd: mode === "landlock" ? root : "/workspace" };
}

// A Node process run as `user` with a pipe for stdin (pi's RPC mode), running one sandboxed command with
// `{NODE}` replaced by its own pid; it prints the result, then, once the test closes its stdin, whatever
// arrived there.
const CHILD = `
const parent = process.ppid;
setInterval(() => process.ppid !== parent && process.exit(1), 200).unref();
const { pkg, sandbox, command, cwd } = JSON.parse(process.argv.at(-1));
const pno = await import(pkg);
let output = "";
const { exitCode } = await pno
  .createBashOperations({ sandbox })
  .exec(command.replaceAll("{NODE}", String(process.pid)), cwd, { onData: (c) => (output += c) });
process.stdout.write(JSON.stringify({ output, exitCode }) + "\\n");
let stdin = "";
process.stdin.on("data", (d) => (stdin += d));
process.stdin.on("end", () => process.stdout.write(JSON.stringify({ stdin }) + "\\n"));
`;

/** Runs `command` sandboxed in a child Node run as `user`: `{ output, exitCode, stdin }`. */
async function runInChild(user, sandbox, command, cwd) {
  const dir = tempDirFor("root", "pno-guard-child-");
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, "child.mjs");
  writeFileSync(file, CHILD, { mode: 0o644 });
  const argv = [...nodeArgvAs(user), file, JSON.stringify({ pkg: staged("index.js"), sandbox, command, cwd })];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "inherit"], cwd: "/" });
  cleanup.push(() => child.kill("SIGKILL"));
  const lines = [];
  let buffered = "";
  let wake;
  child.stdout.on("data", (d) => {
    buffered += d;
    const parts = buffered.split("\n");
    buffered = parts.pop();
    lines.push(...parts.map((l) => JSON.parse(l)));
    wake?.();
  });
  const closed = new Promise((resolve) => child.on("close", resolve));
  const line = async (n) => {
    while (lines.length < n) {
      const more = new Promise((resolve) => (wake = resolve));
      if ((await Promise.race([more.then(() => false), closed.then(() => true)])) && lines.length < n)
        throw new Error(`the child ended after ${lines.length} lines`);
    }
    return lines[n - 1];
  };
  const result = await line(1);
  child.stdin.end();
  const { stdin } = await line(2);
  return { ...result, stdin };
}

// Opens each path as asked, through the guard (a write open, or any open with a denyRead rule), and
// prints what became of it: the errno's name, or OPENED (after writing a line into it, or reading).
const PROBE = `
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
node = sys.argv[1]
out = {}
def attempt(name, path, flags, dir_fd=None):
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
        return
    try:
        if flags & os.O_ACCMODE == os.O_WRONLY:
            os.write(fd, b"INJECTED-BY-SANDBOX\\n" if not name.startswith("own") else b"")
        else:
            os.read(fd, 64)
    except OSError:
        pass
    os.close(fd)
    out[name] = "OPENED"
others = ["1"] + ([node] if node != "-" else [])
for pid in others:
    attempt(pid + " mem", "/proc/%s/mem" % pid, os.O_RDWR)
    attempt(pid + " maps", "/proc/%s/maps" % pid, os.O_RDONLY)
    attempt(pid + " environ", "/proc/%s/environ" % pid, os.O_RDONLY)
    for n in range(24):
        attempt("%s fd %d" % (pid, n), "/proc/%s/fd/%d" % (pid, n), os.O_WRONLY)
    attempt(pid + " via root", "/proc/self/root/proc/%s/mem" % pid, os.O_RDWR)
    attempt(pid + " via net", "/proc/net/../../%s/mem" % pid, os.O_RDWR)
    # linkat(AT_EMPTY_PATH) of the caller's own O_PATH descriptor of another process's mem.
    m = os.open("/proc/%s/mem" % pid, os.O_PATH)
    r = libc.linkat(m, b"", -100, b"linked-mem", 0x1000)
    out[pid + " linkat empty path"] = "OK" if r == 0 else errno.errorcode.get(ctypes.get_errno())
    os.close(m)
    # A descriptor of the directory, held by the caller itself (O_PATH: the kernel lets it look).
    try:
        d = os.open("/proc/" + pid, os.O_PATH | os.O_DIRECTORY)
    except OSError as e:
        out[pid + " O_PATH"] = errno.errorcode.get(e.errno)
        continue
    attempt(pid + " by dirfd", "mem", os.O_RDWR, dir_fd=d)
    attempt(pid + " by own fd link", "/proc/self/fd/%d/mem" % d, os.O_RDWR)
    os.chdir("/proc/" + pid)
    attempt(pid + " by cwd", "mem", os.O_RDWR)
    attempt(pid + " by cwd fd", "fd/1", os.O_WRONLY)
    attempt(pid + " by own cwd link", "/proc/self/cwd/mem", os.O_RDWR)
    os.chdir(os.environ["PWD_AT"])
    os.close(d)
# The caller's own /proc stays its own.
attempt("own fd", "/proc/self/fd/1", os.O_WRONLY)
attempt("own thread fd", "/proc/thread-self/fd/1", os.O_WRONLY)
attempt("own pid fd", "/proc/%d/fd/1" % os.getpid(), os.O_WRONLY)
print(json.dumps(out))
`;

describe.skipIf(modes.length === 0)("the guard answers only for its caller", () => {
  for (const mode of modes) {
    for (const user of users) {
      for (const policy of [undefined, { denyRead: [".env"] }]) {
        const what = policy ? "with a denyRead rule (every open is the guard's)" : "the protected defaults";
        it(`${mode}, as ${user}, ${what}: no /proc/<pid> but the caller's own`, async () => {
          const root = tempDirFor(user, "pno-guard-");
          cleanup.push(() => rmSync(root, { recursive: true, force: true }));
          writeFileSync(path.join(root, "probe.py"), PROBE, { mode: 0o644 });
          const { sandbox, cwd } = options(mode, root, policy ? { policy } : {});
          // Node's pid means nothing inside a PID namespace: there, init (1) is the other process.
          const node = mode === "landlock" ? "{NODE}" : "-";
          const r = await runInChild(user, sandbox, `PWD_AT=$PWD /usr/bin/python3 probe.py ${node}`, cwd);
          expect(r.exitCode).toBe(0);
          const out = JSON.parse(r.output.trim().split("\n").at(-1));
          const own = Object.fromEntries(Object.entries(out).filter(([k]) => k.startsWith("own")));
          expect(own).toEqual({ "own fd": "OPENED", "own thread fd": "OPENED", "own pid fd": "OPENED" });
          const others = Object.entries(out).filter(([k]) => !k.startsWith("own") && !k.endsWith("O_PATH"));
          expect(others.length).toBeGreaterThan(mode === "landlock" ? 60 : 30);
          expect(others.filter(([, v]) => v !== "EACCES")).toEqual([]);
          // Nothing reached Node's stdin pipe.
          expect(r.stdin).toBe("");
        });
      }
    }
  }
});

// The remote server (`--sandbox MODE --listen`) holds its token in its memory and environment: the same
// guard serves its sandbox, so no /proc route reaches them either.
const server = process.platform === "linux" ? serverPath() : null;
describe.skipIf(modes.length === 0 || !server || !hasListen(server))("the remote server's guard", () => {
  for (const mode of modes) {
    it(`--sandbox ${mode} --listen: no /proc/<pid> of the server or the sandbox's init`, async () => {
      const root = tempDirFor("root", "pno-guard-remote-");
      cleanup.push(() => rmSync(root, { recursive: true, force: true }));
      writeFileSync(path.join(root, "probe.py"), PROBE, { mode: 0o644 });
      const cwd = mode === "namespaces" ? "/workspace" : root;
      const listening = await startListening(server, { root, args: ["--sandbox", mode, "--runtime-root", cwd] });
      cleanup.push(() => listening.close());
      const connection = await connectWebSocket(listening.url, { token: listening.token, requireSandbox: true });
      cleanup.push(() => connection.close());
      const node = mode === "landlock" ? String(listening.child.pid) : "-";
      let output = "";
      const { exitCode } = await connection.bash.exec(`PWD_AT=$PWD /usr/bin/python3 probe.py ${node}`, cwd, {
        onData: (d) => (output += d),
      });
      expect(exitCode).toBe(0);
      expect(output).not.toContain(listening.token);
      const out = JSON.parse(output.trim().split("\n").at(-1));
      const others = Object.entries(out).filter(([k]) => !k.startsWith("own") && !k.endsWith("O_PATH"));
      expect(others.length).toBeGreaterThan(mode === "landlock" ? 60 : 30);
      expect(others.filter(([, v]) => v !== "EACCES")).toEqual([]);
    });
  }
});

/** A command that runs each `name: shell` step and prints `name=<exit code>` per line; the codes. */
function steps(list) {
  return Object.entries(list)
    .map(([name, cmd]) => `(${cmd}) >/dev/null 2>&1; echo "${name}=$?"`)
    .join("; ");
}
function codes(output) {
  return Object.fromEntries(
    output
      .trim()
      .split("\n")
      .filter((l) => /^[\w-]+=\d+$/.test(l))
      .map((l) => {
        const [k, v] = l.split("=");
        return [k, Number(v)];
      }),
  );
}

const GIT = ["-c", "safe.directory=*", "-c", "user.email=a@b", "-c", "user.name=n"];
function git(cwd, ...args) {
  const r = spawnSync("git", [...GIT, ...args], { cwd, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** Every file named PWNED* beneath `dir`. */
function pwned(dir) {
  return readdirSync(dir, { recursive: true }).filter((f) => path.basename(String(f)).startsWith("PWNED"));
}

/**
 * A repository owned by `user`, as a host has it: a commit, a submodule-style gitfile (`sub/.git` naming
 * `.git/modules/sub`), a linked worktree (`wt`), and core.hooksPath set to `githooks`.
 */
function repository(user) {
  const root = tempDirFor(user, "pno-guard-git-");
  cleanup.push(() => rmSync(root, { recursive: true, force: true }));
  git(root, "init", "-q", "-b", "main");
  writeFileSync(path.join(root, "f"), "f\n");
  git(root, "add", "f");
  git(root, "commit", "-qm", "one");
  mkdirSync(path.join(root, ".git/modules"), { recursive: true });
  git(root, "init", "-q", `--separate-git-dir=${path.join(root, ".git/modules/sub")}`, "sub");
  git(root, "worktree", "add", "-q", "wt");
  mkdirSync(path.join(root, "githooks"));
  git(root, "config", "core.hooksPath", "githooks");
  if (user === "nobody") spawnSync("chown", ["-R", "65534:65534", root]);
  return root;
}

describe.skipIf(modes.length === 0)("git's other ways to run code are protected", () => {
  for (const mode of modes) {
    for (const user of users) {
      it(`${mode}, as ${user}: commondir, gitfiles, worktrees, core.hooksPath, husky`, async () => {
        const root = repository(user);
        const { sandbox, cwd } = options(mode, root);
        // A git directory of the sandbox's whose config and hooks would run on the host.
        const evil = [
          "mkdir -p evil/hooks evil/objects evil/refs",
          "echo 'ref: refs/heads/main' > evil/HEAD",
          String.raw`printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch PWNED-fsmonitor\n' > evil/config`,
          String.raw`printf '#!/bin/sh\ntouch PWNED-hook\n' > evil/hooks/pre-commit`,
          "chmod +x evil/hooks/pre-commit",
        ].join(" && ");
        const hook = String.raw`printf '#!/bin/sh\ntouch PWNED-hook\n'`;
        const [r] = await execAllAs(user, pno, sandbox, [
          {
            command: steps({
              evil,
              commondir: "echo ../evil > .git/commondir",
              worktreeCommondir: "echo ../../../evil > .git/worktrees/wt/commondir",
              worktreeGitdir: "echo /tmp/x > .git/worktrees/wt/gitdir",
              worktreeNew: "mkdir .git/worktrees/other",
              subGitfile: "printf 'gitdir: ../evil\\n' > sub/.git",
              subRemove: "rm -f sub/.git",
              subRename: "mv sub/.git sub/gitfile",
              wtGitfile: "printf 'gitdir: ../evil\\n' > wt/.git",
              newGitfile: "mkdir -p nested && printf 'gitdir: ../evil\\n' > nested/.git",
              gitSymlink: "mkdir -p nested2 && ln -s ../evil nested2/.git",
              hooksPath: `${hook} > githooks/pre-commit`,
              hooksPathMove: "mv githooks githooks-old",
              hooksPathRemove: "rmdir githooks",
              husky: `mkdir -p .husky/_ && ${hook} > .husky/_/pre-commit`,
              moduleHooks: `${hook} > .git/modules/sub/hooks/pre-commit`,
            }),
            cwd,
          },
        ]);
        const c = codes(r.output);
        expect(c.evil).toBe(0);
        const refused = Object.fromEntries(
          Object.keys(c)
            .filter((k) => k !== "evil")
            .map((k) => [k, c[k] !== 0]),
        );
        expect(refused).toEqual(Object.fromEntries(Object.keys(refused).map((k) => [k, true])));
        expect(Object.keys(refused).length).toBe(15);
        expect(existsSync(path.join(root, "githooks/pre-commit"))).toBe(false);
        expect(existsSync(path.join(root, ".husky"))).toBe(false);
        // The host's git, afterwards, runs nothing of the sandbox's.
        // (Whether each succeeds says nothing: a sandbox's fsmonitor would make it fail.)
        const host = (dir, ...args) => spawnSync("git", [...GIT, ...args], { cwd: dir });
        for (const dir of [root, path.join(root, "sub"), path.join(root, "wt")]) host(dir, "status");
        host(root, "commit", "-q", "--allow-empty", "-m", "two");
        host(path.join(root, "wt"), "commit", "-q", "--allow-empty", "-m", "three");
        expect(pwned(root)).toEqual([]);
      });
    }
  }
});

/** The number of threads of this process. */
function threads() {
  return Number(/^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${process.pid}/status`, "utf8"))[1]);
}

describe.skipIf(modes.length === 0)("FIFO opens that wait are bounded", () => {
  for (const mode of modes) {
    it(`${mode}: 300 writers blocked on a FIFO cost Node one thread; past 256 they are refused`, async () => {
      const root = tempDirFor("root", "pno-guard-fifo-");
      cleanup.push(() => rmSync(root, { recursive: true, force: true }));
      const { sandbox, cwd } = options(mode, root);
      const ops = pno.createBashOperations({ sandbox });
      const before = threads();
      // Each writer's open waits for a reader that never comes; a refused one says so in a file. Once
      // the 44 past the cap were refused, READY (or, after 30 s, GAVE-UP).
      const command = [
        "mkfifo p",
        "for i in $(seq 300); do ( (exec 3>p) 2>/dev/null || echo r >> refused ) & done",
        "n=0; while [ $(cat refused 2>/dev/null | wc -l) -lt 44 ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done",
        'echo "$(cat refused | wc -l) refused"',
        "[ $n -lt 300 ] && echo READY || echo GAVE-UP",
        "sleep 600",
      ].join("; ");
      const controller = new AbortController();
      let output = "";
      let during;
      const done = ops
        .exec(command, cwd, {
          signal: controller.signal,
          onData: (d) => {
            output += d;
            if (/READY|GAVE-UP/.test(output) && during === undefined) {
              during = threads();
              controller.abort();
            }
          },
        })
        .catch((e) => e);
      await done;
      // The sandbox's handler, its performer and one FIFO waiter, not one thread per wait.
      expect(during - before).toBeLessThan(16);
      expect(output).toContain("44 refused\nREADY");
    });
  }
});

// Binds a Unix socket (a socketpair's end: both modes allow those) to each path given, and prints what
// became of each: OK or the errno's name. An abstract name is no file: the kernel's.
const BIND = `
import errno, json, socket, sys
out = {}
for name in sys.argv[1:]:
    a, b = socket.socketpair()
    try:
        a.bind(name.replace("@", "\\0"))
        out[name] = "OK"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
`;

describe.skipIf(modes.length === 0)("bind() of a Unix socket is decided by the policy", () => {
  for (const mode of modes) {
    for (const user of users) {
      it(`${mode}, as ${user}: no socket under a protected or denied path`, async () => {
        const root = tempDirFor(user, "pno-guard-bind-");
        cleanup.push(() => rmSync(root, { recursive: true, force: true }));
        for (const dir of [".git/hooks", "locked", "free"]) mkdirSync(path.join(root, dir), { recursive: true });
        writeFileSync(path.join(root, "bind.py"), BIND, { mode: 0o644 });
        if (user === "nobody") spawnSync("chown", ["-R", "65534:65534", root]);
        const { sandbox, cwd } = options(mode, root, { policy: { denyWrite: ["locked/"] } });
        const targets = [
          ".git/hooks/pre-commit",
          "locked/s",
          "./free/../locked/t",
          `${cwd}/.git/config`,
          "free/s",
          "@abstract",
        ];
        const [r] = await execAllAs(user, pno, sandbox, [
          { command: `umask 027; /usr/bin/python3 bind.py ${targets.join(" ")}`, cwd },
        ]);
        expect(r.exitCode).toBe(0);
        expect(JSON.parse(r.output)).toEqual({
          ".git/hooks/pre-commit": "EACCES",
          "locked/s": "EACCES",
          "./free/../locked/t": "EACCES",
          [`${cwd}/.git/config`]: "EACCES",
          "free/s": "OK",
          "@abstract": "OK",
        });
        for (const rel of [".git/hooks/pre-commit", "locked/s", "locked/t", ".git/config"])
          expect(existsSync(path.join(root, rel)), rel).toBe(false);
        // The socket the policy allows is made as the caller would make it: its umask applies.
        const made = lstatSync(path.join(root, "free/s"));
        expect(made.isSocket()).toBe(true);
        expect(made.mode & 0o777).toBe(0o750);
      });
    }
  }
});
