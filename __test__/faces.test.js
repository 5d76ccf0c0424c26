// One failure, two faces: the same failing exec (missing cwd, missing shell, a shell that cannot be
// executed, a cwd no system call takes) and the same fs errors through the napi addon and through a
// `pi-native-ops-server` reached with connect() give the identical error: class, message, and Node's
// own properties in Node's order. Each text is decided once, in the core (crates/core/src/error.rs,
// exec/preflight.rs), so it is asserted here literally too: a change there shows in both faces alike,
// and the missing-cwd text is pi's own (checked against pi's createLocalBashOperations).
import { spawnSync } from "node:child_process";
import { rmSync, truncateSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createBashOperations,
  createBoundFs,
  createGrepTool,
  createNativeTools,
  createRemoteTools,
} from "pi-native-ops";
import { native } from "../js/native.js";
import { serverPath, startServer } from "./helpers/face.js";
import { pi, runTool } from "./helpers/pi.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

let base;
let dir;
let server;
beforeAll(async () => {
  base = tempDir("pno-faces-");
  dir = makeTree(path.join(base, "root"), { "a.txt": "A\n", "sub/b.txt": "B\n", "script.sh": "echo hi\n" });
  if (serverPath()) server = await startServer(dir);
});
afterAll(async () => {
  await server?.close();
  removeTree(base);
});

/** What a caller can see of an error: its class, message, and own properties in order. */
const shape = (err) => ({
  class: err?.constructor?.name,
  message: err?.message,
  props: Object.fromEntries(Object.keys(err ?? {}).map((k) => [k, err[k]])),
});
async function failure(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  throw new Error("expected a rejection");
}

const onData = () => {};

describe.skipIf(!serverPath())("the local and the remote face fail identically", () => {
  /** The failure of `exec` through both faces, asserted identical; returns its shape. */
  async function bothExec(shellPath, command, cwd) {
    const options = shellPath === undefined ? {} : { shellPath };
    const local = createBashOperations(options);
    const remote = shellPath === undefined ? server.connection.bash : server.connection.createBashOperations(options);
    const mine = shape(await failure(local.exec(command, cwd, { onData })));
    const theirs = shape(await failure(remote.exec(command, cwd, { onData })));
    expect(theirs).toEqual(mine);
    return mine;
  }

  it("exec in a missing working directory: pi's text, nothing else", async () => {
    const missing = path.join(dir, "none");
    const text = `Working directory does not exist: ${missing}\nCannot execute bash commands.`;
    expect(await bothExec(undefined, "true", missing)).toEqual({ class: "Error", message: text, props: {} });
    // pi's own words.
    const stock = await failure(pi.createLocalBashOperations().exec("true", missing, { onData }));
    expect(stock.message).toBe(text);
  });

  it("exec in a cwd no system call can take (a NUL byte) is the same refusal", async () => {
    const cwd = `${dir}\0x`;
    expect(await bothExec(undefined, "true", cwd)).toEqual({
      class: "Error",
      message: `Working directory does not exist: ${cwd}\nCannot execute bash commands.`,
      props: {},
    });
  });

  it("exec with a missing custom shell: pi's text, checked before the cwd", async () => {
    const shell = path.join(dir, "no-shell");
    expect(await bothExec(shell, "true", path.join(dir, "none"))).toEqual({
      class: "Error",
      message: `Custom shell path not found: ${shell}`,
      props: {},
    });
  });

  it("exec with a shell that cannot be executed: Node's spawn error, fields in Node's order", async () => {
    const shell = path.join(dir, "script.sh"); // not executable: EACCES
    expect(await bothExec(shell, "true", dir)).toEqual({
      class: "Error",
      message: `spawn ${shell} EACCES`,
      props: { errno: -13, code: "EACCES", syscall: `spawn ${shell}`, path: shell },
    });
  });

  it("fs errors: a system error, a refusal", async () => {
    const local = createBoundFs(dir);
    const remote = server.connection.fs;
    const missing = path.join(dir, "missing.txt");
    const mine = shape(await failure(local.read.readFile(missing)));
    expect(shape(await failure(remote.read.readFile(missing)))).toEqual(mine);
    expect(mine).toEqual({
      class: "Error",
      message: `ENOENT: no such file or directory, open '${missing}'`,
      props: { errno: -2, code: "ENOENT", syscall: "open", path: missing },
    });
    const refusal = shape(await failure(local.ls.stat("/etc/passwd")));
    expect(shape(await failure(remote.ls.stat("/etc/passwd")))).toEqual(refusal);
    expect(refusal).toEqual({ class: "Error", message: 'path "/etc/passwd" is outside workspace', props: {} });
  });

  // The policy's refusals come from the core's Root (Root::with_policy), the same through both faces.
  it("a policy refusal: the core's Protected error, its rule where path would be", async () => {
    const policy = { denyRead: ["secret.txt"], denyWrite: ["sub/"] };
    writeFileSync(path.join(dir, "secret.txt"), "s\n");
    const guarded = await startServer(dir, { connect: { policy } });
    try {
      const local = createBoundFs(dir, { policy });
      const remote = guarded.connection.fs;
      const secret = path.join(dir, "secret.txt");
      const mine = shape(await failure(local.read.readFile(secret)));
      expect(shape(await failure(remote.read.readFile(secret)))).toEqual(mine);
      expect(mine).toEqual({
        class: "Error",
        message: `path "${secret}" is protected by policy`,
        props: { rule: "secret.txt" },
      });
      const locked = path.join(dir, "sub/new.txt");
      const write = shape(await failure(local.write.writeFile(locked, "x")));
      expect(shape(await failure(remote.write.writeFile(locked, "x")))).toEqual(write);
      expect(write.props).toEqual({ rule: "sub/" });
      // A bad rule: the core's InvalidGlob text from both.
      const bad = { denyRead: ["a{b"] };
      let thrown;
      try {
        createBoundFs(dir, { policy: bad });
      } catch (err) {
        thrown = err;
      }
      const refused = await failure(startServer(dir, { connect: { policy: bad } }));
      expect(shape(refused)).toEqual(shape(thrown));
    } finally {
      await guarded.close();
    }
  });

  it("a file too large to read whole: Node's RangeError with its code alone", async () => {
    const huge = path.join(dir, "sparse-1t.bin");
    writeFileSync(huge, "");
    truncateSync(huge, 2 ** 40); // sparse: no disk used
    try {
      const mine = shape(await failure(createBoundFs(dir).read.readFile(huge)));
      expect(shape(await failure(server.connection.fs.read.readFile(huge)))).toEqual(mine);
      expect(mine).toEqual({
        class: "RangeError",
        message: `File size (${2 ** 40}) is greater than 2 GiB`,
        props: { code: "ERR_FS_FILE_TOO_LARGE" },
      });
    } finally {
      rmSync(huge);
    }
  });
});

// What the faces say of the core's decisions: grep's caps, a cancelled call's text, the sandbox's mode
// names, the policy's defaults and its events. Each is decided once in the core (crates/core/src/grep/
// text.rs, error.rs, exec/sandbox/mod.rs, policy.rs) and read by both faces from there.
describe.skipIf(!serverPath())("the core's decisions, said alike by both faces", () => {
  it("grep's caps: the cut the core applies is the one the tool's notices name, in both faces", async () => {
    const long = "x".repeat(native.GREP_MAX_LINE_CHARS + 100);
    // More output than the byte cap, and one line over the line cut.
    writeFileSync(path.join(dir, "caps.txt"), `needle ${long}\n${`needle ${"y".repeat(90)}\n`.repeat(1000)}`);
    try {
      const params = { pattern: "needle", path: "caps.txt", limit: 5000 };
      const local = await runTool(createGrepTool(dir, { fs: createBoundFs(dir) }), params);
      const remote = await runTool(createRemoteTools(dir, { connection: server.connection }).grep, params);
      expect(remote).toEqual(local);
      const first = local.text.split("\n")[0];
      // The core's cut, in UTF-16 units, then pi's marker.
      expect(first).toBe(`caps.txt:1: ${`needle ${long}`.slice(0, native.GREP_MAX_LINE_CHARS)}... [truncated]`);
      expect(local.text).toContain(`Some lines truncated to ${native.GREP_MAX_LINE_CHARS} chars.`);
      expect(local.text).toContain(`${pi.formatSize(native.GREP_MAX_OUTPUT_BYTES)} limit reached`);
      expect(Buffer.byteLength(local.details.truncation.content)).toBeLessThanOrEqual(native.GREP_MAX_OUTPUT_BYTES);
      // pi's own numbers.
      expect([native.GREP_MAX_LINE_CHARS, native.GREP_MAX_OUTPUT_BYTES]).toEqual([500, 50 * 1024]);
    } finally {
      rmSync(path.join(dir, "caps.txt"));
    }
  });

  it("a cancelled grep: the core's Operation aborted from both faces", async () => {
    const signal = AbortSignal.abort();
    const params = { pattern: "A" };
    const local = await runTool(createGrepTool(dir, { fs: createBoundFs(dir) }), params, { signal });
    const remote = await runTool(createRemoteTools(dir, { connection: server.connection }).grep, params, { signal });
    expect(remote).toEqual(local);
    expect(local).toEqual({ error: native.OPERATION_ABORTED });
    expect(native.OPERATION_ABORTED).toBe("Operation aborted");
  });

  it("the sandbox's mode names: the core's list in JS's refusal and the server's", () => {
    let thrown;
    try {
      createBashOperations({ sandbox: { root: dir, mode: "chroot" } });
    } catch (err) {
      thrown = err;
    }
    const names = native.sandboxModes();
    expect(names).toEqual(["auto", "namespaces", "landlock"]);
    expect(thrown).toBeInstanceOf(TypeError);
    expect(thrown.message).toBe(
      `createBashOperations: sandbox.mode must be one of ${names.map((m) => `"${m}"`).join(", ")}, got "chroot"`,
    );
    const run = spawnSync(serverPath(), ["--root", dir, "--sandbox=chroot"], { encoding: "utf8" });
    expect(run.status).not.toBe(0);
    expect(run.stderr).toContain(`--sandbox takes ${names.slice(0, -1).join(", ")} or ${names.at(-1)}, got "chroot"`);
  });

  it("the policy's defaults: protect unset is the core's default, in the tools' one-policy check", () => {
    const sandbox = (policy) => ({ root: dir, ...(policy === undefined ? {} : { policy }) });
    // Equal once defaulted: protect absent is protect: true; an absent list is an empty one. (The shell's
    // sandbox may still be refused on this machine: only the one-policy check is asserted.)
    const differs = /sandbox.policy differs/;
    expect(() =>
      createNativeTools(dir, {
        policy: { denyRead: [".env"] },
        sandbox: sandbox({ denyRead: [".env"], protect: true }),
      }),
    ).not.toThrow(differs);
    expect(() => createNativeTools(dir, { policy: { denyWrite: [] }, sandbox: sandbox({}) })).not.toThrow(differs);
    expect(() => createNativeTools(dir, { policy: {}, sandbox: sandbox({ protect: false }) })).toThrow(
      "sandbox.policy differs from the tools' policy; give it once",
    );
    expect(native.samePolicy({}, { protect: true })).toBe(true);
    expect(native.samePolicy({ protect: false }, undefined)).toBe(false);
  });

  it("a file tool's refusal: one event, the core's fields and clock, from both faces", async () => {
    writeFileSync(path.join(dir, "key.pem"), "k\n");
    const localEvents = [];
    const remoteEvents = [];
    const policy = { denyRead: ["*.pem"] };
    const guarded = await startServer(dir, { connect: { policy, onPolicyEvent: (e) => remoteEvents.push(e) } });
    try {
      const before = Date.now();
      const local = createBoundFs(dir, { policy, onPolicyEvent: (e) => localEvents.push(e) });
      const key = path.join(dir, "key.pem");
      await failure(local.read.readFile(key));
      await failure(guarded.connection.fs.read.readFile(key));
      const after = Date.now();
      expect(localEvents).toHaveLength(1);
      expect(remoteEvents).toHaveLength(1);
      const [mine] = localEvents;
      const [theirs] = remoteEvents;
      expect({ ...theirs, time: 0 }).toEqual({ ...mine, time: 0 });
      expect(Object.keys(mine)).toEqual(["tool", "access", "path", "rule", "allowed", "time"]);
      expect(mine).toEqual({ tool: "read", access: "read", path: key, rule: "*.pem", allowed: false, time: mine.time });
      for (const { time } of [mine, theirs]) {
        // Whole milliseconds, as every event's clock (the core's) gives them.
        expect(Number.isInteger(time) && time >= before && time <= after).toBe(true);
      }
    } finally {
      await guarded.close();
      rmSync(path.join(dir, "key.pem"));
    }
  });
});
