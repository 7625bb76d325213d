#!/usr/bin/env python3
"""Calls between the library's files go one way: no file of src/ calls a
function of another file that (directly or not) calls back into it.

Reads the symbols each object file of the build defines and uses (nm) and
finds the cycles of the file graph.  Two are there by design and listed in
docs/ARCHITECTURE.md ("Still two-way, by design"); any other is a failure,
named with its files.  Usage: layering.py BUILDDIR
"""
import collections
import glob
import os
import subprocess
import sys

# Cycles there by design: the I/O backends hand finished pieces to the
# engine; a group is a pager made of pagers.
ALLOWED = [
    {"io/engine", "io/pool", "io/uring"},
    {"pager/ahead", "pager/group", "pager/pager", "pager/stats"},
]


def name(obj, src):
    rel = os.path.relpath(obj, src).replace(os.sep + ".libs", "")
    return os.path.splitext(rel)[0].replace(os.sep, "/")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "."
    src = os.path.join(build, "src")
    every = glob.glob(os.path.join(src, "**", "*.o"), recursive=True)
    # libtool keeps the shared library's objects in .libs: one set only
    objs = [o for o in every if ".libs" not in o] or every
    if not objs:
        print(f"no object files under {src}: build first")
        return 77
    defines, uses = {}, collections.defaultdict(set)
    for o in objs:
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDBR":
                defines[f[2]] = name(o, src)
            elif len(f) == 2 and f[0] == "U":
                uses[name(o, src)].add(f[1])
    graph = collections.defaultdict(set)
    for o, syms in uses.items():
        for s in syms:
            if s in defines and defines[s] != o:
                graph[o].add(defines[s])

    # Tarjan's strongly connected components, iteratively.
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(comp)

    bad = [c for c in cycles if c not in ALLOWED]
    print(f"{len(graph)} files, {sum(len(v) for v in graph.values())} calls between them, "
          f"{len(cycles)} cycle(s), {len(bad)} not by design")
    for c in bad:
        print("files that call each other:", " ".join(sorted(c)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
