#!/usr/bin/env python3
"""Checks that every include between src/ directories points down the level
table of docs/design/layers.md, and that tools/ includes no src/ directory
(it sees the public headers and src/toolkit's usrtrace_toolkit/ only).

Usage: check_layers.py [--root DIR] [--stamp FILE]
Exits 1, listing each forbidden include with its file and line, when one is
found; 2 when the table itself is missing or names a directory twice or a
directory of src/ is in no level."""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/[^"]+"')


def read_levels(doc):
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- levels: begin.*?-->(.*?)<!-- levels: end -->", text, re.S)
    if not m:
        sys.exit(f"check_layers: {doc}: no '<!-- levels: begin -->' table")
    levels = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for d in cells[1].split():
            if d in levels:
                print(f"check_layers: {doc}: '{d}' is on two levels", file=sys.stderr)
                sys.exit(2)
            levels[d] = int(cells[0])
    return levels


def sources(root):
    for top in ("src", "tools"):
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith((".h", ".cc", ".hpp", ".inc")):
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, base).split(os.sep)
                    owner = "tools" if top == "tools" else rel[0]
                    if top == "src" and len(rel) == 1:
                        continue  # src/CMakeLists.txt and the like
                    yield path, owner


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--stamp")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    levels = read_levels(os.path.join(root, "docs", "design", "layers.md"))
    srcdirs = sorted(d for d in os.listdir(os.path.join(root, "src"))
                     if os.path.isdir(os.path.join(root, "src", d)))
    missing = [d for d in srcdirs if d not in levels]
    if missing:
        print(f"check_layers: src/{', src/'.join(missing)}: on no level of docs/design/layers.md",
              file=sys.stderr)
        sys.exit(2)
    bad = []
    for path, owner in sources(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if owner == "tools" and target in levels:
                    # The command sees the internals only through the
                    # tools-only layer's header (usrtrace_toolkit/), and
                    # has no src/ include path to reach them otherwise.
                    rel = os.path.relpath(path, root)
                    bad.append(f"{rel}:{n}: tools includes src/{target}/ directly, not through "
                               f"usrtrace_toolkit/toolkit.h: {line.strip()}")
                    continue
                if target == "usrtrace" or target == owner or target not in levels:
                    continue
                if levels[target] >= levels[owner]:
                    rel = os.path.relpath(path, root)
                    bad.append(f"{rel}:{n}: {owner} (level {levels[owner]}) includes {target} "
                               f"(level {levels[target]}): {line.strip()}")
    for b in bad:
        print(f"check_layers: {b}", file=sys.stderr)
    if bad:
        print(f"check_layers: {len(bad)} include(s) against docs/design/layers.md: a lower level "
              "calls up through a registration instead (see the hooks table there)", file=sys.stderr)
        sys.exit(1)
    if a.stamp:
        with open(a.stamp, "w") as f:
            f.write("ok\n")


if __name__ == "__main__":
    main()
