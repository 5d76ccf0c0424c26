// The workspace policy in the sandboxed shell (both modes, root and nobody): denied-write paths and the
// protected defaults cannot be created, written, truncated, renamed, linked or removed, denied-read paths
// cannot be opened, however the path is spelled, for paths made later too; each refusal is an event;
// git still works. Every outcome is judged on the host side.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import * as pno from "pi-native-ops";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, removeScripts, tempDirFor } from "./helpers/nobody.js";

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

const POLICY = { denyRead: [".env", "secrets/**"], denyWrite: ["locked/"] };
const NOBODY = 65534;

/** A workspace owned by `user`: a git repository (hooks, config), denied and free files. */
function workspace(user, mode) {
  const root = tempDirFor(user, "pno-policy-");
  cleanup.push(() => rmSync(root, { recursive: true, force: true }));
  const git = spawnSync("git", ["init", "-q", root]);
  if (git.status !== 0) throw new Error(`git init: ${git.stderr}`);
  const files = {
    "free.txt": "free\n",
    "locked/a": "locked\n",
    ".git/hooks/existing": "#!/bin/sh\n",
    ".env": "SECRET=1\n",
    "secrets/k": "key\n",
    "sub/f": "sub\n",
  };
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), content);
  }
  mkdirSync(path.join(root, "locked/empty"));
  // A repository with no hooks directory: a symlink named like one would stand in for it.
  mkdirSync(path.join(root, "sub2/.git"), { recursive: true });
  symlinkSync("../.env", path.join(root, "sub/env-link"));
  // An absolute link in the shell's view: /workspace/… is the shell's workspace, not the host's.
  symlinkSync(`${mode === "landlock" ? root : "/workspace"}/free.txt`, path.join(root, "abslink2"));
  if (user === "nobody") spawnSync("chown", ["-R", `${NOBODY}:${NOBODY}`, root]);
  return root;
}

/** The sandbox options of `mode` over `root`, and the cwd its commands run in. */
function options(mode, root, extra = {}) {
  const sandbox = { root, mode, policy: POLICY, ...extra };
  if (mode === "landlock") sandbox.runtimeRoot = root;
  return { sandbox, cwd: mode === "landlock" ? root : "/workspace" };
}

/** A command that runs each `name: shell` step and prints `name=<exit code>` per line. */
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

describe.skipIf(modes.length === 0)("the policy in the sandboxed shell", () => {
  for (const mode of modes) {
    for (const user of users) {
      describe(`${mode}, as ${user}`, () => {
        let root;
        let run;
        const at = () => (mode === "landlock" ? root : "/workspace");
        beforeAll(() => {
          root = workspace(user, mode);
          const { sandbox, cwd } = options(mode, root);
          run = (command) => execAllAs(user, pno, sandbox, [{ command, cwd }]).then(([r]) => r);
        });

        it("refuses every way of writing a denied-write path and a protected default", async () => {
          const r = await run(
            steps({
              create: "echo x > locked/new",
              overwrite: "echo x > locked/a",
              append: "echo x >> locked/a",
              truncate: "truncate -s 0 locked/a",
              renameInto: "cp free.txt f2 && mv f2 locked/moved",
              renameOut: "mv locked/a out",
              renameDir: "mv locked unlocked",
              hardlinkInto: "ln free.txt locked/h",
              hardlinkOut: "ln locked/a alias",
              symlinkInto: "ln -s /tmp locked/s",
              mkdir: "mkdir locked/d",
              rmdir: "rmdir locked/empty",
              unlink: "rm -f locked/a",
              hook: "echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
              hookViaSymlink: "ln -s .git/hooks h && echo x > h/pre-push",
              hookRename: "echo x > hk && mv hk .git/hooks/post-checkout",
              hookRemove: "rm -f .git/hooks/existing",
              hooksDirSwap: "mv .git/hooks .git/old-hooks",
              gitDirRename: "mv .git moved-git",
              config: "echo '[core] hooksPath = x' >> .git/config",
              envrc: "echo 'echo hi' > .envrc",
              vscode: "mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
              caseOther: "echo x > LOCKED-other && echo y > .ENVRC",
              hooksSymlink: "ln -s ../../sub sub2/.git/hooks",
              free: "echo ok > free2.txt && mv free2.txt sub/free3.txt && ln sub/free3.txt sub/l && rm sub/l",
              absolute: `echo abs > ${at()}/abs.txt && ln -s ${at()}/locked abslink && ! echo x > abslink/y`,
            }),
          );
          const c = codes(r.output);
          for (const [name, code] of Object.entries(c)) {
            if (["free", "caseOther", "absolute"].includes(name)) expect(code, name).toBe(0);
            else expect(code, name).not.toBe(0);
          }
          expect(Object.keys(c)).toHaveLength(26);
          expect(readFileSync(path.join(root, "abs.txt"), "utf8")).toBe("abs\n");
          expect(existsSync(path.join(root, "locked/y"))).toBe(false);
          // Judged on the host.
          expect(readFileSync(path.join(root, "locked/a"), "utf8")).toBe("locked\n");
          expect(readFileSync(path.join(root, ".git/hooks/existing"), "utf8")).toBe("#!/bin/sh\n");
          for (const rel of [
            "locked/new",
            "locked/moved",
            "locked/h",
            "locked/s",
            "locked/d",
            "out",
            "alias",
            "unlocked",
            ".git/hooks/pre-commit",
            ".git/hooks/pre-push",
            ".git/hooks/post-checkout",
            ".git/old-hooks",
            "moved-git",
            "sub2/.git/hooks",
            ".envrc",
            ".vscode/tasks.json",
          ]) {
            expect(existsSync(path.join(root, rel)), rel).toBe(false);
          }
          expect(existsSync(path.join(root, "locked/empty"))).toBe(true);
          expect(readFileSync(path.join(root, ".git/config"), "utf8")).not.toContain("hooksPath");
          expect(readFileSync(path.join(root, "sub/free3.txt"), "utf8")).toBe("ok\n");
          // Names differing by case are other files on a case-sensitive file system.
          expect(readFileSync(path.join(root, ".ENVRC"), "utf8")).toBe("y\n");
        });

        it("refuses reading denied-read paths however they are reached", async () => {
          const r = await run(
            steps({
              cat: "cat .env",
              dotdot: "cat sub/../.env",
              absolute: `cat ${mode === "landlock" ? root : "/workspace"}/.env`,
              symlink: "cat sub/env-link",
              newSymlink: "ln -s secrets/k kl && cat kl",
              inDir: "cat secrets/k",
              listDir: "ls secrets",
              renameOut: "mv .env env-copy",
              hardlink: "ln .env env-link2",
              renameDirOut: "mv secrets public",
              procCwd: "cat /proc/self/cwd/.env",
              procFd: "exec 3<.git/config; cat /proc/self/fd/3 >/dev/null && exec 4<secrets; cat /proc/self/fd/4/k",
              absSymlink: `ln -s ${at()}/.env abs-env && cat abs-env`,
              okViaProc: `exec 3<free.txt; cat /proc/self/fd/3 /proc/self/cwd/free.txt ${at()}/free.txt abslink2`,
              madeNow: "mkdir -p n && echo s > n/.env && cat n/.env",
              write: "echo NEW=1 > .env",
              other: "cat free.txt sub/f",
              // An O_PATH open (tar opens directories so) stays the kernel's: ADDFD cannot hand one over.
              tar: `python3 -c 'import os; fd = os.open("sub", os.O_PATH); print(sorted(os.listdir("/proc/self/fd/%d" % fd)))'`,
            }),
          );
          const c = codes(r.output);
          for (const [name, code] of Object.entries(c)) {
            // Writing a denied-read file reveals nothing: allowed (its content is then the new one).
            if (["other", "write", "okViaProc", "tar"].includes(name)) expect(code, name).toBe(0);
            else expect(code, name).not.toBe(0);
          }
          expect(Object.keys(c)).toHaveLength(18);
          expect(r.output).not.toContain("key");
          for (const rel of ["env-copy", "env-link2", "public"])
            expect(existsSync(path.join(root, rel)), rel).toBe(false);
          expect(existsSync(path.join(root, "n/.env"))).toBe(true);
        });

        it("lets git init, add and commit work, and refuses core.hooksPath", async () => {
          const git = "git -c user.email=a@b -c user.name=n";
          const r = await run(
            steps({
              init: `${git} init -q fresh && cd fresh && echo x > f && ${git} add f && ${git} commit -qm one`,
              commit: `echo y > free.txt && ${git} add free.txt && ${git} commit -qm two`,
              hooksPath: "git config core.hooksPath x",
              fsmonitor: "git config core.fsmonitor 'touch /tmp/pwned'",
            }),
          );
          const c = codes(r.output);
          expect({ init: c.init, commit: c.commit }).toEqual({ init: 0, commit: 0 });
          // git config writes .git/config.lock and renames it over .git/config: the rename is refused.
          expect(c.hooksPath).not.toBe(0);
          expect(c.fsmonitor).not.toBe(0);
          const log = spawnSync("git", ["-c", "safe.directory=*", "-C", root, "log", "--oneline"], {
            encoding: "utf8",
          });
          expect(log.stdout).toContain("two");
          const config = readFileSync(path.join(root, ".git/config"), "utf8");
          expect(config).not.toMatch(/hooksPath|fsmonitor/);
          // The repository the command made is its own; the next command cannot change its hooks.
          expect(existsSync(path.join(root, "fresh/.git/config"))).toBe(true);
          const again = await run(steps({ hook: "echo x > fresh/.git/hooks/pre-commit" }));
          expect(codes(again.output)).toEqual({ hook: 1 });
        });
      });
    }

    describe(`${mode}: paths made later, events, bad rules`, () => {
      it("holds for a file the host creates after the operations were made, and reports each refusal", async () => {
        const root = workspace("root", mode);
        const events = [];
        const { sandbox, cwd } = options(mode, root, {
          onPolicyEvent: (e) => events.push(e),
        });
        const ops = pno.createBashOperations({ sandbox });
        mkdirSync(path.join(root, "later/secrets"), { recursive: true });
        writeFileSync(path.join(root, "later/.env"), "LATER=1\n");
        const command = "cat later/.env; echo x > locked/z; echo ok";
        let output = "";
        const { exitCode } = await ops.exec(command, cwd, { onData: (d) => (output += d) });
        expect(exitCode).toBe(0);
        expect(output).not.toContain("LATER");
        expect(existsSync(path.join(root, "locked/z"))).toBe(false);
        await expect.poll(() => events.length).toBe(2);
        const at = mode === "landlock" ? root : "/workspace";
        expect(events.map((e) => Object.keys(e))).toEqual([
          ["tool", "access", "path", "rule", "allowed", "time", "command"],
          ["tool", "access", "path", "rule", "allowed", "time", "command"],
        ]);
        expect(events.map(({ time, ...e }) => e)).toEqual([
          { tool: "bash", access: "read", path: `${at}/later/.env`, rule: ".env", allowed: false, command },
          { tool: "bash", access: "write", path: `${at}/locked/z`, rule: "locked/", allowed: false, command },
        ]);
        expect(typeof events[0].time).toBe("number");
        expect(Math.abs(events[0].time - Date.now())).toBeLessThan(10 * 60 * 1000);
      });

      it("a FIFO's open waits for its other end without holding the sandbox's other calls", async () => {
        const root = workspace("root", mode);
        const { sandbox, cwd } = options(mode, root);
        const ops = pno.createBashOperations({ sandbox });
        let output = "";
        // The writer's open waits for a reader; meanwhile another write open and the reader's own
        // (notified: denyRead has rules) go through.
        const { exitCode } = await ops.exec("mkfifo p; (echo through > p &); echo y > other; cat p", cwd, {
          onData: (d) => (output += d),
          timeout: 30,
        });
        expect({ exitCode, output }).toEqual({ exitCode: 0, output: "through\n" });
        expect(readFileSync(path.join(root, "other"), "utf8")).toBe("y\n");
      });

      it.skipIf(spawnSync("script", ["--version"]).status !== 0)(
        "/dev/tty opened for writing is not the agent's terminal",
        () => {
          // Node with a controlling terminal (script gives it a pty): the shell, in a session of its
          // own, has none, and the handler that opens for it must not lend it Node's.
          const root = workspace("root", mode);
          const { sandbox, cwd } = options(mode, root);
          const child = path.join(root, "tty.mjs");
          const pkg = new URL("../index.js", import.meta.url).href;
          writeFileSync(
            child,
            `const pno = await import(${JSON.stringify(pkg)});
const ops = pno.createBashOperations({ sandbox: ${JSON.stringify(sandbox)} });
let out = "";
await ops.exec("echo MARK-IN-TTY > /dev/tty; echo rc=$?", ${JSON.stringify(cwd)}, { onData: (d) => (out += d) });
console.log("RESULT " + out.trim());`,
          );
          const r = spawnSync("script", ["-qec", `${process.execPath} ${child}`, "/dev/null"], {
            encoding: "utf8",
            timeout: 60_000,
          });
          expect(r.stdout).toMatch(/RESULT[\s\S]*rc=1/);
          expect(r.stdout).not.toContain("MARK-IN-TTY");
        },
      );

      it("one command reports at most 1,000 refusals (the rest are refused unreported)", async () => {
        const root = workspace("root", mode);
        const events = [];
        const { sandbox, cwd } = options(mode, root, { onPolicyEvent: (e) => events.push(e) });
        const ops = pno.createBashOperations({ sandbox });
        const loop = "for i in $(seq 1005); do echo > .envrc; done 2>/dev/null; echo done";
        let output = "";
        await ops.exec(loop, cwd, { onData: (d) => (output += d) });
        expect(output).toBe("done\n");
        // Events arrive in order: once the next command's is here, every one of the loop's is too.
        await ops.exec("echo > .envrc", cwd, { onData() {} }).catch(() => {});
        await expect.poll(() => events.filter((e) => e.command === "echo > .envrc").length).toBe(1);
        expect(events.filter((e) => e.command === loop)).toHaveLength(1000);
        expect(existsSync(path.join(root, ".envrc"))).toBe(false);
      });

      it("a throwing onPolicyEvent neither stops the command nor crashes Node", async () => {
        const root = workspace("root", mode);
        let calls = 0;
        const { sandbox, cwd } = options(mode, root, {
          onPolicyEvent: () => {
            calls++;
            throw new Error("callback bug");
          },
        });
        const ops = pno.createBashOperations({ sandbox });
        let output = "";
        await ops.exec("echo > .envrc; echo > .envrc; echo done", cwd, { onData: (d) => (output += d) });
        expect(output).toContain("done");
        await expect.poll(() => calls).toBe(2);
      });

      it("with no policy the protected defaults apply; protect: false drops them", async () => {
        const root = workspace("root", mode);
        const cwd = mode === "landlock" ? root : "/workspace";
        const extra = mode === "landlock" ? { runtimeRoot: root } : {};
        const plain = pno.createBashOperations({ sandbox: { root, mode, ...extra } });
        let output = "";
        await plain.exec(steps({ hook: "echo x > .git/hooks/pre-commit", env: "cat .env" }), cwd, {
          onData: (d) => (output += d),
        });
        expect(codes(output)).toEqual({ hook: 1, env: 0 });
        const open = pno.createBashOperations({ sandbox: { root, mode, ...extra, policy: { protect: false } } });
        output = "";
        await open.exec(steps({ hook: "echo x > .git/hooks/pre-commit" }), cwd, { onData: (d) => (output += d) });
        expect(codes(output)).toEqual({ hook: 0 });
      });

      it("a rule that does not parse is refused when the operations are made", () => {
        const root = workspace("root", mode);
        const { sandbox } = options(mode, root, { policy: { denyRead: ["a{b"] } });
        expect(() => pno.createBashOperations({ sandbox })).toThrow(/policy\.denyRead: invalid rule "a\{b"/);
        expect(() => pno.createBashOperations({ sandbox: { ...sandbox, policy: { denyRead: ".env" } } })).toThrow(
          TypeError,
        );
      });
    });
  }
});
