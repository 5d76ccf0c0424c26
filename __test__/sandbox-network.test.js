// The sandbox's network allow-list (`sandbox.network: { allow, headers }`, namespaces mode): the shell's
// only way out is the proxy on Node's side. As root (in this process) and as nobody (a child Node): a name
// allowed, an address not listed refused, a CONNECT tunnel, a client that ignores the proxy (no route), IPv6,
// DNS attempts, the event of each connection (at most 1,000 a command), heads with bare LFs refused, ports
// other than 80 and 443 and loopback addresses refused unless an entry names them, headers only to the port
// their entry names. Every server is on this machine's loopback, allowed explicitly where a test reaches it.
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import * as pno from "pi-native-ops";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execAllAs, nobody, removeScripts, tempDirFor } from "./helpers/nobody.js";

const support = process.platform === "linux" ? pno.sandboxSupport() : null;
const users = ["root", ...(nobody.argv ? ["nobody"] : [])];
const hasCurl = existsSync("/usr/bin/curl");

/** Listens on `host` (port 0); null when the address is unavailable here (IPv6 off). */
async function listenOn(server, host) {
  return new Promise((resolve) => {
    server.once("error", () => resolve(null));
    server.listen(0, host, () => resolve(server.address().port));
  });
}

/** The bulk transfers: past the relay's bulk threshold (4 MiB), so its pipes grow mid-transfer. */
const BULK_BYTES = 24e6;
const bulk = randomBytes(BULK_BYTES);
const sha256 = (data) => createHash("sha256").update(data).digest("hex");
/** What `seq 1 3000000` prints (20.9 MB), uploaded from the sandbox. */
const upload = Buffer.from(`${Array.from({ length: 3e6 }, (_, i) => i + 1).join("\n")}\n`);

let web;
let web2;
let web6;
let echo;
let raw;
let ports;
/** What the raw server received, one string (latin1) per connection. */
const rawSeen = [];
const servers = [];
/** Allow entries for a loopback server at `port`: its name and its addresses (loopback must be listed). */
const loopback = (port) => [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`];
beforeAll(async () => {
  // Answers with the path and the X-Token header it received.
  // `/bulk` sends `bulk`; `/sum` answers the request body's hash and length.
  const handler = (req, res) => {
    res.setHeader("Connection", "close");
    if (req.url === "/bulk") return res.end(bulk);
    if (req.url === "/sum") {
      const hash = createHash("sha256");
      let bytes = 0;
      req.on("data", (chunk) => {
        hash.update(chunk);
        bytes += chunk.length;
      });
      req.on("end", () => res.end(`sum=${hash.digest("hex")} bytes=${bytes}\n`));
      return;
    }
    res.end(`hello ${req.url} token=${req.headers["x-token"] ?? "none"}\n`);
  };
  web = http.createServer(handler);
  web2 = http.createServer(handler);
  web6 = http.createServer(handler);
  echo = net.createServer((socket) => socket.pipe(socket));
  // Records the bytes of each connection (no HTTP parser in between) and answers 200.
  raw = net.createServer((socket) => {
    const i = rawSeen.push("") - 1;
    socket.on("data", (d) => {
      rawSeen[i] += d.toString("latin1");
      if (rawSeen[i].includes("\r\n\r\n")) socket.end("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    socket.on("error", () => {});
  });
  servers.push(web, web2, web6, echo, raw);
  ports = {
    web: await listenOn(web, "127.0.0.1"),
    web2: await listenOn(web2, "127.0.0.1"),
    web6: await listenOn(web6, "::1"),
    echo: await listenOn(echo, "127.0.0.1"),
    raw: await listenOn(raw, "127.0.0.1"),
  };
});
afterAll(() => {
  for (const server of servers) server.close();
  removeScripts();
});

const skip = !support?.namespaces ? (support?.namespacesError ?? "not Linux") : null;
const maybe = skip ? describe.skip : describe;

/** Bash that sends `head` (printf format) straight to the proxy and prints its status line. */
function rawHead(head) {
  return [
    "port=${HTTP_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$port",
    `printf '${head}' >&3`,
    "IFS= read -r status <&3; echo \"${status%$'\\r'}\"",
  ].join("\n");
}

/** Bash that opens a CONNECT tunnel to `target` through the proxy and echoes "ping" through it. */
function tunnel(target) {
  return [
    "port=${HTTP_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$port",
    `printf 'CONNECT ${target} HTTP/1.1\\r\\nHost: ${target}\\r\\n\\r\\n' >&3`,
    "IFS= read -r status <&3; echo \"${status%$'\\r'}\"",
    "while IFS= read -r line <&3 && [ \"${line%$'\\r'}\" != '' ]; do :; done",
    'echo ping >&3; IFS= read -r reply <&3; echo "reply=$reply"',
  ].join("\n");
}

maybe.each(users)("network allow-list as %s", (user) => {
  let results;
  let commands;
  let concurrent;
  beforeAll(async () => {
    const root = tempDirFor(user, "pno-net-");
    const { web: p, web6: p6, echo: e } = ports;
    commands = {
      byName: `curl -sS -H 'X-Token: from-shell' http://localhost:${p}/a`,
      byAddress: `curl -sS -o /dev/null -w '%{http_code}' --noproxy '' http://127.0.0.2:${p}/b`,
      notListed: `curl -sS -o /dev/null -w '%{http_code}' http://blocked.example/`,
      tunnel: tunnel(`localhost:${e}`),
      tunnelByAddress: tunnel(`127.0.0.2:${e}`),
      direct: `(exec 3<>/dev/tcp/127.0.0.1/${p}) 2>/dev/null && echo reached || echo refused`,
      udp: "(exec 3<>/dev/udp/8.8.8.8/53 && printf x >&3) 2>&1; echo exit=$?",
      dns: "getent hosts example.com; echo exit=$?",
      v6Listener: `curl -sS --noproxy '' -x "http://[::1]:\${HTTP_PROXY##*:}" http://localhost:${p}/v6proxy`,
      notProxyRequest: rawHead("GET / HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"),
      malformed: rawHead("GET http://localhost:1/ HTTP/9\\r\\n\\r\\n"),
      oversized: rawHead(`GET http://localhost:${p}/ HTTP/1.1\\r\\nX: %040000d\\r\\n\\r\\n`),
      twoHosts: rawHead(
        `GET http://localhost:${p}/ HTTP/1.1\\r\\nHost: localhost\\r\\nHost: other.example\\r\\n\\r\\n`,
      ),
      controlInValue: rawHead(`GET http://localhost:${p}/ HTTP/1.1\\r\\nX: a\\001b\\r\\n\\r\\n`),
      v6Target: p6 ? `curl -sS -g http://[::1]:${p6}/v6` : "echo no-ipv6",
      // Forwarded, then through a CONNECT tunnel (curl -p), each way.
      bulkForward: `curl -sS http://localhost:${p}/bulk | sha256sum`,
      bulkTunnel: `curl -sS -p http://localhost:${p}/bulk | sha256sum`,
      uploadForward: `seq 1 3000000 > up1 && curl -sS --data-binary @up1 http://localhost:${p}/sum`,
      uploadTunnel: `seq 1 3000000 > up2 && curl -sS -p --data-binary @up2 http://localhost:${p}/sum`,
      // 1,100 refused connections in one command: 1,000 events.
      manyRefused: [
        "port=${HTTP_PROXY##*:}; n=0",
        "for i in $(seq 1100); do exec 3<>/dev/tcp/127.0.0.1/$port || break",
        "  printf 'CONNECT 127.0.0.1:9 HTTP/1.1\\r\\n\\r\\n' >&3; IFS= read -r status <&3; exec 3<&-",
        '  case "$status" in "HTTP/1.1 403 "*) n=$((n+1));; esac; done; echo "refused=$n"',
      ].join("\n"),
      // Entries the old grammar took too (any port of a name, headers for the name): a bare LF in the
      // target or after the version is refused before any connection, so neither the smuggled Host nor
      // the header configured for localhost reaches the server.
      smuggleInTarget: {
        command: rawHead(`GET http://localhost:${ports.raw}/a\\nHost:other.example HTTP/1.1\\r\\n\\r\\n`),
        sandbox: { network: { allow: ["localhost", "127.0.0.1"], headers: { localhost: { "X-Token": "secret" } } } },
      },
      smuggleAfterVersion: {
        command: rawHead(`GET http://localhost:${ports.raw}/a HTTP/1.1\\nHost: other.example\\r\\n\\r\\n`),
        sandbox: { network: { allow: ["localhost", "127.0.0.1"], headers: { localhost: { "X-Token": "secret" } } } },
      },
      // An entry without a port: 80 and 443 only.
      portNotListed: {
        command: `curl -sS -o /dev/null -w '%{http_code}' http://localhost:${p}/port`,
        sandbox: { network: { allow: ["localhost", "127.0.0.1"] } },
      },
      // A name that resolves to loopback, its address not listed: refused; listed: reached.
      loopbackNotListed: {
        command: `curl -sS -o /dev/null -w '%{http_code}' http://localhost:${p}/loop`,
        sandbox: { network: { allow: [`localhost:${p}`] } },
      },
      loopbackListed: {
        command: `curl -sS http://localhost:${p}/loop`,
        sandbox: { network: { allow: [`localhost:${p}`, `127.0.0.1:${p}`] } },
      },
      // A header configured for one port of a name goes to that port only; one for the bare name to 80/443.
      headerOtherPort: {
        command: `curl -sS http://localhost:${ports.web2}/other; curl -sS http://localhost:${p}/own`,
        sandbox: {
          network: {
            allow: [...loopback(p), ...loopback(ports.web2)],
            headers: { [`localhost:${p}`]: { "X-Token": "for-its-port" }, localhost: { "X-Token": "for-80-443" } },
          },
        },
      },
    };
    const sandbox = {
      root,
      mode: "namespaces",
      network: {
        allow: [...loopback(p), ...loopback(e), ...(p6 ? [`[::1]:${p6}`] : [])],
        headers: { [`localhost:${p}`]: { "X-Token": "from-host" } },
      },
      onPolicyEvent: "collect",
    };
    const list = Object.values(commands).map((c) =>
      typeof c === "string" ? { command: c, cwd: "/workspace" } : { cwd: "/workspace", ...c },
    );
    // Two at once: the first connects while the second, started later, runs.
    concurrent = [
      `until [ -e b-started ]; do sleep 0.01; done; curl -sS http://localhost:${p}/first; touch a-done`,
      "touch b-started; until [ -e a-done ]; do sleep 0.01; done",
    ];
    const answers = await execAllAs(user, pno, sandbox, [
      ...list,
      concurrent.map((command) => ({ command, cwd: "/workspace" })),
    ]);
    results = Object.fromEntries(Object.keys(commands).map((key, i) => [key, answers[i]]));
    results.concurrent = answers.at(-1);
  }, 120_000);

  const connects = (key) => results[key].events.map(({ host, port, rule, allowed }) => ({ host, port, rule, allowed }));

  it.skipIf(!hasCurl)("lets an allowed name through, with the configured header in place of the shell's", () => {
    expect(results.byName).toMatchObject({ output: `hello /a token=from-host\n`, exitCode: 0 });
    expect(connects("byName")).toEqual([
      { host: "localhost", port: ports.web, rule: `localhost:${ports.web}`, allowed: true },
    ]);
    const [event] = results.byName.events;
    expect(Object.keys(event)).toEqual(["tool", "access", "host", "port", "rule", "allowed", "time", "command"]);
    expect(event).toMatchObject({ tool: "bash", access: "connect", command: commands.byName });
    expect(typeof event.time).toBe("number");
  });

  it.skipIf(!hasCurl)("refuses an address no entry is, and a name not listed, with 403 and an event", () => {
    expect(results.byAddress).toMatchObject({ output: "403", exitCode: 0 });
    expect(connects("byAddress")).toEqual([{ host: "127.0.0.2", port: ports.web, rule: null, allowed: false }]);
    expect(results.notListed).toMatchObject({ output: "403", exitCode: 0 });
    expect(connects("notListed")).toEqual([{ host: "blocked.example", port: 80, rule: null, allowed: false }]);
  });

  it("tunnels CONNECT to an allowed name, and refuses it to an address not listed", () => {
    expect(results.tunnel.output).toBe("HTTP/1.1 200 Connection Established\nreply=ping\n");
    expect(connects("tunnel")).toEqual([
      { host: "localhost", port: ports.echo, rule: `localhost:${ports.echo}`, allowed: true },
    ]);
    expect(results.tunnelByAddress.output).toMatch(/^HTTP\/1\.1 403 Forbidden\n/);
    expect(connects("tunnelByAddress")).toEqual([{ host: "127.0.0.2", port: ports.echo, rule: null, allowed: false }]);
  });

  it("gives a client that ignores the proxy no route, and no DNS", () => {
    expect(results.direct.output).toBe("refused\n");
    expect(results.udp.output).toMatch(/Network is unreachable[\s\S]*exit=1\n$/);
    expect(results.dns.output).toMatch(/^exit=[1-9]\d*\n$/);
    for (const key of ["direct", "udp", "dns"]) expect(results[key].events).toEqual([]);
  });

  it.skipIf(!hasCurl)("reports a connection as the command it came from when two run at once", () => {
    expect(results.concurrent.all.map((r) => r.exitCode)).toEqual([0, 0]);
    expect(results.concurrent.all[0].output).toBe("hello /first token=from-host\n");
    expect(results.concurrent.events.map((e) => [e.host, e.allowed, e.command])).toEqual([
      ["localhost", true, concurrent[0]],
    ]);
  });

  it.skipIf(!hasCurl)("relays 20+ MB each way byte for byte, forwarded and tunnelled", () => {
    for (const key of ["bulkForward", "bulkTunnel"]) {
      expect(results[key], key).toMatchObject({ output: `${sha256(bulk)}  -\n`, exitCode: 0 });
    }
    for (const key of ["uploadForward", "uploadTunnel"]) {
      expect(results[key], key).toMatchObject({
        output: `sum=${sha256(upload)} bytes=${upload.length}\n`,
        exitCode: 0,
      });
    }
  });

  it("answers what is not a proxy request, is malformed or too large without connecting anywhere", () => {
    expect(results.notProxyRequest.output).toBe("HTTP/1.1 501 Not Implemented\n");
    expect(results.malformed.output).toBe("HTTP/1.1 400 Bad Request\n");
    expect(results.oversized.output).toBe("HTTP/1.1 431 Request Header Fields Too Large\n");
    expect(results.twoHosts.output).toBe("HTTP/1.1 400 Bad Request\n");
    expect(results.controlInValue.output).toBe("HTTP/1.1 400 Bad Request\n");
    for (const key of ["notProxyRequest", "malformed", "oversized", "twoHosts", "controlInValue"]) {
      expect(results[key].events, key).toEqual([]);
    }
  });

  it("reports at most 1,000 connections of one command", () => {
    expect(results.manyRefused).toMatchObject({ output: "refused=1100\n", exitCode: 0 });
    expect(results.manyRefused.events.length).toBe(1000);
    expect(results.manyRefused.events.every((e) => e.allowed === false && e.host === "127.0.0.1")).toBe(true);
  });

  it("refuses a head with a bare LF (400) before connecting: no smuggled Host, no configured header", () => {
    for (const key of ["smuggleInTarget", "smuggleAfterVersion"]) {
      expect(results[key], key).toMatchObject({ output: "HTTP/1.1 400 Bad Request\n", exitCode: 0 });
      expect(results[key].events, key).toEqual([]);
    }
    expect(rawSeen).toEqual([]);
  });

  it.skipIf(!hasCurl)("allows ports 80 and 443 unless an entry names another", () => {
    expect(results.portNotListed).toMatchObject({ output: "403", exitCode: 0 });
    expect(connects("portNotListed")).toEqual([{ host: "localhost", port: ports.web, rule: null, allowed: false }]);
  });

  it.skipIf(!hasCurl)("reaches a loopback address only when an entry is the address", () => {
    expect(results.loopbackNotListed).toMatchObject({ output: "403", exitCode: 0 });
    expect(connects("loopbackNotListed")).toEqual([{ host: "localhost", port: ports.web, rule: null, allowed: false }]);
    expect(results.loopbackListed).toMatchObject({ output: "hello /loop token=none\n", exitCode: 0 });
    expect(connects("loopbackListed")).toEqual([
      { host: "localhost", port: ports.web, rule: `localhost:${ports.web}`, allowed: true },
    ]);
  });

  it.skipIf(!hasCurl)("sends a configured header only to the port its entry names", () => {
    expect(results.headerOtherPort).toMatchObject({
      output: "hello /other token=none\nhello /own token=for-its-port\n",
      exitCode: 0,
    });
  });

  it.skipIf(!hasCurl)("listens on [::1] too, and allows an IPv6 literal listed literally", () => {
    expect(results.v6Listener).toMatchObject({ output: "hello /v6proxy token=from-host\n", exitCode: 0 });
    if (!ports.web6) return;
    expect(results.v6Target).toMatchObject({ output: "hello /v6 token=none\n", exitCode: 0 });
    expect(connects("v6Target")).toEqual([
      { host: "[::1]", port: ports.web6, rule: `[::1]:${ports.web6}`, allowed: true },
    ]);
  });
});

maybe("network allow-list options", () => {
  const root = tempDirFor("root", "pno-net-opts-");

  it("takes host:port, [v6]:port and address entries", () => {
    const allow = ["localhost:3000", "*.corp.example:8443", "10.0.0.1:8080", "[::1]:3000", "::1", "fd00::1"];
    expect(() =>
      pno.createBashOperations({
        sandbox: { root, mode: "namespaces", network: { allow, headers: { "localhost:3000": { A: "1" } } } },
      }),
    ).not.toThrow();
  });

  it("refuses Landlock mode, bad entries and bad shapes", () => {
    const make = (sandbox) => () => pno.createBashOperations({ sandbox: { root, ...sandbox } });
    expect(make({ mode: "landlock", network: { allow: ["localhost"] } })).toThrow(
      expect.objectContaining({
        code: "ESANDBOX",
        message: expect.stringContaining("network.allow needs namespaces mode"),
      }),
    );
    for (const bad of ["http://x.org", "x.org:0", "x.org:65536", "::1:x", "[::1]8080"]) {
      expect(make({ mode: "namespaces", network: { allow: [bad] } })).toThrow(
        expect.objectContaining({ code: "ESANDBOX", message: expect.stringContaining(JSON.stringify(bad)) }),
      );
    }
    expect(make({ mode: "namespaces", network: { allow: ["x.org"], headers: { "x.org:0": { A: "1" } } } })).toThrow(
      expect.objectContaining({ code: "ESANDBOX", message: expect.stringContaining('"x.org:0"') }),
    );
    expect(make({ mode: "namespaces", network: { allow: ["x.org"], headers: { "x.org": { A: "a\nB: 1" } } } })).toThrow(
      expect.objectContaining({ code: "ESANDBOX" }),
    );
    expect(make({ network: { allow: "x.org" } })).toThrow(TypeError);
    expect(make({ network: { allow: [], other: 1 } })).toThrow(/unknown option "other"/);
    expect(make({ network: "yes" })).toThrow(TypeError);
    expect(make({ network: { allow: [], headers: { "x.org": { A: 1 } } } })).toThrow(TypeError);
    expect(make({ onPolicyEvent: "x" })).toThrow(TypeError);
  });

  it.skipIf(!hasCurl)("keeps running when onPolicyEvent throws", async () => {
    let calls = 0;
    const ops = pno.createBashOperations({
      sandbox: {
        root,
        mode: "namespaces",
        network: { allow: loopback(ports.web) },
        onPolicyEvent: () => {
          calls++;
          throw new Error("the caller's bug");
        },
      },
    });
    let output = "";
    const { exitCode } = await ops.exec(`curl -sS http://localhost:${ports.web}/t`, "/workspace", {
      onData: (c) => {
        output += c;
      },
    });
    expect({ output, exitCode }).toEqual({ output: "hello /t token=none\n", exitCode: 0 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(calls).toBe(1);
  });
});
