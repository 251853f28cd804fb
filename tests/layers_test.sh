#!/usr/bin/env bash
# The level check (scripts/check_layers.py, docs/design/layers.md): the tree
# as it is passes; the same tree with one include planted that points up a
# level (instance -> trigger), across a level (filter -> hist, both on one
# level), from tools/ into src/ past the tools-only layer, or into a
# directory on no level fails, each naming the file.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
check=$root/scripts/check_layers.py
fail() { echo "layers_test: FAILED: $*" >&2; exit 1; }

python3 "$check" --root "$root" || fail "the tree itself breaks the level table (above)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plant() {  # plant NAME FILE LINE EXPECTED_RC EXPECTED_TEXT
  local name=$1 file=$2 line=$3 want_rc=$4 want=$5 rc=0
  rm -rf "$work/t" && mkdir -p "$work/t"
  cp -r "$root/src" "$root/tools" "$root/docs" "$work/t/"
  if [[ $file == */ ]]; then mkdir -p "$work/t/$file" && echo "$line" >"$work/t/$file/x.h"
  else echo "$line" >>"$work/t/$file"; fi
  python3 "$check" --root "$work/t" >"$work/out" 2>&1 || rc=$?
  ((rc == want_rc)) || { cat "$work/out" >&2; fail "$name: exit $rc, expected $want_rc"; }
  grep -q -- "$want" "$work/out" || { cat "$work/out" >&2; fail "$name: no '$want' in the message"; }
  echo "layers_test: $name: refused ($want)"
}
plant "up a level" src/instance/instance.h '#include "trigger/control.h"' 1 \
  'src/instance/instance.h:.*instance (level 6) includes trigger (level 9)'
plant "within a level" src/filter/filter.cc '#include "hist/hist.h"' 1 'filter (level 8) includes hist (level 8)'
plant "tools past the toolkit" tools/usrtrace/cmd_report.cc '#include "record/journal.h"' 1 \
  'tools/usrtrace/cmd_report.cc:.*tools includes src/record/ directly'
plant "a directory on no level" src/newdir/ '#include "base/sys.h"' 2 'src/newdir: on no level'
echo "layers_test: passed"
