// Benchmark corpora, prepared once under bench/.corpus/ (git-ignored):
// - small: a copy of the installed pi-coding-agent package (~1.3k files), a small real repository;
// - kernel: the Linux source from Debian's linux-source tarball (/usr/src/linux-source-*.tar.xz), with
//   Debian's "ignore everything at the top level" block stripped from .gitignore, as upstream has it.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
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
    }
  }
  return { small, kernel, kernelWhy };
}
