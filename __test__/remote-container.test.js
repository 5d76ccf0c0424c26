// The server as it runs in a container: started as an unprivileged user inside new user + mount
// namespaces, the workspace bind-mounted at /workspace, chrooted into a root that holds nothing else of
// the host (the static binary and the workspace only; plus the system directories, bound read as they
// are, for the shell). The client speaks /workspace paths; nothing of the host path may appear in any
// result or error.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
} from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRemoteTools } from "pi-native-ops";
import { runTool } from "./helpers/pi.js";
import { serverPath, startServer } from "./helpers/face.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const NOBODY = 65534; // nobody / nogroup's id on Linux
const chroot = ["/usr/sbin/chroot", "/sbin/chroot", "/usr/bin/chroot"].find(existsSync);

/** The command prefix that drops to an unprivileged user when we are root (as in CI containers). */
function dropPrivileges() {
  return process.getuid?.() === 0 ? ["setpriv", `--reuid=${NOBODY}`, `--regid=${NOBODY}`, "--clear-groups", "--"] : [];
}

/** Why the namespaces cannot be made here, or null when they can. */
function unavailable() {
  if (process.platform !== "linux") return "user and mount namespaces are Linux's";
  if (!serverPath()) return "no pi-native-ops-server binary (scripts/build-server.sh builds it)";
  if (!chroot) return "no chroot binary";
  const [file, ...args] = [...dropPrivileges(), "unshare", "-Urm", "true"];
  const probe = spawnSync(file, args, { encoding: "utf8" });
  if (probe.status !== 0) {
    return `no user + mount namespaces here: \`${[file, ...args].join(" ")}\` failed (${(probe.stderr || probe.error?.message || "").trim()})`;
  }
  return null;
}
const why = unavailable();
if (why) console.log(`remote-container: skipped: ${why}`);

let base;
let hostWorkspace;
let outside;
beforeAll(() => {
  if (why) return;
  base = tempDir("pno-container-");
  outside = makeTree(path.join(base, "outside"), { "secret.txt": "SECRET\n" });
  hostWorkspace = makeTree(path.join(base, "ws"), {
    "a.txt": "alpha\nneedle one\n",
    "src/b.ts": "export const needle = 2;\n",
    "src/c.ts": "nothing\n",
    "link-rel-out": { symlink: "../outside/secret.txt" },
    "link-abs-out": { symlink: path.join(outside, "secret.txt") },
    "link-in": { symlink: "src/b.ts" },
  });
  // Two roots: "empty" holds only the binary and the workspace's mount point; "system" adds the host's
  // /usr, /etc, /dev and /proc (bound as they are) and its bin/lib links, which a shell needs.
  for (const name of ["empty", "system"]) {
    const r = path.join(base, name);
    mkdirSync(path.join(r, "workspace"), { recursive: true });
    copyFileSync(serverPath(), path.join(r, "pi-native-ops-server"));
    chmodSync(path.join(r, "pi-native-ops-server"), 0o755);
  }
  for (const d of systemDirs()) {
    const host = `/${d}`;
    const at = path.join(base, "system", d);
    if (lstatSync(host).isSymbolicLink()) symlinkSync(readlinkSync(host), at);
    else mkdirSync(at);
  }
  // The unprivileged user must be able to enter the tree and write the workspace.
  if (process.getuid?.() === 0) chownTree(base, NOBODY);
  chmodSync(base, 0o755);
});
afterAll(() => base && removeTree(base));

function systemDirs() {
  return ["usr", "bin", "lib", "lib64", "sbin", "etc", "dev", "proc"].filter((d) => existsSync(`/${d}`));
}

function chownTree(p, id) {
  lchownSync(p, id, id);
  if (lstatSync(p).isDirectory()) for (const name of readdirSync(p)) chownTree(path.join(p, name), id);
}

/** Starts the server in its namespaces, chrooted into base/<rootName>, serving /workspace. */
function containerServer(rootName) {
  const r = path.join(base, rootName);
  const binds = rootName === "system" ? systemDirs().filter((d) => !lstatSync(`/${d}`).isSymbolicLink()) : [];
  // Inside the namespaces: bind the workspace, bind (recursively: a user namespace may not reveal what
  // the host's submounts cover) the system directories, then chroot and exec the server.
  const script =
    'set -e; mount --bind "$1" "$2/workspace"; r="$2"; shift 2; ' +
    'for d in "$@"; do mount --rbind "/$d" "$r/$d"; done; ' +
    `exec ${chroot} "$r" /pi-native-ops-server --root /workspace`;
  return startServer("/workspace", {
    spawnArgs: [...dropPrivileges(), "unshare", "-Urm", "sh", "-c", script, "sh", hostWorkspace, r, ...binds],
  });
}

/** Every string reachable in a result or an error (message, path, stack-free fields). */
function everything(x) {
  if (x instanceof Error)
    return JSON.stringify({ message: x.message, code: x.code, path: x.path, syscall: x.syscall, ...x });
  const json = JSON.stringify(x, (_, v) =>
    Buffer.isBuffer(v) || v?.type === "Buffer" ? Buffer.from(v).toString() : v,
  );
  return json ?? String(x);
}

/** Awaits `p` and returns its value or its error, after checking that neither names the host path. */
async function noLeak(p) {
  const got = await Promise.resolve(p).then(
    (v) => v,
    (e) => e,
  );
  const text = everything(got);
  expect(text).not.toContain(base);
  expect(text).not.toContain(path.basename(base));
  return got;
}

describe.skipIf(why)("a server in user + mount namespaces, chrooted, as nobody", () => {
  for (const rootName of ["empty", "system"]) {
    describe(`in the ${rootName} root`, () => {
      let server;
      let fs;
      let tools;
      beforeAll(async () => {
        server = await containerServer(rootName);
        fs = server.connection.fs;
        tools = createRemoteTools("/workspace", { connection: server.connection });
      });
      afterAll(() => server?.close());

      it("serves /workspace: roots, reads, writes land in the host workspace", async () => {
        // Really confined: an unprivileged user on the host, its root the chroot directory.
        const status = readFileSync(`/proc/${server.child.pid}/status`, "utf8");
        if (process.getuid?.() === 0) expect(/^Uid:\s+(\d+)/m.exec(status)?.[1]).toBe(String(NOBODY));
        expect(readlinkSync(`/proc/${server.child.pid}/root`)).toBe(path.join(base, rootName));
        expect(fs.runtimeRoot).toBe("/workspace");
        expect(everything({ root: fs.root, runtimeRoot: fs.runtimeRoot })).not.toContain(base);
        expect(String(await noLeak(fs.read.readFile("/workspace/a.txt")))).toBe("alpha\nneedle one\n");
        expect(String(await noLeak(fs.read.readFile("/workspace/link-in")))).toBe("export const needle = 2;\n");
        await noLeak(fs.write.writeFile(`/workspace/written-${rootName}.txt`, "from the container\n"));
        expect(readFileSync(path.join(hostWorkspace, `written-${rootName}.txt`), "utf8")).toBe("from the container\n");
        const st = await noLeak(fs.ls.stat("/workspace/src"));
        expect(st.isDirectory()).toBe(true);
        expect((await noLeak(fs.ls.readdir("/workspace/src"))).sort()).toEqual(["b.ts", "c.ts"]);
      });

      it("pi's tools through it: read, ls, find, grep, in /workspace terms", async () => {
        expect((await noLeak(runTool(tools.read, { path: "a.txt" }))).text).toBe("alpha\nneedle one\n");
        const ls = await noLeak(runTool(tools.ls, { path: "." }));
        expect(ls.text).toContain("src/");
        expect(ls.text).toContain("a.txt");
        expect((await noLeak(runTool(tools.find, { pattern: "*.ts" }))).text).toBe("src/b.ts\nsrc/c.ts");
        const grep = await noLeak(runTool(tools.grep, { pattern: "needle" }));
        expect(grep.text).toBe("a.txt:2: needle one\nsrc/b.ts:1: export const needle = 2;");
        expect(await noLeak(fs.find.glob("*.ts", "/workspace", { ignore: [], limit: 10 }))).toEqual([
          "/workspace/src/b.ts",
          "/workspace/src/c.ts",
        ]);
      });

      it("escapes are refused in /workspace terms", async () => {
        for (const p of [
          "/workspace/../etc/passwd",
          "/workspace/link-rel-out",
          "/workspace/link-abs-out",
          "/etc/passwd",
          "/proc/self/root/etc/passwd",
          "/",
        ]) {
          const err = await noLeak(fs.read.readFile(p));
          expect(err.message).toBe(`path "${p}" is outside workspace`);
        }
        const tool = await noLeak(runTool(tools.read, { path: "link-abs-out" }));
        expect(tool.error).toBe('path "/workspace/link-abs-out" is outside workspace');
        const grep = await noLeak(runTool(tools.grep, { pattern: "SECRET", path: "link-rel-out" }));
        expect(grep.error).toBe('path "/workspace/link-rel-out" is outside workspace');
        const ls = await noLeak(runTool(tools.ls, { path: "/" }));
        expect(ls.error).toBe('path "/" is outside workspace');
      });

      it("missing paths fail like Node, naming the /workspace path", async () => {
        const err = await noLeak(fs.read.readFile("/workspace/missing.txt"));
        expect(err).toMatchObject({ code: "ENOENT", syscall: "open", path: "/workspace/missing.txt" });
        expect(err.message).toBe("ENOENT: no such file or directory, open '/workspace/missing.txt'");
        await expect(noLeak(fs.ls.stat("/workspace/nope"))).resolves.toMatchObject({ code: "ENOENT" });
        expect((await noLeak(runTool(tools.read, { path: "nope.txt" }))).error).toContain("/workspace/nope.txt");
        expect((await noLeak(runTool(tools.grep, { pattern: "x", path: "nope" }))).error).toBe(
          "Path not found: /workspace/nope",
        );
      });

      if (rootName === "system") {
        it("bash runs in /workspace and sees only /workspace", async () => {
          const out = await noLeak(runTool(tools.bash, { command: 'pwd; echo "$PWD"; ls src; cat a.txt' }));
          expect(out.text).toBe("/workspace\n/workspace\nb.ts\nc.ts\nalpha\nneedle one\n");
          const sub = await noLeak(runTool(tools.bash, { command: "cd src && pwd" }));
          expect(sub.text).toBe("/workspace/src\n");
        });
      } else {
        it("bash fails cleanly without a shell, naming no host path", async () => {
          const r = await noLeak(runTool(tools.bash, { command: "pwd" }));
          expect(r.error).toMatch(/^spawn \S+ ENOENT$/);
        });
      }
    });
  }
});
