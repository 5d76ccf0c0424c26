#!/usr/bin/env python3
"""Import cycles between the modules of a crate's src/.

An edge A -> B is a real use in A's code of an item defined in B: every path A names (through crate::,
super::, self::, a child module or a name A imports) is followed through `use` and `pub use` to the module
that defines the item, so a re-export does not hide where an item lives. A child's use of an item its
ancestor defines is an edge like any other; a module's use of its own descendants is its composition, not
an import, and declaring a module (`mod x;`), re-exporting (`pub use`) or importing a module by name is not
a use by itself. Tests are left out: every item under `#[cfg(test)]`
(a test module of any name, inline or in its own file, a test-only function or import).
Prints each cycle (a strongly connected component) and its edges, with the lines that make them.
Usage: scripts/module-cycles.py crates/core/src [module-prefix ...] (also prints those modules' edges);
scripts/module-cycles.py --self-test checks the checker on small crates written to a temp dir."""
import re, sys, pathlib


def self_test():
    """Each case: a crate's files, and the cycle the check must report (None: none)."""
    import subprocess, tempfile
    cases = {
        "a cycle through a re-export": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "mod inner;\npub(crate) use inner::go;\n",
            "a/inner.rs": "pub(crate) fn go() { crate::b::stop() }\n",
            "b.rs": "pub(crate) fn stop() {}\npub(crate) fn later() { crate::a::go() }\n",
        }, "a::inner <-> b"),
        "the same call from test code only": ({
            "lib.rs": "mod a;\nmod b;\n#[cfg(test)]\nmod helpers;\n",
            "a/mod.rs": "pub(crate) mod inner;\npub(crate) use inner::go;\n",
            "a/inner.rs": "pub(crate) fn go() { crate::b::stop() }\n",
            "b.rs": "pub(crate) fn stop() {}\n#[cfg(test)]\nfn t() { crate::a::inner::go(); }\n"
                    "#[cfg(test)]\nmod checks {\n    fn u() { crate::a::inner::go(); }\n}\n",
            "helpers.rs": "pub fn x() { crate::a::inner::go() }\n",
        }, None),
        "a child's use of its ancestor's item": ({
            "lib.rs": "mod p;\nmod s;\n",
            "p/mod.rs": "mod c;\npub(crate) struct Q;\npub(crate) fn run() { crate::s::k() }\n",
            "p/c.rs": "pub(crate) fn h() -> super::Q { super::Q }\n",
            "s.rs": "pub(crate) fn k() { let _ = crate::p::c::h(); }\n",
        }, "p <-> p::c <-> s"),
        "a call of a function named like a module": ({
            "lib.rs": "mod exec;\nmod probe;\n",
            "exec/mod.rs": "mod spawn;\npub(crate) use spawn::spawn;\n",
            "exec/spawn.rs": "pub(crate) fn spawn() { crate::probe::plan() }\n",
            "probe.rs": "pub(crate) fn plan() {}\npub(crate) fn support() { crate::exec::spawn() }\n",
        }, "exec::spawn <-> probe"),
    }
    failed = 0
    for name, (tree, cycle) in cases.items():
        with tempfile.TemporaryDirectory() as dir:
            for path, text in tree.items():
                (pathlib.Path(dir) / path).parent.mkdir(parents=True, exist_ok=True)
                (pathlib.Path(dir) / path).write_text(text)
            run = subprocess.run([sys.executable, __file__, dir], capture_output=True, text=True)
            ok = (run.returncode == 0) if cycle is None else (run.returncode == 1 and f"cycle: {cycle}\n" in run.stdout)
            print(("ok  " if ok else "FAIL"), name + ("" if ok else f": exit {run.returncode}\n{run.stdout}{run.stderr}"))
            failed += not ok
    sys.exit(1 if failed else 0)


if sys.argv[1:] == ["--self-test"]:
    self_test()

src = pathlib.Path(sys.argv[1])
files = {}
for p in src.rglob("*.rs"):
    parts = list(p.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    files[tuple(parts)] = p


def blank_literals(text):
    """Comments removed and string/char literals emptied, so braces and paths in them do not count."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i): depth, i = depth + 1, i + 2
                elif text.startswith("*/", i): depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n": out.append("\n")
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end)); i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j)); i = j + 1
        elif c == "'" and (m := re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'").match(text, i)):
            out.append("' '"); i = m.end()
        else:
            out.append(c); i += 1
    return "".join(out)


CFG_TEST = re.compile(r"#\[cfg\((?:all\()?test\b[^\]]*\]")
ATTR = re.compile(r"\s*#\[[^\]]*\]")


def strip_cfg_test(text):
    """Every item under #[cfg(test)] removed; returns the text and the child modules declared test-only."""
    test_children = set()
    while (m := CFG_TEST.search(text)):
        i = m.end()
        while (a := ATTR.match(text, i)):
            i = a.end()
        head = re.compile(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").match(text, i)
        if head:
            test_children.add(head.group(1))
        depth, j = 0, i
        while j < len(text):
            ch = text[j]
            if ch in "([": depth += 1
            elif ch in ")]": depth -= 1
            elif ch == ";" and depth == 0: break
            elif ch == "{" and depth == 0:
                d = 0
                while j < len(text):
                    d += text[j] == "{"; d -= text[j] == "}"
                    if d == 0: break
                    j += 1
                break
            j += 1
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), j + 1) + text[j + 1:]
    return text, test_children


def split_use_tree(body):
    """`a::{b, c::{d as e}}` -> ["a::b", "a::c::d@e"]."""
    out, stack = [], [("", re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", body)))]
    while stack:
        prefix, body = stack.pop()
        i = body.find("{")
        if i < 0:
            out += [prefix + piece for piece in body.split(",") if piece]
            continue
        head, depth = body[:i], 0
        for j in range(i, len(body)):
            depth += body[j] == "{"; depth -= body[j] == "}"
            if depth == 0: break
        parts, d, cur = [], 0, ""
        for ch in body[i + 1:j]:
            if ch == "," and d == 0: parts.append(cur); cur = ""; continue
            d += ch == "{"; d -= ch == "}"; cur += ch
        parts.append(cur)
        stack += [(prefix + head, part) for part in parts if part]
    return out


USE = re.compile(r"(?:\b(pub(?:\([^)]*\))?)\s+)?\buse\s+([^;]+);")
info = {}  # module -> (text, child modules, imports {name: [path segments]}, [(segments, pub use?, offset)])
tests = set()
for mod, p in files.items():
    text, test_children = strip_cfg_test(blank_literals(p.read_text()))
    tests |= {mod + (c,) for c in test_children}
    children = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M))
    imports, uses = {}, []
    for m in USE.finditer(text):
        for piece in split_use_tree(m.group(2)):
            path, _, alias = piece.partition("@")
            segs = [s for s in path.split("::") if s]
            if not segs: continue
            if segs[-1] == "self": segs = segs[:-1]
            name = alias or segs[-1]
            if segs[-1] != "*":  # a name imported under several cfgs leads to each of them
                imports.setdefault(name, []).append(segs)
            uses.append((segs, bool(m.group(1)), m.start()))
    info[mod] = (text, children, imports, uses)
# a module declared under #[cfg(test)], or named tests, is test code with everything below it
tests |= {m for m in files if m and m[-1] == "tests"}
is_test = lambda m: any(m[:k] in tests for k in range(1, len(m) + 1))
live = [m for m in files if not is_test(m)]


def resolve(mod, segs, call=False, seen=0):
    """Where `segs`, named in `mod`, leads: {("module", m)} when it names a module itself, {("item", m)} for
    an item m defines, empty outside the crate. `call`: the last segment is a function (a module may share
    its name), so it is looked up as an item."""
    if seen > 32: return set()
    cur = list(mod)
    if segs[0] == "crate": cur, segs = [], segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super": cur = cur[:-1]
            segs = segs[1:]
    elif tuple(cur + segs[:1]) not in files and segs[0] not in info[tuple(cur)][2]:
        return set()  # another crate (std, libc, ...)
    while segs:
        seg, here = segs[0], tuple(cur)
        if seg == "*": return {("module", here)}
        last_value = call and len(segs) == 1
        if here + (seg,) in files and not last_value:
            cur.append(seg); segs = segs[1:]; continue
        imported = info[here][2].get(seg) if here in info else None
        if imported:
            out = set()
            for path in imported:
                out |= resolve(here, path + segs[1:], call, seen + 1)
            return out
        return {("item", here)}
    return {("module", tuple(cur))}


PATH = re.compile(r"(?<![\w:])((?:\w+::)+\w+)(\s*\()?")
edges = {m: {} for m in live}
for mod in live:
    text, children, imports, uses = info[mod]
    line = lambda at: text.count("\n", 0, at) + 1
    found = []
    for segs, reexport, at in uses:
        if reexport: continue  # a re-export is followed where it is used, not counted where it is made
        found.append((segs, at, segs[-1] == "*", False))
    body = USE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for m in PATH.finditer(body):
        segs = m.group(1).split("::")
        if segs[0] in ("crate", "super", "self") or segs[0] in children or segs[0] in imports:
            found.append((segs, m.start(), False, bool(m.group(2))))
    for segs, at, glob, call in found:
        for kind, target in resolve(mod, segs, call):
            if kind == "module" and not glob: continue  # naming a module is not using it
            if is_test(target) or target == mod: continue
            if target[:len(mod)] == mod: continue  # a module composing its own children
            if glob and mod[:len(target)] == target: continue  # `use super::*` cannot say which items
            edges[mod].setdefault(target, []).append(f"{files[mod].relative_to(src)}:{line(at)} {'::'.join(segs)}")
# Tarjan
index, low, onstack, stack, sccs, n = {}, {}, set(), [], [], [0]
def strong(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); onstack.add(v)
    for w in edges[v]:
        if w not in index: strong(w); low[v] = min(low[v], low[w])
        elif w in onstack: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); onstack.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
sys.setrecursionlimit(10000)
for v in edges:
    if v not in index: strong(v)
name = lambda m: "::".join(m) or "<root>"
for comp in sccs:
    print("cycle:", " <-> ".join(sorted(name(m) for m in comp)))
    for m in sorted(comp):
        for t in sorted(t for t in edges[m] if t in comp):
            where = edges[m][t]
            print(f"    {name(m)} -> {name(t)}: {where[0]}" + (f" (+{len(where) - 1} more)" if len(where) > 1 else ""))
for prefix in sys.argv[2:]:
    for m in sorted(edges):
        if name(m).startswith(prefix):
            print(name(m), "->", ", ".join(sorted(name(t) for t in edges[m])))
print(f"{len(sccs)} cycle(s)")
sys.exit(1 if sccs else 0)
