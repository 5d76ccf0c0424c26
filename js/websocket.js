// Remote mode over a WebSocket: docs/protocol.md's byte stream, unchanged, carried by a resumable session
// (the contract: docs/websocket.md). The session turns one WebSocket after another into a single ordered
// byte stream that connect() reads and writes as it does a child's stdio: after a dropped connection it
// redials with `?session=<id>`, both sides resend what the other has not acknowledged, and calls in flight
// never see the drop. Only when no resume succeeds within the grace period does the stream fail.
//
// The `ws` package, not Node's global WebSocket: Node 20 (which this package supports) has none without a
// flag, and the browser API of Node 22's cannot set an Authorization header, send pings, or tell how many
// bytes wait in the socket (our backpressure).
import { Duplex } from "node:stream";
import WebSocket from "ws";
import { checkObject } from "./args.js";
import { checkOnPolicyEvent, checkPolicy } from "./policy-events.js";
import { connect } from "./remote.js";

/** Message types (first byte of each binary message). */
const HELLO = 0x01;
const DATA = 0x02;
const ACK = 0x03;
/** Bytes of a HELLO from the server: type, session id (16), received (u64). */
const SERVER_HELLO_BYTES = 1 + 16 + 8;
/** Bytes of an ACK: type, received (u64). */
const ACK_BYTES = 1 + 8;
/** The largest DATA payload the contract allows (1 MiB): what the socket accepts. */
const MAX_DATA_BYTES = 1024 * 1024;
/**
 * The DATA payload this side sends at most: a cut loses the message it lands in, so smaller messages lose
 * less to resend; at 256 KiB the per-message cost is still nothing.
 */
const SEND_DATA_BYTES = 256 * 1024;
/** Acknowledge at least every 256 KiB received (the contract), so the server's replay buffer drains. */
const ACK_EVERY_BYTES = 256 * 1024;
/** ...and when this long passes with unacknowledged bytes (the contract). */
const ACK_DELAY_MS = 50;
/** Unacknowledged bytes kept for a replay before writes wait (the contract's default, 8 MiB). */
const DEFAULT_REPLAY_BYTES = 8 * 1024 * 1024;
/** Bytes queued in the socket before sending more waits for it to drain: a 1 GiB writeFile is not copied whole. */
const WIRE_HIGH_WATER_BYTES = 2 * 1024 * 1024;
/** How long a dropped session is redialled (the server's default --grace, 60 s). */
const DEFAULT_GRACE_MS = 60_000;
/** How long the first dial retries a server not yet listening or a proxy answering 502/503/504. */
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** Ping interval (the contract: 15 s); three intervals of silence (45 s) count as a drop. */
const PING_INTERVAL_MS = 15_000;
const SILENT_INTERVALS = 3;
/** Redial backoff (the contract: 50 ms doubling to 1 s). */
const BACKOFF_MIN_MS = 50;
const BACKOFF_MAX_MS = 1000;
/** How long close() waits for the server's answer to the closing handshake, and redials to deliver it. */
const CLOSE_WAIT_MS = 5000;
/** The protocol the client offers and the server must select; the token's entry when sent that way. */
const SUBPROTOCOL = "pi-native-ops.v1";
const TOKEN_PROTOCOL_PREFIX = "pi-native-ops.token.";
/** Token characters the contract allows (valid in a Sec-WebSocket-Protocol entry). */
const TOKEN_CHARS = /^[A-Za-z0-9._~-]+$/;
/** Upgrade answers a proxy gives while the server behind it is not listening yet, or restarting. */
const TRANSIENT_STATUS = new Set([502, 503, 504]);

const u64 = (type, value) => {
  const b = Buffer.allocUnsafe(9);
  b[0] = type;
  b.writeBigUInt64LE(BigInt(value), 1);
  return b;
};

/** An Error that ends the session at once (no redial helps). */
function fatal(message) {
  const error = new Error(message);
  error.fatal = true;
  return error;
}

/** Why an upgrade was refused, from ws's error for a non-101 answer; fatal unless a proxy's transient answer. */
function upgradeError(err) {
  const status = Number(/Unexpected server response: (\d+)/.exec(err?.message ?? "")?.[1]);
  if (!status) return err;
  if (TRANSIENT_STATUS.has(status)) return new Error(`the server answered the upgrade with ${status}`);
  if (status === 401) return fatal("the server refused the token (401): it is missing or wrong");
  if (status === 404) return fatal("the server no longer has this session (404): its grace period passed");
  if (status === 409) return fatal("the server already has a session (409): it serves one at a time");
  return fatal(`the server refused the upgrade with ${status}`);
}

/**
 * One session: the Duplex connect() uses, and the sockets behind it. Offsets count stream bytes from the
 * session's start: `sent` taken from connect(), `acked` acknowledged by the server (the replay buffer
 * holds `acked..sent`), `wire` written to the current socket; `received` from the server.
 */
class Session {
  constructor(url, { token, graceMs, replayBytes, connectTimeoutMs, tokenIn, headers, pingIntervalMs }) {
    this.url = url;
    this.token = token;
    this.tokenIn = tokenIn;
    this.headers = headers;
    this.graceMs = graceMs;
    this.replayLimit = replayBytes;
    this.connectTimeoutMs = connectTimeoutMs;
    this.pingIntervalMs = pingIntervalMs;
    this.id = null;
    this.sent = 0;
    this.acked = 0;
    this.wire = 0;
    this.received = 0;
    this.ackedReceived = 0;
    this.replay = [];
    this.replayBytes = 0;
    this.held = []; // write callbacks waiting for the replay buffer to drain
    this.ws = null;
    this.ready = false; // HELLOs exchanged on this.ws
    this.closeSent = false;
    this.finalCallback = null;
    this.done = false;
    this.lastError = null;
    this.retryUntil = 0;
    this.backoff = BACKOFF_MIN_MS;
    this.timers = new Set();
    /** Resumes completed (a drop and a successful redial each). */
    this.resumes = 0;
    this.stream = new Duplex({
      read() {},
      write: (chunk, _encoding, callback) => this.take(chunk, callback),
      final: (callback) => this.end(callback),
      destroy: (err, callback) => {
        this.stop();
        callback(err);
      },
    });
  }

  /** Dials the first connection; resolves once the server's HELLO names the session. */
  open(signal) {
    return new Promise((resolve, reject) => {
      this.opened = { resolve, reject };
      this.retryUntil = Date.now() + this.connectTimeoutMs;
      if (signal) {
        const onAbort = () => this.giveUp(fatal("connect was aborted"));
        if (signal.aborted) return onAbort();
        signal.addEventListener("abort", onAbort, { once: true });
        const settled = () => signal.removeEventListener("abort", onAbort);
        this.opened = {
          resolve: () => {
            settled();
            resolve();
          },
          reject: (e) => {
            settled();
            reject(e);
          },
        };
      }
      this.dial();
    });
  }

  dial() {
    if (this.done) return;
    const url = new URL(this.url);
    if (this.id !== null) url.searchParams.set("session", this.id);
    const protocols = [SUBPROTOCOL];
    const headers = { ...this.headers };
    if (this.tokenIn === "protocol") protocols.push(TOKEN_PROTOCOL_PREFIX + this.token);
    else headers.authorization = `Bearer ${this.token}`;
    let ws;
    try {
      ws = new WebSocket(url, protocols, {
        headers,
        perMessageDeflate: false,
        maxPayload: 1 + MAX_DATA_BYTES,
        handshakeTimeout: Math.max(1000, Math.min(this.graceMs, 10_000)),
      });
    } catch (err) {
      return this.giveUp(fatal(`bad WebSocket URL ${JSON.stringify(this.url)}: ${err.message}`));
    }
    this.ws = ws;
    this.ready = false;
    this.progressed = false;
    this.closeSent = false;
    this.lastHeard = Date.now();
    ws.on("open", () => {
      if (ws !== this.ws) return;
      if (ws.protocol !== SUBPROTOCOL) {
        return this.giveUp(fatal(`the server selected subprotocol ${JSON.stringify(ws.protocol)}, not ${SUBPROTOCOL}`));
      }
      ws.send(u64(HELLO, this.received));
      this.ackedReceived = this.received;
      this.startPings(ws);
    });
    ws.on("message", (data, isBinary) => {
      if (ws !== this.ws) return;
      this.lastHeard = Date.now();
      try {
        if (!isBinary) throw fatal("protocol violation: a text message");
        this.message(data);
      } catch (err) {
        ws.close(err.code1008 ? 1008 : 1002);
        this.giveUp(err.fatal ? err : fatal(err.message));
      }
    });
    ws.on("pong", () => {
      this.lastHeard = Date.now();
      // A connection that lived through a ping's round trip is no redial loop.
      if (ws === this.ws && this.ready) this.progress();
    });
    ws.on("error", (err) => {
      if (ws !== this.ws) return;
      // ws's own refusal of what the server sent (a message over maxPayload: 1009; a bad frame): no redial
      // would fare better.
      if (typeof err?.code === "string" && err.code.startsWith("WS_ERR_")) {
        this.lastError = fatal(`protocol violation: ${err.message} (${err.code})`);
      } else this.lastError = upgradeError(err);
    });
    ws.on("close", (code, reason) => this.lost(ws, code, reason.toString()));
  }

  message(data) {
    const type = data[0];
    if (type === HELLO) {
      if (this.ready || data.length !== SERVER_HELLO_BYTES) throw fatal("protocol violation: a bad or second HELLO");
      const id = data.subarray(1, 17).toString("hex");
      if (this.id !== null && id !== this.id) throw fatal(`the server resumed session ${id}, not ${this.id}`);
      this.agree(Number(data.readBigUInt64LE(17)));
      // The server resends from where we were: everything after its HELLO continues the stream.
      this.wire = this.acked;
      this.ready = true;
      if (this.id === null) {
        this.id = id;
        // The grace period runs from the last progress: a session that makes none is lost when it passes.
        this.retryUntil = Date.now() + this.graceMs;
        this.opened?.resolve();
        this.opened = null;
      } else this.resumes++;
      this.lastError = null;
      this.pump();
      if (this.finalCallback !== null) this.sendClose();
      return;
    }
    if (!this.ready) throw fatal("protocol violation: a message before the server's HELLO");
    if (type === DATA) {
      const payload = data.subarray(1);
      this.received += payload.length;
      if (payload.length > 0) {
        this.progress();
        this.stream.push(payload);
      }
      this.noteReceived();
      return;
    }
    if (type === ACK) {
      if (data.length !== ACK_BYTES) throw fatal("protocol violation: a bad ACK");
      const received = Number(data.readBigUInt64LE(1));
      // An ACK behind one already taken says nothing new (as the server treats ours).
      if (received >= this.acked) this.agree(received);
      return;
    }
    throw fatal(`protocol violation: message type ${type}`);
  }

  /** The server has `received` of our bytes: drop them from the replay buffer (a broken session otherwise). */
  agree(received) {
    if (!(received >= this.acked && received <= this.sent)) {
      const err = fatal(
        `session broken: the server has ${received} bytes, the client kept ${this.acked}..${this.sent} for a replay`,
      );
      err.code1008 = true;
      throw err;
    }
    let drop = received - this.acked;
    if (drop > 0) this.progress();
    this.acked = received;
    this.replayBytes -= drop;
    while (drop > 0) {
      const head = this.replay[0];
      if (head.length <= drop) {
        this.replay.shift();
        drop -= head.length;
      } else {
        this.replay[0] = head.subarray(drop);
        drop = 0;
      }
    }
    if (this.replayBytes < this.replayLimit) for (const callback of this.held.splice(0)) callback();
  }

  /**
   * This connection moved the stream (bytes came or were acknowledged, or a ping came back): a drop of it
   * is a new drop, with its own grace period and an immediate redial. A connection dropped before any
   * progress (right after a valid HELLO) counts as a failed dial: the redials back off and the grace
   * period goes on.
   */
  progress() {
    this.progressed = true;
    this.backoff = BACKOFF_MIN_MS;
  }

  noteReceived() {
    if (this.received - this.ackedReceived >= ACK_EVERY_BYTES) return this.sendAck();
    if (this.ackTimer === undefined && this.received > this.ackedReceived) {
      this.ackTimer = this.timer(() => {
        this.ackTimer = undefined;
        this.sendAck();
      }, ACK_DELAY_MS);
    }
  }

  sendAck() {
    if (this.ackTimer !== undefined) {
      clearTimeout(this.ackTimer);
      this.timers.delete(this.ackTimer);
      this.ackTimer = undefined;
    }
    if (!this.ready || this.ws?.readyState !== WebSocket.OPEN || this.received === this.ackedReceived) return;
    this.ws.send(u64(ACK, this.received));
    this.ackedReceived = this.received;
  }

  /** Bytes from connect(): kept for a replay, sent when connected; the callback waits while the buffer is full. */
  take(chunk, callback) {
    if (this.done) return callback(new Error("the WebSocket session has ended"));
    if (chunk.length > 0) {
      this.replay.push(chunk);
      this.replayBytes += chunk.length;
      this.sent += chunk.length;
      this.pump();
    }
    if (this.replayBytes < this.replayLimit) callback();
    else this.held.push(callback);
  }

  /** Sends replay bytes not yet on this socket, in DATA messages of at most SEND_DATA_BYTES, while the socket keeps up. */
  pump() {
    const ws = this.ws;
    if (!this.ready || ws?.readyState !== WebSocket.OPEN) return;
    while (this.wire < this.sent && ws.bufferedAmount < WIRE_HIGH_WATER_BYTES) {
      const pieces = [Buffer.of(DATA)];
      let skip = this.wire - this.acked;
      let n = 0;
      for (const chunk of this.replay) {
        if (skip >= chunk.length) {
          skip -= chunk.length;
          continue;
        }
        const piece = chunk.subarray(skip, skip + SEND_DATA_BYTES - n);
        skip = 0;
        pieces.push(piece);
        n += piece.length;
        if (n === SEND_DATA_BYTES) break;
      }
      this.wire += n;
      ws.send(Buffer.concat(pieces, 1 + n), (err) => {
        if (!err && ws === this.ws) this.pump();
      });
    }
  }

  startPings(ws) {
    const interval = setInterval(() => {
      if (ws !== this.ws || ws.readyState !== WebSocket.OPEN) return clearInterval(interval);
      const silence = SILENT_INTERVALS * this.pingIntervalMs;
      if (Date.now() - this.lastHeard > silence) {
        this.lastError = new Error(`no answer for ${silence} ms`);
        return ws.terminate();
      }
      ws.ping();
    }, this.pingIntervalMs);
    interval.unref();
    this.timers.add(interval);
  }

  /** A socket closed: the end of the session after our close, else a drop to resume from. */
  lost(ws, code, reason) {
    if (ws !== this.ws) return;
    const wasLive = this.ready && this.progressed;
    this.ws = null;
    this.ready = false;
    if (this.done) return;
    // Our close answered: the session is over. A socket that died before the answer may have lost the
    // close, so it is redialled and sent again (the server would otherwise wait out its grace period).
    if (this.closeSent && code === 1000) return this.finish();
    // The server ended the session (its end of the stream).
    if (code === 1000 && this.id !== null) return this.finish();
    // A message over 1 MiB is closed 1009 by the server, or failed by ws here (its local 1006, with the
    // WS_ERR_ error above): fatal either way.
    if (code === 1008 || code === 1003 || code === 1002 || code === 1009) {
      return this.giveUp(fatal(`the server closed the session (${code}${reason ? `: ${reason}` : ""})`));
    }
    const why = this.lastError ?? new Error(`the connection closed (${code}${reason ? `: ${reason}` : ""})`);
    if (why.fatal) return this.giveUp(why);
    const now = Date.now();
    if (wasLive) {
      // A drop of a live session: the grace period starts now.
      this.retryUntil = now + this.graceMs;
      this.backoff = BACKOFF_MIN_MS;
    }
    // Closing, the redials only deliver the close: a server already gone is not waited for a whole grace.
    if (this.finalCallback !== null) {
      this.closingSince ??= now;
      this.retryUntil = Math.min(this.retryUntil, this.closingSince + CLOSE_WAIT_MS);
    }
    if (now >= this.retryUntil) {
      const what =
        this.id === null
          ? `could not connect within ${this.connectTimeoutMs} ms`
          : `no resume within ${this.graceMs} ms`;
      return this.giveUp(new Error(`WebSocket session lost: ${what} (${why.message})`));
    }
    // The first redial after a drop goes at once (a proxy's cut is the usual drop); then 50 ms doubling to 1 s.
    if (wasLive) return this.dial();
    const delay = Math.min(this.backoff, this.retryUntil - now);
    this.backoff = Math.min(this.backoff * 2, BACKOFF_MAX_MS);
    this.timer(() => this.dial(), delay);
  }

  timer(fn, ms) {
    const t = setTimeout(() => {
      this.timers.delete(t);
      fn();
    }, ms);
    this.timers.add(t);
    return t;
  }

  /** connect() ended its output (close()): a normal close, sent once every byte is on a live socket. */
  end(callback) {
    if (this.done) return callback();
    this.finalCallback = callback;
    if (this.ready) this.sendClose();
  }

  sendClose() {
    const ws = this.ws;
    this.sendAck();
    this.closeSent = true;
    ws.close(1000, "end of session");
    // A server that never answers the closing handshake does not hold close() up.
    const t = this.timer(() => ws.terminate(), CLOSE_WAIT_MS);
    t.unref();
  }

  finish() {
    if (this.done) return;
    this.done = true;
    this.stop();
    this.stream.push(null);
    this.finalCallback?.();
    this.finalCallback = null;
    this.opened?.reject(fatal("the server closed the connection before the session started"));
    this.opened = null;
  }

  /** No resume: the stream fails, and with it every pending call. */
  giveUp(err) {
    if (this.done) return;
    this.done = true;
    this.stop();
    this.ws?.terminate();
    this.ws = null;
    this.held = [];
    if (this.opened) {
      this.opened.reject(err);
      this.opened = null;
    }
    this.finalCallback?.();
    this.finalCallback = null;
    // Before connect() listens (a failed first dial), the error is open()'s rejection alone.
    this.stream.destroy(this.stream.listenerCount("error") > 0 ? err : undefined);
  }

  stop() {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.ackTimer = undefined;
    if (!this.done) {
      this.done = true;
      this.ws?.terminate();
      this.ws = null;
    }
  }
}

function checkMs(value, name, fallback) {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`${name} must be a non-negative number of milliseconds`);
  }
  return value;
}

/**
 * Connects to a `pi-native-ops-server --listen` over a WebSocket: the same object as {@link connect}.
 * `token` is the server's PI_NATIVE_OPS_TOKEN. A dropped connection is redialled and resumed for up to
 * `graceMs` (default 60 s, the server's default --grace); calls in flight go on untouched. The other
 * options are connect()'s.
 */
export async function connectWebSocket(url, options = {}) {
  if (typeof url !== "string" && !(url instanceof URL)) throw new TypeError("url must be a string or a URL");
  checkObject(options);
  const {
    token,
    graceMs,
    connectTimeoutMs,
    replayBytes,
    tokenIn = "header",
    headers = {},
    pingIntervalMs,
    ...connectOptions
  } = options;
  if (typeof token !== "string" || !TOKEN_CHARS.test(token)) {
    throw new TypeError("options.token must be the server's PI_NATIVE_OPS_TOKEN (characters A-Z a-z 0-9 . _ ~ -)");
  }
  if (tokenIn !== "header" && tokenIn !== "protocol")
    throw new TypeError('options.tokenIn must be "header" or "protocol"');
  checkObject(headers, "options.headers");
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`url is not a URL: ${JSON.stringify(String(url))}`);
  }
  // The platforms' port URLs are https://; the same address speaks WebSocket.
  if (parsed.protocol === "https:") parsed.protocol = "wss:";
  else if (parsed.protocol === "http:") parsed.protocol = "ws:";
  if (parsed.protocol !== "wss:" && parsed.protocol !== "ws:") {
    throw new TypeError(`url must be ws:, wss:, http: or https:, got ${parsed.protocol}`);
  }
  const { signal } = connectOptions;
  if (signal !== undefined && (signal === null || typeof signal.aborted !== "boolean")) {
    throw new TypeError("options.signal must be an AbortSignal");
  }
  // connect() checks them again; here before any dial.
  checkPolicy(connectOptions.policy, "options.policy");
  checkOnPolicyEvent(connectOptions.onPolicyEvent, "options.onPolicyEvent");
  const session = new Session(parsed.href, {
    token,
    tokenIn,
    headers,
    graceMs: checkMs(graceMs, "options.graceMs", DEFAULT_GRACE_MS),
    connectTimeoutMs: checkMs(connectTimeoutMs, "options.connectTimeoutMs", DEFAULT_CONNECT_TIMEOUT_MS),
    replayBytes: checkMs(replayBytes, "options.replayBytes", DEFAULT_REPLAY_BYTES) || DEFAULT_REPLAY_BYTES,
    pingIntervalMs: checkMs(pingIntervalMs, "options.pingIntervalMs", PING_INTERVAL_MS) || PING_INTERVAL_MS,
  });
  try {
    await session.open(signal);
  } catch (err) {
    throw new Error(`connectWebSocket ${parsed.origin}: ${err.message}`);
  }
  try {
    return await connect(session.stream, connectOptions);
  } catch (err) {
    session.stream.destroy();
    throw err;
  }
}
