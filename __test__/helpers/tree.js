// Temporary fixture trees for tests: `makeTree({ "a.txt": "x", "d/b.txt": Buffer, "l": { symlink: "a.txt" } })`.
import {
  mkdtempSync,
  mkdirSync,
  writeFileSync,
  symlinkSync,
  rmSync,
  readdirSync,
  readFileSync,
  lstatSync,
  readlinkSync,
  realpathSync,
  renameSync,
  existsSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

// Under wine (scripts/test-windows.sh), whose Windows Node cannot make a symlink or junction (wine 8's
// CreateSymbolicLinkW does nothing, FSCTL_SET_REPARSE_POINT is unsupported), a Linux process beside the
// run makes a unix symlink for each request dropped in PI_NATIVE_OPS_WINE_LINKS. Wine shows such a link as
// the file or directory it leads to, which is what the bounded root's final-path check must catch.
const WINE_LINKS = process.env.PI_NATIVE_OPS_WINE_LINKS;
const WINE_DRIVE_C = process.env.PI_NATIVE_OPS_WINE_DRIVE_C;
// How long a request may wait for the Linux side before the fixture fails (ms): generous, for a busy machine.
const WINE_LINK_WAIT_MS = 30_000;

/** A Windows path as the Linux side sees it: C: is the wine prefix's drive_c, Z: is /. */
function unixPath(p) {
  const drive = /^([A-Za-z]):[\\/]/.exec(p);
  if (!drive) return p.replaceAll("\\", "/");
  const rest = p.slice(3).replaceAll("\\", "/");
  if (drive[1].toUpperCase() === "Z") return `/${rest}`;
  if (drive[1].toUpperCase() === "C") return `${WINE_DRIVE_C}/${rest}`;
  throw new Error(`wine links: no Linux path for drive ${drive[1]}:`);
}

let wineRequests = 0;
/** Asks the Linux side (scripts/test-windows.sh) to do `op` with `args` (Windows paths), and waits for it. */
function wineRequest(op, ...args) {
  const name = path.join(WINE_LINKS, `${process.pid}-${wineRequests++}`);
  writeFileSync(`${name}.tmp`, `${[op, ...args.map(unixPath)].join("\n")}\n`);
  renameSync(`${name}.tmp`, `${name}.req`);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (let waited = 0; !existsSync(`${name}.done`); waited += 5) {
    if (waited > WINE_LINK_WAIT_MS) throw new Error(`wine links: no answer to ${name}.req`);
    Atomics.wait(pause, 0, 0, 5);
  }
  const status = readFileSync(`${name}.done`, "utf8").trim();
  rmSync(`${name}.done`);
  if (status !== "0") throw new Error(`wine links: ${op} ${args.join(" ")} failed (${status})`);
}

/**
 * Under wine: asks the Linux side to swap `dir` `count` times between an empty directory and a unix
 * symlink to `target`, without waiting; returns a function telling whether the swapping has ended.
 */
export function wineSwapStart(dir, target, count) {
  const name = path.join(WINE_LINKS, `${process.pid}-${wineRequests++}`);
  writeFileSync(`${name}.tmp`, `swap\n${unixPath(dir)}\n${unixPath(target)}\n${count}\n`);
  renameSync(`${name}.tmp`, `${name}.req`);
  return () => existsSync(`${name}.done`);
}

/**
 * Under wine: asks the Linux side to swap the directory `dir` and a unix symlink `link` to `target` atomically
 * (renameat2's RENAME_EXCHANGE), as fast as it can, until told to stop; returns once the swapping runs.
 * `stop()` ends it and waits until `dir` is the directory again; it answers how many swaps were made.
 */
export function wineExchangeStart(dir, link, target) {
  const stopFile = path.join(WINE_LINKS, `${process.pid}-${wineRequests}.stop`);
  wineRequest("exchange", dir, link, target, stopFile);
  return () => {
    writeFileSync(stopFile, "");
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (let waited = 0; !existsSync(`${stopFile}.ended`); waited += 5) {
      if (waited > WINE_LINK_WAIT_MS) throw new Error(`wine links: the exchange of ${dir} did not stop`);
      Atomics.wait(pause, 0, 0, 5);
    }
    return Number(readFileSync(`${stopFile}.ended`, "utf8"));
  };
}

function makeSymlink(target, link) {
  if (WINE_LINKS) wineRequest("link", target, link);
  else symlinkSync(target, link);
}

export function tempDir(prefix = "pno-") {
  return realpathSync(mkdtempSync(path.join(tmpdir(), prefix)));
}

/**
 * The trees helpers/swapper.js races: `<base>/outside` (`f.txt` holding `secret`, `outside-marker`) and
 * `<base>/root` (`real/` and `swapdir/`, each with `f.txt` "INSIDE" and `inside-marker`, and `swap`, a
 * symlink to `real`). Returns `{ outside, root }`.
 */
export function swapTrees(base, secret = "SECRET") {
  const outside = makeTree(path.join(base, "outside"), { "f.txt": secret, "outside-marker": "" });
  const root = makeTree(path.join(base, "root"), {
    "real/f.txt": "INSIDE",
    "real/inside-marker": "",
    "swapdir/f.txt": "INSIDE",
    "swapdir/inside-marker": "",
    swap: { symlink: "real" },
  });
  return { outside, root };
}

export function makeTree(dir, spec) {
  for (const [rel, value] of Object.entries(spec)) {
    const p = path.join(dir, rel);
    if (rel.endsWith("/")) {
      mkdirSync(p, { recursive: true });
      continue;
    }
    mkdirSync(path.dirname(p), { recursive: true });
    if (value && typeof value === "object" && "symlink" in value) makeSymlink(value.symlink, p);
    else writeFileSync(p, value);
  }
  return dir;
}

/** Everything under `dir` as { relPath: content | "->target" | "<dir>" }, to prove nothing changed. */
export function snapshot(dir) {
  const out = {};
  const walk = (d) => {
    for (const name of readdirSync(d).sort()) {
      const p = path.join(d, name);
      const rel = path.relative(dir, p);
      const st = lstatSync(p);
      if (st.isSymbolicLink()) out[rel] = `->${readlinkSync(p)}`;
      else if (st.isDirectory()) {
        out[rel] = "<dir>";
        walk(p);
      } else out[rel] = readFileSync(p).toString("base64");
    }
  };
  walk(dir);
  return out;
}

export function removeTree(dir) {
  // Under wine a unix symlink looks like the directory it leads to, and Node's recursive rm would empty
  // that directory (a link to / would empty the host): the Linux side removes the tree, links as links.
  if (WINE_LINKS) wineRequest("rmtree", dir);
  else rmSync(dir, { recursive: true, force: true });
}
