#!/usr/bin/env python3
# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Checks docs/layout.md against the tree it describes.

Usage: check_layout_doc.py ROOT [--doc FILE]

Fails (exit 1, one line per problem) when docs/layout.md (or FILE)
  - names a path that does not exist under ROOT: a path in backticks or a path in a fenced code
    block (the dependency tree), written from the repository root. `*` matches as in a shell
    glob; X also counts as present when X.in exists (a file meson generates from a template); a
    bare file name in backticks (no slash, a known extension) must be some file's name (or X.in);
    the generated folders (build*/, device-kit/) may be named without existing;
  - links (Markdown) to a relative target that does not exist;
  - leaves out a top-level folder of the tree, or a second-level folder that holds source files.
    A folder counts as named when its own path appears (`src/ops/` or `src/ops`).
The tree is what git lists under ROOT (tracked files, and untracked ones it does not ignore);
without git, every file under ROOT but the build*/, device-kit/ and hidden folders.
"""

import fnmatch
import os
import re
import subprocess
import sys

SOURCE_EXTENSIONS = (".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".py", ".sh")
# Extensions that make a bare name in backticks (no slash) a file name to check.
FILE_EXTENSIONS = SOURCE_EXTENSIONS + (".md", ".txt", ".build", ".toml", ".in", ".map")
# Folders that builds and scripts create; the page may name them although they are not in the tree.
GENERATED = re.compile(r"^(build[^/]*|device-kit)(/|$)")

BACKTICKS = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
TREE_PATH = re.compile(r"(?<![\w./*-])([\w.*-]+/(?:[\w.*-]+/?)*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH_TOKEN = re.compile(r"^[\w.*/+-]+$")


def tree_files(root):
    """Relative paths of the files in the tree (see the module's docstring)."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f and os.path.isfile(os.path.join(root, f))]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for folder, dirs, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")
                   and not (rel == "." and d == "device-kit") and d != "__pycache__"]
        files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return files


def required_folders(files):
    """Top-level folders, and second-level folders holding source files."""
    folders = set()
    for f in files:
        parts = f.split("/")
        if len(parts) >= 2:
            folders.add(parts[0])
        if len(parts) == 3 and f.endswith(SOURCE_EXTENSIONS):
            folders.add(parts[0] + "/" + parts[1])
    return folders


def mentioned_paths(text):
    """(path, where) for every path the page names in backticks or in a fenced block."""
    paths = []
    fenced = [m.group(1) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    for block in fenced:
        paths += [(p, "code block") for p in TREE_PATH.findall(block) if "//" not in p]
    for token in BACKTICKS.findall(prose):
        token = token.strip()
        if not PATH_TOKEN.match(token) or token.startswith(("-", "/")):
            continue  # not a path, an option, or an absolute path outside the tree
        if "/" in token or token.endswith(FILE_EXTENSIONS):
            paths.append((token, "backticks"))
    return paths


def exists(root, files, path):
    bare = "/" not in path
    path = path.rstrip("/")
    if GENERATED.match(path):
        return True
    if bare:  # a bare file name: some file of the tree must have it
        return any(fnmatch.fnmatchcase(os.path.basename(f), pattern)
                   for f in files for pattern in (path, path + ".in"))
    if "*" in path:
        return any(fnmatch.fnmatchcase(f, path) or fnmatch.fnmatchcase(f, path + "/*")
                   for f in files)
    full = os.path.join(root, path)
    return os.path.exists(full) or os.path.exists(full + ".in")


def main(argv):
    args = list(argv[1:])
    doc = None
    if "--doc" in args and args.index("--doc") + 1 < len(args):
        i = args.index("--doc")
        doc = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.abspath(args[0])
    doc = doc or os.path.join(root, "docs", "layout.md")
    try:
        text = open(doc, encoding="utf-8").read()
    except OSError as error:
        print(f"check_layout_doc: cannot read {doc}: {error}", file=sys.stderr)
        return 1
    files = tree_files(root)
    problems = []
    named = set()
    for path, where in mentioned_paths(text):
        named.add(path.rstrip("/"))
        if not exists(root, files, path):
            problems.append(f"names `{path}` ({where}), which is not in the tree")
    for target in LINK.findall(FENCE.sub("", text)):
        target = target.split("#")[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue
        if not os.path.exists(os.path.normpath(os.path.join(root, "docs", target))):
            problems.append(f"links to {target}, which is not in the tree")
    for folder in sorted(required_folders(files) - named):
        problems.append(f"does not name the folder `{folder}/`")
    shown = os.path.relpath(doc, root) if os.path.abspath(doc).startswith(root + os.sep) else doc
    for problem in sorted(set(problems)):
        print(f"{shown}: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"{shown}: {len(named)} paths named, all in the tree; "
          f"{len(required_folders(files))} folders, all named")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
