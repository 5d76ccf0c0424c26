// A fake of E2B's in-sandbox daemon (envd) on loopback, for the real `e2b` SDK in its debug mode
// (`Sandbox.create({ debug: true, sandboxUrl })`): the file upload (`POST /files`, multipart) and the
// Connect RPCs the SDK's commands use (`process.Process/Start`, a server stream of JSON envelopes, and
// `process.Process/SendSignal`), each command run here as a local process.
import { spawn } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";

/** Connect's envelope flag of the stream's last message (the end of stream, with any error). */
const END_STREAM = 0x02;

/** One Connect envelope: a flags byte, the length (big-endian), the JSON message. */
function envelope(message, flags = 0) {
  const json = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

async function bodyOf(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/**
 * Starts the daemon. `onUpload(path)` is told of each file written, `onStart(line, envs, child)` of each
 * command (the line bash runs), `onSignal` of each signal sent. Resolves to `{ url, close }`.
 */
export async function startFakeEnvd({ onUpload = () => {}, onStart = () => {}, onSignal = () => {} } = {}) {
  const processes = new Map();
  let nextPid = 1000;
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://envd");
    const body = await bodyOf(req);
    if (req.method === "POST" && url.pathname === "/files") {
      // Node's own multipart parser (undici's Request.formData).
      const form = await new Request("http://envd/files", { method: "POST", headers: req.headers, body }).formData();
      const dest = url.searchParams.get("path");
      onUpload(dest);
      rmSync(dest, { force: true });
      writeFileSync(dest, Buffer.from(await form.get("file").arrayBuffer()));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify([{ name: path.basename(dest), path: dest, type: "file" }]));
      return;
    }
    if (req.method === "POST" && url.pathname === "/process.Process/Start") {
      const request = JSON.parse(body.subarray(5, 5 + body.readUInt32BE(1)).toString("utf8"));
      const { cmd, args = [], envs = {} } = request.process;
      const child = spawn(cmd, args, { env: { ...process.env, ...envs }, stdio: ["ignore", "pipe", "pipe"] });
      const pid = nextPid++;
      processes.set(pid, child);
      onStart(args.at(-1), envs, child);
      res.writeHead(200, { "content-type": "application/connect+json" });
      res.write(envelope({ event: { start: { pid } } }));
      child.stdout.on("data", (d) => res.write(envelope({ event: { data: { stdout: d.toString("base64") } } })));
      child.stderr.on("data", (d) => res.write(envelope({ event: { data: { stderr: d.toString("base64") } } })));
      child.on("close", (code, signal) => {
        const status = signal ? `signal: ${signal}` : `exit status ${code}`;
        res.write(envelope({ event: { end: { exitCode: code ?? -1, exited: true, status } } }));
        res.end(envelope({}, END_STREAM));
      });
      return;
    }
    if (req.method === "POST" && url.pathname === "/process.Process/SendSignal") {
      const request = JSON.parse(body.toString("utf8"));
      const signal = String(request.signal).replace(/^SIGNAL_/, "");
      onSignal(signal);
      processes.get(request.process?.pid)?.kill(signal);
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => {
      for (const child of processes.values()) child.kill("SIGKILL");
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
