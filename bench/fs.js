// boundFs against pi's default operations (Node fs) on the same small files, raw and through pi's tools,
// and the peak memory of reading a 1 GiB file with offset/limit through pi's read tool.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, openSync, writeSync, closeSync, rmSync, statSync, writeFileSync } from "node:fs";
import * as nodeFs from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { findBinary } from "../scripts/node-tools.js";
import { compare, runChild } from "./lib.js";

const here = path.dirname(fileURLToPath(import.meta.url));

export async function bench({ pi, piName, native, log }) {
  const dir = path.join(here, ".corpus", "fs-small");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(path.join(dir, "src"), { recursive: true });
  const text = Array.from({ length: 100 }, (_, i) => `line ${i}: ${"lorem ipsum ".repeat(3)}`).join("\n");
  for (let i = 0; i < 40; i++) writeFileSync(path.join(dir, "src", `file${i}.ts`), text);
  const file = path.join(dir, "src", "file0.ts");
  const fs = native.createBoundFs(dir);
  const t = "≤ 1.2×";
  const rows = [];

  rows.push(
    await compare(
      "readFile 4 KB",
      "small files",
      () => fs.read.readFile(file),
      () => nodeFs.readFile(file),
      { target: t },
    ),
  );
  rows.push(
    await compare(
      "writeFile 4 KB",
      "small files",
      () => fs.write.writeFile(path.join(dir, "w1.txt"), text),
      () => nodeFs.writeFile(path.join(dir, "w2.txt"), text, "utf-8"),
      { target: t, note: "native is atomic (temp file + rename)" },
    ),
  );
  rows.push(
    await compare(
      "stat",
      "small files",
      () => fs.ls.stat(file),
      () => nodeFs.stat(file),
      { target: t },
    ),
  );
  rows.push(
    await compare(
      "readdir (40 entries)",
      "small files",
      () => fs.ls.readdir(path.join(dir, "src")),
      () => nodeFs.readdir(path.join(dir, "src")),
      { target: t },
    ),
  );

  const tools = (factory, group) => [pi[factory](dir, { operations: fs[group] }), pi[factory](dir)];
  const exec = (tool, params) => () => tool.execute("bench", params, undefined, undefined);
  const [readN, readS] = tools("createReadTool", "read");
  rows.push(
    await compare(
      "pi read tool, 4 KB file",
      "small files",
      exec(readN, { path: "src/file1.ts" }),
      exec(readS, { path: "src/file1.ts" }),
      { target: t },
    ),
  );
  const [writeN, writeS] = tools("createWriteTool", "write");
  rows.push(
    await compare(
      "pi write tool, 4 KB file",
      "small files",
      exec(writeN, { path: "out/n.ts", content: text }),
      exec(writeS, { path: "out/s.ts", content: text }),
      { target: t },
    ),
  );
  const [editN, editS] = tools("createEditTool", "edit");
  // Each side toggles its own file's line back and forth.
  const edit = (tool, name) => {
    let flip = 0;
    return () => {
      flip++;
      const [a, b] = flip % 2 ? ["line 50:", "LINE 50:"] : ["LINE 50:", "line 50:"];
      return tool.execute("bench", { path: `src/${name}`, edits: [{ oldText: a, newText: b }] }, undefined, undefined);
    };
  };
  rows.push(
    await compare("pi edit tool, 4 KB file", "small files", edit(editN, "file2.ts"), edit(editS, "file3.ts"), {
      target: t,
      runs: 200,
    }),
  );
  const [lsN, lsS] = tools("createLsTool", "ls");
  rows.push(
    await compare("pi ls tool, 40 entries", "small files", exec(lsN, { path: "src" }), exec(lsS, { path: "src" }), {
      target: t,
    }),
  );
  rows.push(...(await lsRows({ pi, native })));
  rows.push(...legacyLsRows(piName, log));

  // 1 GiB streamed read: pi >= 1.5 streams offset/limit reads through createReadStream.
  const big = path.join(here, ".corpus", "big-1g.txt");
  if (!existsSync(big)) {
    log("writing a 1 GiB text file (once)");
    const line = Buffer.from(`${"0123456789".repeat(9)}abcdefghi\n`);
    const block = Buffer.concat(Array.from({ length: 10_000 }, () => line));
    const fd = openSync(big, "w");
    for (let written = 0; written < 2 ** 30; written += block.length) writeSync(fd, block);
    closeSync(fd);
  }
  const streams = typeof pi.createReadToolDefinition === "function" && !!fs.read.createReadStream;
  const child = path.join(here, "child-read.js");
  const params = JSON.stringify({ path: big, offset: 10_000_000, limit: 20 });
  // Alternate fresh child processes, three per side; medians of time, max of peak RSS.
  const runs = { native: [], stock: [] };
  for (let i = 0; i < 3; i++)
    for (const side of ["native", "stock"]) runs[side].push(await runChild(child, [side, params]));
  const summary = (rs) => ({
    ms: rs.map((r) => r.ms).sort((a, b) => a - b)[1],
    maxRssMiB: Math.max(...rs.map((r) => r.maxRssMiB)),
    baselineMiB: Math.max(...rs.map((r) => r.baselineMiB)),
  });
  const n = summary(runs.native);
  const s = summary(runs.stock);
  rows.push({
    operation: "pi read tool, offset 10M / limit 20 of a 1 GiB file",
    corpus: "1 GiB file",
    nativeMs: n.ms,
    stockMs: s.ms,
    ratio: n.ms / s.ms,
    nativeMemMiB: n.maxRssMiB,
    stockMemMiB: s.maxRssMiB,
    target: "peak memory: a few MiB over baseline",
    note: `${streams ? "streamed" : "whole-file read"}; median of 3 fresh processes per side; RSS of a child before the read ${n.baselineMiB.toFixed(0)} MiB`,
  });
  return rows;
}

/**
 * pi's ls tool over 200 entries (one in ten a directory) in the workspace root and in a
 * subdirectory, and ls.stat / ls.exists per call against statSync / existsSync, which pi 0.73.1's ls
 * calls (pi 1.6.0's calls fs/promises). Both sides are awaited, as pi's ls awaits them.
 */
export async function lsRows({ pi, native }) {
  const dir = path.join(here, ".corpus", "fs-ls");
  rmSync(dir, { recursive: true, force: true });
  for (const d of [dir, path.join(dir, "sub")]) {
    mkdirSync(d, { recursive: true });
    // 200 entries each: the root's last is the subdirectory.
    for (let i = 0; i < (d === dir ? 199 : 200); i++) {
      if (i % 10 === 0) mkdirSync(path.join(d, `dir${i}`), { recursive: true });
      else writeFileSync(path.join(d, `file${i}.txt`), "x");
    }
  }
  const fs = native.createBoundFs(dir);
  // The root's view (Linux) is asked for by the first stat beneath the root and made in the background.
  await fs.ls.exists(path.join(dir, "sub", "file1.txt"));
  for (let i = 0; i < 1000 && fs.view?.() === "making"; i++) await new Promise((r) => setTimeout(r, 2));
  const view = fs.view?.() === "ready" ? "through the root's view" : `no view (${fs.view?.() ?? "none"})`;
  const lsN = pi.createLsTool(dir, { operations: fs.ls });
  const lsS = pi.createLsTool(dir);
  const exec = (tool, params) => () => tool.execute("bench", params, undefined, undefined);
  const t = "≤ 1.0×";
  const corpus = `pi ${pi.VERSION ?? "?"}, Node ${process.versions.node}`;
  const rows = [];
  rows.push(
    await compare("pi ls tool, 200 entries", corpus, exec(lsN, { path: "." }), exec(lsS, { path: "." }), {
      target: t,
      runs: 300,
      note: `the workspace root, ${view}: one system call per entry`,
    }),
  );
  rows.push(
    await compare(
      "pi ls tool, 200 entries in a subdirectory",
      corpus,
      exec(lsN, { path: "sub" }),
      exec(lsS, { path: "sub" }),
      {
        target: t,
        runs: 300,
        note: `${view}: one system call per entry, against one statx`,
      },
    ),
  );
  // Per call: batches of one awaited call per entry (the times are the batch's; the ratio is per call).
  const entries = (sub) => fs.ls.readdir(path.join(dir, sub)).then((names) => names.map((n) => path.join(dir, sub, n)));
  for (const [sub, where] of [
    [".", "in the root"],
    ["sub", "in a subdirectory"],
  ]) {
    const paths = await entries(sub);
    const batch = (fn) => async () => {
      for (const p of paths) await fn(p);
    };
    for (const [op, ours, node] of [
      ["stat", fs.ls.stat, statSync],
      ["exists", fs.ls.exists, existsSync],
    ]) {
      const row = await compare(`${op} per call (${paths.length} calls), ${where}`, corpus, batch(ours), batch(node), {
        target: "≤ 1.0×",
        runs: 100,
        note: `ls.${op} against fs.${op}Sync, both awaited, ${view}; medians of 100 batches`,
      });
      rows.push(row);
    }
  }
  return rows;
}

/**
 * The same ls rows for pi 0.73.1 on a Node older than 22.19 (the Node on PATH, which run.js left
 * for Node 22 and pi 1.6.0), in a child process; none when that pi is the one benchmarked already.
 */
export function legacyLsRows(piName, log) {
  const legacy = "@mariozechner/pi-coding-agent";
  if (piName === legacy) return [];
  const node = findBinary("node") ?? process.execPath;
  try {
    const out = execFileSync(node, [path.join(here, "child-ls.js")], {
      env: { ...process.env, PI_NATIVE_OPS_PI: legacy },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
    });
    return JSON.parse(out.trim().split("\n").pop());
  } catch (err) {
    log(`ls rows for ${legacy}: not measured (${String(err.message).split("\n")[0]})`);
    return [];
  }
}
