// The bash sandbox (createBashOperations({ sandbox })): what a sandboxed shell cannot do, as root (in
// this process) and as nobody (a child Node dropped with setpriv), in namespaces mode and, forced, in
// Landlock mode; and that exec's own guarantees (streaming, 128 + signal, abort/timeout killing the
// whole tree) still hold inside.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import * as pno from "pi-native-ops";
import { pidsWith, untilDead } from "./helpers/procs.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fakeServer } from "./helpers/fake-server.js";
import {
  execAll,
  execAllAs,
  mkdirAs,
  nobody,
  removeScripts,
  startExecAs,
  tempDirFor,
  writeFileAs,
} from "./helpers/nobody.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const FAKE_KEY = `sk-fake-${process.pid}-do-not-leak`;
process.env.PNO_FAKE_API_KEY = FAKE_KEY;

/** A TCP listener on the host's loopback, counting the connections it accepts. */
async function listen() {
  const server = net.createServer((socket) => {
    server.accepted++;
    socket.destroy();
  });
  server.accepted = 0;
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

/** A host process for the sandbox to try to see and kill: `sleep`, as `user`. */
function hostSleeper(user, env = process.env) {
  const argv = user === "nobody" ? [...nobody.argv, "sleep", "600"] : ["sleep", "600"];
  const child = spawn(argv[0], argv.slice(1), { stdio: "ignore", env });
  return child;
}

const cleanup = [];
afterAll(() => {
  for (const fn of cleanup.reverse()) fn();
  removeScripts();
});

// The same suite for each user: the refusals must not depend on the sandbox running as root.
// "root" runs in this process, which is root wherever nobody is available (CI as a plain user: only it).
const users = ["root", ...(nobody.argv ? ["nobody"] : [])];
const label = (user) => (user === "root" && process.getuid() !== 0 ? "this process's user" : user);
const modes = [
  ["namespaces", support?.namespaces, support?.namespacesError],
  ["landlock", support?.landlockAbi > 0, support?.landlockError],
];

describe("sandboxSupport()", () => {
  it.runIf(process.platform === "linux")("reports the machine's modes with reasons", () => {
    expect(support).toMatchObject({ platform: "linux", seccomp: expect.any(Boolean) });
    expect(typeof support.kernel).toBe("string");
    expect(support.auto === null || ["namespaces", "landlock"].includes(support.auto)).toBe(true);
    if (support.namespaces) expect(support.namespacesError).toBe(null);
    else expect(support.namespacesError).toMatch(/./);
    if (support.landlockAbi === 0) expect(support.landlockError).toMatch(/./);
    else expect(support.landlockError).toBe(null);
    // Every Linux CI machine of this repository offers a mode; as root, namespaces always work.
    expect(support.auto).not.toBe(null);
    if (process.getuid() === 0) expect(support.auto).toBe("namespaces");
  });
});

describe("createBashOperations({ sandbox }) validation", () => {
  const root = tempDirFor("root", "pno-sbx-valid-");
  cleanup.push(() => rmSync(root, { recursive: true, force: true }));
  const bad = [
    [{ sandbox: null }, /sandbox must be an object/],
    [{ sandbox: {} }, /sandbox\.root must be a string/],
    [{ sandbox: { root: "/nonexistent-pno" } }, /sandbox\.root must be an existing directory/],
    [{ sandbox: { root: "/etc/hostname" } }, /sandbox\.root must be an existing directory/],
    [{ sandbox: { root, runtimeRoot: "workspace" } }, /runtimeRoot must be an absolute path/],
    [{ sandbox: { root, network: "yes" } }, /network must be a boolean/],
    [{ sandbox: { root, readOnly: "/opt" } }, /readOnly must be an array/],
    [{ sandbox: { root, readWrite: ["rel"] } }, /readWrite\[0\] must be an absolute path/],
    [{ sandbox: { root, env: { A: 1 } } }, /env\.A must be a string/],
    [{ sandbox: { root, env: { "A=B": "x" } } }, /env: invalid name/],
    [{ sandbox: { root, mode: "chroot" } }, /mode must be one of "auto", "namespaces", "landlock"/],
    [{ sandbox: { root, maxProcesses: 0 } }, /maxProcesses must be a positive integer/],
    [{ sandbox: { root, tmpSize: 0 } }, /tmpSize must be a positive integer \(bytes\)/],
    [{ sandbox: { root, tmpSize: -1 } }, /tmpSize must be a positive integer/],
    [{ sandbox: { root, tmpSize: 1.5 } }, /tmpSize must be a positive integer/],
    [{ sandbox: { root, tmpSize: "1G" } }, /tmpSize must be a positive integer/],
    [{ sandbox: { root, netwrok: false } }, /unknown option "netwrok"/],
  ];
  for (const [options, message] of bad) {
    it(`rejects ${JSON.stringify(options)}`, () => {
      expect(() => pno.createBashOperations(options)).toThrow(TypeError);
      expect(() => pno.createBashOperations(options)).toThrow(message);
    });
  }

  it("a remote connection refuses a sandbox instead of ignoring it", async () => {
    expect(() => pno.createRemoteTools("/", { sandbox: true })).toThrow(
      /sandbox is the server's option over a remote connection: start pi-native-ops-server with --sandbox/,
    );
    const conn = await pno.connect(fakeServer(root).transport);
    try {
      expect(() => conn.createBashOperations({ sandbox: { root } })).toThrow(
        /sandbox is the server's option over a remote connection: start pi-native-ops-server with --sandbox/,
      );
      expect(() => pno.createRemoteTools("/", { connection: conn, bash: { sandbox: { root } } })).toThrow(TypeError);
    } finally {
      await conn.close();
    }
  });
});

for (const [mode, available, why] of modes) {
  for (const user of users) {
    describe.skipIf(!available)(
      `sandbox, ${mode} mode, as ${label(user)}${available ? "" : ` (skipped: ${why})`}`,
      () => {
        const tag = `${mode}-${user}-${process.pid}`;
        let root;
        let other;
        let secretDirs;
        let runtimeRoot;
        const run = (commands, extra = {}) =>
          execAllAs(
            user,
            pno,
            { root, runtimeRoot, mode, maxProcesses: 64, env: { GREETING: "hi" }, ...extra },
            commands,
          );

        beforeAll(() => {
          root = tempDirFor(user, `pno-sbx-root-`);
          // Landlock cannot remap paths: the workspace is at its host path.
          runtimeRoot = mode === "landlock" ? root : "/workspace";
          writeFileAs(user, path.join(root, "hello.txt"), "hello from the root\n");
          // Another workspace, open to everyone: only the sandbox keeps it out.
          other = tempDirFor(user, "pno-sbx-other-", 0o777);
          writeFileAs(user, path.join(other, "secret.txt"), `other workspace ${tag}\n`, 0o666);
          // Secrets planted in /root and /home (only a root test process can put them there).
          secretDirs = process.getuid() === 0 ? [`/root/.pno-sbx-${tag}`, `/home/pno-sbx-${tag}`] : [];
          for (const dir of secretDirs) {
            mkdirSync(dir, { recursive: true });
            writeFileSync(path.join(dir, "secret.txt"), `home secret ${tag}\n`);
          }
          cleanup.push(() => {
            for (const dir of [root, other, ...secretDirs]) rmSync(dir, { recursive: true, force: true });
          });
        });

        it("the workspace holds the root's files at runtimeRoot, and writes land in the root", async () => {
          const [read, write] = await run([
            { command: "pwd; cat hello.txt", cwd: runtimeRoot },
            { command: "mkdir -p out && echo written > out/new.txt && cd out && pwd", cwd: runtimeRoot },
          ]);
          expect(read).toEqual({ output: `${runtimeRoot}\nhello from the root\n`, exitCode: 0 });
          expect(write).toEqual({ output: `${runtimeRoot}/out\n`, exitCode: 0 });
          expect(readFileSync(path.join(root, "out/new.txt"), "utf8")).toBe("written\n");
        });

        it("a cwd inside the workspace is checked in the sandbox's view", async () => {
          mkdirSync(path.join(root, "src"), { recursive: true });
          const [inside, missing] = await run([
            { command: "pwd", cwd: `${runtimeRoot}/src` },
            { command: "pwd", cwd: `${runtimeRoot}/missing` },
          ]);
          expect(inside).toEqual({ output: `${runtimeRoot}/src\n`, exitCode: 0 });
          expect(missing.error).toBe(
            `Working directory does not exist: ${runtimeRoot}/missing\nCannot execute bash commands.`,
          );
        });

        it("cannot read /root, /home, /etc/shadow or another workspace", async () => {
          const targets = [...secretDirs.map((d) => `${d}/secret.txt`), "/etc/shadow", `${other}/secret.txt`];
          const results = await run(
            targets.map((t) => ({
              command: `cat ${t} 2>/dev/null && echo READ; ls ${path.dirname(t)} 2>/dev/null | grep -q secret && echo LISTED; true`,
              cwd: runtimeRoot,
            })),
          );
          for (const [i, r] of results.entries()) {
            expect({ target: targets[i], ...r }).toEqual({ target: targets[i], output: "", exitCode: 0 });
          }
        });

        it("cannot write outside the workspace and its temp dir", async () => {
          const targets = [
            `${other}/planted`,
            "/etc/pno-planted",
            "/usr/pno-planted",
            "/var/tmp/pno-planted",
            "/planted",
          ];
          if (mode === "landlock") targets.push("/tmp/pno-planted");
          const [r] = await run([
            {
              command: targets
                .map((t) => `(echo x > ${t}) 2>/dev/null && echo WROTE ${t}`)
                .join("; ")
                .concat("; true"),
              cwd: runtimeRoot,
            },
          ]);
          expect(r).toEqual({ output: "", exitCode: 0 });
          for (const t of targets) expect(existsSync(t)).toBe(false);
        });

        it("has a private temp dir, gone afterwards", async () => {
          const hostFile = `/tmp/pno-sbx-host-${tag}`;
          writeFileSync(hostFile, "host tmp\n");
          cleanup.push(() => rmSync(hostFile, { force: true }));
          const [first, second] = await run([
            {
              command: `echo mine > "$TMPDIR/pno-mark-${tag}" && cat "$TMPDIR/pno-mark-${tag}"; ls -d "$TMPDIR"; test -e ${hostFile} && echo HOST-TMP-EXISTS; cat ${hostFile} 2>/dev/null; true`,
              cwd: runtimeRoot,
            },
            { command: `test -e "$TMPDIR/pno-mark-${tag}" && echo STILL-THERE; true`, cwd: runtimeRoot },
          ]);
          const tmpdir = first.output.split("\n")[1];
          // Landlock governs opening, not looking up: a host file's existence shows, its content does not.
          const seen = mode === "landlock" ? "HOST-TMP-EXISTS\n" : "";
          expect(first).toEqual({ output: `mine\n${tmpdir}\n${seen}`, exitCode: 0 });
          if (mode === "namespaces") expect(tmpdir).toBe("/tmp");
          expect(second).toEqual({ output: "", exitCode: 0 });
          // Nothing of it is left on the host.
          if (mode === "landlock") expect(existsSync(tmpdir)).toBe(false);
          else expect(existsSync(`/tmp/pno-mark-${tag}`)).toBe(false);
          expect(existsSync(path.join(root, `pno-mark-${tag}`))).toBe(false);
        });

        it.runIf(mode === "namespaces")(
          "leaves nothing for the next command outside the workspace, and cannot change the shared root",
          async () => {
            // What every command shares (the template): the root, /dev, the mounts and their options.
            const view =
              "ls -a / /dev /tmp /dev/shm | md5sum; awk '{print $4, $5, $6}' /proc/self/mountinfo | sort | md5sum";
            const attempts = [
              "echo x > /tmp/pno-left",
              "echo x > /dev/shm/pno-left",
              "echo x > /pno-left",
              "echo x > /dev/pno-left",
              "mkdir /proc/pno-left",
              "umount /tmp",
              "umount -l /proc",
              "mount -o remount,rw /",
              "mount -t tmpfs none /mnt",
              "ln -s /tmp /dev/pno-link",
            ];
            const [first, second] = await run([
              {
                command: `${view}; ${attempts.map((a) => `(${a}) 2>/dev/null`).join("; ")}; cat /tmp/pno-left /dev/shm/pno-left`,
                cwd: runtimeRoot,
              },
              {
                command: `${view}; ls -A /tmp /dev/shm; ls -a / /dev | grep pno; true`,
                cwd: runtimeRoot,
              },
            ]);
            const [rootView, mounts] = first.output.split("\n");
            // The first could write its own /tmp and /dev/shm, nothing else.
            expect(first).toEqual({ output: `${rootView}\n${mounts}\nx\nx\n`, exitCode: 0 });
            // The second sees the same root and mounts, and empty /tmp and /dev/shm.
            expect(second).toEqual({
              output: `${rootView}\n${mounts}\n/dev/shm:\n\n/tmp:\n`,
              exitCode: 0,
            });
          },
        );

        it.runIf(mode === "namespaces")(
          "two commands at once see neither each other's /tmp nor each other's processes",
          async () => {
            const mark = `${runtimeRoot}/.pno-meet-${tag}`;
            // Each writes its /tmp and starts a sleep, waits until the other has too, then looks.
            const side = (me, other) => ({
              command: [
                `echo ${me} > /tmp/pno-${me}; sleep 314${me === "a" ? 1 : 2} & touch ${mark}-${me}`,
                `for i in $(seq 400); do test -e ${mark}-${other} && break; sleep 0.05; done`,
                `test -e ${mark}-${other} && echo met`,
                "ls /tmp; ps -eo args | grep -c '^sleep 314'",
                `touch ${mark}-${me}-done`,
                `for i in $(seq 400); do test -e ${mark}-${other}-done && break; sleep 0.05; done`,
              ].join("; "),
              cwd: runtimeRoot,
            });
            const [[a, b]] = await run([[side("a", "b"), side("b", "a")]]);
            for (const name of readdirSync(root)) if (name.startsWith(".pno-meet-")) rmSync(path.join(root, name));
            expect(a).toEqual({ output: "met\npno-a\n1\n", exitCode: 0 });
            expect(b).toEqual({ output: "met\npno-b\n1\n", exitCode: 0 });
          },
        );

        it("gets a clean environment: the agent's env never reaches the shell", async () => {
          // A host process holding the key in its environment: /proc/<pid>/environ must not give it away.
          const holder = hostSleeper(user, { ...process.env, PNO_FAKE_API_KEY: FAKE_KEY });
          cleanup.push(() => holder.kill("SIGKILL"));
          await new Promise((resolve) => holder.once("spawn", resolve));
          const [r] = await run([
            {
              command: `env; echo key=\${PNO_FAKE_API_KEY-unset}; cat /proc/${holder.pid}/environ /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep PNO_FAKE; true`,
              cwd: runtimeRoot,
              env: { ...process.env, PNO_FAKE_API_KEY: FAKE_KEY },
            },
          ]);
          expect(r.exitCode).toBe(0);
          expect(r.output).not.toContain(FAKE_KEY);
          expect(r.output).toContain("key=unset\n");
          expect(r.output).toContain("GREETING=hi\n");
          expect(r.output).toMatch(/^PATH=.*\/usr\/local\/bin/m);
          expect(r.output).toMatch(/^HOME=/m);
        });

        it("has no network by default; network: true reaches the host's loopback", async () => {
          const server = await listen();
          cleanup.push(() => server.close());
          const { port } = server.address();
          const probe = {
            command: `(echo hi > /dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo CONNECTED || echo REFUSED`,
            cwd: runtimeRoot,
          };
          const [off] = await run([probe]);
          expect(off).toEqual({ output: "REFUSED\n", exitCode: 0 });
          expect(server.accepted).toBe(0);
          const [on] = await run([probe], { network: true });
          expect(on).toEqual({ output: "CONNECTED\n", exitCode: 0 });
          // The accept is this process's event: it may come after the exec has settled.
          for (let i = 0; i < 400 && server.accepted === 0; i++) await new Promise((r) => setTimeout(r, 25));
          expect(server.accepted).toBe(1);
        });

        it("cannot kill host processes (namespaces: cannot see them either)", async () => {
          const victim = hostSleeper(user);
          cleanup.push(() => victim.kill("SIGKILL"));
          await new Promise((resolve) => victim.once("spawn", resolve));
          const [r] = await run([
            {
              command: `test -e /proc/${victim.pid} && echo PROC-VISIBLE; kill -9 ${victim.pid} 2>/dev/null && echo KILLED; ps -e -o pid= | wc -l`,
              cwd: runtimeRoot,
            },
          ]);
          expect(r.output).not.toContain("KILLED");
          expect(victim.exitCode).toBe(null);
          expect(victim.signalCode).toBe(null);
          if (mode === "namespaces") {
            expect(r.output).not.toContain("PROC-VISIBLE");
            // Only the sandbox's own few processes.
            expect(Number(r.output.trim().split("\n").pop())).toBeLessThan(8);
          }
        });

        it("mount, unshare, chroot and ptrace escapes fail", async () => {
          const victim = hostSleeper(user);
          cleanup.push(() => victim.kill("SIGKILL"));
          await new Promise((resolve) => victim.once("spawn", resolve));
          const attempts = [
            "mount -t tmpfs none /tmp",
            "mount --bind / /tmp",
            "unshare -U -r true",
            "unshare -m true",
            "chroot / true",
            // PTRACE_ATTACH (16) of a host process, by raw syscall (x86_64: ptrace is 101).
            `perl -e 'exit(syscall(101, 16, ${victim.pid}, 0, 0) == 0 ? 0 : 1)'`,
            // unshare(CLONE_NEWUSER) by raw syscall (x86_64: 272), in case the binary is missing.
            "perl -e 'exit(syscall(272, 0x10000000) == 0 ? 0 : 1)'",
          ];
          const results = await run(
            attempts.map((a) => ({ command: `${a} 2>/dev/null && echo ESCAPED; true`, cwd: runtimeRoot })),
          );
          for (const [i, r] of results.entries()) {
            expect({ attempt: attempts[i], ...r }).toEqual({ attempt: attempts[i], output: "", exitCode: 0 });
          }
          expect(victim.exitCode).toBe(null);
        });

        it("streams, reports 128 + signal, and passes a failing exit code", async () => {
          const [stream, signal, failing] = await run([
            { command: "echo a; sleep 0.1; echo b >&2; echo c", cwd: runtimeRoot },
            { command: "echo before; kill -9 $$", cwd: runtimeRoot },
            { command: "ls /nonexistent-pno 2>&1; exit 3", cwd: runtimeRoot },
          ]);
          expect(stream).toEqual({ output: "a\nb\nc\n", exitCode: 0 });
          expect(signal).toEqual({ output: "before\n", exitCode: 137 });
          expect(failing.exitCode).toBe(3);
          expect(failing.output).toContain("No such file or directory");
        });

        it("abort and timeout kill the whole tree", async () => {
          const [aborted, timedOut] = await run([
            { command: `(sleep 3107 &) ; sleep 3108 & echo started; wait`, cwd: runtimeRoot, abortOn: "started" },
            { command: `(setsid sleep 3109 &) ; echo started; sleep 3110`, cwd: runtimeRoot, timeout: 0.5 },
          ]);
          expect(aborted).toEqual({ output: "started\n", error: "aborted", code: null });
          expect(timedOut).toEqual({ output: "started\n", error: "timeout:0.5", code: null });
          for (const marker of ["sleep 3107", "sleep 3108", "sleep 3109", "sleep 3110"])
            expect(await untilDead(marker)).toEqual([]);
        });

        it("the sandboxed tree dies with the Node process that started it", async () => {
          const child = startExecAs(
            user,
            { root, runtimeRoot, mode },
            "sleep 3121 & setsid sleep 3122 & echo started; wait",
            runtimeRoot,
          );
          await new Promise((resolve) => child.stdout.on("data", (d) => String(d).includes("started") && resolve()));
          expect(pidsWith("sleep 3122").length).toBeGreaterThan(0);
          child.kill("SIGKILL");
          expect(await untilDead("sleep 312")).toEqual([]);
        });

        it("a fork bomb stays under maxProcesses and dies with abort", { timeout: 30_000 }, async () => {
          const max = 20;
          // Namespaces mode: RLIMIT_NPROC in the user namespace is exact, but the kernel exempts root,
          // whom only the PID namespace's pid_max bounds: the limit + the kernel's 300 reserved pids.
          const bound = user === "root" ? max + 300 : max;
          // Each `sleep 3111` is one more process, forked until the limit refuses one.
          let peak = 0;
          const sampler = setInterval(() => {
            peak = Math.max(peak, pidsWith("sleep 3111").length);
          }, 20);
          // perl's fork does not retry on EAGAIN as bash's does: the first refusal ends the loop.
          const forker = `perl -e '$| = 1; my $n = 0; for (1..400) { my $p = fork; if (!defined $p) { print "fork failed: $!\\n"; last } if (!$p) { exec "sleep", "3111" } $n++ } print "forked $n\\n"; sleep 600'`;
          const [bomb] = await run([{ command: forker, cwd: runtimeRoot, abortOn: "forked" }], { maxProcesses: max });
          clearInterval(sampler);
          peak = Math.max(peak, pidsWith("sleep 3111").length);
          expect(bomb.error).toBe("aborted");
          const forked = Number(/forked (\d+)\n$/.exec(bomb.output)?.[1]);
          expect(forked).toBeGreaterThan(0);
          if (mode === "namespaces") {
            expect(bomb.output).toBe(`fork failed: Resource temporarily unavailable\nforked ${forked}\n`);
            expect(forked).toBeLessThanOrEqual(bound);
            expect(peak).toBeLessThanOrEqual(bound);
          } else {
            // Landlock mode sets no process limit (RLIMIT_NPROC counts the user's processes machine-wide):
            // only abort's tree kill holds.
            expect(bomb.output).toBe("forked 400\n");
          }
          expect(await untilDead("sleep 3111")).toEqual([]);
        });

        it("keeps its process room after many short-lived processes", async () => {
          // 400 forks in a row, then 20 at once: a limit counting forks made (or PIDs used) would refuse.
          const command =
            "for i in $(seq 400); do /bin/true; done; for i in $(seq 20); do sleep 0.5 & done; wait; echo done";
          const [r] = await run([{ command, cwd: runtimeRoot }], { maxProcesses: 300 });
          expect(r).toEqual({ output: "done\n", exitCode: 0 });
        });

        it("a path a command swapped for a symlink is refused by the next operations object", async () => {
          const name = `cache-${tag}`;
          const cache = path.join(root, name);
          mkdirAs(user, cache);
          // A command of the workspace's sandbox replaces the directory with a link out of it...
          const [swap] = await run([
            { command: `rm -rf ${name} && ln -s ${other} ${name} && echo swapped`, cwd: runtimeRoot },
          ]);
          expect(swap).toEqual({ output: "swapped\n", exitCode: 0 });
          // ...which the next sandbox configured with that path must not bind or allow.
          const [next] = await run([{ command: `echo x > ${cache}/planted-${tag}`, cwd: runtimeRoot }], {
            readWrite: [cache],
          });
          expect(next).toMatchObject({ created: false, code: "ESANDBOX" });
          expect(next.error).toMatch(
            new RegExp(`^sandbox unavailable: the readWrite path ${cache} resolves through the symlink ${cache}, `),
          );
          expect(existsSync(path.join(other, `planted-${tag}`))).toBe(false);
        });

        it("a root swapped for a symlink after its operations were made is refused, not followed", async () => {
          // B's workspace lies inside A's: A's command replaces it with a link to another workspace.
          const name = `inner-${tag}`;
          const inner = path.join(root, name);
          mkdirAs(user, inner);
          writeFileAs(user, path.join(inner, "hello.txt"), "inner\n");
          const innerRuntime = mode === "landlock" ? inner : "/workspace";
          const a = { root, runtimeRoot };
          const [before, swap, after] = await run(
            [
              { command: "cat hello.txt", cwd: innerRuntime },
              {
                command: `mv ${name} ${name}.old && ln -s ${other} ${name} && echo swapped`,
                cwd: runtimeRoot,
                sandbox: a,
              },
              { command: `echo x > planted-${tag}; cat secret.txt`, cwd: innerRuntime },
            ],
            { root: inner, runtimeRoot: innerRuntime },
          );
          expect(before).toEqual({ output: "inner\n", exitCode: 0 });
          expect(swap).toEqual({ output: "swapped\n", exitCode: 0 });
          expect(after).toEqual({
            output: "",
            code: "ESANDBOX",
            error: `sandbox unavailable: the root ${inner} is no longer the directory the sandbox was made with (removed, replaced, moved or swapped for a symlink): refusing to follow it; make a new sandbox (createBashOperations) to use what is there now`,
          });
          expect(existsSync(path.join(other, `planted-${tag}`))).toBe(false);
        });

        it.runIf(mode === "namespaces")(
          "a readOnly path inside the workspace or a readWrite path stays read-only everywhere it shows",
          async () => {
            const data = tempDirFor(user, "pno-sbx-data-");
            cleanup.push(() => rmSync(data, { recursive: true, force: true }));
            mkdirAs(user, path.join(data, "ro"));
            const docs = path.join(root, `docs-${tag}`);
            mkdirAs(user, docs);
            writeFileAs(user, path.join(docs, "readme"), "readme\n");
            // And the reverse: a readWrite directory inside that readOnly one is writable at both places.
            mkdirAs(user, path.join(docs, "out"));
            const targets = [`${data}/ro/x`, `${docs}/x`, `${runtimeRoot}/docs-${tag}/x`];
            const [r] = await run(
              [
                {
                  command: `${targets.map((t) => `(echo x > ${t}) 2>/dev/null && echo WROTE ${t}`).join("; ")}; echo ok > ${data}/ok && echo rw-ok; cat ${runtimeRoot}/docs-${tag}/readme ${docs}/readme; echo a > ${docs}/out/a && echo b > ${runtimeRoot}/docs-${tag}/out/b && echo out-ok`,
                  cwd: runtimeRoot,
                },
              ],
              { readWrite: [data, path.join(docs, "out")], readOnly: [path.join(data, "ro"), docs] },
            );
            expect(r).toEqual({ output: "rw-ok\nreadme\nreadme\nout-ok\n", exitCode: 0 });
            expect(readdirSync(path.join(data, "ro"))).toEqual([]);
            expect(readdirSync(docs).sort()).toEqual(["out", "readme"]);
            expect(readdirSync(path.join(docs, "out")).sort()).toEqual(["a", "b"]);
          },
        );

        it.runIf(mode === "landlock")(
          "a readOnly path inside the workspace or a readWrite path is refused when made",
          async () => {
            const data = tempDirFor(user, "pno-sbx-data-");
            cleanup.push(() => rmSync(data, { recursive: true, force: true }));
            mkdirAs(user, path.join(data, "ro"));
            const docs = path.join(root, `docs-${tag}`);
            mkdirAs(user, docs);
            const probe = [{ command: "true", cwd: runtimeRoot }];
            const [inRoot] = await run(probe, { readOnly: [docs] });
            const [inData] = await run(probe, { readWrite: [data], readOnly: [path.join(data, "ro")] });
            expect(inRoot).toEqual({
              created: false,
              code: "ESANDBOX",
              error: `sandbox unavailable: readOnly ${docs} lies inside the workspace root ${root}: Landlock mode cannot make part of a writable area read-only (namespaces mode can); move it out of there or drop one of the two`,
            });
            expect(inData).toMatchObject({ created: false, code: "ESANDBOX" });
            expect(inData.error).toContain(`readOnly ${data}/ro lies inside the readWrite path ${data}:`);
          },
        );

        it.runIf(mode === "namespaces")("bounds its private /tmp and /dev/shm by tmpSize", async () => {
          const size = 4 << 20;
          const fill = (dir) => `head -c ${2 * size} /dev/zero > ${dir}/big 2>/dev/null || echo ${dir} full`;
          const df = "df -B1 --output=size /tmp /dev/shm | tail -n +2 | tr -d ' '";
          const [bounded, byDefault] = await run([
            { command: `${df}; ${fill("/tmp")}; ${fill("/dev/shm")}`, cwd: runtimeRoot, sandbox: { tmpSize: size } },
            { command: df, cwd: runtimeRoot },
          ]);
          expect(bounded).toEqual({ output: `${size}\n${size}\n/tmp full\n/dev/shm full\n`, exitCode: 0 });
          // The default: the RAM / 8, at most 2 GiB (a tmpfs rounds its size up to pages).
          const page = 4096;
          const want = Math.ceil(Math.min(Math.floor(os.totalmem() / 8), 2 ** 31) / page) * page;
          expect(byDefault).toEqual({ output: `${want}\n${want}\n`, exitCode: 0 });
        });
      },
    );
  }
}

describe.skipIf(!support?.auto)("sandbox mode errors and a real fork bomb", () => {
  const root = tempDirFor("root", "pno-sbx-misc-");
  cleanup.push(() => rmSync(root, { recursive: true, force: true }));

  it.runIf(support?.landlockAbi > 0)("landlock mode refuses a runtimeRoot that differs from the root", async () => {
    const [r] = await execAll(pno, { root, mode: "landlock" }, [{ command: "true", cwd: root }]);
    expect(r.code).toBe("ESANDBOX");
    expect(r.error).toMatch(/^sandbox unavailable: /);
  });

  it("a real fork bomb is contained and dies with abort", { timeout: 30_000 }, async () => {
    const controller = new AbortController();
    // "auto" may pick Landlock (no user namespaces here), which needs the workspace at its host path.
    const runtimeRoot = support.auto === "landlock" ? root : "/workspace";
    const ops = pno.createBashOperations({ sandbox: { root, runtimeRoot, maxProcesses: 32 } });
    let output = "";
    const running = ops.exec("pnobomb() { pnobomb | pnobomb & }; pnobomb; echo lit; sleep 600", runtimeRoot, {
      onData: (c) => {
        output += c;
        if (output.includes("lit")) setTimeout(() => controller.abort(), 500).unref();
      },
      signal: controller.signal,
    });
    await expect(running).rejects.toThrow("aborted");
    expect(await untilDead("pnobomb")).toEqual([]);
  });
});
