// The pi package end to end: the real `pi` CLI (the version under test, on this Node) with `-e <this
// package>`, in JSON mode, a scratch HOME, and a scripted local model that calls each of the seven tools.
// The results are the native ones (an escape is refused, sandboxed bash cannot read outside), and what
// the model is sent otherwise matches a stock pi run of the same script.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxSupport, serverBinaryPath } from "pi-native-ops";
import { MODEL, PROVIDER, runPi, scratchPiHome, startFakeModel } from "./helpers/fake-model.js";
import { isPi1, piName } from "./helpers/pi.js";
import { removeTree } from "./helpers/tree.js";

const repo = path.resolve(import.meta.dirname, "..");
/** The real CLI, as the package's `bin` names it (pi 1.6 runs its bundle, which embeds pi's modules). */
const piDir = path.join(repo, "node_modules", piName);
const cli = path.join(piDir, JSON.parse(readFileSync(path.join(piDir, "package.json"), "utf8")).bin.pi);
/** An extension that says whether the seven tools pi registered were built by the pi that runs. */
const probe = path.join(import.meta.dirname, "helpers", "pi-probe-extension.ts");
const TOOLS = "read,bash,edit,write,grep,find,ls";

/** The script: each of the seven tools, then a final answer. */
const STEPS = [
  { tool: "read", args: { path: "a.txt" } },
  { tool: "read", args: { path: "../outside.txt" } },
  { tool: "write", args: { path: "new.txt", content: "hello world\n" } },
  { tool: "edit", args: { path: "new.txt", edits: [{ oldText: "hello", newText: "goodbye" }] } },
  { tool: "ls", args: {} },
  { tool: "find", args: { pattern: "*.txt" } },
  { tool: "grep", args: { pattern: "goodbye" } },
  { tool: "bash", args: { command: "cat new.txt; cat ../outside.txt" } },
  { text: "done" },
];
const STEP = { outsideRead: 1, find: 5, grep: 6, bash: 7 };

const dirs = [];
let model;
beforeAll(async () => {
  model = await startFakeModel((request) => {
    // Each run is one conversation: its step is the number of tool results it has sent.
    const results = request.messages.filter((m) => m.role === "tool").length;
    return STEPS[results] ?? { text: "done" };
  });
});
afterAll(async () => {
  await model?.close();
  for (const dir of dirs) removeTree(dir);
});

/** A fresh run directory: `ws/` (pi's cwd, the workspace) with a.txt, and `outside.txt` beside it. */
function runDir() {
  const dir = realpathSync(mkdtempSync(path.join(os.tmpdir(), "pno-piext-")));
  dirs.push(dir);
  mkdirSync(path.join(dir, "ws"));
  writeFileSync(path.join(dir, "ws", "a.txt"), "alpha\n");
  writeFileSync(path.join(dir, "outside.txt"), "secret\n");
  return dir;
}

/** Replaces the run's own directory (and the date) so two runs' texts compare. */
const normalize = (text, dir) =>
  text
    .split(dir)
    .join("<DIR>")
    .replace(/\d{4}-\d{2}-\d{2}/g, "<DATE>");

/**
 * Runs pi on the script with `args` (the message comes first: a boolean extension flag would take a
 * following word as its value); `tools` is --tools (null: none given), `probed` adds the probe extension. Resolves
 * to the tool results, the requests it sent, its stderr, and what the probe saw.
 */
async function run(args, { extension = true, settings, tools = TOOLS, probed = false } = {}) {
  const dir = runDir();
  if (typeof args === "function") args = args(dir);
  const env = scratchPiHome(dir, `${model.url}/${path.basename(dir)}`);
  if (settings !== undefined) {
    const file = path.join(env.PI_CODING_AGENT_DIR, "settings.json");
    writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, "utf8")), "pi-native-ops": settings }));
  }
  const argv = [
    "--mode",
    "json",
    "--no-session",
    "--provider",
    PROVIDER,
    "--model",
    MODEL,
    ...(tools === null ? [] : ["--tools", tools]),
    "go",
    ...(extension ? ["-e", repo] : []),
    ...(probed ? ["-e", probe] : []),
    ...args,
  ];
  if (probed) env.PI_PROBE_OUT = path.join(dir, "probe.json");
  const out = await runPi(process.execPath, cli, argv, { cwd: path.join(dir, "ws"), env });
  const results = out.stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line))
    .filter((event) => event.type === "tool_execution_end")
    .map((event) => ({
      tool: event.toolName,
      isError: event.isError,
      text: normalize(
        event.result.content
          .filter((c) => c.type === "text")
          .map((c) => c.text)
          .join(""),
        dir,
      ),
    }));
  const requests = model.requests
    .filter((r) => r.url.includes(`/${path.basename(dir)}/`))
    .map((r) => JSON.parse(normalize(JSON.stringify(r.body), dir)));
  const probeSaw = probed ? JSON.parse(readFileSync(env.PI_PROBE_OUT, "utf8")) : undefined;
  return { ...out, dir, results, requests, probeSaw };
}

/** What pi tells the model: the system prompt and the tools' declarations (names, texts, schemas). */
const declared = (requests) => ({ system: requests[0].messages[0], tools: requests[0].tools });

let stock;
let native;
describe(`pi -e pi-native-ops (${piName}, Node ${process.versions.node})`, () => {
  beforeAll(async () => {
    [stock, native] = await Promise.all([run([], { extension: false }), run([])]);
  }, 120_000);

  it("runs the seven tools natively, as the model sees a stock pi", () => {
    expect(native.stderr).toBe("");
    expect(native.code).toBe(0);
    expect(native.results.map((r) => r.tool)).toEqual(STEPS.filter((s) => s.tool).map((s) => s.tool));
    expect(declared(native.requests)).toEqual(declared(stock.requests));
    // The same texts, but where the native tools differ from stock pi.
    const differ = [STEP.outsideRead, STEP.find, STEP.grep];
    const same = (results) => results.filter((_, i) => !differ.includes(i));
    expect(same(native.results)).toEqual(same(stock.results));
    expect(native.results[0]).toEqual({ tool: "read", isError: false, text: "alpha\n" });
    expect(native.results[STEP.bash].text).toBe("goodbye world\nsecret\n");
  });

  it("builds the tools with the pi that runs it, never a second copy of pi's modules", async () => {
    const [plain, probed] = await Promise.all([run([], { extension: false, probed: true }), run([], { probed: true })]);
    const all = Object.fromEntries(STEPS.filter((s) => s.tool).map((s) => [s.tool, true]));
    // The probe's own check holds for stock pi's built-ins.
    expect(plain.probeSaw.hostBuilt).toEqual(all);
    expect(probed.stderr).toBe("");
    expect(probed.probeSaw.hostBuilt).toEqual(all);
  });

  it.runIf(isPi1)(
    "loaded as a JavaScript module, where pi does not map its names, refuses the copies of pi node_modules holds",
    async () => {
      const direct = await withScript([STEPS[0]], () =>
        run(["-e", path.join(repo, "js", "extension.js")], { extension: false }),
      );
      expect(direct.stderr).toContain("pi-native-ops: cannot find the module of the pi that runs this extension");
      expect(direct.stderr).toContain("resolves to a copy of pi other than the one running this extension");
      // No silent fallback to stock pi's tools either.
      expect(direct.results[0]).toMatchObject({ tool: "read", isError: true });
      expect(direct.results[0].text).toContain("cannot find the module of the pi that runs this extension");
    },
  );

  it("offers the model stock pi's tools: the default set without --tools, the named ones with it", async () => {
    const [plain, defaults, named] = await Promise.all([
      run([], { extension: false, tools: null, probed: true }),
      run([], { tools: null, probed: true }),
      run([], { tools: "read,grep,ls", probed: true }),
    ]);
    expect(plain.probeSaw.active).toEqual(["read", "bash", "edit", "write"]);
    expect(defaults.probeSaw.active).toEqual(plain.probeSaw.active);
    expect(declared(defaults.requests)).toEqual(declared(plain.requests));
    expect(named.probeSaw.active).toEqual(["read", "grep", "ls"]);
    // The named tools are the native ones (stock pi reads outside the workspace).
    expect(named.results[STEP.outsideRead]).toMatchObject({ tool: "read", isError: true });
  });

  it("refuses a path outside the workspace, which stock pi reads", () => {
    expect(stock.results[STEP.outsideRead]).toEqual({ tool: "read", isError: false, text: "secret\n" });
    expect(native.results[STEP.outsideRead]).toEqual({
      tool: "read",
      isError: true,
      text: 'path "<DIR>/outside.txt" is outside workspace',
    });
  });

  it("a refused write names the file the model gave, and a write to the workspace itself says EISDIR as stock pi does", async () => {
    const script = [
      { tool: "write", args: { path: "../outside.txt", content: "x" } },
      { tool: "write", args: { path: ".", content: "x" } },
    ];
    const [plain, refused] = await withScript(script, () => Promise.all([run([], { extension: false }), run([])]));
    expect(refused.results[0]).toEqual({
      tool: "write",
      isError: true,
      text: 'path "<DIR>/outside.txt" is outside workspace',
    });
    expect(plain.results[1]).toEqual({
      tool: "write",
      isError: true,
      text: "EISDIR: illegal operation on a directory, open '<DIR>/ws'",
    });
    expect(refused.results[1]).toEqual(plain.results[1]);
  });

  it("a refused write that would have to create directories names the file, not a directory", async () => {
    const script = [
      { tool: "write", args: { path: "../made/x.txt", content: "x" } },
      { tool: "write", args: { path: "/etc/pi-native-ops-made/x.txt", content: "x" } },
      { tool: "write", args: { path: "secret/sub/x.txt", content: "x" } },
      { tool: "write", args: { path: "open/sub/x.txt", content: "x" } },
      { tool: "write", args: { path: "a.txt/x.txt", content: "x" } },
    ];
    const deny = ["--native-deny-write", "secret/**"];
    const [plain, refused, remote] = await withScript(script, () =>
      Promise.all([
        run([], { extension: false }),
        run(deny),
        run([...deny, "--native-remote", `exec '${serverBinaryPath()}' --root .`]),
      ]),
    );
    expect(refused.results.slice(0, 3)).toEqual([
      { tool: "write", isError: true, text: 'path "<DIR>/made/x.txt" is outside workspace' },
      { tool: "write", isError: true, text: 'path "/etc/pi-native-ops-made/x.txt" is outside workspace' },
      { tool: "write", isError: true, text: 'path "<DIR>/ws/secret/sub/x.txt" is protected by policy' },
    ]);
    // Where the write is allowed, its directories are made, as stock pi makes them.
    expect(refused.results[3]).toEqual(plain.results[3]);
    expect(refused.results[3].isError).toBe(false);
    // A file where a directory should be: stock pi's mkdir error.
    expect(refused.results[4]).toEqual(plain.results[4]);
    expect(existsSync(path.join(refused.dir, "made"))).toBe(false);
    expect(existsSync(path.join(refused.dir, "ws", "secret"))).toBe(false);
    expect(readFileSync(path.join(refused.dir, "ws", "open", "sub", "x.txt"), "utf8")).toBe("x");
    // The same on a pi-native-ops-server.
    expect(remote.stderr).toBe("");
    expect(remote.results).toEqual(refused.results);
    expect(existsSync(path.join(remote.dir, "made"))).toBe(false);
  });

  it("finds and greps in process (stock pi needs fd and rg)", () => {
    expect(native.results[STEP.find]).toEqual({ tool: "find", isError: false, text: "a.txt\nnew.txt" });
    expect(native.results[STEP.grep]).toEqual({ tool: "grep", isError: false, text: "new.txt:1: goodbye world" });
  });

  const sandbox = sandboxSupport().auto !== null;
  it.runIf(sandbox)(
    "--native-sandbox: bash cannot read outside the workspace, in either mode; --native-sandbox-ro opens a path",
    async () => {
      // The mode auto does not pick, when this kernel has it too.
      const other = sandboxSupport().auto === "namespaces" ? "landlock" : "namespaces";
      const otherWorks = sandboxSupport().enforces[other] !== null;
      const [confined, opened, otherMode, fromSettings] = await Promise.all([
        run(["--native-sandbox"]),
        run((dir) => ["--native-sandbox", "--native-sandbox-ro", path.join(dir, "outside.txt")]),
        otherWorks ? run(["--native-sandbox", "--native-sandbox-mode", other]) : null,
        run([], { settings: { sandbox: true } }),
      ]);
      // pi's settings.json has the same options as the flags.
      expect(fromSettings.results).toEqual(confined.results);
      expect(confined.stderr).toBe("");
      expect(confined.results[STEP.bash]).toEqual({
        tool: "bash",
        isError: true,
        text: "goodbye world\ncat: ../outside.txt: No such file or directory\n\n\nCommand exited with code 1",
      });
      // The other tools are unchanged by the sandbox.
      const others = (results) => results.filter((_, i) => i !== STEP.bash);
      expect(others(confined.results)).toEqual(others(native.results));
      expect(opened.results[STEP.bash]).toEqual(native.results[STEP.bash]);
      if (otherMode) {
        // Landlock leaves the file visible and refuses to open it; namespaces leave it out.
        expect(others(otherMode.results)).toEqual(others(native.results));
        expect(otherMode.results[STEP.bash].text).toMatch(
          /^goodbye world\ncat: \.\.\/outside\.txt: (No such file or directory|Permission denied)\n/,
        );
      }
    },
  );

  it.runIf(sandbox)("--native-sandbox-network: the host's loopback only with it", async () => {
    const port = new URL(model.url).port;
    const probe = `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo reached || echo unreachable`;
    const script = [{ tool: "bash", args: { command: probe } }];
    const results = await withScript(script, () =>
      Promise.all([run(["--native-sandbox"]), run(["--native-sandbox", "--native-sandbox-network"])]),
    );
    expect(results.map((r) => r.results[0]?.text)).toEqual(["unreachable\n", "reached\n"]);
  });

  it("--native-deny-read, --native-deny-write and the protected defaults hold for every tool, sandboxed bash too; --native-policy-log gets each refusal", async () => {
    const script = [
      { tool: "read", args: { path: "secret.txt" } },
      { tool: "grep", args: { pattern: "TOKEN" } },
      { tool: "write", args: { path: "dist/x.js", content: "x" } },
      { tool: "write", args: { path: ".git/hooks/pre-commit", content: "#!/bin/sh\n" } },
      { tool: "bash", args: { command: "cat secret.txt; echo x > .envrc; echo exit $?" } },
    ];
    const flags = (dir) => {
      writeFileSync(path.join(dir, "ws", "secret.txt"), "TOKEN=1\n");
      mkdirSync(path.join(dir, "ws", ".git", "hooks"), { recursive: true });
      const log = path.join(dir, "policy.log");
      return [
        ...(sandbox ? ["--native-sandbox"] : []),
        "--native-deny-read",
        "secret.txt",
        "--native-deny-write",
        "dist/",
        "--native-policy-log",
        log,
      ];
    };
    const [policed, open] = await withScript(script, () =>
      Promise.all([run(flags), run((dir) => [...flags(dir).slice(0, -6), "--native-no-protect"])]),
    );
    expect(policed.stderr).toBe("");
    const refused = (i) => policed.results[i];
    expect(refused(0)).toMatchObject({ isError: true, text: 'path "<DIR>/ws/secret.txt" is protected by policy' });
    expect(refused(1).text).toBe("No matches found");
    expect(refused(2)).toMatchObject({ isError: true });
    expect(refused(2).text).toContain("is protected by policy");
    expect(refused(3).text).toContain("is protected by policy");
    if (sandbox) {
      expect(refused(4).text).toContain("cat: secret.txt: Permission denied");
      expect(refused(4).text).toContain(".envrc: Permission denied");
    }
    const events = readFileSync(path.join(policed.dir, "policy.log"), "utf8")
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    expect(events.map((e) => [e.tool, e.access, e.rule])).toEqual([
      ["read", "read", "secret.txt"],
      ["write", "write", "dist/"],
      ["write", "write", "**/.git/hooks/"],
      ...(sandbox
        ? [
            ["bash", "read", "secret.txt"],
            ["bash", "write", ".envrc"],
          ]
        : []),
    ]);
    // Without the deny rules and with --native-no-protect, the same script reads, writes and runs.
    expect(open.results.slice(0, 4).map((r) => r.isError)).toEqual([false, false, false, false]);
    expect(open.results[1].text).toContain("secret.txt:1: TOKEN=1");
  });

  it("--native-index: the same results from the warm index", async () => {
    const indexed = await run(["--native-index"]);
    expect(indexed.stderr).toBe("");
    expect(indexed.results).toEqual(native.results);
  });

  it("--native-remote: the tools run on a pi-native-ops-server the command starts", async () => {
    const server = serverBinaryPath();
    const remote = await run(["--native-remote", `exec '${server}' --root .`]);
    expect(remote.stderr).toBe("");
    expect(remote.results).toEqual(native.results);
    expect(declared(remote.requests)).toEqual(declared(stock.requests));
  });

  it.runIf(sandbox)(
    "--native-remote with --native-sandbox: bash runs in the server's --sandbox; a server without one is refused",
    async () => {
      const server = serverBinaryPath();
      const [confined, unconfined] = await Promise.all([
        run(["--native-remote", `exec '${server}' --root . --sandbox`, "--native-sandbox"]),
        run(["--native-remote", `exec '${server}' --root .`, "--native-sandbox"]),
      ]);
      expect(confined.stderr).toBe("");
      // The server's sandbox shows the workspace alone, as the local one does.
      expect(confined.results[STEP.bash]).toEqual({
        tool: "bash",
        isError: true,
        text: "goodbye world\ncat: ../outside.txt: No such file or directory\n\n\nCommand exited with code 1",
      });
      const others = (results) => results.filter((_, i) => i !== STEP.bash);
      expect(others(confined.results)).toEqual(others(native.results));
      expect(unconfined.stderr).toContain(
        "remote server runs commands unsandboxed, and connect was given requireSandbox",
      );
      expect(unconfined.results.every((r) => r.isError)).toBe(true);
    },
  );

  it("--native-remote: the model is told the server's working directory", async () => {
    const server = serverBinaryPath();
    const remote = await withScript([{ tool: "read", args: { path: "ws/a.txt" } }], () =>
      run((dir) => ["--native-remote", `exec '${server}' --root '${dir}'`]),
    );
    expect(remote.stderr).toBe("");
    expect(remote.results).toEqual([{ tool: "read", isError: false, text: "alpha\n" }]);
    const system = JSON.stringify(remote.requests[0].messages[0]);
    const told = isPi1 ? "<cwd>\\n<DIR>\\n</cwd>" : "Current working directory: <DIR>";
    expect(system).toContain(told);
    expect(system).not.toContain("<DIR>/ws");
  });

  // Eleven real pi processes at once: a loaded 2-core machine needs more than vitest's default minute.
  it("a bad flag or setting or an unreachable remote is shown at startup, and every tool refuses", async () => {
    const cases = [
      [["--native-sandbox-network"], "--native-sandbox-network needs --native-sandbox"],
      [
        ["--native-sandbox", "--native-sandbox-mode", "bogus"],
        'sandbox.mode must be one of "auto", "namespaces", "landlock", got "bogus"',
      ],
      [["--native-remote", "echo no server here >&2; exit 3"], "no server here"],
      [
        ["--native-remote", "exec true", "--native-sandbox", "--native-sandbox-mode", "landlock"],
        "--native-sandbox-mode does not apply to --native-remote: give the server's pi-native-ops-server --sandbox",
      ],
      [{ sandbox: "yes" }, 'settings "pi-native-ops".sandbox must be a boolean'],
      [{ sandbx: true }, 'settings "pi-native-ops": unknown key "sandbx"'],
      [{ sandboxNetwork: true }, "--native-sandbox-network needs --native-sandbox"],
      [["--native-sandbox-allow", "localhost"], "--native-sandbox-allow needs --native-sandbox"],
      [{ denyRead: ".env" }, 'settings "pi-native-ops".denyRead must be an array of strings'],
      [["--native-deny-read", "a{b"], 'policy.denyRead: invalid rule "a{b"'],
      [["--native-policy-log", "/nonexistent-dir/x.log"], "ENOENT"],
    ];
    const runs = await withScript([STEPS[0]], () =>
      Promise.all(cases.map(([given]) => (Array.isArray(given) ? run(given) : run([], { settings: given })))),
    );
    for (const [i, [, said]] of cases.entries()) {
      const { stderr, results } = runs[i];
      expect(stderr).toContain("pi-native-ops: ");
      expect(stderr).toContain(said);
      expect(results[0].isError).toBe(true);
      expect(results[0].text).toContain(said);
    }
  }, 300_000);

  it.runIf(isPi1 && sandbox)(
    "routes the user's ! commands through the same bash, and says what is active (RPC mode)",
    async () => {
      const bang = async (flags) => {
        const dir = runDir();
        const env = scratchPiHome(dir, model.url);
        const argv = ["--mode", "rpc", "--no-session", "--provider", PROVIDER, "--model", MODEL, "-e", repo, ...flags];
        const child = spawn(process.execPath, [cli, ...argv], { cwd: path.join(dir, "ws"), env });
        let stdout = "";
        const answer = new Promise((resolve, reject) => {
          child.stdout.setEncoding("utf8").on("data", (d) => {
            stdout += d;
            const events = stdout
              .split("\n")
              .slice(0, -1)
              .filter((line) => line.startsWith("{"))
              .map((line) => JSON.parse(line));
            const answer = events.find((e) => e.type === "response" && e.id === "bang");
            const status = events.find((e) => e.method === "setStatus" && e.statusKey === "pi-native-ops");
            if (answer) resolve({ ...answer.data, status: status?.statusText });
          });
          child.on("close", () => reject(new Error(`pi exited before answering: ${stdout}`)));
        });
        child.stdin.write(`${JSON.stringify({ id: "bang", type: "bash", command: "cat ../outside.txt" })}\n`);
        try {
          return await answer;
        } finally {
          child.kill();
        }
      };
      const [plain, sandboxed] = await Promise.all([bang([]), bang(["--native-sandbox"])]);
      expect(plain).toMatchObject({ output: "secret\n", exitCode: 0, status: "native tools" });
      expect(sandboxed).toMatchObject({
        output: "cat: ../outside.txt: No such file or directory\n",
        exitCode: 1,
        status: `native tools · sandbox (${sandboxSupport().auto})`,
      });
    },
  );
});

/** Runs `fn` with the model answering from `script` instead of STEPS (runs in it share the script). */
async function withScript(script, fn) {
  const saved = STEPS.splice(0, STEPS.length, ...script, { text: "done" });
  try {
    return await fn();
  } finally {
    STEPS.splice(0, STEPS.length, ...saved);
  }
}
