// A fake of the Vercel Sandbox API on loopback, for the real `@vercel/sandbox` SDK (its `fetch` option sends
// https://vercel.com/api/... here): create a sandbox with `ports` (POST /v3/sandboxes), a session's
// commands (POST .../cmd, waited as an NDJSON stream or detached; GET .../cmd/:id?wait=true; GET
// .../cmd/:id/logs as NDJSON; POST .../cmd/:id/kill), writeFiles (POST .../fs/write, a gzipped tar
// unpacked with the SDK's own tar-stream) and stop. Each command runs here as a local process. Each port
// given at create gets a route whose URL the SDK builds as `https://<subdomain>.vercel.run`: the subdomain
// is chosen so that URL is a TLS "edge" on 127.0.0.1 (self-signed, made with openssl) that forwards to the
// port on 127.0.0.1, answering 502 while nothing listens there, as Vercel's proxy does. Not emulated:
// sandbox names/get/list, snapshots, network policy, mkdir/readFile, interactive shells, sudo, cwd,
// timeouts, the OIDC token refresh and retries on 429.
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { constants, tmpdir } from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import tls from "node:tls";
import zlib from "node:zlib";
import tar from "tar-stream";

/** The base URL the SDK's APIClient uses (it takes no other). */
export const VERCEL_API = "https://vercel.com/api";

async function bodyOf(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** A self-signed certificate for 127.0.0.1 (the edge's). */
function selfSigned() {
  const dir = mkdtempSync(path.join(tmpdir(), "fake-vercel-cert-"));
  try {
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"].concat([
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        path.join(dir, "key.pem"),
        "-out",
        path.join(dir, "cert.pem"),
      ]),
      { stdio: "ignore" },
    );
    return { key: readFileSync(path.join(dir, "key.pem")), cert: readFileSync(path.join(dir, "cert.pem")) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The TLS edge of one route: forwards to 127.0.0.1:port, 502 while it refuses. */
async function startEdge(credentials, port) {
  const sockets = new Set();
  const edge = tls.createServer(credentials, (client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => {});
    const upstream = net.connect(port, "127.0.0.1");
    upstream.once("connect", () => {
      client.pipe(upstream);
      upstream.pipe(client);
    });
    upstream.once("error", () => {
      if (upstream.readyState === "closed" && client.writable) {
        client.end("HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
      } else client.destroy();
    });
    client.once("close", () => upstream.destroy());
  });
  await new Promise((resolve) => edge.listen(0, "127.0.0.1", resolve));
  return {
    port: edge.address().port,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => edge.close(resolve));
    },
  };
}

/**
 * Starts the API. `onUpload(path)` is told of each file written, `onStart(cmd, args, env, child)` of each
 * detached command, `onKill(signal)` of each kill. Resolves to `{ fetch, close }`: `fetch` is the option
 * for Sandbox.create, sending the SDK's requests to this server.
 */
export async function startFakeVercel({ onUpload = () => {}, onStart = () => {}, onKill = () => {} } = {}) {
  const credentials = selfSigned();
  const edges = [];
  const commands = new Map();
  let next = 1;
  const now = Date.now();
  const session = (id, status = "running") => ({
    id,
    memory: 2048,
    vcpus: 1,
    region: "iad1",
    timeout: 300_000,
    status,
    requestedAt: now,
    createdAt: now,
    updatedAt: now,
    cwd: "/vercel/sandbox",
  });
  const commandJson = (c) => ({
    id: c.id,
    name: c.cmd,
    args: c.args,
    cwd: "/vercel/sandbox",
    sessionId: c.sessionId,
    exitCode: c.exitCode,
    startedAt: now,
  });
  /** Runs a command; its output is kept as log lines, in order. */
  const run = (sessionId, { command: cmd, args = [], env = {} }) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    const c = { id: `cmd_${next++}`, cmd, args, sessionId, exitCode: null, child, logs: [], waiters: new Set() };
    const tell = () => {
      for (const waiter of c.waiters) waiter();
    };
    for (const stream of ["stdout", "stderr"]) {
      child[stream].setEncoding("utf8").on("data", (data) => {
        c.logs.push({ stream, data });
        tell();
      });
    }
    child.on("error", (err) => {
      c.logs.push({ stream: "stderr", data: `${err.message}\n` });
    });
    child.on("close", (code, signal) => {
      c.exitCode = code ?? 128 + (constants.signals[signal] ?? 0);
      tell();
    });
    commands.set(c.id, c);
    return c;
  };
  /** Writes `c`'s log lines as NDJSON from `from`, then `last(c)` if given, once the command exited. */
  const streamLogs = (res, c, last) => {
    let sent = 0;
    const flush = () => {
      while (sent < c.logs.length) res.write(`${JSON.stringify(c.logs[sent++])}\n`);
      if (c.exitCode !== null) {
        c.waiters.delete(flush);
        if (last) res.write(`${JSON.stringify(last(c))}\n`);
        res.end();
      }
    };
    c.waiters.add(flush);
    res.on("close", () => c.waiters.delete(flush));
    flush();
  };
  const json = (res, status, body) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://vercel");
    const body = await bodyOf(req);
    const parts = url.pathname.split("/").filter(Boolean);
    if (req.method === "POST" && url.pathname === "/v3/sandboxes") {
      const { ports = [] } = JSON.parse(body.toString("utf8"));
      const routes = [];
      for (const port of ports) {
        const edge = await startEdge(credentials, port);
        edges.push(edge);
        // The SDK's domain(port) is `https://${subdomain}.vercel.run`: this one lands on the edge.
        const subdomain = `127.0.0.1:${edge.port}/sb`;
        routes.push({ port, subdomain, url: `https://${subdomain}.vercel.run` });
      }
      const sandbox = {
        name: "sb-test",
        persistent: false,
        createdAt: now,
        updatedAt: now,
        currentSessionId: "sess_1",
        status: "running",
      };
      return json(res, 200, { sandbox, session: session("sess_1"), routes });
    }
    // /v2/sandboxes/sessions/:sid/...
    if (parts[0] !== "v2" || parts[1] !== "sandboxes" || parts[2] !== "sessions") return json(res, 404, {});
    const [sessionId, what, cmdId, action] = parts.slice(3);
    if (req.method === "POST" && what === "stop") return json(res, 200, { session: session(sessionId, "stopped") });
    if (req.method === "POST" && what === "fs" && cmdId === "write") {
      const extractDir = req.headers["x-cwd"] ?? "/";
      const extract = tar.extract();
      extract.on("entry", (header, stream, next) => {
        const chunks = [];
        stream.on("data", (d) => chunks.push(d));
        stream.on("end", () => {
          const file = path.resolve(extractDir, header.name);
          onUpload(file);
          rmSync(file, { force: true });
          writeFileSync(file, Buffer.concat(chunks));
          chmodSync(file, header.mode ?? 0o644);
          next();
        });
      });
      await pipeline(Readable.from([body]), zlib.createGunzip(), extract);
      return json(res, 200, {});
    }
    if (what !== "cmd") return json(res, 404, {});
    if (req.method === "POST" && cmdId === undefined) {
      const request = JSON.parse(body.toString("utf8"));
      const c = run(sessionId, request);
      if (!request.wait) {
        onStart(request.command, request.args ?? [], request.env ?? {}, c.child);
        return json(res, 200, { command: commandJson(c) });
      }
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.write(`${JSON.stringify({ command: commandJson(c) })}\n`);
      return streamLogs(res, c, (done) => ({ command: commandJson(done) }));
    }
    const c = commands.get(cmdId);
    if (!c) return json(res, 404, { error: { message: `no command ${cmdId}` } });
    if (req.method === "POST" && action === "kill") {
      const { signal } = JSON.parse(body.toString("utf8"));
      onKill(signal);
      c.child.kill(signal);
      return json(res, 200, { command: commandJson(c) });
    }
    if (req.method === "GET" && action === "logs") {
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      return streamLogs(res, c);
    }
    if (req.method === "GET" && action === undefined) {
      if (url.searchParams.get("wait") !== "true" || c.exitCode !== null)
        return json(res, 200, { command: commandJson(c) });
      const answer = () => {
        if (c.exitCode === null) return;
        c.waiters.delete(answer);
        json(res, 200, { command: commandJson(c) });
      };
      c.waiters.add(answer);
      res.on("close", () => c.waiters.delete(answer));
      return;
    }
    json(res, 404, {});
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  return {
    // The SDK passes its own undici dispatcher; this fetch is Node's and needs none.
    fetch: (input, { dispatcher, ...init } = {}) => {
      const url = String(input);
      if (!url.startsWith(`${VERCEL_API}/`)) throw new Error(`fake-vercel: not the Sandbox API: ${url}`);
      return fetch(base + url.slice(VERCEL_API.length), init);
    },
    close: async () => {
      for (const c of commands.values()) c.child.kill("SIGKILL");
      for (const edge of edges) await edge.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
