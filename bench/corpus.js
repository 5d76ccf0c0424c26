// Benchmark corpora, prepared once under bench/.corpus/ (git-ignored):
// - small: a copy of the installed pi-coding-agent package (~1.3k files, with its minified bundles);
// - pi-mono: a clone of pi's own repository (~700 files), the "small repository", when a git copy
//   of it is on this machine (BENCH_PIMONO_GIT, or the library's mirror); the bench has no network;
// - kernel: the Linux source from Debian's linux-source tarball (/usr/src/linux-source-*.tar.xz), with
//   Debian's "ignore everything at the top level" block stripped from .gitignore, as upstream has it;
// - monorepo (made only by the index rows, prepareMonorepo below): copies of the kernel.
import { execFileSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statfsSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = path.join(here, ".corpus");

export async function prepareCorpora(log) {
  mkdirSync(dir, { recursive: true });
  const small = path.join(dir, "small");
  if (!existsSync(small)) {
    const src = ["@earendil-works/pi-coding-agent", "@mariozechner/pi-coding-agent"]
      .map((p) => path.join(here, "..", "node_modules", p))
      .find(existsSync);
    log(`preparing small corpus from ${src}`);
    cpSync(src, small, { recursive: true, verbatimSymlinks: true });
    execFileSync("git", ["init", "-q", small]);
  }
  const { piMono, piMonoWhy } = preparePiMono(log);
  let kernel = process.env.BENCH_KERNEL_DIR || path.join(dir, "linux");
  let kernelWhy = null;
  if (!existsSync(kernel)) {
    const tarball = existsSync("/usr/src") && readdirSync("/usr/src").find((f) => /^linux-source-.*\.tar\.xz$/.test(f));
    if (!tarball) {
      kernelWhy = "kernel corpus: no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)";
      kernel = null;
    } else {
      log(`extracting /usr/src/${tarball} (takes ~15 s)`);
      execFileSync("tar", ["xJf", path.join("/usr/src", tarball), "-C", dir]);
      renameSync(path.join(dir, tarball.replace(/\.tar\.xz$/, "")), kernel);
      const gi = path.join(kernel, ".gitignore");
      const text = readFileSync(gi, "utf8");
      const cut = text.indexOf("#\n# Debian packaging");
      if (cut > 0) writeFileSync(gi, `${text.slice(0, cut).trimEnd()}\n`);
      writtenOut();
    }
  }
  return { small, piMono, piMonoWhy, kernel, kernelWhy };
}

const PIMONO_GIT = process.env.BENCH_PIMONO_GIT || "/work/.mirror/badlogic+pi-mono/repo";

function preparePiMono(log) {
  const piMono = path.join(dir, "pi-mono");
  if (existsSync(piMono)) return { piMono, piMonoWhy: null };
  if (!existsSync(PIMONO_GIT))
    return { piMono: null, piMonoWhy: `pi-mono corpus: no git copy at ${PIMONO_GIT} (set BENCH_PIMONO_GIT)` };
  log(`cloning pi-mono from ${PIMONO_GIT}`);
  execFileSync("git", ["clone", "-q", PIMONO_GIT, piMono]);
  return { piMono, piMonoWhy: null };
}

/** Copies of the kernel in the monorepo: 4 × 78.6k files = 314k searched files, over the 300k. */
const MONOREPO_COPIES = 4;
/** Written last into a finished monorepo; a different or missing stamp makes the bench remake it. */
const MONOREPO_STAMP = `monorepo v2: ${MONOREPO_COPIES} kernel copies + node_modules, git init`;

/**
 * A large monorepo under bench/.corpus/monorepo, made from the kernel corpus once (~1 min) and reused by
 * later runs: a git repository (`git init`, no commits, so `.gitignore` rules apply as in a checkout)
 * holding `packages/linux-1..4`, each a copy of the kernel, and a git-ignored `node_modules/` copied from
 * this repository's own (a dependency tree on disk that searches must skip). Real copies, not hard links:
 * the index watches every file that has more than one link (an edit through another of its names fires no
 * event on the directory it watches), so hard-linked copies would cost a watch per file, here and in the
 * kernel corpus they link to, and would share one page cache between the copies. Returns `{ dir }` or
 * `{ why }`.
 */
export function prepareMonorepo(kernel, log) {
  const mono = path.join(dir, "monorepo");
  // In .git/, which no search enters.
  const stamp = path.join(mono, ".git", "bench-stamp");
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === MONOREPO_STAMP) return { dir: mono };
  if (!kernel) return { why: "monorepo corpus: no kernel corpus to copy" };
  // 4 copies of the kernel's 1.3 GB and a 0.5 GB node_modules take ~6 GB; ask for a margin.
  const { bavail, bsize } = statfsSync(dir);
  if (bavail * bsize < 10 * 2 ** 30) return { why: "monorepo corpus: less than 10 GiB free under bench/.corpus" };
  const started = Date.now();
  log(`making the monorepo corpus (${MONOREPO_COPIES} kernel copies + node_modules, ~1 min, ~6 GB)`);
  // Made under a temporary name and renamed when complete, so an interrupted run leaves nothing reusable.
  const tmp = `${mono}.partial`;
  rmSync(tmp, { recursive: true, force: true });
  rmSync(mono, { recursive: true, force: true });
  mkdirSync(path.join(tmp, "packages"), { recursive: true });
  execFileSync("git", ["init", "-q", tmp]);
  writeFileSync(path.join(tmp, ".gitignore"), "node_modules/\n");
  for (let i = 1; i <= MONOREPO_COPIES; i++) {
    execFileSync("cp", ["-a", kernel, path.join(tmp, "packages", `linux-${i}`)]);
  }
  const modules = path.join(here, "..", "node_modules");
  if (existsSync(modules)) execFileSync("cp", ["-a", modules, path.join(tmp, "node_modules")]);
  writeFileSync(path.join(tmp, ".git", "bench-stamp"), MONOREPO_STAMP);
  renameSync(tmp, mono);
  writtenOut();
  log(`monorepo corpus made in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return { dir: mono };
}

/**
 * Waits until a new corpus's gigabytes are on disk: written back in the background, they would slow the
 * rows timed next (the kernel index build, for one).
 */
function writtenOut() {
  execFileSync("sync");
}
