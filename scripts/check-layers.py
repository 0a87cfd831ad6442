#!/usr/bin/env python3
"""Lists the #include edges between the rooms of the repository and fails on one that points up.

The rooms, lowest first (a file may include its own room and any room below it):
  public     include/mlakit        the API: the standard library only
  ground     src/core              Status text, validation helpers, CPU features, dispatch registry
  simd       simd                  the kernels, per ISA level
  backends   src/reference src/cpu src/cuda
                                   the reference may not include simd or another back-end
  ops        src/ops               the front door: validate, route, run
  goldens    src/goldens           golden-file drivers, case generators, safetensors I/O
  tools      src/tools tests bench fuzz python examples
                                   anything below

usage: check-layers.py [--edges]   (--edges prints every edge between rooms with its count)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (room, rank, path prefixes); a path belongs to the room of its longest matching prefix.
ROOMS = [
    ("public", 0, ["include/mlakit/"]),
    ("ground", 1, ["src/core/"]),
    ("simd", 2, ["simd/"]),
    ("reference", 3, ["src/reference/"]),
    ("cpu", 3, ["src/cpu/"]),
    ("cuda", 3, ["src/cuda/"]),
    ("ops", 4, ["src/ops/"]),
    ("goldens", 5, ["src/goldens/"]),
    ("tools", 6, ["src/tools/", "tests/", "bench/", "fuzz/", "python/", "examples/"]),
]
# Back-ends are siblings: none includes another, and the reference (the oracle) shares nothing
# with what it checks.
FORBIDDEN = {("reference", "simd"), ("reference", "cpu"), ("reference", "cuda"), ("cpu", "cuda"),
             ("cpu", "reference"), ("cuda", "cpu"), ("cuda", "reference")}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".hpp", ".cpp", ".h", ".cu", ".cuh", ".inc")


def room_of(path):
    best = None
    for name, rank, prefixes in ROOMS:
        for p in prefixes:
            if path.startswith(p) and (best is None or len(p) > best[2]):
                best = (name, rank, len(p))
    return best[:2] if best else None


def resolve(include, including):
    """The repository path an include names: relative to the including file, then the include roots."""
    for base in (os.path.dirname(including), "include", "src", "", "tests"):
        path = os.path.normpath(os.path.join(base, include))
        if os.path.isfile(os.path.join(ROOT, path)):
            return path
    return None


def main():
    edges, bad = {}, []
    for top in ("include", "src", "simd", "tests", "bench", "fuzz", "python", "examples"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), ROOT)
                src = room_of(path)
                if src is None:
                    continue
                with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for inc in INCLUDE.findall(text):
                    target = resolve(inc, path)
                    dst = room_of(target) if target else None
                    if dst is None or dst[0] == src[0]:
                        continue
                    edges[(src[0], dst[0])] = edges.get((src[0], dst[0]), 0) + 1
                    if dst[1] > src[1] or (src[0], dst[0]) in FORBIDDEN:
                        bad.append(f"{path} -> {target} ({src[0]} may not include {dst[0]})")
    if "--edges" in sys.argv:
        for (a, b), n in sorted(edges.items()):
            print(f"{a:10s} -> {b:10s} {n}")
    for b in bad:
        print("UPWARD", b)
    print(f"{sum(edges.values())} includes between rooms, {len(bad)} pointing up or sideways")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
