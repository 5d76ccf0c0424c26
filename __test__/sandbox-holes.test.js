// The sandbox against a determined shell: set-id bits never reach the host, only
// listed socket families exist (no AF_VSOCK), host processes and IPC objects stay out of reach in
// Landlock mode (which has no PID or IPC namespace), and nothing a command starts outlives it. Each
// case as root (this process) and as nobody (a child Node), in both modes. Judged on the host side.
import { execFileSync, spawn } from "node:child_process";
import { lstatSync, readdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import * as pno from "pi-native-ops";
import { untilDead } from "./helpers/procs.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, removeScripts, tempDirFor } from "./helpers/nobody.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const users = ["root", ...(nobody.argv ? ["nobody"] : [])];
const label = (user) => (user === "root" && process.getuid() !== 0 ? "this process's user" : user);
const modes = [
  ["namespaces", support?.namespaces, support?.namespacesError],
  ["landlock", support?.landlockAbi > 0, support?.landlockError],
];
const asUser = (user, argv) => (user === "nobody" ? [...nobody.argv, ...argv] : argv);

const cleanup = [];
afterAll(() => {
  for (const fn of cleanup.reverse()) fn();
  removeScripts();
});

/** Every path under `dir` whose mode has a setuid or setgid bit. */
function setIdFiles(dir) {
  const found = [];
  for (const name of readdirSync(dir)) {
    const file = path.join(dir, name);
    const st = lstatSync(file);
    if (st.mode & 0o6000) found.push(`${name} ${(st.mode & 0o7777).toString(8)}`);
    if (st.isDirectory()) found.push(...setIdFiles(file).map((f) => `${name}/${f}`));
  }
  return found;
}

/** What a host process's scheduling, limits, placement and I/O class are now. */
function processState(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return {
    limits: readFileSync(`/proc/${pid}/limits`, "utf8"),
    nice: fields[16],
    policy: fields[38],
    cpus: /Cpus_allowed_list:\s*(\S+)/.exec(status)?.[1],
    io: execFileSync("ionice", ["-p", String(pid)], { encoding: "utf8" }),
  };
}

describe("sandboxSupport().enforces", () => {
  it.runIf(process.platform === "linux")("says what each mode confines on this kernel", () => {
    const keys = [
      "files",
      "truncate",
      "deviceIoctl",
      "network",
      "signals",
      "abstractUnixSockets",
      "otherProcesses",
      "setIdBits",
      "processLifetime",
      "metadata",
      "locks",
    ];
    const { namespaces, landlock } = support.enforces;
    expect(namespaces === null).toBe(!support.namespaces);
    expect(landlock === null).toBe(!(support.landlockAbi > 0 && support.seccomp));
    if (namespaces) expect(Object.keys(namespaces).sort()).toEqual([...keys].sort());
    if (namespaces) for (const key of keys) expect({ key, value: namespaces[key] }).toEqual({ key, value: true });
    if (landlock) {
      expect(Object.keys(landlock).sort()).toEqual([...keys].sort());
      const abi = support.landlockAbi;
      expect(landlock).toMatchObject({
        files: true,
        truncate: abi >= 3,
        deviceIoctl: abi >= 5,
        signals: abi >= 6,
        abstractUnixSockets: abi >= 6,
        setIdBits: true,
        otherProcesses: true,
        processLifetime: true,
      });
    }
  });
});

for (const [mode, available, why] of modes) {
  for (const user of users) {
    describe.skipIf(!available)(
      `sandbox holes, ${mode} mode, as ${label(user)}${available ? "" : ` (skipped: ${why})`}`,
      () => {
        let root;
        let runtimeRoot;
        const run = (commands, extra = {}) =>
          execAllAs(user, pno, { root, runtimeRoot, mode, maxProcesses: 64, ...extra }, commands);

        beforeAll(() => {
          root = tempDirFor(user, "pno-holes-");
          runtimeRoot = mode === "landlock" ? root : "/workspace";
          cleanup.push(() => rmSync(root, { recursive: true, force: true }));
        });

        it("no set-id bit reaches a file, by any call that sets a mode", async () => {
          // x86_64 numbers for the raw calls perl makes: mknod 133, fchmodat 268, fchmodat2 452.
          const attempts = [
            "cp /usr/bin/id chmod-u && chmod 4755 chmod-u",
            "cp /usr/bin/id chmod-g && chmod g+s chmod-g",
            "mkdir dir-g && chmod 2775 dir-g",
            "install -m 4755 /usr/bin/id install-u",
            "cp -p /usr/bin/su cp-p",
            "perl -MFcntl -e 'sysopen(my $f, \"open-u\", O_CREAT|O_WRONLY, 04755) or exit 1'",
            'perl -e \'open(my $f, ">", "fchmod-u") or exit 1; chmod(04755, $f) or exit 1\'',
            "touch fchmodat2-u && perl -e 'exit(syscall(452, -100, \"fchmodat2-u\", 04755, 0) == 0 ? 0 : 1)'",
            "touch fchmodat-u && perl -e 'exit(syscall(268, -100, \"fchmodat-u\", 06755) == 0 ? 0 : 1)'",
            "perl -e 'exit(syscall(133, \"mknod-u\", 0100000 | 04755, 0) == 0 ? 0 : 1)'",
            "mkdir -m 2755 mkdir-g",
          ];
          const results = await run(attempts.map((command) => ({ command: `${command}; ls -l`, cwd: runtimeRoot })));
          for (const r of results) expect(r.exitCode).toBeTypeOf("number");
          expect(setIdFiles(root)).toEqual([]);
          // Ordinary modes still work, in both argument positions.
          const [plain] = await run([
            {
              command:
                "touch plain && chmod 0700 plain && stat -c %a plain && perl -MFcntl -e 'sysopen(my $f, \"made\", O_CREAT|O_WRONLY, 0640) or exit 1' && stat -c %a made",
              cwd: runtimeRoot,
            },
          ]);
          expect(plain).toEqual({ output: "700\n640\n", exitCode: 0 });
        });

        it("creates no socket of a family outside the allow-list (no AF_VSOCK)", async () => {
          // socket(family, SOCK_STREAM or SOCK_DGRAM, 0): created or not, nothing is connected.
          const probe = (family, type) =>
            `perl -e 'socket(my $s, ${family}, ${type}, 0) ? print "yes\\n" : print "no\\n"'`;
          const families = { vsock: [40, 1], packet: [17, 3], alg: [38, 5], inet: [2, 1], unix: [1, 1] };
          const [r] = await run([
            {
              command: Object.entries(families)
                .map(([name, [family, type]]) => `echo -n "${name} "; ${probe(family, type)}`)
                .join("; "),
              cwd: runtimeRoot,
            },
          ]);
          const created = Object.fromEntries(
            r.output
              .trim()
              .split("\n")
              .map((line) => line.split(" ")),
          );
          expect(created.vsock).toBe("no");
          expect(created.packet).toBe("no");
          expect(created.alg).toBe("no");
          // What stays: namespaces mode has local sockets and a private loopback; Landlock mode
          // without network has no socket at all.
          expect(created.inet).toBe(mode === "namespaces" ? "yes" : "no");
          expect(created.unix).toBe(mode === "namespaces" ? "yes" : "no");
        });

        it("leaves host processes' limits, priority, CPUs and I/O class alone; its own can change", async () => {
          const [file, ...args] = asUser(user, ["sleep", "600"]);
          const victim = spawn(file, args, { stdio: "ignore" });
          cleanup.push(() => victim.kill("SIGKILL"));
          await new Promise((resolve) => victim.once("spawn", resolve));
          const before = processState(victim.pid);
          const pid = victim.pid;
          const attempts = [
            `prlimit --pid ${pid} --nofile=12:12`,
            `renice -n 19 -p ${pid}`,
            `taskset -p 1 ${pid}`,
            `ionice -c 3 -p ${pid}`,
            `chrt -i -p 0 ${pid}`,
            // setpriority(PRIO_USER, 0, 19): every process of the user (x86_64 setpriority is 141).
            "perl -e 'exit(syscall(141, 2, 0, 19) == 0 ? 0 : 1)'",
          ];
          const results = await run(
            attempts.map((a) => ({ command: `${a} >/dev/null 2>&1 && echo CHANGED; true`, cwd: runtimeRoot })),
          );
          for (const [i, r] of results.entries()) {
            expect({ attempt: attempts[i], ...r }).toEqual({ attempt: attempts[i], output: "", exitCode: 0 });
          }
          expect(processState(pid)).toEqual(before);
          // The sandbox's own processes stay its to tune.
          const [own] = await run([
            {
              command:
                "ulimit -n 100 && ulimit -n && nice -n 5 true && taskset -c 0 true && ionice -c 3 true && echo ok",
              cwd: runtimeRoot,
            },
          ]);
          expect(own).toEqual({ output: "100\nok\n", exitCode: 0 });
        });

        it("cannot reach the host's System V IPC objects", async () => {
          const [file, ...args] = asUser(user, ["ipcmk", "-M", "4096"]);
          const made = execFileSync(file, args, { encoding: "utf8" });
          const id = /(\d+)\s*$/.exec(made.trim())[1];
          cleanup.push(() => {
            try {
              execFileSync("ipcrm", ["-m", id], { stdio: "ignore" });
            } catch {
              // removed already
            }
          });
          const [r] = await run([
            {
              command: `ipcrm -m ${id} 2>/dev/null && echo REMOVED; perl -e 'exit(defined(shmget(${id} + 0, 0, 0)) ? 0 : 1)' 2>/dev/null && echo ATTACHED; true`,
              cwd: runtimeRoot,
            },
          ]);
          expect(r).toEqual({ output: "", exitCode: 0 });
          expect(execFileSync("ipcs", ["-m", "-i", id], { encoding: "utf8" })).toContain(id);
        });

        it("ends everything the command started when it ends, setsid and nohup included", async () => {
          const marker = `pno-holes-bg-${mode}-${user}-${process.pid}`;
          const [r] = await run([
            {
              command: `setsid nohup sh -c 'while :; do date >> bg.txt; sleep 0.05; done' ${marker} >/dev/null 2>&1 & (sh -c 'sleep 600' ${marker}-2 &) ; echo started`,
              cwd: runtimeRoot,
            },
          ]);
          expect(r).toEqual({ output: "started\n", exitCode: 0 });
          expect(await untilDead(marker, 400)).toEqual([]);
        });
      },
    );
  }
}
