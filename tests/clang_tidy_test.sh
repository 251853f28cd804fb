#!/usr/bin/env bash
# clang-tidy with the checks of .clang-tidy over every source of src/ and
# tools/, once each, with the flags the build compiles it with (the clang
# configuration's compile database: every flag is clang's own). The fuzz
# targets compile src/ again with their own flags; those entries are left
# out, as are files of no level. Any finding fails, with its text.
# Usage: clang_tidy_test.sh RUN_CLANG_TIDY CLANG_TIDY BUILD_DIR SOURCE_DIR
set -uo pipefail
run=$1 tidy=$2 build=$3 src=$4
[[ -f $build/compile_commands.json ]] || { echo "clang_tidy: no $build/compile_commands.json" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=$(python3 - "$build/compile_commands.json" "$src" "$work/compile_commands.json" <<'PY'
import json, os, sys
db, src, out = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
seen, keep = set(), []
for e in json.load(open(db)):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    rel = os.path.relpath(f, src)
    if not (rel.startswith("src/") or rel.startswith("tools/")) or f in seen:
        continue
    if " -o fuzz/" in e.get("command", "") or "/fuzz/" in e.get("output", ""):
        continue
    seen.add(f)
    keep.append(e)
json.dump(keep, open(out, "w"))
print(len(keep))
PY
)
"$run" -clang-tidy-binary "$tidy" -p "$work" -quiet -j "$(nproc)" >"$work/out" 2>&1
rc=$?
if ((rc != 0)) || grep -Eq '(warning|error): ' "$work/out"; then
  grep -E -A4 '(warning|error): ' "$work/out" | head -200 >&2
  echo "clang_tidy: FAILED (exit $rc): findings above; .clang-tidy says which checks and why" >&2
  exit 1
fi
echo "clang_tidy: $n sources of src/ and tools/, no finding"
