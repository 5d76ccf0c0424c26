// The calls a path rule cannot see, answered by the sandbox's user-notification handler: metadata
// changes (modes, owners, times, xattrs) outside the writable areas in Landlock mode, and locks on
// host files in both modes. Each is judged on the host side, as root and as nobody.
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, statSync, symlinkSync } from "node:fs";
import path from "node:path";
import * as pno from "pi-native-ops";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, removeScripts, tempDirFor, writeFileAs } from "./helpers/nobody.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const users = ["root", ...(nobody.argv ? ["nobody"] : [])];
const label = (user) => (user === "root" && process.getuid() !== 0 ? "this process's user" : user);
// The system call numbers and `struct flock` layout below are x86-64's.
const x86 = process.arch === "x64";
const cleanup = [];
afterAll(() => {
  for (const fn of cleanup.reverse()) fn();
  removeScripts();
});

describe.runIf(process.platform === "linux")("sandboxSupport() and user notification", () => {
  it("says whether user notification works, and what rests on it", () => {
    expect(typeof support.userNotification).toBe("boolean");
    const { namespaces, landlock } = support.enforces;
    if (namespaces)
      expect({ metadata: namespaces.metadata, locks: namespaces.locks }).toEqual({
        metadata: true,
        locks: support.userNotification,
      });
    if (landlock)
      expect({ metadata: landlock.metadata, locks: landlock.locks }).toEqual({
        metadata: support.userNotification,
        locks: support.userNotification,
      });
  });
});

/** The perl one-liner setting xattr user.pno=v on its argument (setxattr(2), x86-64 number 188). */
const SETXATTR = `perl -e 'my ($f, $n, $v) = ($ARGV[0], "user.pno", "v"); exit(syscall(188, $f, $n, $v, 1, 0) == 0 ? 0 : 1)'`;
/** The value of xattr user.pno of `file` on the host (getxattr(2), 191), or null. */
function hostXattr(file) {
  const r = spawnSync("perl", [
    "-e",
    'my ($f, $a, $b) = ($ARGV[0], "user.pno", "\\0" x 64); my $n = syscall(191, $f, $a, $b, 64); print $n >= 0 ? substr($b, 0, $n) : "NONE"',
    file,
  ]);
  const out = r.stdout.toString();
  return out === "NONE" ? null : out;
}
/** A perl one-liner taking a read lock on its argument with fcntl command `cmd` (6: F_SETLK, 37: F_OFD_SETLK). */
const fcntlLock = (cmd) =>
  `perl -e 'open(F, "<", $ARGV[0]) or exit 2; my $l = pack("s s x4 q q l x4", 0, 0, 0, 0, 0); exit(fcntl(F, ${cmd}, $l) ? 0 : 1)'`;

describe.skipIf(!(support?.landlockAbi > 0) || !x86)("Landlock mode: metadata outside the writable areas", () => {
  for (const user of users) {
    describe(`as ${label(user)}`, () => {
      let root;
      let other;
      const run = (command) =>
        // The host directory is readable (readOnly): descriptors of its files reach the handler too.
        execAllAs(user, pno, { root, runtimeRoot: root, mode: "landlock", readOnly: [other] }, [
          { command, cwd: root },
        ]).then(([r]) => r);
      beforeAll(() => {
        root = tempDirFor(user, "pno-notify-root-");
        other = tempDirFor(user, "pno-notify-other-");
        writeFileAs(user, path.join(other, "victim"), "host file\n", 0o600);
        writeFileAs(user, path.join(root, "inside"), "workspace file\n", 0o644);
        symlinkSync(path.join(other, "victim"), path.join(root, "link"));
        cleanup.push(() => {
          for (const dir of [root, other]) rmSync(dir, { recursive: true, force: true });
        });
      });

      it("chmod, chown, touch and setxattr outside are refused, through a symlink too", async () => {
        const victim = path.join(other, "victim");
        const before = statSync(victim);
        const r = await run(
          [
            `chmod 666 ${victim} 2>/dev/null && echo CHMOD`,
            `chown $(id -u):$(id -g) ${victim} 2>/dev/null && echo CHOWN`,
            `touch -d @1000000000 ${victim} 2>/dev/null && echo TOUCH`,
            `${SETXATTR} ${victim} && echo SETXATTR`,
            "chmod 666 link 2>/dev/null && echo LINK",
            `perl -e 'open(F, "<", $ARGV[0]) or exit 2; exit(chmod(0666, *F) ? 0 : 1)' ${victim} && echo FCHMOD`,
            `perl -e 'open(F, "<", $ARGV[0]) or exit 2; exit(chown($<, $(, *F) ? 0 : 1)' ${victim} && echo FCHOWN`,
            // utimensat(fd, NULL, NULL): times set to now on a descriptor opened only for reading.
            `perl -e 'open(F, "<", $ARGV[0]) or exit 2; exit(utime(undef, undef, *F) ? 0 : 1)' ${victim} && echo FUTIMENS`,
            `chmod 644 ${victim}; echo "chmod: $?"`,
            "true",
          ].join("; "),
        );
        expect(r).toEqual({
          output: `chmod: changing permissions of '${victim}': Operation not permitted\nchmod: 1\n`,
          exitCode: 0,
        });
        const after = statSync(victim);
        expect(after.mode & 0o7777).toBe(0o600);
        expect(after.mtimeMs).toBe(before.mtimeMs);
        expect(hostXattr(victim)).toBe(null);
      });

      it("readWrite paths (a directory, a file) are writable areas too", async () => {
        const dir = tempDirFor(user, "pno-notify-rw-");
        const file = path.join(other, "rw-file");
        writeFileAs(user, file, "", 0o644);
        writeFileAs(user, path.join(dir, "in-rw"), "", 0o644);
        cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
        const [r] = await execAllAs(user, pno, { root, runtimeRoot: root, mode: "landlock", readWrite: [dir, file] }, [
          { command: `chmod 600 ${dir}/in-rw ${file} && touch -d @1000000000 ${file} && echo OK`, cwd: root },
        ]);
        expect(r).toEqual({ output: "OK\n", exitCode: 0 });
        expect(statSync(path.join(dir, "in-rw")).mode & 0o7777).toBe(0o600);
        expect(statSync(file).mode & 0o7777).toBe(0o600);
      });

      it("inside the workspace they keep working (chmod, chown, touch -d, xattrs, cp -p)", async () => {
        const r = await run(
          [
            "chmod 600 inside",
            "chown $(id -u):$(id -g) inside",
            "touch -d @1000000000 inside",
            `${SETXATTR} inside`,
            "mkdir -p sub && cp -p inside sub/copy",
            "touch -h link",
            // Times set to now through a descriptor, read-only or for writing.
            `perl -e 'open(F, "<", "inside") or exit 2; exit(utime(undef, undef, *F) ? 0 : 1)'`,
            `perl -e 'open(F, ">>", "sub/copy") or exit 2; exit(utime(undef, undef, *F) ? 0 : 1)'`,
            "touch -d @1000000000 inside sub/copy",
            "echo OK",
          ].join(" && "),
        );
        expect(r).toEqual({ output: "OK\n", exitCode: 0 });
        for (const file of ["inside", "sub/copy"]) {
          const st = statSync(path.join(root, file));
          expect({ file, mode: st.mode & 0o7777, mtime: st.mtimeMs }).toEqual({ file, mode: 0o600, mtime: 1e12 });
        }
        expect(hostXattr(path.join(root, "inside"))).toBe("v");
        // tar sets each directory's mode after its contents, through glibc's fchmodat(AT_SYMLINK_NOFOLLOW),
        // which without fchmodat2 changes `/proc/self/fd/N`: the caller's descriptor, not the handler's.
        const tar = await run(
          "mkdir -p t/d && chmod 751 t t/d && tar cf t.tar t && rm -r t && tar xf t.tar && echo OK",
        );
        expect(tar).toEqual({ output: "OK\n", exitCode: 0 });
        expect(statSync(path.join(root, "t", "d")).mode & 0o7777).toBe(0o751);
        // touch -h changed the link itself, not the host file it points to.
        expect(statSync(path.join(other, "victim")).mtimeMs).not.toBe(1e12);
      });
    });
  }
});

const modes = [
  ["namespaces", support?.namespaces],
  ["landlock", support?.landlockAbi > 0],
];
for (const [mode, available] of modes) {
  describe.skipIf(!available || !x86)(`${mode} mode: locks on host files`, () => {
    for (const user of users) {
      describe(`as ${label(user)}`, () => {
        let root;
        let other;
        const runtimeRoot = () => (mode === "landlock" ? root : "/workspace");
        const run = (command) =>
          execAllAs(user, pno, { root, runtimeRoot: runtimeRoot(), mode, readOnly: [other] }, [
            { command, cwd: runtimeRoot() },
          ]).then(([r]) => r);
        beforeAll(() => {
          root = tempDirFor(user, "pno-lock-root-");
          other = tempDirFor(user, "pno-lock-other-");
          writeFileAs(user, path.join(other, "lockme"), "", 0o644);
          writeFileAs(user, path.join(root, "lockme"), "", 0o644);
          mkdirSync(path.join(root, "sub"));
          cleanup.push(() => {
            for (const dir of [root, other]) rmSync(dir, { recursive: true, force: true });
          });
        });

        it("flock, fcntl and OFD locks on a host file are refused", async () => {
          const targets = [path.join(other, "lockme"), ...(user === "root" ? ["/etc/.pwd.lock"] : [])];
          const r = await run(
            targets
              .flatMap((t) => [
                `flock -n -s ${t} true 2>/dev/null && echo FLOCK ${t}`,
                `${fcntlLock(6)} ${t} && echo POSIX ${t}`,
                `${fcntlLock(37)} ${t} && echo OFD ${t}`,
              ])
              .concat([`flock -n -s ${targets[0]} true; echo "flock: $?"`])
              .join("; "),
          );
          expect(r.exitCode).toBe(0);
          expect(r.output).toMatch(/^flock: .*: No locks available\nflock: [1-9]\d*\n$/);
        });

        it("locks inside the workspace work, a blocking one waits for its holder", async () => {
          const r = await run(
            [
              "flock -n -s lockme true && echo FLOCK",
              `${fcntlLock(6)} lockme && echo POSIX`,
              `${fcntlLock(37)} lockme && echo OFD`,
              "mkfifo go",
              "(flock lockme -c 'echo held; read x < go') &",
              'until [ -n "$(flock -n lockme true 2>/dev/null || echo busy)" ]; do :; done',
              "(flock lockme -c 'echo got') &",
              "echo release > go",
              "wait",
            ].join("\n"),
          );
          expect(r).toEqual({ output: "FLOCK\nPOSIX\nOFD\nheld\ngot\n", exitCode: 0 });
        });
      });
    }
  });
}

/** A perl one-liner: an inotify watch (inotify_init1 294, inotify_add_watch 254) on its argument. */
const WATCH = `perl -e '$fd = syscall(294, 0); $w = syscall(254, $fd, $ARGV[0], 0x100); print $w >= 0 ? "WATCHED\\n" : "REFUSED $!\\n"'`;

describe.skipIf(!(support?.landlockAbi > 0) || !x86)("Landlock mode: inotify and fanotify", () => {
  for (const user of users) {
    describe(`as ${label(user)}`, () => {
      let root;
      let hidden;
      const run = (command) =>
        execAllAs(user, pno, { root, runtimeRoot: root, mode: "landlock" }, [{ command, cwd: root }]).then(([r]) => r);
      beforeAll(() => {
        root = tempDirFor(user, "pno-watch-root-");
        hidden = tempDirFor(user, "pno-watch-hidden-");
        cleanup.push(() => {
          for (const dir of [root, hidden]) rmSync(dir, { recursive: true, force: true });
        });
      });

      it("refuses a watch on a directory the shell cannot list, and fanotify", async () => {
        const r = await run(
          [
            `ls ${hidden} >/dev/null 2>&1 || echo UNLISTABLE`,
            `${WATCH} ${hidden}`,
            `${WATCH} ${hidden}/../${path.basename(hidden)}`,
            `perl -e 'my $r = syscall(300, 0x200, 0); print $r >= 0 ? "FANOTIFY\\n" : "REFUSED $!\\n"'`,
          ].join("; "),
        );
        expect(r).toEqual({
          output: "UNLISTABLE\nREFUSED Permission denied\nREFUSED Permission denied\nREFUSED Operation not permitted\n",
          exitCode: 0,
        });
      });

      it("watches what the shell can read, and reports names created in the workspace", async () => {
        const r = await run(
          [
            `${WATCH} /usr/bin`,
            `${WATCH} ${root}`,
            `perl -e '$fd = syscall(294, 0); $dot = "."; $w = syscall(254, $fd, $dot, 0x100); die "no watch: $!" if $w < 0; open(F, ">", "born.txt"); close F; open(my $h, "<&=", $fd); sysread($h, $buf, 4096); ($wd, $mask, $cookie, $len) = unpack("iIII", $buf); print unpack("Z*", substr($buf, 16, $len)), "\\n"'`,
          ].join("; "),
        );
        expect(r).toEqual({ output: "WATCHED\nWATCHED\nborn.txt\n", exitCode: 0 });
      });
    });
  }
});
