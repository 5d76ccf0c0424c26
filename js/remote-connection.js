// The client's connection to a pi-native-ops-server (docs/protocol.md): framing of one byte stream in
// each direction, calls in flight by id, flow-control credits, the handshake and the connection's life,
// and the errors an answer becomes. It knows no operation; js/remote-operations.js builds those on it.
import { createRequire } from "node:module";
import path from "node:path";
import { deliver, eventOf } from "./policy-events.js";

const require = createRequire(import.meta.url);
/** This package's version, sent in the handshake. */
export const CLIENT_VERSION = require("../package.json").version;

/** The protocol this client speaks (docs/protocol.md, "version 1"). */
export const PROTOCOL_VERSION = 1;
/** Bytes of a frame's length prefix: two u32 (header length, payload length). */
const PREFIX_BYTES = 8;
/** The largest header the protocol allows (1 MiB): a bigger length means a broken stream. */
const MAX_HEADER_BYTES = 1024 * 1024;
/** The largest payload the protocol allows (1 GiB). */
const MAX_PAYLOAD_BYTES = 1024 * 1024 * 1024;

/** Bytes of an oversized header read to find the call it answers (its `t` and `id` come first). */
const OVERSIZED_PEEK_BYTES = 64;
/**
 * The largest answer moved into its payload (`inPayload`) the client parses: JSON.parse may take 21 bytes
 * of heap per byte (a list of empty objects), so 8 MiB costs at most about 180 MiB while it is parsed. A
 * larger one is a protocol violation (docs/protocol.md, "The client's bounds").
 */
const MAX_ANSWER_BYTES = 8 * 1024 * 1024;
/** The largest `data` payload the protocol allows (1 MiB). */
const MAX_DATA_BYTES = 1024 * 1024;
/** A stream's `data` bytes the server may have sent and not had credited (the protocol's window). */
const STREAM_WINDOW_BYTES = 4 * 1024 * 1024;
/**
 * How long a cancelled call (a timeout, an abort) waits for the server's answer before it settles on its
 * own: the local deadline holds within 200 ms whether or not the server answers.
 */
const CANCEL_GRACE_MS = 100;
/** Calls settled without the server answering their cancel at which the connection is torn down. */
const MAX_UNANSWERED_CANCELS = 3;

/** A frame header's JSON object, or null when it is none. */
function parseHeader(bytes) {
  let header;
  try {
    header = JSON.parse(bytes.toString("utf8"));
  } catch {
    return null;
  }
  return header !== null && typeof header === "object" && !Array.isArray(header) ? header : null;
}

/** Errors this module made for a closed connection (so an abort does not mask them). */
export const closedErrors = new WeakSet();
/** The error frame's fields behind each error built from one (grep's abort reads `filesSearched`). */
export const frameFields = new WeakMap();

export function closedError(reason) {
  const error = new Error(`remote connection closed: ${reason}`);
  closedErrors.add(error);
  return error;
}

/** Node's properties of a system error, in Node's order, with the type each must have. */
const NODE_ERROR_FIELDS = [
  ["errno", "number"],
  ["code", "string"],
  ["syscall", "string"],
  ["path", "string"],
  // The policy rule of a Protected refusal, after `path` as the binding sets it.
  ["rule", "string"],
];

/**
 * The Error a local call throws, from an error frame's fields: the exact message, the class the
 * core names (`name`, e.g. `RangeError`; default `Error`), and each of Node's fields the frame
 * carries, set in Node's order. The server sends exactly what the core decides a local error
 * carries (crates/core/src/error.rs, `node_fields`); nothing here knows one error from another,
 * and the message is never parsed.
 */
function remoteError(fields) {
  const f = fields !== null && typeof fields === "object" ? fields : {};
  const message = typeof f.message === "string" ? f.message : "remote error without a message";
  const error = f.name === "RangeError" ? new RangeError(message) : new Error(message);
  for (const [key, type] of NODE_ERROR_FIELDS) {
    if (typeof f[key] === type) error[key] = f[key];
  }
  frameFields.set(error, f);
  return error;
}

function isWebReadable(value) {
  return value !== null && typeof value === "object" && typeof value.getReader === "function";
}
function isWebWritable(value) {
  return value !== null && typeof value === "object" && typeof value.getWriter === "function";
}
function isNodeReadable(value) {
  return (
    value !== null && typeof value === "object" && typeof value.on === "function" && typeof value.read === "function"
  );
}
function isNodeWritable(value) {
  return (
    value !== null && typeof value === "object" && typeof value.on === "function" && typeof value.write === "function"
  );
}

/**
 * The two byte streams of a transport: a child process's stdout/stdin, `{ readable, writable }` (Node
 * or web streams), or a Node Duplex. A Duplex has boolean `readable`/`writable` properties, so stream
 * objects are told apart from those by shape.
 */
function streamsOf(transport) {
  if (transport === null || typeof transport !== "object") {
    throw new TypeError("transport must be a child process, a Duplex stream or { readable, writable }");
  }
  if (isNodeReadable(transport.stdout) && isNodeWritable(transport.stdin)) {
    return { input: transport.stdout, output: transport.stdin, child: transport };
  }
  const { readable, writable } = transport;
  if ((isNodeReadable(readable) || isWebReadable(readable)) && (isNodeWritable(writable) || isWebWritable(writable))) {
    return { input: readable, output: writable, child: null };
  }
  if (isNodeReadable(transport) && isNodeWritable(transport))
    return { input: transport, output: transport, child: null };
  throw new TypeError(
    "transport must be a child process (stdio pipes), a Duplex stream or { readable, writable } streams",
  );
}

/** One connection: framing, calls in flight by id, flow-control credits, lifecycle. */

/**
 * hello's `sandbox` (`--sandbox`): `{ mode, network }`, or null when the server runs commands unconfined
 * (a server older than the field says nothing: null too); undefined when malformed.
 */
function sandboxOf(value) {
  if (value === undefined || value === null) return null;
  if (typeof value !== "object" || Array.isArray(value)) return undefined;
  const { mode, network } = value;
  if (mode !== null && typeof mode !== "string") return undefined;
  const hosts = Array.isArray(network) && network.every((host) => typeof host === "string");
  if (typeof network !== "boolean" && !hosts) return undefined;
  return { mode, network: hosts ? [...network] : network };
}

export class Connection {
  constructor(transport) {
    const { input, output, child } = streamsOf(transport);
    this.pending = new Map();
    // Ids of calls settled on their own (a cancel the server did not answer in time), until it answers.
    this.unanswered = new Set();
    this.nextId = 1;
    this.closedReason = null;
    this.server = null;
    // Outgoing frames queued in this tick of the event loop, written as one write.
    this.queue = [];
    this.queuedBytes = 0;
    this.credits = new Map();
    this.flushScheduled = false;
    this.waitingForDrain = false;
    // Incoming bytes not yet framed.
    this.chunks = [];
    this.buffered = 0;
    this.frame = null; // { headerBytes, payloadBytes } once a prefix is read
    this.handshake = null;
    // connect()'s onPolicyEvent: receives the server's event frames.
    this.onPolicyEvent = undefined;
    this.attachInput(input, child);
    this.attachOutput(output, input);
  }

  attachInput(input, child) {
    // The end of the output, not the child's exit, ends the connection: answers written just before an
    // exit may still be in the pipe when 'exit' fires. The exit only names the reason when known by then.
    const ended = (what) => {
      if (child?.signalCode) return `server killed by ${child.signalCode}`;
      if (typeof child?.exitCode === "number") return `server exited with code ${child.exitCode}`;
      return what;
    };
    // A child that cannot start emits 'error' on itself; unheard, it would crash the process.
    child?.on("error", (err) => this.fail(`server process error: ${err.message}`));
    if (isWebReadable(input)) {
      const reader = input.getReader();
      this.cancelInput = () => reader.cancel().catch(() => {});
      (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return this.fail("the stream ended");
          this.receive(Buffer.from(value.buffer, value.byteOffset, value.byteLength));
        }
      })().catch((err) => this.fail(`stream error: ${err?.message ?? err}`));
      return;
    }
    input.on("data", (chunk) => this.receive(typeof chunk === "string" ? Buffer.from(chunk) : chunk));
    input.on("end", () => this.fail(ended("the stream ended")));
    input.on("close", () => this.fail(ended("the stream closed")));
    input.on("error", (err) => this.fail(`stream error: ${err.message}`));
  }

  attachOutput(output, input) {
    if (isWebWritable(output)) {
      const writer = output.getWriter();
      this.write = (buffer) => {
        writer.write(buffer).catch((err) => this.fail(`stream error: ${err?.message ?? err}`));
        if (writer.desiredSize !== null && writer.desiredSize <= 0) {
          this.waitingForDrain = true;
          writer.ready.then(
            () => this.drained(),
            () => {},
          );
        }
      };
      this.endOutput = () => writer.close().catch(() => {});
      return;
    }
    if (output !== input) output.on("error", (err) => this.fail(`stream error: ${err.message}`));
    this.write = (buffer) => {
      if (!output.write(buffer)) {
        this.waitingForDrain = true;
        output.once("drain", () => this.drained());
      }
    };
    this.endOutput = () =>
      new Promise((resolve) => {
        if (output.writableFinished || output.destroyed) return resolve();
        output.once("finish", resolve);
        output.once("close", resolve);
        output.once("error", resolve);
        output.end();
      });
  }

  drained() {
    this.waitingForDrain = false;
    this.flush();
  }

  /** Queues a frame for this tick's write. */
  send(header, payload) {
    if (this.closedReason !== null) return;
    const json = Buffer.from(JSON.stringify(header));
    const prefix = Buffer.allocUnsafe(PREFIX_BYTES);
    prefix.writeUInt32BE(json.length, 0);
    prefix.writeUInt32BE(payload ? payload.length : 0, 4);
    this.queue.push(prefix, json);
    this.queuedBytes += PREFIX_BYTES + json.length;
    if (payload && payload.length > 0) {
      this.queue.push(payload);
      this.queuedBytes += payload.length;
    }
    this.schedule();
  }

  schedule() {
    if (this.flushScheduled || this.waitingForDrain) return;
    this.flushScheduled = true;
    // setImmediate, not a microtask: everything queued in this turn of the event loop, across awaits, is
    // one write (sandbox APIs charge per stdin write).
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  flush() {
    if (this.closedReason !== null || this.waitingForDrain) return;
    for (const [id, bytes] of this.credits) {
      const json = Buffer.from(JSON.stringify({ t: "credit", id, bytes }));
      const prefix = Buffer.alloc(PREFIX_BYTES);
      prefix.writeUInt32BE(json.length, 0);
      this.queue.push(prefix, json);
      this.queuedBytes += PREFIX_BYTES + json.length;
    }
    this.credits.clear();
    if (this.queue.length === 0) return;
    const buffer = this.queue.length === 1 ? this.queue[0] : Buffer.concat(this.queue, this.queuedBytes);
    this.queue = [];
    this.queuedBytes = 0;
    this.write(buffer);
  }

  credit(id, bytes) {
    if (this.closedReason !== null || bytes === 0) return;
    const call = this.pending.get(id);
    if (call !== undefined) call.uncredited -= bytes;
    this.credits.set(id, (this.credits.get(id) ?? 0) + bytes);
    this.schedule();
  }

  /**
   * Cancels call `id`. Given `failure` (a function making the call's error), the call also settles on its
   * own with that error when the server has not answered within CANCEL_GRACE_MS; its late answer is then
   * dropped, and MAX_UNANSWERED_CANCELS such calls unanswered at once end the connection.
   */
  cancel(id, failure) {
    this.send({ t: "cancel", id });
    const call = this.pending.get(id);
    if (failure === undefined || call === undefined || call.grace !== undefined) return;
    call.grace = setTimeout(() => {
      if (this.pending.get(id) !== call) return;
      this.pending.delete(id);
      this.unanswered.add(id);
      call.reject(failure());
      if (this.unanswered.size >= MAX_UNANSWERED_CANCELS) {
        this.fail(`the server answered none of ${this.unanswered.size} cancelled calls`);
      }
    }, CANCEL_GRACE_MS);
  }

  /**
   * Sends a call; `onData(payload)` receives a streaming call's data frames. Returns its id and a
   * promise of the `ok` frame's `{ header, payload }` (rejected with the error frame's Error).
   */
  start(op, args, payload, onData) {
    if (this.closedReason !== null) return { id: 0, promise: Promise.reject(closedError(this.closedReason)) };
    const id = this.nextId++;
    const header = { t: "call", id, op, ...args };
    const promise = new Promise((resolve, reject) => {
      // `uncredited`: a stream's data received and not yet credited, held to the window.
      this.pending.set(id, { op, resolve, reject, onData, uncredited: 0, grace: undefined });
    });
    if (payload && payload.length > MAX_PAYLOAD_BYTES) {
      this.settle(id, null, new Error(`remote ${op}: payload of ${payload.length} bytes exceeds the protocol's 1 GiB`));
      return { id, promise };
    }
    const json = JSON.stringify(header);
    if (Buffer.byteLength(json) > MAX_HEADER_BYTES) {
      this.settle(id, null, new Error(`remote ${op}: arguments exceed the protocol's 1 MiB header`));
      return { id, promise };
    }
    this.send(header, payload);
    return { id, promise };
  }

  /** A call answered with `ok`: the header's fields. */
  async call(op, args, payload) {
    return (await this.start(op, args, payload).promise).header;
  }

  settle(id, ok, error) {
    const call = this.pending.get(id);
    if (!call) return;
    this.pending.delete(id);
    clearTimeout(call.grace);
    if (error) call.reject(error);
    else call.resolve(ok);
  }

  /**
   * Frames arriving bytes; never allocates what a length merely claims. A frame's header (at most 1 MiB)
   * is read first; its payload is held only when it is one the client asked for ({@link admit}), and
   * dropped as it arrives otherwise.
   */
  receive(chunk) {
    if (this.closedReason !== null || chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (this.frame === null) {
        if (this.buffered < PREFIX_BYTES) return;
        const prefix = this.take(PREFIX_BYTES, false);
        const headerBytes = prefix.readUInt32BE(0);
        const payloadBytes = prefix.readUInt32BE(4);
        if (headerBytes < 1 || headerBytes > MAX_PAYLOAD_BYTES || payloadBytes > MAX_PAYLOAD_BYTES) {
          return this.fail(
            `protocol violation: frame lengths out of range (header ${headerBytes}, payload ${payloadBytes})`,
          );
        }
        this.frame = { headerBytes, payloadBytes, skip: headerBytes > MAX_HEADER_BYTES, header: null, keep: true };
      }
      const frame = this.frame;
      if (frame.skip) {
        // A header over the limit (a server that does not move a large answer into its payload):
        // only its call fails. Its bytes are dropped as they come, never held.
        if (!this.skipOversized()) return;
        if (this.closedReason !== null) return;
        continue;
      }
      const { headerBytes, payloadBytes } = frame;
      if (frame.header === null) {
        if (this.buffered < headerBytes) return;
        const header = parseHeader(this.take(headerBytes, false));
        if (header === null) return this.fail("protocol violation: a frame header is not a JSON object");
        frame.header = header;
        frame.keep = this.admit(header, payloadBytes);
        if (this.closedReason !== null) return;
        // A stream's data (admitted within its window) goes on as it arrives, and a dropped payload is
        // dropped as it arrives: both count down what is left of the frame.
        if (!frame.keep || (header.t === "data" && payloadBytes > 0)) frame.left = payloadBytes;
        if (!frame.keep) {
          // An answer's stray payload is dropped; the answer itself still settles its call.
          if (header.t !== "data") this.dispatch(header, Buffer.alloc(0));
          if (this.closedReason !== null) return;
        }
      }
      if (frame.left !== undefined) {
        // Stream data goes to its consumer in the pieces it arrives in, before the rest of its frame:
        // no byte is copied to join them, and each piece is credited back as soon as it is consumed.
        const n = Math.min(frame.left, this.buffered);
        const pieces = n > 0 ? this.takePieces(n) : [];
        frame.left -= n;
        if (frame.keep) {
          for (const piece of pieces) {
            this.dispatch(frame.header, piece);
            if (this.closedReason !== null) return;
          }
        }
        if (frame.left > 0) return;
        this.frame = null;
        continue;
      }
      if (this.buffered < payloadBytes) return;
      this.frame = null;
      let header = frame.header;
      if (header.inPayload === true && payloadBytes > 0) {
        // An answer too large for a header travels as the payload (docs/protocol.md, "Frames").
        const id = header.id;
        header = parseHeader(this.take(payloadBytes, false));
        if (header !== null && header.id !== id) header = null;
        if (header === null && typeof id === "number") {
          this.settle(id, null, new Error("remote call: the server's answer is not a JSON object"));
          continue;
        }
        if (header === null) return this.fail("protocol violation: a frame header is not a JSON object");
        this.dispatch(header, Buffer.alloc(0));
        if (this.closedReason !== null) return;
        continue;
      }
      this.dispatch(header, this.take(payloadBytes, true));
      if (this.closedReason !== null) return;
    }
  }

  /**
   * Whether a frame's payload is held until whole: only one the client asked for, within its bound. A
   * readFile's answer (the file), a stream's data within the credit window, an answer moved into its
   * payload up to MAX_ANSWER_BYTES. Any other payload (a frame for an id nobody waits for, bytes on an
   * answer that carries none) is dropped as it arrives; a stream that overruns its window or an answer
   * over its bound is a protocol violation that ends the connection.
   */
  admit(header, payloadBytes) {
    if (payloadBytes === 0) return true;
    const call = typeof header.id === "number" ? this.pending.get(header.id) : undefined;
    if (call === undefined) return false;
    if (header.t === "data") {
      if (call.onData === undefined) return false;
      call.uncredited += payloadBytes;
      if (payloadBytes > MAX_DATA_BYTES) {
        this.fail(`protocol violation: a data frame of ${payloadBytes} bytes for call ${header.id}, over 1 MiB`);
        return false;
      }
      if (call.uncredited > STREAM_WINDOW_BYTES) {
        this.fail(
          `protocol violation: call ${header.id} was sent ${call.uncredited} bytes of data not credited, over the window of ${STREAM_WINDOW_BYTES}`,
        );
        return false;
      }
      return true;
    }
    if (header.inPayload === true) {
      if (payloadBytes <= MAX_ANSWER_BYTES) return true;
      this.fail(
        `protocol violation: an answer of ${payloadBytes} bytes to call ${header.id}, over the client's limit of ${MAX_ANSWER_BYTES}`,
      );
      return false;
    }
    return header.t === "ok" && call.op === "readFile";
  }

  /**
   * Drops the buffered bytes of an oversized frame; true once all of them are gone. The call it
   * answers, named by the `"id":N` its first bytes carry (the server writes `t` and `id` first), fails
   * alone; a frame that names none ends the connection, as any header that is no message.
   */
  skipOversized() {
    const frame = this.frame;
    if (frame.left === undefined) {
      if (this.buffered < OVERSIZED_PEEK_BYTES) return false;
      const start = this.take(OVERSIZED_PEEK_BYTES, false).toString("latin1");
      const id = /^\{"t":"(?:ok|error)","id":(\d{1,15})[,}]/.exec(start)?.[1];
      frame.left = frame.headerBytes + frame.payloadBytes - OVERSIZED_PEEK_BYTES;
      if (id === undefined) {
        return this.fail(`protocol violation: a frame header of ${frame.headerBytes} bytes (over the 1 MiB limit)`);
      }
      this.settle(
        Number(id),
        null,
        new Error(`remote call: the server's answer header of ${frame.headerBytes} bytes exceeds the protocol's 1 MiB`),
      );
    }
    const n = Math.min(frame.left, this.buffered);
    if (n > 0) this.takePieces(n);
    frame.left -= n;
    if (frame.left > 0) return false;
    this.frame = null;
    return true;
  }

  /** The next `n` buffered bytes; `copy` gives the payload its own memory, not a view of a bigger chunk. */
  take(n, copy) {
    if (n === 0) return Buffer.alloc(0);
    const whole = this.chunks[0].length === n;
    const pieces = this.takePieces(n);
    if (pieces.length > 1) return Buffer.concat(pieces, n);
    return copy && !whole ? Buffer.from(pieces[0]) : pieces[0];
  }

  /** The next `n` buffered bytes as views of the chunks they arrived in (none when `n` is 0). */
  takePieces(n) {
    this.buffered -= n;
    const pieces = [];
    let left = n;
    while (left > 0) {
      const chunk = this.chunks[0];
      if (chunk.length <= left) {
        pieces.push(this.chunks.shift());
        left -= chunk.length;
      } else {
        pieces.push(chunk.subarray(0, left));
        this.chunks[0] = chunk.subarray(left);
        left = 0;
      }
    }
    return pieces;
  }

  dispatch(header, payload) {
    // The server could not tell which call a frame of ours was: a call may never be answered, so the
    // connection ends rather than leave it hanging (the server closes after a protocol mismatch, too).
    if (header.t === "error" && (header.id === undefined || header.id === null)) {
      const message = header.error?.message;
      return this.fail(`server error: ${typeof message === "string" ? message : "(no message)"}`);
    }
    if (this.server === null) return this.greet(header);
    if (header.t === "event") return deliver(this.onPolicyEvent, eventOf(header));
    if (header.t === "eventsDropped") {
      const dropped = typeof header.count === "number" ? header.count : 0;
      return deliver(this.onPolicyEvent, { dropped, time: Date.now() });
    }
    // The late answer of a call that settled on its own: the server did answer its cancel.
    if ((header.t === "ok" || header.t === "error") && this.unanswered.delete(header.id)) return;
    const call = this.pending.get(header.id);
    if (!call) return; // a call already settled (cancelled, or failed client-side): nothing waits
    switch (header.t) {
      case "data":
        call.onData?.(payload);
        return;
      case "ok":
        return this.settle(header.id, { header, payload });
      case "error":
        return this.settle(header.id, null, remoteError(header.error));
      default:
        return this.fail(`protocol violation: unexpected frame type ${JSON.stringify(header.t)}`);
    }
  }

  greet(hello) {
    if (hello.t !== "hello") return this.fail(`protocol violation: expected hello, got ${JSON.stringify(hello.t)}`);
    if (hello.protocol !== PROTOCOL_VERSION) {
      const message =
        `remote protocol mismatch: client pi-native-ops ${CLIENT_VERSION} speaks protocol ${PROTOCOL_VERSION}, ` +
        `server pi-native-ops-server ${hello.server} speaks protocol ${hello.protocol}`;
      const error = new Error(message);
      this.handshake?.reject(error);
      return this.fail(message);
    }
    if (typeof hello.root !== "string" || !path.isAbsolute(hello.root)) {
      return this.fail("protocol violation: hello without an absolute root");
    }
    const sandbox = sandboxOf(hello.sandbox);
    if (sandbox === undefined) return this.fail("protocol violation: hello with a malformed sandbox");
    this.server = {
      protocol: hello.protocol,
      version: String(hello.server),
      root: hello.root,
      platform: String(hello.platform),
      sandbox,
    };
    this.handshake?.resolve();
  }

  /** Ends the connection: every pending and later call rejects with `remote connection closed: <reason>`. */
  fail(reason) {
    if (this.closedReason !== null) return this.ended;
    this.closedReason = reason;
    this.handshake?.reject(closedError(reason));
    const calls = [...this.pending.values()];
    this.pending.clear();
    this.unanswered.clear();
    for (const call of calls) {
      clearTimeout(call.grace);
      call.reject(closedError(reason));
    }
    this.queue = [];
    this.credits.clear();
    this.chunks = [];
    this.buffered = 0;
    this.cancelInput?.();
    // Ending our side tells a live server to kill its commands and exit.
    this.ended = this.endOutput();
    return this.ended;
  }
}
