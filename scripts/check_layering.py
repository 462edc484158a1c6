#!/usr/bin/env python3
# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Checks that every folder includes only what its layer may use (docs/layout.md's arrows).

Usage: check_layering.py ROOT

Every `#include "x/..."` whose first component is a folder of the repository is checked against
ALLOWED below: a folder may include its own headers and those of the folders listed for it, and
nothing else (a stray internal include fails here, with the file, the line and the rule). The
repository root is on every target's include path, so the compiler alone would accept such an
include; this check is what keeps the layers honest, and it runs as the `layering` test.

Before it reads the tree, the check proves it can fail: it plants stray includes (an internal
header in a public-API-only folder, the library in the float64 oracle, a kernel family outside
the library) and exits 1 when any of them passes unnoticed.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layout_doc import tree_files  # noqa: E402  (the tree as git lists it)

# Folder -> the repository folders (or single headers) its files may include, besides its own.
# Folders absent here (tests/, scripts/) may include anything; third-party headers (hwy/, CLI/,
# doctest/, pybind11/ ...) are not the tree's and are not checked.
ALLOWED = {
    "include": [],
    "core": ["include"],
    "cpu": ["include", "core"],
    # The CUDA rows see the dispatch table's row type and a Context's stream and workspace slot,
    # nothing else of src/.
    "cuda": ["include", "core", "src/dispatch.h", "src/device_slot.h"],
    "src": ["include", "core", "cpu"],
    "bindings/c": ["include"],
    "bindings/python": ["include"],
    "examples": ["include"],
    "reference": [],
    "fuzz": ["include"],
    "bench": ["include", "reference"],
    "tools": ["include", "reference", "bench", "fuzz"],
    "testing": ["cuda"],
}
# Public headers are included as "dynattn/x.h" (include/ is on the path).
ALIASES = {"dynattn": "include"}
SOURCE = re.compile(r"\.(h|hh|hpp|c|cc|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The ALLOWED key a repository path belongs to (the longest matching prefix), or None."""
    best = None
    for layer in ALLOWED:
        if (path == layer or path.startswith(layer + "/")) and (not best or len(layer) > len(best)):
            best = layer
    return best


def violations(path, text, top_folders):
    """Problems of one file, as 'path:line: ...' strings."""
    layer = layer_of(path)
    if layer is None:
        return []
    allowed = [layer] + ALLOWED[layer]
    problems = []
    for match in INCLUDE.finditer(text):
        target = match.group(1)
        first = target.split("/", 1)[0]
        if "/" not in target or (first not in top_folders and first not in ALIASES):
            continue  # a header beside the file, or a third-party one
        resolved = ALIASES[first] + "/" + target if first in ALIASES else target
        if any(resolved == a or resolved.startswith(a + "/") for a in allowed):
            continue
        line = text.count("\n", 0, match.start()) + 1
        problems.append(f'{path}:{line}: includes "{target}", but {layer}/ may include only '
                        f'{", ".join(a + ("" if "." in a else "/") for a in allowed)}')
    return problems


def self_test(top_folders):
    """Stray includes that must be caught; returns the ones that were not."""
    planted = [
        ("tools/x.cc", '#include "core/codec.h"\n'),
        ("reference/x.cc", '#include "dynattn/types.h"\n'),
        ("examples/x.cc", '#include "src/context.h"\n'),
        ("bindings/python/src/x.cc", '#include "src/validate.h"\n'),
        ("cuda/x.cu", '#include "src/context.h"\n'),
        ("core/x.h", '#include "cpu/kernels.h"\n'),
        ("fuzz/x.cc", '#include "tools/npy.h"\n'),
        ("include/dynattn/x.h", '#include "src/plan_state.h"\n'),
    ]
    missed = [f"{path}: {text.strip()}" for path, text in planted
              if not violations(path, text, top_folders)]
    accepted = [("tools/x.cc", '#include "dynattn/plan.h"\n#include "bench/benchmark.h"\n'),
                ("cuda/x.cu", '#include "src/dispatch.h"\n#include "core/plan.h"\n')]
    missed += [f"{path}: refused {text.strip()!r}" for path, text in accepted
               if violations(path, text, top_folders)]
    return missed


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    top_folders = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}
    missed = self_test(top_folders)
    if missed:
        print("check_layering: the check let planted stray includes through:", *missed,
              sep="\n  ", file=sys.stderr)
        return 1
    sources = sorted(f for f in tree_files(root) if SOURCE.search(f))
    problems = []
    for path in sources:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            problems += violations(path, f.read(), top_folders)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"check_layering: {len(sources)} files, every include within its layer "
          f"(and the {len(ALLOWED)} rules refuse every planted stray include)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
