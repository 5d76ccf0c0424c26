// A fake of Daytona's API and of a sandbox's toolbox on loopback, for the real `@daytonaio/sdk`
// (`new Daytona({ apiUrl })`, then `daytona.get(id)`): the sandbox and its port preview links
// (`/api/...`), and the toolbox calls the adapter makes through the SDK (`/toolbox/<id>/...`: execute,
// bulk upload, sessions, a session command's state and logs), each command run here as a local process.
import { spawn, spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import http from "node:http";

async function bodyOf(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/**
 * Starts the fake of sandbox `id`. `onUpload(path)`, `onExec(command, child)` (a session command) and
 * `onDeleteSession(id)` tell what the SDK asked. Resolves to `{ url, apiUrl, close }`.
 */
export async function startFakeDaytona(
  id,
  { onUpload = () => {}, onExec = () => {}, onDeleteSession = () => {} } = {},
) {
  const sessions = new Map();
  let nextCommand = 1;
  let url;
  const json = (res, status, value) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(value));
  };
  const server = http.createServer(async (req, res) => {
    const body = await bodyOf(req);
    const { pathname } = new URL(req.url, "http://daytona");
    const parts = pathname.split("/").filter(Boolean);
    // The API: the sandbox, its port preview links.
    if (parts[0] === "api" && parts[1] === "sandbox" && parts[2] === id) {
      if (parts.length === 3) {
        return json(res, 200, {
          id,
          name: id,
          organizationId: "org",
          user: "daytona",
          state: "started",
          target: "local",
          public: false,
          labels: {},
          env: {},
          toolboxProxyUrl: `${url}/toolbox`,
        });
      }
      if (parts[3] === "ports" && parts[5] === "preview-url") {
        return json(res, 200, { sandboxId: id, url: `http://127.0.0.1:${parts[4]}`, token: "preview-token" });
      }
    }
    if (parts[0] !== "toolbox" || parts[1] !== id) return json(res, 404, { message: "not found" });
    const route = `${req.method} /${parts.slice(2).join("/")}`;
    if (route === "POST /process/execute") {
      const { command } = JSON.parse(body.toString("utf8"));
      const done = spawnSync("sh", ["-c", command], { encoding: "utf8" });
      return json(res, 200, { exitCode: done.status, result: done.stdout });
    }
    if (route === "POST /files/bulk-upload") {
      // Node's own multipart parser (undici's Request.formData).
      const form = await new Request("http://daytona/", { method: "POST", headers: req.headers, body }).formData();
      for (let i = 0; form.has(`files[${i}].path`); i++) {
        const dest = form.get(`files[${i}].path`);
        onUpload(dest);
        rmSync(dest, { force: true });
        writeFileSync(dest, Buffer.from(await form.get(`files[${i}].file`).arrayBuffer()));
      }
      return json(res, 200, {});
    }
    if (route === "POST /process/session") {
      sessions.set(JSON.parse(body.toString("utf8")).sessionId, new Map());
      return json(res, 200, {});
    }
    const session = sessions.get(parts[4]);
    if (parts[2] === "process" && parts[3] === "session" && session !== undefined) {
      if (req.method === "POST" && parts[5] === "exec") {
        const { command } = JSON.parse(body.toString("utf8"));
        const child = spawn("sh", ["-c", command], { stdio: ["ignore", "pipe", "pipe"] });
        const record = { command, child, stdout: "", stderr: "", exitCode: null };
        child.stdout.on("data", (d) => {
          record.stdout += d;
        });
        child.stderr.on("data", (d) => {
          record.stderr += d;
        });
        child.on("close", (code) => {
          record.exitCode = code ?? -1;
        });
        const cmdId = `cmd-${nextCommand++}`;
        session.set(cmdId, record);
        onExec(command, child);
        return json(res, 200, { cmdId });
      }
      if (req.method === "DELETE" && parts.length === 5) {
        for (const { child } of session.values()) child.kill("SIGKILL");
        sessions.delete(parts[4]);
        onDeleteSession(parts[4]);
        return json(res, 200, {});
      }
      const record = session.get(parts[6]);
      if (req.method === "GET" && parts[5] === "command" && record !== undefined) {
        if (parts[7] === "logs") {
          return json(res, 200, {
            output: record.stdout + record.stderr,
            stdout: record.stdout,
            stderr: record.stderr,
          });
        }
        return json(res, 200, { id: parts[6], command: record.command, exitCode: record.exitCode ?? undefined });
      }
    }
    return json(res, 404, { message: `no ${route}` });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    apiUrl: `${url}/api`,
    close: () => {
      for (const session of sessions.values()) for (const { child } of session.values()) child.kill("SIGKILL");
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
