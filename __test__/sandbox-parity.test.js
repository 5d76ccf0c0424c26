// Parity with today's way to sandbox pi's shell: pi's own bash tool over its local operations, each
// command wrapped in `bwrap` by a spawnHook (the workspace bound at /workspace, the system read-only,
// no network, a clean environment), against pi's bash tool over our sandboxed operations. Ordinary
// commands must give the model the same text. Also the one-call wiring: createNativeTools({ sandbox }).
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import * as pno from "pi-native-ops";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, removeScripts, tempDirFor } from "./helpers/nobody.js";
import { pi, piName, runTool } from "./helpers/pi.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const bwrap = spawnSync("bwrap", ["--ro-bind", "/", "/", "--unshare-all", "true"]);
const bwrapWhy = bwrap.error
  ? "no bwrap on PATH (scripts/setup.sh installs bubblewrap)"
  : bwrap.status !== 0
    ? `bwrap fails here: ${bwrap.stderr}`
    : null;
const runtimeRoot = "/workspace";
afterAll(removeScripts);
const quote = (s) => `'${s.replaceAll("'", "'\\''")}'`;
// The sandbox's clean environment (createBashOperations' sandbox), spelled out for bwrap.
const cleanEnv = {
  HOME: "/tmp",
  PATH: "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin",
  TMPDIR: "/tmp",
  LANG: "C.UTF-8",
  TERM: "dumb",
};

/** bwrap's command line with the flags equivalent to our namespaces sandbox over `root`. */
function bwrapArgv(root) {
  const system = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"].flatMap((d) => ["--ro-bind-try", d, d]);
  const env = Object.entries(cleanEnv).flatMap(([k, v]) => ["--setenv", k, v]);
  const argv = [
    "bwrap",
    "--unshare-all",
    "--die-with-parent",
    ...system,
    "--bind",
    root,
    runtimeRoot,
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
    "--clearenv",
    ...env,
  ];
  return argv;
}

/** A spawnHook running each command in bwrap over `root`. */
function bwrapHook(root) {
  const argv = bwrapArgv(root);
  return (ctx) => ({
    ...ctx,
    command: `${argv.map(quote).join(" ")} --chdir ${quote(ctx.cwd)} -- /bin/bash -c ${quote(ctx.command)}`,
    // pi's local operations check that cwd exists on the host: the runtime path's host side.
    cwd: path.join(root, path.relative(runtimeRoot, ctx.cwd)),
  });
}

/** A workspace for the parity commands, a small git repository with a change, owned by `user`. */
function makeWorkspace(user) {
  const root = tempDirFor("root", "pno-sbx-parity-");
  writeFileSync(path.join(root, "a.txt"), "alpha\n");
  mkdirSync(path.join(root, "src"));
  writeFileSync(path.join(root, "src/main.c"), "int main(void) { return 0; }\n");
  const git = (...args) => spawnSync("git", args, { cwd: root, encoding: "utf8" });
  git("init", "-q", "-b", "main");
  git("-c", "user.name=t", "-c", "user.email=t@example.com", "add", "a.txt");
  git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first");
  writeFileSync(path.join(root, "a.txt"), "alpha changed\n");
  if (user === "nobody") spawnSync("chown", ["-R", "nobody:nogroup", root]);
  return root;
}

const cases = [
  ["ls", { command: "ls; ls src" }],
  ["cat", { command: "cat a.txt src/main.c" }],
  ["git status", { command: "git -c safe.directory='*' status --short --branch" }],
  ["a failing command", { command: "ls missing-file; echo after >&2; exit 2" }],
  [
    "a command writing files",
    { command: "mkdir -p out && seq 3 > out/n.txt && ls out && cat out/n.txt && wc -l < out/n.txt" },
  ],
  ["the environment", { command: "env | sort" }],
  ["what is mounted where", { command: "ls /; ls /tmp | wc -l; pwd" }],
  ["no network", { command: "(echo > /dev/tcp/127.0.0.1/9) 2>&1 | sed 's/.*: //'" }],
];

async function run(tool, params) {
  const r = await runTool(tool, params);
  // pi 1.x returns non-zero exits as isError results, pi 0.x throws them: both are "failed".
  return r.error === undefined ? { failed: r.isError ?? false, text: r.text } : { failed: true, text: r.error };
}

describe.skipIf(!support?.namespaces || bwrapWhy)(
  `pi's bash tool (${piName}): sandboxed native exec vs bwrap via spawnHook${bwrapWhy ? ` (skipped: ${bwrapWhy})` : ""}`,
  () => {
    let ours;
    let theirs;
    beforeAll(() => {
      // Two identical workspaces, so a command that writes gives each side the same starting point.
      ours = makeWorkspace("root");
      theirs = makeWorkspace("root");
    });
    afterAll(() => {
      for (const root of [ours, theirs]) rmSync(root, { recursive: true, force: true });
    });

    for (const [name, params] of cases) {
      it(`gives the same result: ${name}`, async () => {
        const native = pi.createBashTool(runtimeRoot, {
          operations: pno.createBashOperations({ sandbox: { root: ours, runtimeRoot } }),
        });
        const stock = pi.createBashTool(runtimeRoot, {
          operations: pi.createLocalBashOperations(),
          spawnHook: bwrapHook(theirs),
        });
        expect(await run(native, params)).toEqual(await run(stock, params));
      });
    }
    it("both wrote the same files into their roots", () => {
      expect(readFileSync(path.join(ours, "out/n.txt"), "utf8")).toBe("1\n2\n3\n");
      expect(readFileSync(path.join(theirs, "out/n.txt"), "utf8")).toBe("1\n2\n3\n");
    });
  },
);

// As nobody: the same commands, our sandboxed exec run by a Node dropped to nobody against bwrap run as
// nobody (pi's tool only formats what exec gives, so exec's output and exit code are compared).
describe.skipIf(!support?.namespaces || bwrapWhy || !nobody.argv)(
  `sandboxed native exec vs bwrap, as nobody${nobody.argv ? "" : ` (skipped: ${nobody.why})`}`,
  () => {
    let ours;
    let theirs;
    beforeAll(() => {
      ours = makeWorkspace("nobody");
      theirs = makeWorkspace("nobody");
    });
    afterAll(() => {
      for (const root of [ours, theirs]) rmSync(root, { recursive: true, force: true });
    });

    it("gives the same output and exit code for each command", async () => {
      const results = await execAllAs(
        "nobody",
        pno,
        { root: ours, runtimeRoot },
        cases.map(([, { command }]) => ({ command, cwd: runtimeRoot })),
      );
      for (const [i, [name, { command }]] of cases.entries()) {
        const argv = [...nobody.argv, "sh", "-c", 'exec "$@" 2>&1', "sh", ...bwrapArgv(theirs)];
        argv.push("--chdir", runtimeRoot, "--", "/bin/bash", "-c", command);
        const bwrap = spawnSync(argv[0], argv.slice(1), { encoding: "utf8", cwd: "/" });
        expect({ name, ...results[i] }).toEqual({ name, output: bwrap.stdout, exitCode: bwrap.status });
      }
      expect(results[0]).toEqual({ output: "a.txt\nsrc\nmain.c\n", exitCode: 0 });
      expect(readFileSync(path.join(ours, "out/n.txt"), "utf8")).toBe("1\n2\n3\n");
    });
  },
);

describe.skipIf(!support?.namespaces)("createNativeTools(cwd, { root, runtimeRoot, sandbox })", () => {
  let root;
  beforeAll(() => {
    root = tempDirFor("root", "pno-sbx-tools-");
    writeFileSync(path.join(root, "note.txt"), "note\n");
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("bounds the file tools and sandboxes bash over the same workspace", async () => {
    process.env.PNO_FAKE_API_KEY = "sk-fake-tools";
    const tools = pno.createNativeTools(runtimeRoot, { root, runtimeRoot, sandbox: true });
    const wrote = await run(tools.write, { path: "/workspace/made.txt", content: "by write\n" });
    expect(wrote.failed).toBe(false);
    const bash = await run(tools.bash, {
      command:
        "cat made.txt note.txt; echo key=${PNO_FAKE_API_KEY-unset}; cat /etc/shadow 2>/dev/null || echo no-shadow; echo out > from-bash.txt",
    });
    expect(bash).toEqual({ failed: false, text: "by write\nnote\nkey=unset\nno-shadow\n" });
    const read = await run(tools.read, { path: "/workspace/from-bash.txt" });
    expect(read.text).toBe("out\n");
    expect(readFileSync(path.join(root, "from-bash.txt"), "utf8")).toBe("out\n");
  });

  it("sandbox: { … } takes the tools' root and runtimeRoot, and refuses different ones", async () => {
    const tools = pno.createNativeTools(runtimeRoot, { root, runtimeRoot, sandbox: { env: { GREETING: "hi" } } });
    expect(await run(tools.bash, { command: "pwd; echo $GREETING" })).toEqual({
      failed: false,
      text: "/workspace\nhi\n",
    });
    expect(() => pno.createNativeTools(runtimeRoot, { root, runtimeRoot, sandbox: { runtimeRoot: "/w" } })).toThrow(
      /sandbox.runtimeRoot \(\/w\) differs from the tools' runtimeRoot/,
    );
    expect(() => pno.createNativeTools(runtimeRoot, { root, sandbox: "yes" })).toThrow(TypeError);
    expect(() => pno.createNativeTools(runtimeRoot, { root, bash: { sandbox: {} } })).toThrow(
      /tools' own `sandbox` option/,
    );
  });

  it("without a runtimeRoot the workspace keeps its host path, for the file tools and the shell", async () => {
    const tools = pno.createNativeTools(root, { sandbox: true });
    expect(await run(tools.bash, { command: "pwd; cat note.txt" })).toEqual({ failed: false, text: `${root}\nnote\n` });
    expect((await run(tools.read, { path: `${root}/note.txt` })).text).toBe("note\n");
  });
});
