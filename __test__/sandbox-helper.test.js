// Nothing of Node in the sandbox: a sandboxed command's supervisor and, in namespaces mode,
// its init are the sandbox helper (the platform's pi-native-ops-server, freshly executed), never a copy
// of Node. A random secret is planted in this process's environment and heap (and, through the
// environment, in the nobody child Node's) before any sandbox exists; then, while a sandboxed command
// waits, this process (root) reads the helper processes' /proc files and memory, and the command
// tries the same from inside. Both modes, root and nobody.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  closeSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  realpathSync,
  statSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import * as pno from "pi-native-ops";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, removeScripts, tempDirFor } from "./helpers/nobody.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const users = ["root", ...(nobody.argv ? ["nobody"] : [])];
const modes = [
  ["namespaces", support?.namespaces],
  ["landlock", support?.landlockAbi > 0],
];

// The secret, before any sandbox is made: in this process's environment (inherited by nobody's child
// Node) and heap.
const SECRET = `pno-secret-${randomBytes(16).toString("hex")}`;
process.env.PNO_TEST_SECRET = SECRET;
const heapSecrets = [Buffer.from(SECRET), `${SECRET}`];
// What the command is given to search for: the secret reversed, so the plan (and so the helper's
// memory) never holds the secret itself.
const REVERSED = [...SECRET].reverse().join("");

afterAll(() => removeScripts());

/** The parent pid of `pid`. */
function ppidOf(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/** The pid of the shell whose command line holds `token` (not one of its subshells), or null. */
function shellWith(token) {
  const holds = (pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "latin1").includes(token);
    } catch {
      return false;
    }
  };
  for (const name of readdirSync("/proc")) {
    if (/^\d+$/.test(name) && holds(name) && !holds(ppidOf(Number(name)))) return Number(name);
  }
  return null;
}

/** Whether `pid`'s readable memory holds `needle`, read through /proc/<pid>/mem. */
function memoryHolds(pid, needle) {
  const fd = openSync(`/proc/${pid}/mem`, "r");
  try {
    for (const line of readFileSync(`/proc/${pid}/maps`, "utf8").split("\n")) {
      const [range, perms] = line.split(" ");
      if (!range || perms[0] !== "r") continue;
      const [start, end] = range.split("-").map((x) => Number.parseInt(x, 16));
      if (!Number.isSafeInteger(end)) continue; // [vsyscall]
      const chunk = Buffer.alloc(1 << 20);
      // Overlapping reads: a secret across a chunk's edge is still seen.
      for (let at = start; at < end; at += chunk.length - needle.length) {
        const length = Math.min(chunk.length, end - at);
        let n = 0;
        try {
          n = readSync(fd, chunk, 0, length, at);
        } catch {
          break; // an unreadable region (guard pages, vvar)
        }
        if (chunk.subarray(0, n).includes(needle)) return true;
        if (length < chunk.length) break;
      }
    }
    return false;
  } finally {
    closeSync(fd);
  }
}

/** What the test process sees of the helper process `pid`. */
function inspect(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return {
    exe: readlinkSync(`/proc/${pid}/exe`),
    environ: readFileSync(`/proc/${pid}/environ`, "latin1"),
    maps: readFileSync(`/proc/${pid}/maps`, "utf8"),
    holdsSecret: memoryHolds(pid, Buffer.from(SECRET)),
    uid: Number(/^Uid:\s+(\d+)/m.exec(status)[1]),
    environOwner: statSync(`/proc/${pid}/environ`).uid,
    fds: Object.fromEntries(readdirSync(`/proc/${pid}/fd`).map((fd) => [fd, readlinkSync(`/proc/${pid}/fd/${fd}`)])),
  };
}

// From inside: the shell's parent (namespaces mode: /proc/1, the init; Landlock mode: the supervisor).
// Its environment, its descriptors (listed, and reopened for writing), and its memory through python3
// (opened read-write, as an attacker writing code would; every region /proc/<pid>/maps shows).
const MEM_SCRIPT = `
import sys
pid, rev = int(sys.argv[1]), sys.argv[2]
secret = rev[::-1].encode()
try:
    mem = open("/proc/%d/mem" % pid, "r+b", buffering=0)
except OSError as e:
    print("mem: refused errno", e.errno)
    sys.exit(0)
regions = []
try:
    for line in open("/proc/%d/maps" % pid):
        a, b = (int(x, 16) for x in line.split()[0].split("-"))
        if line.split()[1][0] == "r":
            regions.append((a, b))
except OSError as e:
    print("maps: refused errno", e.errno)
found = False
for a, b in regions:
    try:
        mem.seek(a)
        if secret in mem.read(b - a):
            found = True
    except (OSError, OverflowError, ValueError):
        pass
print("mem: opened,", "SECRET FOUND" if found else "nothing", "in", len(regions), "regions")
`;

function insideCommand(token, done) {
  return [
    `: ${token}`,
    `echo "ppid $PPID"`,
    `echo "environ: $(cat /proc/$PPID/environ 2>&1 | tr '\\0' ' ')"`,
    `echo "fds: $(ls -l /proc/$PPID/fd 2>&1 | tr '\\n' ' ')"`,
    `for n in 3 4 5 6 7 8 9 10 11 12 13 14; do (: > /proc/$PPID/fd/$n) 2>/dev/null && echo "opened fd $n for writing"; done`,
    `python3 -c '${MEM_SCRIPT.replaceAll("'", `'"'"'`)}' $PPID ${REVERSED} 2>&1`,
    "echo inside-done",
    `while [ ! -e ${done} ]; do sleep 0.05; done`,
  ].join("\n");
}

describe.runIf(process.platform === "linux")("the sandbox holds nothing of Node", () => {
  for (const [mode, available] of modes) {
    for (const user of users) {
      for (const protect of [true, false]) {
        const title = `${mode}, ${user}${protect ? " (every open through the guard)" : " (protect: false)"}`;
        it.runIf(available)(
          title,
          async () => {
            expect(heapSecrets[1]).toBe(SECRET); // the heap copy lives until now
            const root = tempDirFor(user, "pno-helper-");
            const token = `pno-token-${randomBytes(8).toString("hex")}`;
            const done = ".pno-helper-done";
            const sandbox = {
              root,
              ...(mode === "landlock" ? { runtimeRoot: root, mode } : { mode }),
              // A denyRead rule sends every open through the guard (Node's side), so the command's opens
              // take that route too: it must reach nothing of Node either.
              policy: protect ? { denyRead: [".pno-nothing-here"] } : { protect: false },
            };
            const cwd = mode === "landlock" ? root : "/workspace";
            const running = execAllAs(user, pno, sandbox, [
              { command: insideCommand(token, path.join(cwd, done)), cwd, timeout: 120 },
            ]);
            let shell = shellWith(token);
            const deadline = Date.now() + 60_000;
            while (shell === null && Date.now() < deadline) {
              await new Promise((resolve) => setTimeout(resolve, 20));
              shell = shellWith(token);
            }
            expect(shell, "the sandboxed shell appears").not.toBeNull();
            const parent = ppidOf(shell);
            // Namespaces mode: shell <- init <- supervisor; Landlock mode: shell <- supervisor.
            const helpers =
              mode === "namespaces" ? { init: parent, supervisor: ppidOf(parent) } : { supervisor: parent };
            const seen = {};
            try {
              for (const [role, pid] of Object.entries(helpers)) seen[role] = inspect(pid);
            } finally {
              writeFileSync(path.join(root, done), "");
            }
            const [result] = await running;
            const nodeExe = realpathSync(process.execPath);
            for (const [role, s] of Object.entries(seen)) {
              const what = `${role} (${mode}, ${user})`;
              expect(path.basename(s.exe), `${what}: its image`).toMatch(/^pi-native-ops-server/);
              expect(s.environ, `${what}: its environment`).toBe("");
              expect(s.maps.includes(nodeExe) || /\.node$/m.test(s.maps), `${what}: Node or the addon mapped`).toBe(
                false,
              );
              expect(s.holdsSecret, `${what}: the secret in its memory`).toBe(false);
              if (user === "nobody") {
                // Non-dumpable: the kernel makes its /proc files root's though it runs as nobody.
                expect([s.uid, s.environOwner], `${what}: non-dumpable`).toEqual([65534, 0]);
              }
            }
            if (seen.init) {
              // The init holds /dev/null as stdio and nothing else: no pipe of the supervisor's.
              expect(seen.init.fds).toEqual({ 0: "/dev/null", 1: "/dev/null", 2: "/dev/null" });
            }
            expect(result.exitCode, JSON.stringify(result)).toBe(0);
            const out = result.output;
            expect(out).toContain("inside-done");
            expect(out).not.toContain(SECRET);
            expect(out).not.toContain("SECRET FOUND");
            expect(out).toMatch(/environ: cat: \/proc\/\d+\/environ: Permission denied/);
            // Nothing of the helper can be reopened: the kernel refuses it, and the guard answers for
            // the caller's own /proc entries only.
            expect(out).not.toContain("for writing");
            if (!protect) expect(out).toMatch(/mem: refused/);
          },
          180_000,
        );
      }
    }
  }
});

// Where the helper is not, no sandbox: refused when it is made (ESANDBOX, saying why), never run
// unconfined. A child Node gives the addon each bad helper, then makes a sandbox.
describe.runIf(process.platform === "linux")("a missing or unusable helper", () => {
  const nativeJs = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "js", "native.js");
  const attempt = (helper) => {
    const script = `
      const { native } = await import(${JSON.stringify(nativeJs)});
      native.sandboxHelper(${JSON.stringify(helper)} ?? undefined);
      const out = {};
      try { new native.BashSandboxHandle({ root: "/tmp" }); out.made = true; }
      catch (e) { out.code = e.code; out.message = e.message; }
      process.stdout.write(JSON.stringify(out));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    expect(child.status, child.stderr).toBe(0);
    return JSON.parse(child.stdout);
  };
  it("none found", () => {
    expect(attempt(null)).toEqual({
      code: "ESANDBOX",
      message: expect.stringMatching(/^sandbox unavailable: no sandbox helper: .*pi-native-ops-server/),
    });
  });
  it("a path that does not exist", () => {
    expect(attempt("/nonexistent/pi-native-ops-server")).toEqual({
      code: "ESANDBOX",
      message: expect.stringContaining("the sandbox helper /nonexistent/pi-native-ops-server cannot be used"),
    });
  });
  it("a file that is not executable", () => {
    const file = fileURLToPath(import.meta.url);
    expect(attempt(file)).toEqual({
      code: "ESANDBOX",
      message: `sandbox unavailable: the sandbox helper ${file} cannot be used: not executable`,
    });
  });
});
