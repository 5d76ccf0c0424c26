// The policy log is bounded: pi with the extension, `--native-remote` on a server that
// floods policy events and `--native-policy-log`, writes a rate-bounded log; and the writer (the same for the
// local guard's events) rotates at its size cap and counts what its rate leaves out.
import { execFileSync } from "node:child_process";
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  realpathSync,
  statSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPolicyLog, POLICY_LOG_BURST, POLICY_LOG_MAX_BYTES, POLICY_LOG_PER_SECOND } from "../js/policy-log.js";
import { MODEL, PROVIDER, runPi, scratchPiHome, startFakeModel } from "./helpers/fake-model.js";
import { piName } from "./helpers/pi.js";
import { removeTree } from "./helpers/tree.js";

const repo = path.resolve(import.meta.dirname, "..");
const cli = path.join(repo, "node_modules", piName, "dist", "cli.js");
const FLOOD = path.join(import.meta.dirname, "helpers", "event-flood-server.js");
/** Events the flooding server sends before it answers the `policy` call (so before connect() resolves). */
const EVENTS_FIRST = 5000;

const dirs = [];
const scratch = () => {
  const dir = realpathSync(mkdtempSync(path.join(os.tmpdir(), "pno-policy-log-")));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of dirs) removeTree(dir);
});

const lines = (file) =>
  readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line));

describe("the policy log's writer", () => {
  const event = (i) => ({ tool: "bash", access: "read", path: `/w/${i}`, rule: null, allowed: false, time: i });

  it("takes a burst, then its rate; what it leaves out is counted in one line before the next event", () => {
    const file = path.join(scratch(), "policy.log");
    let now = 0;
    const { onPolicyEvent: log } = createPolicyLog(file, { burst: 3, perSecond: 2, now: () => now });
    for (let i = 0; i < 10; i++) log(event(i));
    expect(lines(file).map((e) => e.path)).toEqual(["/w/0", "/w/1", "/w/2"]);
    now = 500; // one event's worth of rate
    log(event(10));
    log(event(11));
    expect(lines(file).slice(3)).toEqual([{ dropped: 7, time: 500 }, event(10)]);
  });

  it("close() writes the count of the events left out since the last line", () => {
    const file = path.join(scratch(), "policy.log");
    let now = 0;
    const { onPolicyEvent: log, close } = createPolicyLog(file, { burst: 1, perSecond: 1, now: () => now });
    for (let i = 0; i < 4; i++) log(event(i));
    now = 100;
    close();
    close();
    expect(lines(file)).toEqual([event(0), { dropped: 3, time: 100 }]);
  });

  it("rotates at its size cap: the log and its one previous file hold at most twice the cap", () => {
    const dir = scratch();
    const file = path.join(dir, "policy.log");
    const { onPolicyEvent: log } = createPolicyLog(file, { maxBytes: 1000, burst: 1e9 });
    for (let i = 0; i < 500; i++) log(event(i));
    expect(statSync(file).size).toBeLessThanOrEqual(1000);
    expect(statSync(`${file}.1`).size).toBeLessThanOrEqual(1000);
    // The newest events are in the log, the ones before them in `.1`, without a gap.
    const kept = [...lines(`${file}.1`), ...lines(file)].map((e) => e.time);
    expect(kept.at(-1)).toBe(499);
    expect(kept).toEqual(kept.map((_, i) => kept[0] + i));
  });

  it("a log that exists is appended to, and counts toward the cap", () => {
    const file = path.join(scratch(), "policy.log");
    writeFileSync(file, `${"x".repeat(950)}\n`);
    const { onPolicyEvent: log } = createPolicyLog(file, { maxBytes: 1000 });
    log(event(1));
    expect(readFileSync(`${file}.1`, "utf8")).toBe(`${"x".repeat(950)}\n`);
    expect(lines(file)).toEqual([event(1)]);
  });

  it.skipIf(process.platform === "win32")("a log that is no file (a FIFO) is written without a cap", () => {
    const fifo = path.join(scratch(), "policy.fifo");
    execFileSync("mkfifo", [fifo]);
    // Held open for reading and writing here: the writer's opens never wait, and the lines wait in the pipe.
    const fd = openSync(fifo, constants.O_RDWR);
    try {
      const { onPolicyEvent: log } = createPolicyLog(fifo, { maxBytes: 100 });
      for (let i = 0; i < 5; i++) log(event(i));
      const buffer = Buffer.alloc(64 * 1024);
      const text = buffer.subarray(0, readSync(fd, buffer)).toString();
      expect(
        text
          .trim()
          .split("\n")
          .map((line) => JSON.parse(line).time),
      ).toEqual([0, 1, 2, 3, 4]);
      expect(statSync(fifo).isFIFO()).toBe(true);
      expect(existsSync(`${fifo}.1`)).toBe(false);
    } finally {
      closeSync(fd);
    }
  });

  it("the defaults: 16 MiB, 1000 events at once, then 100 a second", () => {
    expect([POLICY_LOG_MAX_BYTES, POLICY_LOG_BURST, POLICY_LOG_PER_SECOND]).toEqual([16 * 1024 * 1024, 1000, 100]);
  });
});

describe(`pi -e pi-native-ops --native-remote on a server flooding events (${piName}, Node ${process.versions.node})`, () => {
  let model;
  beforeAll(async () => {
    model = await startFakeModel(() => ({ text: "done" }));
  });
  afterAll(() => model?.close());

  it("--native-policy-log takes the events at its rate, not the server's", async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, "ws"));
    const log = path.join(dir, "policy.log");
    const env = scratchPiHome(dir, `${model.url}/${path.basename(dir)}`);
    const argv = ["--mode", "json", "--no-session", "--provider", PROVIDER, "--model", MODEL, "go"];
    const remote = `exec '${process.execPath}' '${FLOOD}' ${EVENTS_FIRST}`;
    const started = performance.now();
    const out = await runPi(
      process.execPath,
      cli,
      [...argv, "-e", repo, "--native-remote", remote, "--native-policy-log", log],
      { cwd: path.join(dir, "ws"), env },
    );
    const seconds = (performance.now() - started) / 1000;
    expect(out.code, out.stderr).toBe(0);
    const written = lines(log);
    const events = written.filter((e) => e.dropped === undefined);
    const dropped = written.filter((e) => e.dropped !== undefined).reduce((n, e) => n + e.dropped, 0);
    console.log(`${events.length} events written, ${dropped} counted as dropped, in ${seconds.toFixed(1)} s`);
    // The server sent 5,000 before connect() resolved. An upper bound that a slower run only loosens: the
    // burst, then the rate for as long as pi ran.
    expect(events.length).toBeLessThanOrEqual(POLICY_LOG_BURST + Math.ceil(POLICY_LOG_PER_SECOND * (seconds + 1)));
    expect(events.length).toBeLessThan(EVENTS_FIRST);
    // The session's end wrote the count of the events still left out: none is unaccounted for.
    expect(events.length + dropped).toBeGreaterThanOrEqual(EVENTS_FIRST);
    expect(events[0]).toMatchObject({ tool: "bash", access: "read", path: "/workspace/.env", allowed: false });
  });
});
