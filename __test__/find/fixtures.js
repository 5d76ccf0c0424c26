// Fixture trees for the find tests, built by code (symlinks, git repositories and non-UTF-8 names do not
// survive being committed), and the search cases recorded against pi's stock find tool (fd) as goldens.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { removeTree } from "../helpers/tree.js";

function write(root, rel, content = "") {
  const p = path.join(root, rel);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, content);
}

// Windows (under wine and on the runner): file names are UTF-16, so the non-UTF-8 name cannot exist; the
// fixtures' symlinks are left out too (wine makes none, and shows the Linux helper's unix symlinks as what they
// lead to; links in a walk on Windows are tested in search-windows.test.js). `WINDOWS_ABSENT` names what is
// missing, for the goldens (recorded on Linux) to leave out.
const WINDOWS = process.platform === "win32";
const LINKS = ["link-file.txt", "link-dir", "loop", "dangling.ts", "link-out"];
const NON_UTF8 = "f\ufffd.bin";

/** Whether a golden's result line names an entry the Windows fixtures do not have. */
export function absentOnWindows(line) {
  if (!WINDOWS) return false;
  const first = line.split("/")[0].replace(/\/$/, "");
  return LINKS.includes(first) || first === NON_UTF8;
}

function gitInit(dir) {
  fs.mkdirSync(dir, { recursive: true });
  // No git under wine: a repository as the walk (and fd) sees one, a `.git` directory.
  if (WINDOWS) write(dir, ".git/HEAD", "ref: refs/heads/main\n");
  else execFileSync("git", ["init", "-q", dir], { stdio: "ignore" });
}

function symlink(target, link) {
  if (!WINDOWS) fs.symlinkSync(target, link);
}

/** Each fixture fills an empty directory `root`; `outside` is an empty sibling directory outside it. */
export const fixtures = {
  /** No git anywhere: ignore files still apply; hidden entries, symlinks, odd names. */
  plain(root, outside) {
    for (const f of [
      "src/a.ts",
      "src/b.js",
      "src/util/c.ts",
      "pkg/src/d.ts",
      "pkg/e.TS",
      "README.md",
      "docs/guide.md",
      "docs/API.MD",
      "a.txt",
      "b.txt",
      "c.txt",
      "ab.txt",
      "a-b/x.ts",
      "a/x.ts",
      ".hidden",
      ".config/settings.json",
      "build/out.js",
      "logs/app.log",
      "keep.log",
      "space name.ts",
      "deep/1/2/3/4/deep.ts",
      "br[a]ce.txt",
    ]) {
      write(root, f);
    }
    write(root, ".gitignore", "build/\n*.log\n!keep.log\n");
    write(root, "docs/.ignore", "guide.md\n");
    symlink("a.txt", path.join(root, "link-file.txt"));
    symlink("src", path.join(root, "link-dir"));
    symlink(".", path.join(root, "loop"));
    symlink("missing-target", path.join(root, "dangling.ts"));
    symlink(outside, path.join(root, "link-out"));
    write(outside, "secret.ts");
    // A file name that is not UTF-8: f<0xff>.bin
    if (!WINDOWS) {
      fs.writeFileSync(Buffer.concat([Buffer.from(`${root}/f`), Buffer.from([0xff]), Buffer.from(".bin")]), "");
    }
  },

  /** A git repository with a nested repository and a nested non-repository directory. */
  repo(root) {
    gitInit(root);
    for (const f of [
      "main.ts",
      "gen.out",
      "secret.key",
      "notes.tmp",
      "lib/x.ts",
      "lib/y.out",
      "nested/n.ts",
      "nested/n.out",
      "nested/n.local",
      "sub/s.ts",
      "sub/s.out",
      "sub/s.local",
      ".ignored-by-ignore/z.ts",
      "neg/keep.out",
      "neg/drop.out",
    ]) {
      write(root, f);
    }
    write(root, ".gitignore", "*.out\n*.tmp\n");
    write(root, ".git/info/exclude", "secret.key\n");
    write(root, ".ignore", ".ignored-by-ignore/\n");
    write(root, "neg/.ignore", "!keep.out\n");
    // The nested repository stops the parent's *.out; its own .gitignore drops *.local.
    gitInit(path.join(root, "nested"));
    write(root, "nested/.gitignore", "*.local\n");
    // A plain subdirectory inherits *.out and adds its own rule.
    write(root, "sub/.gitignore", "*.local\n");
  },

  /** No git at the top, a repository below: pi runs fd with --no-require-git here. */
  outerPlain(root) {
    for (const f of ["top.ts", "top.gen", "inner/i.ts", "inner/i.gen", "inner/i.own"]) write(root, f);
    write(root, ".gitignore", "*.gen\n");
    gitInit(path.join(root, "inner"));
    write(root, "inner/.gitignore", "*.own\n");
  },
};

/** Search cases: [fixture, pattern, { path?, limit? }]. */
export const cases = [
  ["plain", "*.ts"],
  ["plain", "*.TS"],
  ["plain", "*.md"],
  ["plain", "src/*.ts"],
  ["plain", "./src/*.ts"],
  ["plain", "**/src/*.ts"],
  ["plain", "src/**"],
  ["plain", "src/**/*.ts"],
  ["plain", "**/*.ts"],
  ["plain", "*"],
  ["plain", ".*"],
  ["plain", "{a,b}.txt"],
  ["plain", "[ab].txt"],
  ["plain", "[!a]*.txt"],
  ["plain", "*.{js,ts}"],
  ["plain", "br\\[a\\]ce.txt"],
  ["plain", "src"],
  ["plain", "link*"],
  ["plain", "*.log"],
  ["plain", "*.bin"],
  ["plain", "nothing-matches-this"],
  ["plain", "*/x.ts"],
  ["plain", "a*"],
  ["plain", "*.ts", { path: "pkg" }],
  ["plain", "src/*.ts", { path: "pkg" }],
  ["plain", "*", { limit: 3 }],
  ["plain", "*.ts", { limit: 2 }],
  ["repo", "*"],
  ["repo", "*.ts"],
  ["repo", "*.out"],
  ["repo", "*", { path: "nested" }],
  ["repo", "*", { path: "sub" }],
  ["outerPlain", "*"],
];

export function caseName([fixture, pattern, opts = {}]) {
  const extra = [opts.path && `in ${opts.path}`, opts.limit && `limit ${opts.limit}`].filter(Boolean).join(", ");
  return `${fixture}: ${pattern}${extra ? ` (${extra})` : ""}`;
}

/** A file name for the case's golden: its index (names alone collide once sanitized) and a readable slug. */
export function caseFile(c) {
  const i = String(cases.indexOf(c)).padStart(2, "0");
  return `${i}-${caseName(c).replace(/[^A-Za-z0-9.-]+/g, "_")}.json`;
}

/** Builds `name` in a fresh temporary directory; returns { root, outside, dispose }. */
export function buildFixture(tmpBase, name) {
  const base = fs.mkdtempSync(path.join(tmpBase, "pi-native-find-"));
  const root = path.join(base, "root");
  const outside = path.join(base, "outside");
  fs.mkdirSync(root);
  fs.mkdirSync(outside);
  fixtures[name](root, outside);
  return { root: fs.realpathSync(root), outside, dispose: () => removeTree(base) };
}

/** Splits a find tool's text into result lines and the trailing notice (`[...]`), if any. */
export function splitOutput(text) {
  const m = /\n\n\[([^\]]*)\]$/.exec(text);
  const body = m ? text.slice(0, m.index) : text;
  const lines = body === "No files found matching pattern" ? [] : body.split("\n");
  return { lines, notice: m ? m[1] : null };
}

/** What pi's ignore list (`**\/node_modules/**`, `**\/.git/**`) removes: stock fd lists these. */
export function prunedByPi(line) {
  return line.split("/").some((c) => c === ".git" || c === "node_modules");
}
