#!/usr/bin/env python3
"""Dead references in the docs and in the code that points at them. Checks, from the repository root:
- every relative Markdown link in README.md, DEVELOPING.md, docs/*.md, bench/NOTES.md and npm/*/README.md
  names a file that exists, and its #anchor a heading of that file (GitHub's heading ids);
- every path in backticks in those files exists: a repository path (`crates/core/src/root.rs`) as
  given, a shorter one (`notify/guard.rs`, `conn.rs`) as the end of some file's or directory's path;
  and every repository path in their prose (crates/..., docs/..., js/...);
- every path in DEVELOPING.md's code map (the tree under "## The layers") exists, each entry read
  beneath the directory entries it is indented under, and every source file (crates/*/src, crates/*/tests,
  src/, js/) is in it;
- every repository path a code comment names (`// see docs/sandbox.md`, `# crates/server/src/...`), and
  every docs/*.md any source line names, exists, with its #anchor.
A path written `path@commit` (history: `crates/core/src/exec/sandbox/guard.rs@3f661d3`) must have existed at
that commit instead.
Prints `file:line: missing path: X` or `file:line: missing anchor: X#a` for each and exits 1 if any.
Usage: scripts/check-docs.py (no arguments)."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOP = {
    ".ci", ".github", "__test__", "bench", "crates", "demo", "docs", "examples", "js", "npm",
    "pack-test", "scripts", "src",
}
ROOT_FILES = {
    "README.md", "DEVELOPING.md", "LICENSE", "Cargo.toml", "Cargo.lock", "package.json", "package-lock.json",
    "index.js", "index.d.ts", "native.cjs", "native.d.ts", "biome.json", "build.rs", "rustfmt.toml",
    "vitest.config.js", ".editorconfig", ".gitignore",
}
SOURCE_EXTS = {".rs", ".js", ".mjs", ".cjs", ".ts", ".sh", ".py", ".toml", ".yml", ".yaml", ".json"}
PATH_CHARS = r"[A-Za-z0-9_.\-/]"
# A repository path where prose or a comment names one (perhaps at a commit), and a docs page named anywhere.
REPO_PATH = re.compile(
    r"""(?<![\w./\-"'])((?:""" + "|".join(map(re.escape, sorted(TOP))) + r")/" + PATH_CHARS + r"*(?:@[0-9a-f]{7,40}\b)?)"
)
DOCS_REF = re.compile(r"(?<![\w./\-])(docs/[\w\-]+\.md)(#[\w\-]+)?")
# The source files DEVELOPING.md's code map must list.
MAPPED_SOURCE = re.compile(r"crates/[^/]+/(src|tests)/.*\.rs|src/.*\.rs|js/.*\.(js|ts)")
# Where a line's comment starts, per file type.
COMMENT = {
    ".rs": r"//(.*)", ".js": r"(?<![:\\])//(.*)|^\s*/?\*(.*)", ".mjs": r"(?<![:\\])//(.*)",
    ".cjs": r"(?<![:\\])//(.*)", ".ts": r"(?<![:\\])//(.*)|^\s*/?\*(.*)", ".sh": r"(?:^|\s)#(.*)",
    ".py": r"(?:^|\s)#(.*)", ".toml": r"(?:^|\s)#(.*)", ".yml": r"(?:^|\s)#(.*)", ".yaml": r"(?:^|\s)#(.*)",
}

problems = []


def report(file, line, what):
    problems.append(f"{file}:{line}: {what}")


def repo_files():
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [p for p in out.splitlines() if (ROOT / p).exists()]


FILES = repo_files()
# Every file and directory path, for the shorter paths (`notify/guard.rs` is the end of one of them).
ALL_PATHS = set(FILES)
for f in FILES:
    parts = f.split("/")
    for k in range(1, len(parts)):
        ALL_PATHS.add("/".join(parts[:k]) + "/")


def slug(heading):
    """GitHub's id for a heading: inline markup dropped, lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        ids, seen, fence = set(), {}, False
        for line in (ROOT / path).read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                ids.add(base if n == 0 else f"{base}-{n}")
        for m in re.finditer(r'<a (?:name|id)="([^"]+)"', (ROOT / path).read_text(encoding="utf-8")):
            ids.add(m.group(1))
        _anchors[path] = ids
    return _anchors[path]


def check_target(file, line, target, base_dir):
    """A link target relative to base_dir (a repository-relative directory, "" for the root)."""
    path, _, anchor = target.partition("#")
    if path:
        resolved = (ROOT / base_dir / path).resolve()
        try:
            rel = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            report(file, line, f"missing path: {target} (outside the repository)")
            return
        if not resolved.exists():
            report(file, line, f"missing path: {path}")
            return
    else:
        rel = file
    if anchor and rel.endswith(".md") and anchor not in anchors(rel):
        report(file, line, f"missing anchor: {path}#{anchor}")


def looks_like_path(token):
    if any(c in token for c in "<>*{}$ ()=:,'\"") or "//" in token or token.startswith(("-", ".", "/")):
        return token in ROOT_FILES or token.split("/")[0] in (".ci", ".github")
    head = token.split("/")[0]
    if "/" in token:
        return head in TOP or bool(re.fullmatch(PATH_CHARS + r"+\.(rs|js|ts|md|py|sh|json|toml)/?", token))
    return token in ROOT_FILES or bool(re.fullmatch(r"[A-Za-z0-9_\-]+\.(rs|md|py|sh)", token))


def placeholder(token):
    """An example path (`x.rs`, `src/a.ts`): a file or directory named by one letter."""
    return any(len(seg.split(".")[0]) == 1 for seg in token.rstrip("/").split("/"))


def ignored(token):
    """A generated path (`bench/.corpus/linux`, `target/`): what .gitignore names need not exist."""
    return subprocess.run(["git", "check-ignore", "--no-index", "-q", token], cwd=ROOT).returncode == 0


def existed(path, commit):
    """A path as of a commit (`crates/core/src/x.rs@92b72ad`): history in bench/NOTES.md names files since
    moved. A commit this clone does not have (a shallow CI checkout) cannot be asked, and passes."""
    def git_has(obj):
        return subprocess.run(["git", "cat-file", "-e", obj], cwd=ROOT, capture_output=True).returncode == 0
    return git_has(f"{commit}:{path}") or not git_has(f"{commit}^{{commit}}")


def path_exists(token):
    token = token.rstrip(".")
    at = re.fullmatch(r"(.+)@([0-9a-f]{7,40})", token)
    if at:
        return existed(*at.groups())
    if placeholder(token) or ignored(token):
        return True
    head = token.split("/")[0]
    if head in TOP or token in ROOT_FILES:
        return (ROOT / token).exists()
    return any(p == token or p.endswith("/" + token) for p in ALL_PATHS)


def check_markdown(file):
    base_dir = str(pathlib.PurePosixPath(file).parent)
    base_dir = "" if base_dir == "." else base_dir
    fence = False
    for n, line in enumerate((ROOT / file).read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            check_target(file, n, target, base_dir)
        for m in re.finditer(r"`([^`\n]+)`", line):
            token = m.group(1).strip()
            if looks_like_path(token) and not path_exists(token):
                report(file, n, f"missing path: {token}")
        prose = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "", line))
        for m in REPO_PATH.finditer(prose):
            token = m.group(1).rstrip(".,;:)")
            after = prose[m.end() : m.end() + 1]
            if after and after in "*{<#":
                continue  # a glob, or another project's issue (owner/repo#N)
            if not path_exists(token):
                report(file, n, f"missing path: {token}")


def check_code_map(file="DEVELOPING.md"):
    """The tree in the code block under "## The layers": each entry beneath the directory entries above it."""
    lines = (ROOT / file).read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("## The layers"))
        start = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    except StopIteration:
        report(file, 1, 'no code map (a ``` block under "## The layers")')
        return
    mapped = set()
    stack = []  # (indent, directory path)
    last_indent = -2
    for n in range(start + 1, len(lines)):
        line = lines[n]
        if line.startswith("```"):
            break
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent > last_indent + 2:
            continue  # a description's continuation
        m = re.match(r"((?:[\w.<>/*\-]+, )*[\w.<>/*\-]+)", line[indent:])
        if not m:
            continue
        last_indent = indent
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        names = m.group(1).split(", ")
        for name in names:
            if "<" in name or "*" in name:
                continue
            path = parent + name
            mapped.add(path)
            if not (ROOT / path).exists():
                report(file, n + 1, f"missing path: {path} (code map)")
        if len(names) == 1 and names[0].endswith("/"):
            stack.append((indent, parent + names[0]))
    # The other way: every source file is in the map, by name or under a directory entry listed
    # without its files (`query/`, `__test__/`).
    leaves = [d for d in mapped if d.endswith("/") and not any(p != d and p.startswith(d) for p in mapped)]
    for f in FILES:
        if not MAPPED_SOURCE.fullmatch(f) or f.endswith(".d.ts") or f in mapped:
            continue
        if not any(f.startswith(d) for d in leaves):
            report(file, start + 1, f"not in the code map: {f}")


def check_source(file):
    ext = pathlib.PurePosixPath(file).suffix
    if ext not in SOURCE_EXTS or file.startswith("npm/") or file.endswith(".d.ts") and file.startswith("native"):
        return
    try:
        text = (ROOT / file).read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError):
        return
    comment = re.compile(COMMENT[ext]) if ext in COMMENT else None
    test = file.startswith("__test__/")
    for n, line in enumerate(text.splitlines(), 1):
        seen = set()
        c = comment.search(line) if comment else None
        body = next((g for g in c.groups() if g is not None), "") if c else ""
        # A pointer at the docs: in a comment, or anywhere in production code (an error message).
        for m in DOCS_REF.finditer(line if not test and ext != ".json" else body):
            seen.add(m.group(1))
            if not placeholder(m.group(1)):
                check_target(file, n, m.group(1) + (m.group(2) or ""), "")
        for m in REPO_PATH.finditer(body):
            token = m.group(1).rstrip(".,;:)")
            after = body[m.end() : m.end() + 1]
            if token in seen or after in "*{<#\"'" and after or (test and token.split("/")[0] == "src"):
                continue  # a glob, another project's issue, a string in a doc example, a test's fixture tree
            if not path_exists(token):
                report(file, n, f"missing path: {token}")


def main():
    docs = ["README.md", "DEVELOPING.md", "bench/NOTES.md"]
    docs += sorted(f for f in FILES if re.fullmatch(r"docs/[^/]+\.md|npm/[^/]+/README\.md", f))
    for f in docs:
        if (ROOT / f).exists():
            check_markdown(f)
        else:
            report(f, 0, "missing path: " + f)
    check_code_map()
    for f in FILES:
        check_source(f)
    for p in problems:
        print(p)
    if problems:
        print(f"check-docs: {len(problems)} dead reference(s)", file=sys.stderr)
        return 1
    print(f"check-docs: no dead references ({len(docs)} docs, {len(FILES)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
