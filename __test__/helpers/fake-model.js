// A scripted model for the real pi CLI: an OpenAI-compatible chat-completions server on 127.0.0.1 that
// answers each request with the next step of a script (a tool call, or a final text), and a scratch pi
// home (HOME and the agent directory) whose models.json names it. Every request body is kept, so a test
// can compare what pi sent with the extension and without it.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";

export const PROVIDER = "fake";
export const MODEL = "scripted";

/**
 * Starts the server. `script(body, url)` returns the step for a request: `{ tool, args }` or `{ text }`.
 * Resolves to `{ url, requests, onRequest, close }`; `requests` holds each request's `{ url, body }` (a run can
 * use a base URL of its own below `url` to find its requests).
 */
export async function startFakeModel(script) {
  const requests = [];
  let callIds = 0;
  /** `onRequest(body)`, when set, is called as each request arrives. */
  const fake = { url: null, requests, onRequest: null, close: () => new Promise((resolve) => server.close(resolve)) };
  const server = http.createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk) => {
      body += chunk;
    });
    req.on("end", () => {
      let parsed;
      try {
        parsed = JSON.parse(body);
      } catch {
        res.writeHead(400).end("bad json");
        return;
      }
      requests.push({ url: req.url, body: parsed });
      fake.onRequest?.(parsed);
      const step = script(parsed, req.url);
      const base = { id: `chatcmpl-${requests.length}`, object: "chat.completion.chunk", created: 0, model: MODEL };
      const chunk = (choice) => `data: ${JSON.stringify({ ...base, choices: [{ index: 0, ...choice }] })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "close" });
      if (step.tool !== undefined) {
        callIds += 1;
        const call = {
          index: 0,
          id: `call_${callIds}`,
          type: "function",
          function: { name: step.tool, arguments: JSON.stringify(step.args) },
        };
        res.write(chunk({ delta: { role: "assistant", tool_calls: [call] }, finish_reason: null }));
        res.write(chunk({ delta: {}, finish_reason: "tool_calls" }));
      } else {
        res.write(chunk({ delta: { role: "assistant", content: step.text }, finish_reason: null }));
        res.write(chunk({ delta: {}, finish_reason: "stop" }));
      }
      res.write(
        `data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })}\n\n`,
      );
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  fake.url = `http://127.0.0.1:${port}/v1`;
  return fake;
}

/** A scratch home whose pi config has the fake model as its only model; returns the env for pi. */
export function scratchPiHome(dir, url) {
  const home = path.join(dir, "home");
  const agentDir = path.join(home, ".pi", "agent");
  mkdirSync(agentDir, { recursive: true });
  const models = {
    providers: {
      [PROVIDER]: {
        baseUrl: url,
        api: "openai-completions",
        apiKey: "fake-key",
        models: [
          {
            id: MODEL,
            name: "Scripted",
            reasoning: false,
            input: ["text"],
            cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
            contextWindow: 128000,
            maxTokens: 4096,
          },
        ],
      },
    },
  };
  writeFileSync(path.join(agentDir, "models.json"), JSON.stringify(models, null, 2));
  writeFileSync(path.join(agentDir, "settings.json"), JSON.stringify({ quietStartup: true }, null, 2));
  const env = { ...process.env, HOME: home, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: "1" };
  for (const key of Object.keys(env)) {
    // No real provider key reaches the run, and pi's own telemetry and update checks stay off.
    if (/_API_KEY$|^PI_NATIVE_OPS_/.test(key)) delete env[key];
  }
  env.PI_SKIP_VERSION_CHECK = "1";
  env.PI_TELEMETRY = "0";
  return env;
}

/** Runs `node cli args` to completion; resolves to `{ code, stdout, stderr }`. `input` goes to stdin. */
export function runPi(node, cli, args, { cwd, env, input = "" }) {
  return new Promise((resolve, reject) => {
    const child = spawn(node, [cli, ...args], { cwd, env, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d) => {
      stdout += d;
    });
    child.stderr.setEncoding("utf8").on("data", (d) => {
      stderr += d;
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}
