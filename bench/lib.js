// Shared measuring helpers for the bench/ modules.
import { spawn } from "node:child_process";

/** Native and stock measured alternately, call by call (so drift hits both alike), as one row. */
export async function compare(operation, corpus, native, stock, options = {}) {
  const { runs = 200, warmup = 20 } = options;
  for (let i = 0; i < warmup; i++) {
    await native();
    if (stock) await stock();
  }
  const [nativeMs, stockMs] = await timeBoth([native, stock], runs);
  return {
    operation,
    corpus,
    nativeMs,
    stockMs,
    ratio: stockMs ? nativeMs / stockMs : null,
    target: options.target,
    note: options.note,
  };
}

/**
 * Runs `node <script> ...args` and returns its JSON result plus its peak RSS in MiB (getrusage of the
 * child), so memory figures are isolated per side.
 */
export function runChild(script, args, env = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, ...env },
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`${script} exited ${code}`));
      resolve(JSON.parse(out.trim().split("\n").pop()));
    });
  });
}

/** The middle of `xs` (the upper one of an even count). */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Every order of the indexes 0..n-1. */
function orders(n) {
  if (n === 0) return [[]];
  return orders(n - 1).flatMap((order) =>
    order.map((_, at) => [...order.slice(0, at), n - 1, ...order.slice(at)]).concat([[...order, n - 1]]),
  );
}

/**
 * Medians of `runs` timed calls of each side, alternated so that load from elsewhere hits both alike; each
 * round takes the sides in the next of their orders, so each side runs after each other side alike (after a
 * stock tool's child process has just exited, say), not always after the same one.
 */
export async function timeBoth(sides, runs) {
  for (const fn of sides) if (fn) await fn(); // warm the page cache and the code paths
  const ms = sides.map(() => []);
  const rounds = orders(sides.length);
  for (let i = 0; i < runs; i++) {
    for (const k of rounds[i % rounds.length]) {
      const fn = sides[k];
      if (!fn) continue;
      const t = process.hrtime.bigint();
      await fn();
      ms[k].push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  }
  return ms.map((m) => (m.length ? median(m) : null));
}
