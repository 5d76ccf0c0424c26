// The grep fixture tree, built on demand (it holds `.git` directories, which git cannot commit).
// Used both by scripts/record-golden-grep.js (stock pi + rg) and by the tests (native tool).
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";

const utf16le = (s) => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(s, "utf16le")]);

export const FILES = {
  ".git/HEAD": "ref: refs/heads/main\n",
  ".gitignore": "ignored.txt\nbuild/\n",
  ".ignore": "secret.log\n",
  "ignored.txt": "needle in ignored\n",
  "secret.log": "needle in secret\n",
  "build/out.txt": "needle in build\n",
  ".hidden/h.txt": "needle hidden\n",
  ".env": "NEEDLE=1\nneedle env\n",
  "README.md": "# Title\nA needle in the readme\n",
  "docs/guide.md": "guide needle\nNeedle upper\n",
  "src/a.ts": "const a = 1;\n// needle a\nexport { a };\n",
  "src/b.ts": "needle b1\nfiller\nneedle b2\n",
  "src/deep/c.txt": "deep needle\n",
  "ctx.txt": `${["l1", "l2", "needle 3", "l4", "needle 5", "l6", "l7", "l8", "l9", "needle 10", "l11"].join("\n")}\n`,
  "many.txt": `${Array.from({ length: 8 }, (_, i) => `needle ${i + 1}`).join("\n")}\n`,
  "long.txt": `needle ${"x".repeat(600)}\nshort needle\n${"y".repeat(493)}needle😀tail\n`,
  "bin.dat": Buffer.from("needle before nul\n\0binary needle\n"),
  "utf16.txt": utf16le("first line\r\nneedle in utf16\r\n"),
  "crlf.txt": "needle crlf\r\nmid\rneedle lone cr\r\nend needle\r",
  "latin1.txt": Buffer.from([0x6e, 0x65, 0x65, 0x64, 0x6c, 0x65, 0x20, 0xe9, 0xff, 0x0a]),
  "big.txt": `${Array.from({ length: 1200 }, (_, i) => `needle row ${i} ${"z".repeat(60)}`).join("\n")}\n`,
  "nested/.git/HEAD": "ref: refs/heads/main\n",
  "nested/.gitignore": "local.txt\n",
  "nested/local.txt": "needle nested local\n",
  "nested/ignored.txt": "needle nested ignored-by-parent-only\n",
  "nested/kept.txt": "needle nested kept\n",
  "src/sub/x.txt": "needle in sub\n",
};

/** Writes the fixture tree under `dir` (which must exist). */
export function makeFixture(dir) {
  for (const [rel, content] of Object.entries(FILES)) {
    const file = path.join(dir, rel);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, content);
  }
}

/** The recorded searches: tool parameters, and whether stock's order is deterministic (one file). */
export const CASES = [
  { name: "tree", params: { pattern: "needle", glob: "!big.txt" }, exact: false },
  { name: "ignore-case", params: { pattern: "needle", ignoreCase: true, path: "docs" }, exact: true },
  { name: "literal", params: { pattern: "{ a }", literal: true, path: "src/a.ts" }, exact: true },
  { name: "regex", params: { pattern: "needle \\d+$", path: "ctx.txt" }, exact: true },
  { name: "context-overlap", params: { pattern: "needle", path: "ctx.txt", context: 2 }, exact: true },
  { name: "limit-proof", params: { pattern: "needle", path: "many.txt", limit: 3 }, exact: true },
  { name: "limit-exact", params: { pattern: "needle", path: "many.txt", limit: 8 }, exact: true },
  { name: "limit-context", params: { pattern: "needle", path: "many.txt", limit: 2, context: 1 }, exact: true },
  { name: "limit-context-window", params: { pattern: "needle", path: "ctx.txt", limit: 1, context: 2 }, exact: true },
  { name: "limit-fraction", params: { pattern: "needle", path: "many.txt", limit: 2.7 }, exact: true },
  { name: "long-lines", params: { pattern: "needle", path: "long.txt" }, exact: true },
  { name: "binary-walked", params: { pattern: "needle", glob: "*.dat" }, exact: true },
  { name: "binary-named", params: { pattern: "needle", path: "bin.dat" }, exact: true },
  { name: "utf16", params: { pattern: "needle", path: "utf16.txt" }, exact: true },
  { name: "crlf", params: { pattern: "needle", path: "crlf.txt" }, exact: true },
  { name: "crlf-anchor", params: { pattern: "needle crlf$", path: "crlf.txt" }, exact: true },
  { name: "non-utf8", params: { pattern: "needle", path: "latin1.txt" }, exact: true },
  { name: "bytes-cut", params: { pattern: "needle", path: "big.txt", limit: 1000 }, exact: true },
  { name: "hidden", params: { pattern: "needle", path: ".hidden" }, exact: true },
  { name: "nested-repo", params: { pattern: "needle", path: "nested" }, exact: false },
  { name: "glob-name", params: { pattern: "needle", glob: "*.md" }, exact: false },
  { name: "glob-negated", params: { pattern: "needle", glob: "!*.txt" }, exact: false },
  { name: "glob-path", params: { pattern: "needle", glob: "src/**/*.txt" }, exact: false },
  { name: "glob-dot-slash", params: { pattern: "needle", glob: "./src/*.ts" }, exact: false },
  { name: "glob-in-subdir", params: { pattern: "needle", path: "src", glob: "*.ts" }, exact: false },
  { name: "single-file", params: { pattern: "needle", path: "src/b.ts", glob: "*.md" }, exact: true },
  { name: "no-match", params: { pattern: "zzzz-nothing" }, exact: true },
  { name: "missing-path", params: { pattern: "needle", path: "does/not/exist" }, exact: true, error: true },
  { name: "regex-error", params: { pattern: "foo(" }, exact: true, error: true },
  { name: "glob-error", params: { pattern: "needle", glob: "[" }, exact: true, error: true },
];
