#!/usr/bin/env python3
"""Lists import cycles between the modules of a crate's src/ (test modules left out)."""
import os, re, sys

def modules(src):
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] in ('lib', 'main', 'mod'):
                rel = rel[:-1]
            if rel and rel[-1] == 'tests':
                continue
            mods[tuple(rel)] = os.path.join(dirpath, f)
    return mods

def code(path):
    s = open(path).read()
    # inline test modules run to the end of the file by convention
    m = re.search(r'^#\[cfg\(test\)\]\s*\n\s*(pub(\(\w+\))? )?mod \w+ \{', s, re.M)
    if m:
        s = s[:m.start()]
    s = re.sub(r'//[^\n]*', '', s)
    return s

def refs(mod, s, mods):
    out = set()
    # expand use-trees roughly: every path-like token
    for m in re.finditer(r'\b((?:crate|super|self)(?:::\{?[A-Za-z_][A-Za-z0-9_]*)+)', s):
        parts = m.group(1).replace('{', '').split('::')
        base = list(mod)
        if parts[0] == 'crate':
            base = []
            parts = parts[1:]
        else:
            while parts and parts[0] in ('super', 'self'):
                if parts[0] == 'super':
                    base = base[:-1]
                parts = parts[1:]
        path = base + parts
        for n in range(len(path), -1, -1):
            if tuple(path[:n]) in mods:
                out.add(tuple(path[:n]))
                break
    # `use child::…` inside a module file
    for m in re.finditer(r'^\s*(?:pub(?:\([^)]*\))? )?use ([a-z_][a-z0-9_]*)::', s, re.M):
        t = tuple(list(mod) + [m.group(1)])
        if t in mods:
            out.add(t)
    return out

def related(a, b):
    return a[:len(b)] == b or b[:len(a)] == a

def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    def visit(v):
        index[v] = low[v] = len(index); stack.append(v); on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop(); on.discard(w); c.append(w)
                if w == v: break
            if len(c) > 1: out.append(c)
    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index: visit(v)
    return out

for src in sys.argv[1:]:
    mods = modules(src)
    graph = {m: {r for r in refs(m, code(p), mods) if not related(m, r)} for m, p in mods.items()}
    cycles = sccs(graph)
    print(f'{src}: {len(mods)} modules, {sum(len(v) for v in graph.values())} edges, {len(cycles)} cycles')
    for c in cycles:
        print('  cycle:', ' <-> '.join('::'.join(x) for x in sorted(c)))
