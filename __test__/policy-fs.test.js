// The workspace policy (docs/policy.md) in the file tools: denied-read paths refused by read and never listed,
// found or searched; protected and denied-write paths refused by write, edit and mkdir; one event per refusal.
// Every tool is pi's own, built by createNativeTools, and the raw operations of createBoundFs are checked too.
// The fixture's file system is case-sensitive (Linux): `.ENV` is another file than `.env`, and readable.
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createBoundFs, createNativeTools } from "pi-native-ops";
import { runTool } from "./helpers/pi.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const dirs = [];
afterAll(() => dirs.forEach(removeTree));

const DENY = [".env", "*.pem", "secrets/", "vault/*", "!vault/public.txt"];

function workspace() {
  const dir = makeTree(tempDir("pno-policy-"), {
    ".env": "API_KEY=needle-secret\n",
    ".ENV": "needle upper case is another file\n",
    "app/.env": "DB=needle-secret\n",
    "app/main.js": "console.log('needle main');\n",
    "certs/server.pem": "needle pem\n",
    "secrets/deep/token.txt": "needle token\n",
    "vault/private.txt": "needle private\n",
    "vault/public.txt": "needle public\n",
    "README.md": "needle readme\n",
    "link-env": { symlink: ".env" },
    "link-secrets": { symlink: "secrets/deep" },
    ".git/hooks/": "",
    ".git/config": "[core]\n",
  });
  dirs.push(dir);
  return dir;
}

/** The tools over `dir` with the policy, and the events they report. */
function tools(dir, options = {}) {
  const events = [];
  const t = createNativeTools(dir, { policy: { denyRead: DENY }, onPolicyEvent: (e) => events.push(e), ...options });
  return { t, events };
}

const refusal = (dir, rel) => `path "${path.join(dir, rel)}" is protected by policy`;

/** What the model sees: the tool's text, or the message it threw. */
const output = async (tool, params) => {
  const r = await runTool(tool, params);
  return r.error ?? r.text;
};

describe("policy: denied reads", () => {
  it("read refuses denied files, through symlinks too, and reads the rest", async () => {
    const dir = workspace();
    const { t } = tools(dir);
    for (const [rel, rule] of [
      [".env", ".env"],
      ["app/.env", ".env"],
      ["certs/server.pem", "*.pem"],
      ["secrets/deep/token.txt", "secrets/"],
      ["vault/private.txt", "vault/*"],
      ["link-env", ".env"],
      ["link-secrets/token.txt", "secrets/"],
      ["app/../.env", ".env"],
    ]) {
      expect(await output(t.read, { path: rel }), rel).toBe(refusal(dir, path.normalize(rel)));
      const fs = createBoundFs(dir, { policy: { denyRead: DENY } });
      const err = await fs.read.readFile(path.join(dir, rel)).catch((e) => e);
      expect(err.rule, rel).toBe(rule);
      expect(Object.keys(err), rel).toEqual(["rule"]);
    }
    expect(await output(t.read, { path: ".ENV" })).toContain("upper case is another file");
    expect(await output(t.read, { path: "vault/public.txt" })).toContain("needle public");
    expect(await output(t.read, { path: "README.md" })).toContain("needle readme");
  });

  it("ls leaves denied entries out, and refuses a denied directory", async () => {
    const dir = workspace();
    const { t, events } = tools(dir);
    const root = (await output(t.ls, {})).split("\n");
    // Symlinks are listed as what they lead to: links to denied paths are left out, silently.
    expect(root).toEqual([".ENV", ".git/", "app/", "certs/", "README.md", "vault/"]);
    expect(await output(t.ls, { path: "app" })).toBe("main.js");
    expect(await output(t.ls, { path: "certs" })).toBe("(empty directory)");
    expect(await output(t.ls, { path: "vault" })).toBe("public.txt");
    // Through a link, entries are judged where the listing reached too (vault/*, not link-vault/*).
    symlinkSync("vault", path.join(dir, "link-vault"));
    expect(await output(t.ls, { path: "link-vault" })).toBe("public.txt");
    expect(events).toEqual([]);
    expect(await output(t.ls, { path: "secrets" })).toBe(refusal(dir, "secrets"));
    expect(await output(t.ls, { path: "link-secrets" })).toBe(refusal(dir, "link-secrets"));
    expect(events.map((e) => [e.tool, e.path, e.rule])).toEqual([
      ["ls", path.join(dir, "secrets"), "secrets/"],
      ["ls", path.join(dir, "link-secrets"), "secrets/"],
    ]);
  });

  it("find never lists denied entries nor enters denied directories; an explicit one is refused", async () => {
    const dir = workspace();
    const { t, events } = tools(dir);
    const found = (await output(t.find, { pattern: "**/*" })).split("\n").sort();
    expect(found).toEqual([
      ".ENV",
      "README.md",
      "app/",
      "app/main.js",
      "certs/",
      "link-env",
      "link-secrets",
      "vault/",
      "vault/public.txt",
    ]);
    expect(await output(t.find, { pattern: "*.txt" })).toBe("vault/public.txt");
    expect(events).toEqual([]);
    expect(await output(t.find, { pattern: "*", path: "secrets" })).toBe(refusal(dir, "secrets"));
    expect(events.map((e) => [e.tool, e.rule])).toEqual([["find", "secrets/"]]);
  });

  it("grep never searches denied files (a glob takes none back); an explicit one is refused", async () => {
    const dir = workspace();
    const { t, events } = tools(dir);
    const hits = (await output(t.grep, { pattern: "needle" })).split("\n").filter(Boolean).sort();
    expect(hits).toEqual([
      ".ENV:1: needle upper case is another file",
      "README.md:1: needle readme",
      "app/main.js:1: console.log('needle main');",
      "vault/public.txt:1: needle public",
    ]);
    expect(await output(t.grep, { pattern: "needle", glob: "*.pem" })).toBe("No matches found");
    expect(await output(t.grep, { pattern: "secret", glob: ".env" })).toBe("No matches found");
    expect(events).toEqual([]);
    for (const rel of [".env", "secrets", "link-env"]) {
      expect(await output(t.grep, { pattern: "needle", path: rel }), rel).toBe(refusal(dir, rel));
    }
    expect(events.map((e) => [e.tool, e.access, e.rule])).toEqual([
      ["grep", "read", ".env"],
      ["grep", "read", "secrets/"],
      ["grep", "read", ".env"],
    ]);
  });

  it("files created after the tools were made are refused too (no match is remembered)", async () => {
    const dir = workspace();
    const { t } = tools(dir);
    expect(await output(t.find, { pattern: "**/late.*" })).toBe("No files found matching pattern");
    mkdirSync(path.join(dir, "later/secrets"), { recursive: true });
    writeFileSync(path.join(dir, "later/.env"), "needle late\n");
    writeFileSync(path.join(dir, "later/late.pem"), "needle late\n");
    writeFileSync(path.join(dir, "later/late.txt"), "needle late\n");
    expect(await output(t.read, { path: "later/.env" })).toBe(refusal(dir, "later/.env"));
    // `secrets/` names a directory at any depth: later/secrets is left out too.
    expect(await output(t.ls, { path: "later" })).toBe("late.txt");
    expect(await output(t.find, { pattern: "**/late.*" })).toBe("later/late.txt");
    expect(await output(t.grep, { pattern: "late" })).toBe("later/late.txt:1: needle late");
  });

  it("the index on gives the same answers", async () => {
    const dir = workspace();
    const plain = tools(dir).t;
    const indexed = createNativeTools(dir, { policy: { denyRead: DENY }, index: true });
    await indexed.index.ready;
    for (const [tool, params] of [
      ["find", { pattern: "**/*" }],
      ["find", { pattern: "*.pem" }],
      ["grep", { pattern: "needle" }],
      ["grep", { pattern: "needle", glob: "*.pem" }],
      ["grep", { pattern: "needle", path: "vault" }],
      ["grep", { pattern: "needle", path: "secrets" }],
      ["find", { pattern: "*", path: "secrets" }],
    ]) {
      expect(await output(indexed[tool], params), JSON.stringify(params)).toBe(await output(plain[tool], params));
    }
    writeFileSync(path.join(dir, "app/late.pem"), "needle late\n");
    expect(await output(indexed.grep, { pattern: "late" })).toBe("No matches found");
    expect(await output(indexed.find, { pattern: "**/*.pem" })).toBe("No files found matching pattern");
    await indexed.index.close();
  });
});

describe("policy: protected and denied writes", () => {
  it("write and edit refuse git hooks, .git/config and .envrc by default, with no policy given", async () => {
    const dir = workspace();
    const t = createNativeTools(dir);
    for (const rel of [".git/hooks/pre-commit", ".git/config", ".envrc", "app/.envrc", ".vscode/tasks.json"]) {
      expect(await output(t.write, { path: rel, content: "x" }), rel).toBe(refusal(dir, rel));
    }
    expect(
      await output(t.edit, { path: ".git/config", edits: [{ oldText: "[core]", newText: "[core]\n\thooksPath = x" }] }),
    ).toContain(refusal(dir, ".git/config"));
    expect(existsSync(path.join(dir, ".git/hooks/pre-commit"))).toBe(false);
    expect(existsSync(path.join(dir, ".envrc"))).toBe(false);
    expect(readFileSync(path.join(dir, ".git/config"), "utf8")).toBe("[core]\n");
    // Read, yes; git's own files, yes.
    expect(await output(t.read, { path: ".git/config" })).toBe("[core]\n");
    expect(await output(t.write, { path: ".git/info/exclude", content: "x\n" })).toContain("Successfully wrote");
  });

  it("through a symlink into .git too, and a new directory in a protected one is not made", async () => {
    const dir = workspace();
    makeTree(dir, { hooks: { symlink: ".git/hooks" }, g: { symlink: ".git" } });
    const { t, events } = tools(dir);
    expect(await output(t.write, { path: "hooks/pre-commit", content: "x" })).toBe(refusal(dir, "hooks/pre-commit"));
    expect(await output(t.write, { path: "g/hooks/sub/x", content: "x" })).toBe(refusal(dir, "g/hooks/sub"));
    expect(existsSync(path.join(dir, ".git/hooks/sub"))).toBe(false);
    expect(events.map((e) => [e.tool, e.access, e.rule])).toEqual([
      ["write", "write", "**/.git/hooks/"],
      ["write", "write", "**/.git/hooks/"],
    ]);
  });

  it("protect: false lifts the defaults; denyWrite adds rules", async () => {
    const dir = workspace();
    const open = createNativeTools(dir, { policy: { protect: false, denyWrite: ["docs/**"] } });
    expect(await output(open.write, { path: ".git/hooks/pre-commit", content: "x" })).toContain("Successfully wrote");
    expect(await output(open.write, { path: ".envrc", content: "x" })).toContain("Successfully wrote");
    expect(await output(open.write, { path: "docs/a.md", content: "x" })).toBe(refusal(dir, "docs/a.md"));
    // A denied-read file may be written (that reveals nothing), not edited (that reads it first).
    const { t, events } = tools(dir);
    expect(await output(t.write, { path: ".env", content: "NEW=1\n" })).toContain("Successfully wrote");
    expect(await output(t.edit, { path: ".env", edits: [{ oldText: "NEW", newText: "OLD" }] })).toContain(
      refusal(dir, ".env"),
    );
    expect(await output(t.edit, { path: ".envrc", edits: [{ oldText: "x", newText: "y" }] })).toContain(
      refusal(dir, ".envrc"),
    );
    expect(events.map((e) => [e.tool, e.access, e.rule])).toEqual([
      ["edit", "read", ".env"],
      ["edit", "write", ".envrc"],
    ]);
  });
});

describe("policy: options and events", () => {
  it("bad rules and bad options are clear errors at creation", () => {
    const dir = workspace();
    expect(() => createBoundFs(dir, { policy: { denyRead: ["a{b"] } })).toThrow(
      /^policy\.denyRead: invalid rule "a\{b"/,
    );
    expect(() => createBoundFs(dir, { policy: { denyWrite: [""] } })).toThrow(/policy\.denyWrite: "" is not a rule/);
    expect(() => createBoundFs(dir, { policy: { denyRead: ".env" } })).toThrow(TypeError);
    expect(() => createBoundFs(dir, { policy: { denyRead: [1] } })).toThrow(TypeError);
    expect(() => createBoundFs(dir, { policy: { deny: [] } })).toThrow(/policy\.deny is not a policy option/);
    expect(() => createBoundFs(dir, { policy: { protect: "no" } })).toThrow(TypeError);
    expect(() => createBoundFs(dir, { policy: null })).toThrow(TypeError);
    expect(() => createBoundFs(dir, { onPolicyEvent: 1 })).toThrow(TypeError);
    expect(() =>
      createNativeTools(dir, { policy: { denyRead: ["a"] }, sandbox: { policy: { denyRead: ["b"] } } }),
    ).toThrow(/sandbox\.policy differs/);
    expect(() => createNativeTools(dir, { onPolicyEvent: () => {}, sandbox: { onPolicyEvent: () => {} } })).toThrow(
      /sandbox\.onPolicyEvent differs/,
    );
  });

  it("events have these keys in this order, for every tool; a callback that throws changes nothing", async () => {
    const dir = workspace();
    const { t, events } = tools(dir);
    const before = Date.now();
    await output(t.read, { path: ".env" });
    const [event] = events;
    expect(Object.keys(event)).toEqual(["tool", "access", "path", "rule", "allowed", "time"]);
    expect(event).toMatchObject({ tool: "read", access: "read", path: path.join(dir, ".env"), rule: ".env" });
    expect(event.allowed).toBe(false);
    expect(event.time).toBeGreaterThanOrEqual(before);
    expect(event.time).toBeLessThanOrEqual(Date.now());
    const throwing = createNativeTools(dir, {
      policy: { denyRead: DENY },
      onPolicyEvent: () => {
        throw new Error("callback bug");
      },
    });
    expect(await output(throwing.read, { path: ".env" })).toBe(refusal(dir, ".env"));
    expect(await output(throwing.write, { path: ".envrc", content: "x" })).toBe(refusal(dir, ".envrc"));
    expect(await output(throwing.grep, { pattern: "x", path: ".env" })).toBe(refusal(dir, ".env"));
    expect(await output(throwing.read, { path: "README.md" })).toContain("needle readme");
  });

  it("the raw operations report the tool they serve", async () => {
    const dir = workspace();
    const events = [];
    const fs = createBoundFs(dir, { policy: { denyRead: DENY }, onPolicyEvent: (e) => events.push(e) });
    const p = (rel) => path.join(dir, rel);
    const calls = [
      () => fs.read.readFile(p(".env")),
      () => fs.read.access(p(".env")),
      () => fs.read.detectImageMimeType(p(".env")),
      async () => {
        for await (const _ of fs.read.createReadStream(p(".env"))) {
        }
      },
      () => fs.edit.readFile(p(".env")),
      () => fs.edit.access(p(".env")),
      () => fs.edit.access(p(".git/config")),
      () => fs.edit.writeFile(p(".envrc"), "x"),
      () => fs.write.writeFile(p(".git/config"), "x"),
      () => fs.write.mkdir(p(".git/hooks/new")),
      () => fs.ls.exists(p("secrets")),
      () => fs.ls.stat(p(".env")),
      () => fs.ls.readdir(p("secrets")),
      () => fs.find.exists(p("secrets")),
      () => fs.find.glob("*", p("secrets"), {}),
      () => fs.grep.isDirectory(p("secrets")),
      () => fs.grep.readFile(p(".env")),
    ];
    for (const call of calls) await expect(call()).rejects.toThrow(/is protected by policy$/);
    expect(events.map((e) => `${e.tool} ${e.access} ${path.relative(dir, e.path)}`)).toEqual([
      "read read .env",
      "read read .env",
      "read read .env",
      "read read .env",
      "edit read .env",
      "edit read .env",
      "edit write .git/config",
      "edit write .envrc",
      "write write .git/config",
      "write write .git/hooks/new",
      "ls read secrets",
      "ls read .env",
      "ls read secrets",
      "find read secrets",
      "find read secrets",
      "grep read secrets",
      "grep read .env",
    ]);
  });
});
