// The remote face under faults: a server killed mid-call, a client stream closed mid-exec, malformed
// and hostile frames written raw, a 1 GiB flood through the connection, many calls in flight at once.
// Nothing hangs (vitest's test timeout would catch it), nothing crashes, no command tree is left.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createBoundFs, createRemoteTools } from "pi-native-ops";
import { collect, isAlive, pidsIn, waitFor } from "./bash-helpers.js";
import { serverPath, startServer } from "./helpers/face.js";
import { makeTree, removeTree, tempDir } from "./helpers/tree.js";

const CLOSED = /^remote connection closed: /;
// Rust exits with 101 when the main thread panics; a panic elsewhere prints "panicked" on stderr.
const PANIC_EXIT = 101;

// Built at collection time: the truncated-frame cases below name paths in it.
const root = makeTree(tempDir("pno-faults-"), {
  "a.txt": "alpha\nneedle one\n",
  "src/b.ts": "export const needle = 2;\n",
  "src/c.ts": "nothing here\n",
  "d/e/f.md": "# needle\n",
});
afterAll(() => removeTree(root));

/** A server whose stderr is captured, to prove it never panicked. */
async function captured() {
  const server = await startServer(root, { stderr: "pipe" });
  let stderr = "";
  server.child.stderr.on("data", (d) => (stderr += d));
  return { ...server, stderr: () => stderr };
}

describe.skipIf(!serverPath())("the server dies", () => {
  it("kill -9 mid-exec rejects the exec at once, and every later call the same way", async () => {
    const { child, connection } = await startServer(root);
    const out = collect();
    const run = connection.bash.exec("echo PID=$$; sleep 60", root, {
      onData: (chunk) => {
        out.onData(chunk);
        if (pidsIn(out.text()).length === 1) child.kill("SIGKILL");
      },
    });
    const err = await run.catch((e) => e);
    expect(err).toBeInstanceOf(Error);
    expect(err.message).toMatch(CLOSED);
    await expect(connection.fs.read.readFile(path.join(root, "a.txt"))).rejects.toThrow(CLOSED);
    await expect(connection.bash.exec("true", root, { onData() {} })).rejects.toThrow(CLOSED);
    // The shell's supervisor outlives no server: the orphaned tree is killed there, as locally.
    const [pid] = pidsIn(out.text());
    expect(await waitFor(() => !isAlive(pid)), `pid ${pid} still running`).toBe(true);
  });

  it("kill -9 mid-grep rejects the grep at once", async () => {
    // 400 files of 512 KiB and a pattern with no literal to skip ahead on: seconds of search, of which
    // the kill below leaves the first few hundred milliseconds.
    const big = tempDir("pno-faults-grep-");
    try {
      const body = Buffer.alloc(512 * 1024, "abcdefghij klmnopq rstuvwxyz 0123456789\n");
      for (let i = 0; i < 400; i++) writeFileSync(path.join(big, `f${i}.txt`), body);
      const { child, connection } = await startServer(big);
      const { grep } = createRemoteTools(big, { connection });
      const search = grep.execute("t", { pattern: "(a|b|c|d|e|f|g)+[0-9]{3}[a-f]{2}" });
      // Killed once the server is busy searching (its CPU time has started to grow).
      expect(await waitFor(() => cpuTicks(child.pid) > 10), "the server never started searching").toBe(true);
      child.kill("SIGKILL");
      await expect(search).rejects.toThrow(CLOSED);
      await expect(grep.execute("t", { pattern: "x" })).rejects.toThrow(CLOSED);
    } finally {
      removeTree(big);
    }
  });
});

describe.skipIf(!serverPath())("the client's stream closes", () => {
  it("mid-exec: the server kills the command's whole tree and exits", async () => {
    const { child, connection, exited } = await startServer(root);
    const out = collect();
    const command =
      "sleep 60 & echo PID=$!; setsid sh -c 'echo PID=$$; exec sleep 60' & " +
      "sh -c 'trap \"\" TERM; echo PID=$$; sleep 60' & wait";
    const run = connection.bash.exec(command, root, {
      onData: (chunk) => {
        out.onData(chunk);
        // The network cut: the server's input ends while the command runs.
        if (pidsIn(out.text()).length === 3) child.stdin.destroy();
      },
    });
    // Its answer, if the server still sends one on its way out, is the killed tree's, never a clean exit.
    const settled = await run.then(
      (result) => result,
      (err) => err,
    );
    if (settled instanceof Error) expect(settled.message).toMatch(CLOSED);
    else expect(settled.exitCode).not.toBe(0);
    const pids = pidsIn(out.text());
    expect(pids).toHaveLength(3);
    expect(await waitFor(() => !pids.some(isAlive)), `still running: ${pids.filter(isAlive)}`).toBe(true);
    const { code, signal } = await exited;
    expect(signal).toBe(null);
    expect(code).not.toBe(PANIC_EXIT);
  });
});

// --- raw frames: u32 BE header length, u32 BE payload length, header JSON, payload (docs/protocol.md)

function frame(header, payload = Buffer.alloc(0)) {
  const h = Buffer.from(typeof header === "string" ? header : JSON.stringify(header));
  const lengths = Buffer.alloc(8);
  lengths.writeUInt32BE(h.length, 0);
  lengths.writeUInt32BE(payload.length, 4);
  return Buffer.concat([lengths, h, payload]);
}

function lengthsOnly(h, p) {
  const b = Buffer.alloc(8);
  b.writeUInt32BE(h, 0);
  b.writeUInt32BE(p, 4);
  return b;
}

/** A server spoken to raw: `send(bytes)`, `next()` resolves the next decoded frame (null at the end). */
function rawServer(dir = root) {
  const child = spawn(serverPath(), ["--root", dir], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  child.stdin.on("error", () => {}); // the server may close first: EPIPE is an expected outcome
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  let buf = Buffer.alloc(0);
  let ended = false;
  const waiting = [];
  const frames = [];
  const drain = () => {
    while (buf.length >= 8) {
      const h = buf.readUInt32BE(0);
      const p = buf.readUInt32BE(4);
      if (buf.length < 8 + h + p) break;
      frames.push({ header: JSON.parse(buf.subarray(8, 8 + h).toString()), payload: buf.subarray(8 + h, 8 + h + p) });
      buf = buf.subarray(8 + h + p);
    }
    while (waiting.length && (frames.length || ended)) waiting.shift()(frames.shift() ?? null);
  };
  child.stdout.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    drain();
  });
  child.stdout.on("end", () => {
    ended = true;
    drain();
  });
  return {
    child,
    exited,
    stderr: () => stderr,
    send: (bytes) => child.stdin.write(bytes),
    end: () => child.stdin.end(),
    next: () =>
      new Promise((resolve) => {
        waiting.push(resolve);
        drain();
      }),
    /** The next frame answering `id` (data frames included), skipping others. */
    async answer(id) {
      for (;;) {
        const f = await this.next();
        if (f === null || f.header.id === id) return f;
      }
    },
  };
}

/** The server ended on its own terms: no signal, not Rust's panic exit, nothing panicked on stderr. */
async function expectCleanExit(server) {
  const { code, signal } = await server.exited;
  expect(signal).toBe(null);
  expect(code).not.toBe(PANIC_EXIT);
  expect(server.stderr()).not.toMatch(/panicked/);
}

/** A fresh server on the same root still answers (the faults above left nothing broken behind). */
async function expectFreshServerWorks() {
  const s = rawServer();
  expect((await s.next()).header.t).toBe("hello");
  s.send(
    Buffer.concat([
      frame({ t: "hello", protocol: 1, client: "test" }),
      frame({ t: "call", id: 1, op: "readFile", path: path.join(root, "a.txt") }),
    ]),
  );
  const ok = await s.answer(1);
  expect(ok.header.t).toBe("ok");
  expect(ok.payload.toString()).toBe("alpha\nneedle one\n");
  s.end();
  await expectCleanExit(s);
}

function cpuTicks(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]); // utime + stime, fields 14 and 15 of proc(5)
  } catch {
    return 0;
  }
}

/** Bytes the process has read with read(2) and friends (rchar of proc(5)'s /proc/<pid>/io). */
function readBytes(pid) {
  return Number(/rchar:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/io`, "utf8"))?.[1] ?? 0);
}

function rssKiB(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
}

const HELLO = frame({ t: "hello", protocol: 1, client: "test" });

describe.skipIf(!serverPath())("malformed and hostile frames", () => {
  const badHeaders = [
    ["not JSON", "not json at all"],
    ["JSON that is not an object", "[1,2,3]"],
    ["an object with no type", '{"id":3}'],
    ["an unknown message type", '{"t":"launch","id":3}'],
    ["an unknown op", '{"t":"call","id":3,"op":"rmrf","path":"/"}'],
    ["a call without its arguments", '{"t":"call","id":3,"op":"readFile"}'],
    ["a path of the wrong type", '{"t":"call","id":3,"op":"readFile","path":42}'],
    ["a negative id", '{"t":"call","id":-1,"op":"exists","path":"/"}'],
    ["invalid UTF-8", Buffer.from([0x7b, 0x22, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])],
  ];
  for (const [name, header] of badHeaders) {
    it(`a bad header (${name}) gets an error answer; the connection goes on`, async () => {
      const s = rawServer();
      expect((await s.next()).header.t).toBe("hello");
      s.send(Buffer.concat([HELLO, frame(header)]));
      const reply = await s.next();
      expect(reply?.header.t).toBe("error");
      if (typeof header === "string" && header.includes('"id":3')) expect(reply.header.id).toBe(3);
      // The same connection still serves a good call.
      s.send(frame({ t: "call", id: 9, op: "exists", path: path.join(root, "a.txt") }));
      const ok = await s.answer(9);
      expect(ok.header).toMatchObject({ t: "ok", id: 9, exists: true });
      s.end();
      await expectCleanExit(s);
    });
  }

  it("a call for a path outside the root is refused as outside, with nothing done", async () => {
    const s = rawServer();
    await s.next();
    const outside = path.join(path.dirname(root), `pno-faults-never-${process.pid}`);
    s.send(Buffer.concat([HELLO, frame({ t: "call", id: 4, op: "writeFile", path: outside }, Buffer.from("PWNED"))]));
    const reply = await s.answer(4);
    expect(reply.header).toMatchObject({
      t: "error",
      id: 4,
      error: { kind: "Outside", message: `path "${outside}" is outside workspace` },
    });
    expect(() => readFileSync(outside)).toThrow();
    s.end();
    await expectCleanExit(s);
  });

  const badLengths = [
    ["a header length of 0", lengthsOnly(0, 0)],
    ["a header over 1 MiB", lengthsOnly(1024 * 1024 + 1, 0)],
    ["a payload over 1 GiB", lengthsOnly(2, 1024 ** 3 + 1)],
    ["both lengths at u32's maximum", lengthsOnly(0xffffffff, 0xffffffff)],
  ];
  for (const [name, bytes] of badLengths) {
    it(`${name}: the server closes the connection without crashing`, async () => {
      const s = rawServer();
      await s.next();
      s.send(Buffer.concat([HELLO, bytes, Buffer.from("{}")]));
      // Whatever it answers first (an error frame or nothing), the stream then ends.
      while ((await s.next()) !== null);
      await expectCleanExit(s);
      await expectFreshServerWorks();
    });
  }

  it("a frame claiming 1 GiB of payload is not allocated up front", async () => {
    const s = rawServer();
    await s.next();
    // A writeFile whose payload claims the maximum and sends 1 byte: the server must wait for bytes.
    const header = Buffer.from(
      JSON.stringify({ t: "call", id: 1, op: "writeFile", path: path.join(root, "huge.bin") }),
    );
    const bytes = Buffer.concat([HELLO, lengthsOnly(header.length, 1024 ** 3), header, Buffer.from("x")]);
    const before = readBytes(s.child.pid);
    s.send(bytes);
    // Once the server has read all we sent, it has seen the claim.
    expect(
      await waitFor(() => readBytes(s.child.pid) - before >= bytes.length),
      "the server never read the frame",
    ).toBe(true);
    expect(rssKiB(s.child.pid)).toBeLessThan(64 * 1024);
    s.end();
    while ((await s.next()) !== null);
    await expectCleanExit(s);
    expect(() => readFileSync(path.join(root, "huge.bin"))).toThrow();
  });

  for (const [name, bytes] of [
    ["inside the lengths", frame({ t: "call", id: 1, op: "exists", path: "/" }).subarray(0, 5)],
    ["inside the header", frame({ t: "call", id: 1, op: "exists", path: "/" }).subarray(0, 20)],
    [
      "inside the payload",
      frame({ t: "call", id: 1, op: "writeFile", path: path.join(root, "cut.txt") }, Buffer.alloc(1000)).subarray(
        0,
        -10,
      ),
    ],
  ]) {
    it(`input ending ${name} (a truncated frame): the server exits cleanly, writing nothing`, async () => {
      const s = rawServer();
      await s.next();
      s.send(Buffer.concat([HELLO, bytes]));
      s.end();
      while ((await s.next()) !== null);
      await expectCleanExit(s);
      expect(() => readFileSync(path.join(root, "cut.txt"))).toThrow();
    });
  }

  it("random bytes: the server answers or closes, never crashes", async () => {
    // A fixed seed, so a failure can be replayed.
    let seed = 0x9e3779b9;
    const random = () => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) / 2 ** 32;
    };
    for (let round = 0; round < 20; round++) {
      const s = rawServer();
      await s.next();
      const junk = Buffer.from(
        Array.from({ length: 64 + Math.floor(random() * 4000) }, () => Math.floor(random() * 256)),
      );
      // Small lengths first, so that some rounds reach header parsing rather than the length check.
      if (round % 2) junk.writeUInt32BE(1 + Math.floor(random() * 40), 0);
      if (round % 2) junk.writeUInt32BE(Math.floor(random() * 40), 4);
      s.send(Buffer.concat([HELLO, junk]));
      s.end();
      while ((await s.next()) !== null);
      await expectCleanExit(s);
    }
    await expectFreshServerWorks();
  });

  it("a mismatched protocol version is refused naming both versions", async () => {
    const s = rawServer();
    const hello = await s.next();
    s.send(frame({ t: "hello", protocol: 999, client: "9.9.9" }));
    const frames = [];
    for (let f = await s.next(); f !== null; f = await s.next()) frames.push(f);
    const text = JSON.stringify(frames);
    expect(text).toContain("999");
    expect(text).toContain(String(hello.header.protocol));
    await expectCleanExit(s);
  });
});

describe.skipIf(!serverPath())("load through one connection", () => {
  it("floods 1 GiB to a slow consumer with bounded client and server RSS growth", async () => {
    const { connection, child } = await captured();
    const serverBaseline = rssKiB(child.pid);
    let serverPeak = serverBaseline;
    const pause = new Int32Array(new SharedArrayBuffer(4));
    const GiB = 1024 ** 3;
    globalThis.gc?.();
    const baseline = process.memoryUsage().rss;
    let peak = baseline;
    let bytes = 0;
    let calls = 0;
    const result = await connection.bash.exec(`head -c ${GiB} /dev/zero`, root, {
      onData: (chunk) => {
        bytes += chunk.length;
        if (++calls % 64 === 0) {
          Atomics.wait(pause, 0, 0, 2); // a consumer slower than the producer
          peak = Math.max(peak, process.memoryUsage().rss);
          serverPeak = Math.max(serverPeak, rssKiB(child.pid));
        }
      },
    });
    expect(result).toEqual({ exitCode: 0 });
    expect(bytes).toBe(GiB);
    const growthMiB = (peak - baseline) / 1024 ** 2;
    const serverGrowthMiB = (serverPeak - serverBaseline) / 1024;
    console.log(
      `remote flood: ${calls} chunks, peak RSS growth: client ${growthMiB.toFixed(1)} MiB, server ${serverGrowthMiB.toFixed(1)} MiB`,
    );
    // The same bound as the local flood (bash-flood.test.js), on both ends: the 4 MiB credit window
    // plus the frame buffers, far below what an unthrottled 1 GiB would take (the server would read the
    // command's output as fast as it comes and queue it for the slow client).
    expect(growthMiB).toBeLessThan(80);
    expect(serverGrowthMiB).toBeLessThan(80);
  }, 180_000);

  it("command output arrives byte for byte: a large random stream, and pieces of many sizes with pauses", async () => {
    // The server passes a command's output on from its pipe without reading it (splice): every frame's
    // length must match the bytes that follow it, in order, or this stream comes out different.
    const dir = tempDir("pno-faults-noise-");
    try {
      const noise = randomBytes(48 * 1024 * 1024 + 4321);
      writeFileSync(path.join(dir, "noise.bin"), noise);
      const { connection, stderr } = await captured();
      const run = async (command) => {
        const hash = createHash("sha256");
        let bytes = 0;
        const result = await connection.bash.exec(command, dir, {
          onData: (chunk) => {
            hash.update(chunk);
            bytes += chunk.length;
          },
        });
        return { result, bytes, sha256: hash.digest("hex") };
      };
      const sha256 = (buffer) => createHash("sha256").update(buffer).digest("hex");
      expect(await run("cat noise.bin")).toEqual({
        result: { exitCode: 0 },
        bytes: noise.length,
        sha256: sha256(noise),
      });
      const sizes = [1, 4096, 65536, 1024 * 1024 + 1, 3];
      const pieces = await run(
        `for n in ${sizes.join(" ")}; do head -c $n noise.bin; sleep 0.01; done; head -c 5 noise.bin >&2`,
      );
      const want = Buffer.concat([...sizes, 5].map((n) => noise.subarray(0, n)));
      expect(pieces).toEqual({ result: { exitCode: 0 }, bytes: want.length, sha256: sha256(want) });
      expect(stderr()).toBe("");
    } finally {
      removeTree(dir);
    }
  });

  it("100 concurrent mixed calls all complete correctly", async () => {
    const { connection, stderr } = await captured();
    const rfs = connection.fs;
    const local = createBoundFs(root);
    const { grep, find } = createRemoteTools(root, { connection });
    const calls = [];
    for (let i = 0; i < 100; i++) {
      const p = (rel) => path.join(root, rel);
      switch (i % 10) {
        case 0:
          calls.push([rfs.read.readFile(p("a.txt")), local.read.readFile(p("a.txt"))]);
          break;
        case 1:
          calls.push([
            rfs.ls.stat(p("src/b.ts")).then((s) => [s.isFile(), s.size]),
            local.ls.stat(p("src/b.ts")).then((s) => [s.isFile(), s.size]),
          ]);
          break;
        case 2:
          calls.push([rfs.ls.exists(p(`nope-${i}`)), false]);
          break;
        case 3:
          calls.push([rfs.ls.readdir(p("src")).then((n) => n.sort()), ["b.ts", "c.ts"]]);
          break;
        case 4: {
          const name = p(`w/out-${i}.txt`);
          calls.push([
            rfs.write
              .mkdir(p("w"))
              .then(() => rfs.write.writeFile(name, `written ${i}\n`))
              .then(() => rfs.read.readFile(name))
              .then(String),
            `written ${i}\n`,
          ]);
          break;
        }
        case 5:
          calls.push([
            rfs.find.glob("*.ts", root, { ignore: [], limit: 100 }),
            local.find.glob("*.ts", root, { ignore: [], limit: 100 }),
          ]);
          break;
        case 6:
          calls.push([
            grep.execute(`g${i}`, { pattern: "needle" }).then((r) => r.content[0].text),
            "a.txt:2: needle one\nd/e/f.md:1: # needle\nsrc/b.ts:1: export const needle = 2;",
          ]);
          break;
        case 7: {
          const out = collect();
          calls.push([
            connection.bash
              .exec(`echo call ${i}; echo err ${i} >&2; exit ${i % 7}`, root, out)
              .then((r) => [r.exitCode, out.text()]),
            [i % 7, `call ${i}\nerr ${i}\n`],
          ]);
          break;
        }
        case 8:
          calls.push([
            rfs.read.readFile(p(`missing-${i}`)).catch((e) => [e.code, e.message]),
            ["ENOENT", `ENOENT: no such file or directory, open '${p(`missing-${i}`)}'`],
          ]);
          break;
        default:
          calls.push([find.execute(`f${i}`, { pattern: "**/*.md" }).then((r) => r.content[0].text), "d/e/f.md"]);
      }
    }
    const got = await Promise.all(calls.map(([remote]) => remote));
    const want = await Promise.all(calls.map(([, expected]) => expected));
    expect(got).toEqual(want);
    expect(stderr()).not.toMatch(/panicked/);
  });
});
