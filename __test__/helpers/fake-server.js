// An in-process stand-in for pi-native-ops-server speaking docs/protocol.md over a PassThrough pair,
// for the client's own behaviour (framing, coalescing, flow control, lifecycle). File operations are
// answered by a local createBoundFs() and the native grep, errors serialized field by field as the
// server does; exec is scripted by each test. The real server is tested in remote-*.test.js suites.
import { PassThrough } from "node:stream";
import { createBoundFs } from "pi-native-ops";
import { native } from "../../js/native.js";

/** A JS number option off the wire (docs/protocol.md): null is absent, non-finite ones come as strings. */
const fromWire = (n) => (n === null || n === undefined ? undefined : Number(n));

/** Encodes one frame. */
export function frame(header, payload = Buffer.alloc(0)) {
  const json = Buffer.from(typeof header === "string" ? header : JSON.stringify(header));
  const prefix = Buffer.alloc(8);
  prefix.writeUInt32BE(json.length, 0);
  prefix.writeUInt32BE(payload.length, 4);
  return Buffer.concat([prefix, json, payload]);
}

/** Splits a byte stream into frames. */
export function frameReader(onFrame) {
  let buffered = Buffer.alloc(0);
  return (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 8) {
      const h = buffered.readUInt32BE(0);
      const p = buffered.readUInt32BE(4);
      if (buffered.length < 8 + h + p) return;
      const header = JSON.parse(buffered.subarray(8, 8 + h).toString("utf8"));
      const payload = Buffer.from(buffered.subarray(8 + h, 8 + h + p));
      buffered = buffered.subarray(8 + h + p);
      onFrame(header, payload);
    }
  };
}

/** An error frame's fields from a local error, as the server puts them. */
export function wireError(err, kind = "Os") {
  const fields = { kind, message: err.message };
  for (const key of ["code", "errno", "syscall", "path", "filesSearched"])
    if (err[key] !== undefined) fields[key] = err[key];
  return fields;
}

/** The window of unacknowledged data bytes a stream may have (docs/protocol.md). */
export const WINDOW = 4 * 1024 * 1024;

/**
 * A fake server over `root` (a host directory shown as `runtimeRoot`). Options: `hello` (fields over
 * the default hello, or false to send none), `exec(call, server)` to script exec, `reverse` to answer
 * calls in reverse order once `reverse` calls are waiting, `chunk` bytes per readStream data frame,
 * `intercept(call, server)` to answer a call itself (true when it did).
 */
export function fakeServer(root, options = {}) {
  const { runtimeRoot = "/workspace", exec, chunk = 1024 * 1024 } = options;
  const toServer = new PassThrough();
  const toClient = new PassThrough();
  const fs = root ? createBoundFs(root, { runtimeRoot }) : null;
  const bound = root ? new native.BoundRoot(root, runtimeRoot) : null;
  const server = {
    transport: { readable: toClient, writable: toServer },
    /** Every write() the client made, as byte counts. */
    writes: [],
    /** Every frame the client sent. */
    frames: [],
    /** Per stream id: bytes sent, bytes credited. */
    streams: new Map(),
    ended: false,
    send(header, payload) {
      if (!toClient.writableEnded) toClient.write(frame(header, payload));
    },
    /** The server dies: its output ends. */
    die() {
      toClient.end();
    },
    ok(id, fields = {}, payload) {
      server.send({ t: "ok", id, ...fields }, payload);
    },
    error(id, err, kind) {
      server.send({ t: "error", id, error: wireError(err, kind) });
    },
  };
  const write = toServer.write.bind(toServer);
  toServer.write = (data, ...rest) => {
    server.writes.push(data.length);
    return write(data, ...rest);
  };
  toServer.on("finish", () => {
    server.ended = true;
  });
  const held = [];
  const answer = (id, work) => {
    const run = () =>
      work().then(
        ([fields, payload]) => server.ok(id, fields, payload),
        (err) => server.error(id, err, err.message.includes("outside workspace") ? "Outside" : "Os"),
      );
    if (!options.reverse) return run();
    held.push(run);
    if (held.length === options.reverse) for (const r of held.splice(0).reverse()) r();
  };

  const readStreams = new Map();
  const pump = (id) => {
    const s = readStreams.get(id);
    const stream = server.streams.get(id);
    while (s.offset < s.bytes.length && stream.sent - stream.credited < WINDOW) {
      const part = s.bytes.subarray(s.offset, s.offset + chunk);
      s.offset += part.length;
      stream.sent += part.length;
      server.send({ t: "data", id }, part);
    }
    if (s.offset >= s.bytes.length && !s.done) {
      s.done = true;
      server.ok(id);
    }
  };

  const onFrame = (h, payload) => {
    server.frames.push(h);
    if (h.t === "credit") {
      const stream = server.streams.get(h.id);
      if (stream) stream.credited += h.bytes;
      if (readStreams.has(h.id)) pump(h.id);
      server.onCredit?.(h);
      return;
    }
    if (h.t === "cancel") {
      server.onCancel?.(h);
      const s = readStreams.get(h.id);
      if (s && !s.done) {
        s.done = true;
        server.ok(h.id);
      }
      return;
    }
    if (h.t !== "call") return;
    const { id } = h;
    if (options.intercept?.(h, server)) return;
    switch (h.op) {
      case "policy":
        return server.ok(id, { pinned: null });
      case "readFile":
        return answer(id, async () => [{}, await fs.read.readFile(h.path)]);
      case "writeFile":
        return answer(id, async () => [{}, await fs.write.writeFile(h.path, payload)]);
      case "access":
        return answer(id, async () => [{}, await (h.mode === "rw" ? fs.edit : fs.read).access(h.path)]);
      case "detectImageMimeType":
        return answer(id, async () => [{ mime: await fs.read.detectImageMimeType(h.path) }]);
      case "mkdir":
        return answer(id, async () => [{}, await fs.write.mkdir(h.path)]);
      case "exists":
        return answer(id, async () => [{ exists: await fs.ls.exists(h.path) }]);
      case "findExists":
        return answer(id, async () => [{ exists: await fs.find.exists(h.path) }]);
      case "stat":
        return answer(id, async () => {
          const s = await fs.ls.stat(h.path);
          const { size, mtimeMs, mode } = s;
          return [
            {
              size,
              mtimeMs,
              mode,
              isDirectory: s.isDirectory(),
              isFile: s.isFile(),
              isSymbolicLink: s.isSymbolicLink(),
            },
          ];
        });
      case "readdir":
        return answer(id, async () => [{ names: await fs.ls.readdir(h.path) }]);
      case "glob":
        return answer(id, async () => [
          { paths: await fs.find.glob(h.pattern, h.cwd, { ignore: h.ignore, limit: fromWire(h.limit) }) },
        ]);
      case "grep": {
        const { t: _t, id: _id, op: _op, glob, storeCap, context, limit, ...rest } = h;
        const request = {
          ...rest,
          glob: glob ?? undefined,
          storeCap: storeCap ?? undefined,
          context: fromWire(context),
          limit: fromWire(limit),
        };
        return answer(id, async () => [await native.grepSearch(bound, request, new native.GrepAbort())]);
      }
      case "readStream":
        server.streams.set(id, { sent: 0, credited: 0 });
        fs.read.readFile(h.path).then(
          (bytes) => {
            readStreams.set(id, { bytes, offset: 0, done: false });
            pump(id);
          },
          (err) => server.error(id, err),
        );
        return;
      case "exec":
        server.streams.set(id, { sent: 0, credited: 0 });
        return exec?.(h, server);
      default:
        server.send({ t: "error", id, error: { kind: "Protocol", message: `unknown op ${h.op}` } });
    }
  };
  toServer.on("data", frameReader(onFrame));
  if (options.hello !== false) {
    server.send({
      t: "hello",
      protocol: 1,
      server: "0.0.0-fake",
      root: runtimeRoot,
      platform: "linux-x64",
      ...options.hello,
    });
  }
  return server;
}
