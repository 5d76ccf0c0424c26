#!/usr/bin/env python3
"""Import cycles between the modules of a crate's src/: an edge is a path one file names (through
crate::, super::, self:: or a child module it declares) to a module neither its ancestor nor its
descendant; tests are left out. Prints each cycle (a strongly connected component) and its edges.
Usage: scripts/module-cycles.py crates/core/src [module-prefix ...] (also prints those modules' edges)."""
import re, sys, pathlib
src = pathlib.Path(sys.argv[1])
files = {}
for p in src.rglob("*.rs"):
    rel = p.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"): parts = parts[:-1]
    files[tuple(parts)] = p
def resolve(mod, path):
    segs = path.split("::")
    cur = list(mod)
    head = segs[0]
    if head == "crate": cur, segs = [], segs[1:]
    elif head in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super": cur = cur[:-1]
            segs = segs[1:]
    else: segs = segs  # child module of this file
    best = None
    for k in range(len(segs) + 1):
        cand = tuple(cur + segs[:k])
        if cand in files: best = cand
    return best
edges = {m: set() for m in files}
for mod, p in files.items():
    text = p.read_text()
    # drop test modules and tests.rs files (unit tests may name anything)
    if mod and mod[-1] == "tests": continue
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests \{", text)[0]
    text = re.sub(r"//.*", "", text)
    children = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M))
    uses = []
    # expand `use a::{b, c::{d}}` groups into paths
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        stack = [("", m.group(1).replace(" ", "").replace("\n", ""))]
        while stack:
            prefix, body = stack.pop()
            i = body.find("{")
            if i < 0:
                for piece in body.split(","):
                    if piece: uses.append(prefix + piece)
                continue
            head = body[:i]; depth = 0
            for j in range(i, len(body)):
                depth += body[j] == "{"; depth -= body[j] == "}"
                if depth == 0: break
            inner = body[i+1:j]; parts, d, cur = [], 0, ""
            for ch in inner:
                if ch == "," and d == 0: parts.append(cur); cur = ""; continue
                d += ch == "{"; d -= ch == "}"; cur += ch
            parts.append(cur)
            for part in parts:
                if part: stack.append((prefix + head, part))
    # a path followed by `(` names a function: its module is the path without the last segment
    for m in re.finditer(r"\b(\w+(?:::\w+)+)(\s*\()?", text):
        u = m.group(1)
        if u.split("::")[0] not in {"crate", "super", "self"} | children: continue
        if m.group(2): u = u.rsplit("::", 1)[0]
        uses.append(u)
    for u in uses:
        u = re.sub(r"::(self|\*)$", "", u.split(" as ")[0])
        target = resolve(mod, u)
        # an ancestor or descendant is the module tree itself, not an import between modules
        related = target is not None and (target[:len(mod)] == mod or mod[:len(target)] == target)
        if target is not None and not related:
            edges[mod].add(target)
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
want = sys.argv[2:]  # optional module prefixes to show edges of
for comp in sccs:
    print("cycle:", " <-> ".join(sorted(name(m) for m in comp)))
    for m in sorted(comp):
        print("   ", name(m), "->", ", ".join(sorted(name(t) for t in edges[m] if t in comp)))
for prefix in want:
    for m in sorted(edges):
        if name(m).startswith(prefix):
            print(name(m), "->", ", ".join(sorted(name(t) for t in edges[m])))
print(f"{len(sccs)} cycle(s)")
sys.exit(1 if sccs else 0)
