// Bench: native BashOperations vs pi's createLocalBashOperations, same process, medians.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { compare, median } from "./lib.js";

const GiB = 1024 ** 3;

async function roundTrip(ops, runs) {
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await ops.exec("true", "/tmp", { onData() {} });
    times.push(performance.now() - t0);
  }
  return median(times);
}

async function flood(ops) {
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  let calls = 0;
  let bytes = 0;
  const t0 = performance.now();
  await ops.exec(`head -c ${GiB} /dev/zero`, "/tmp", {
    onData: (chunk) => {
      bytes += chunk.length;
      if (++calls % 16 === 0) peak = Math.max(peak, process.memoryUsage().rss);
    },
  });
  if (bytes !== GiB) throw new Error(`flood delivered ${bytes} bytes`);
  return { ms: performance.now() - t0, memMiB: (peak - baseline) / 1024 ** 2 };
}

export async function bench(ctx) {
  const native = ctx.native.createBashOperations();
  const stock = ctx.pi.createLocalBashOperations();
  const rows = [];
  const runs = 40;
  await roundTrip(native, 5);
  await roundTrip(stock, 5);
  // Interleave the sides so machine noise hits both alike.
  const nativeTrips = [];
  const stockTrips = [];
  for (let i = 0; i < 3; i++) {
    nativeTrips.push(await roundTrip(native, runs));
    stockTrips.push(await roundTrip(stock, runs));
  }
  const nativeMs = median(nativeTrips);
  const stockMs = median(stockTrips);
  rows.push({
    operation: "bash exec `true` round trip",
    corpus: "-",
    nativeMs,
    stockMs,
    ratio: nativeMs / stockMs,
    target: "≤ 1.0×",
  });
  ctx.log("bash: flooding 1 GiB through onData (3× each side)");
  const nativeFloods = [];
  const stockFloods = [];
  for (let i = 0; i < 3; i++) {
    nativeFloods.push(await flood(native));
    stockFloods.push(await flood(stock));
  }
  const nf = median(nativeFloods.map((f) => f.ms));
  const sf = median(stockFloods.map((f) => f.ms));
  rows.push(...(await sandboxRows(ctx)));
  rows.push({
    operation: "bash 1 GiB through onData",
    corpus: "-",
    nativeMs: nf,
    stockMs: sf,
    ratio: nf / sf,
    nativeMemMiB: Math.max(...nativeFloods.map((f) => f.memMiB)),
    stockMemMiB: Math.max(...stockFloods.map((f) => f.memMiB)),
    target: "≥ 1.0× throughput (ratio ≤ 1.0)",
    note: "ratio = native/stock time; memory = peak RSS growth during the flood",
  });
  return rows;
}

/** The bwrap command line of today's way to sandbox pi's shell (a spawnHook), as in __test__/sandbox-parity.test.js. */
function bwrapHook(root) {
  const quote = (x) => `'${x.replaceAll("'", "'\\''")}'`;
  const argv = [
    ...["bwrap", "--unshare-all", "--die-with-parent"],
    ...["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"].flatMap((d) => ["--ro-bind-try", d, d]),
    ...["--bind", root, "/workspace", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--clearenv"],
  ].map(quote);
  return (ctx) => ({
    ...ctx,
    cwd: root,
    command: `${argv.join(" ")} --chdir /workspace -- /bin/bash -c ${quote(ctx.command)}`,
  });
}

/**
 * Sandboxed `true`: through pi's bash tool on our sandboxed exec vs pi's bash tool on its local exec
 * wrapped in bwrap by a spawnHook (what agents do today); and our sandboxed exec vs our plain exec.
 */
export async function sandboxRows(ctx) {
  const support = process.platform === "linux" ? ctx.native.sandboxSupport?.() : null;
  if (!support?.namespaces) {
    ctx.log(`bash: sandbox rows skipped (${support?.namespacesError ?? "no sandbox on this platform"})`);
    return [];
  }
  const root = mkdtempSync(path.join(os.tmpdir(), "pno-bench-sandbox-"));
  try {
    const sandboxed = ctx.native.createBashOperations({ sandbox: { root } });
    const plain = ctx.native.createBashOperations();
    const rows = [];
    const bwrap = spawnSync("bwrap", ["--ro-bind", "/", "/", "--unshare-all", "true"]);
    if (bwrap.status === 0) {
      const ours = ctx.pi.createBashTool("/workspace", { operations: sandboxed });
      const theirs = ctx.pi.createBashTool("/workspace", {
        operations: ctx.pi.createLocalBashOperations(),
        spawnHook: bwrapHook(root),
      });
      const call = (tool) => () => tool.execute("bench", { command: "true" });
      rows.push(
        await compare("bash sandboxed `true` via pi's bash tool vs bwrap spawnHook", "-", call(ours), call(theirs), {
          runs: 60,
          warmup: 5,
          target: "≤ 0.6×",
          note: "stock = pi's local exec running bwrap --unshare-all (workspace at /workspace, system read-only)",
        }),
      );
    } else {
      ctx.log("bash: no working bwrap on PATH, the sandbox-vs-bwrap row is skipped (apt-get install bubblewrap)");
    }
    const landlock = support.landlockAbi > 0 && support.seccomp;
    const modes = [
      ["namespaces", sandboxed, "/workspace", "≤ 1.3×"],
      ...(landlock
        ? [
            [
              "landlock",
              ctx.native.createBashOperations({ sandbox: { root, runtimeRoot: root, mode: "landlock" } }),
              root,
              "≤ 1.5×",
            ],
          ]
        : []),
    ];
    if (!landlock) ctx.log(`bash: Landlock rows skipped (${support.landlockError ?? "no seccomp"})`);
    const run = (ops, command, cwd) => () => ops.exec(command, cwd, { onData() {} });
    for (const [mode, ops, cwd, target] of modes) {
      rows.push(
        await compare(
          `bash sandboxed \`true\` exec vs unsandboxed (${mode})`,
          "-",
          run(ops, "true", cwd),
          run(plain, "true", root),
          {
            runs: 60,
            warmup: 5,
            target,
            note: "stock = our unsandboxed exec",
          },
        ),
      );
    }
    rows.push(...(await proxyRows(ctx, root, sandboxed)));
    // Metadata calls in bulk: what a sandbox's per-call checks cost (1,000 utimensat, then 1,000 fchmodat).
    const files = 1000;
    for (let i = 0; i < files; i++) writeFileSync(path.join(root, `f${String(i).padStart(4, "0")}`), "");
    const metadata = "touch f[0-9]* && chmod 640 f[0-9]*";
    // The sandbox alone (`protect: false`: what the sandbox's own metadata calls cost), then with the workspace policy's defaults,
    // which make every open that can write a call the notification handler performs.
    const unprotected = {
      namespaces: ctx.native.createBashOperations({ sandbox: { root, policy: { protect: false } } }),
      landlock: landlock
        ? ctx.native.createBashOperations({
            sandbox: { root, runtimeRoot: root, mode: "landlock", policy: { protect: false } },
          })
        : null,
    };
    for (const [mode, ops, cwd] of modes) {
      for (const [which, sandbox, target] of [
        ["protect: false", unprotected[mode], "≤ 2×"],
        ["the default policy", ops, null],
      ]) {
        rows.push(
          await compare(
            `bash \`touch\` + \`chmod\` of ${files} files, sandboxed (${which}) vs unsandboxed (${mode})`,
            "-",
            run(sandbox, metadata, cwd),
            run(plain, metadata, root),
            {
              runs: 20,
              warmup: 3,
              ...(target ? { target } : {}),
              note: "one command each side, in the workspace",
            },
          ),
        );
      }
    }
    return rows;
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * How the proxy relays (the core decides: splice through a pipe per direction, 1 MiB once a direction
 * moved 4 MiB; with `PNO_NO_SPLICE` set, read and write through a buffer). A BPF sockmap redirect was
 * measured and is not used (bench/NOTES.md, 2026-12-05).
 */
function relayPath() {
  return process.env.PNO_NO_SPLICE ? "read/write (PNO_NO_SPLICE)" : "splice";
}

/** Bytes of the proxy's download row: 100 MB, the figure. */
const PROXY_DOWNLOAD_BYTES = 100e6;

/**
 * The network allow-list (`network: { allow }`): sandboxed `true` with it vs without (the proxy must not
 * slow a command's start), and 100 MB from a loopback HTTP server through the proxy (curl in the sandbox)
 * vs curl in a sandbox sharing the host's network, straight to the server.
 */
async function proxyRows(ctx, root, sandboxed) {
  if (spawnSync("curl", ["--version"]).status !== 0) {
    ctx.log("bash: no curl on PATH, the network allow-list rows are skipped");
    return [];
  }
  const body = Buffer.alloc(PROXY_DOWNLOAD_BYTES, 0x61);
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { "Content-Length": body.length, Connection: "close" });
    res.end(body);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  try {
    // The server on the host's loopback: its port named, and its address (loopback is reached only then).
    const allow = [`localhost:${port}`, `127.0.0.1:${port}`];
    const allowed = ctx.native.createBashOperations({ sandbox: { root, network: { allow } } });
    const run = (ops, command, cwd) => async () => {
      let out = "";
      await ops.exec(command, cwd, {
        onData(c) {
          out += c;
        },
      });
      return out;
    };
    const rows = [
      await compare(
        "bash sandboxed `true` with network.allow vs without (namespaces)",
        "-",
        run(allowed, "true", "/workspace"),
        run(sandboxed, "true", "/workspace"),
        { runs: 60, warmup: 5, target: "≤ 1.05×", note: "stock = the same sandbox without the allow-list" },
      ),
    ];
    // Both sides sandboxed alike (the same start cost), so the row measures the path only.
    const shared = ctx.native.createBashOperations({ sandbox: { root, network: true } });
    const curl = (host) => `curl -sS -o /dev/null -w '%{size_download}' http://${host}:${port}/`;
    const through = run(allowed, curl("localhost"), "/workspace");
    const direct = run(shared, curl("127.0.0.1"), "/workspace");
    for (const side of [through, direct]) {
      const got = Number(await side());
      if (got !== PROXY_DOWNLOAD_BYTES) throw new Error(`the proxy row downloaded ${got} bytes`);
    }
    const row = await compare("bash 100 MB download via the allow-list proxy vs direct", "-", through, direct, {
      runs: 10,
      warmup: 2,
      target: "≤ 1.25× (≥ 0.8× throughput)",
      note: `curl in a sandbox through the proxy vs curl in a sandbox with network: true, same loopback HTTP server; relay: ${relayPath()}`,
    });
    row.note += `; ${(PROXY_DOWNLOAD_BYTES / 1e6 / (row.nativeMs / 1000)).toFixed(0)} vs ${(PROXY_DOWNLOAD_BYTES / 1e6 / (row.stockMs / 1000)).toFixed(0)} MB/s, throughput ${(row.stockMs / row.nativeMs).toFixed(2)}×`;
    rows.push(row);
    return rows;
  } finally {
    server.close();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const native = await import("pi-native-ops");
  const { requirePi } = await import("../js/pi.js");
  const { name, module } = requirePi();
  const rows = await bench({ pi: module, piName: name, native, corpora: {}, log: console.log });
  console.table(rows);
}
