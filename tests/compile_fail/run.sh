#!/usr/bin/env bash
# One compile-fail case (tests/compile_fail/*.cc): the file must compile as
# written (the control: it is the marked line, not the rest, that fails),
# and fail with -DUSRTRACE_COMPILE_FAIL, the compiler's output matching the
# file's `// expect: REGEX` line (extended regex).
# Usage: run.sh CXX INCLUDE_DIR CASE.cc
set -uo pipefail
cxx=$1 inc=$2 src=$3
name=$(basename "$src" .cc)
want=$(sed -n 's|^// expect: ||p' "$src" | head -1)
[[ -n $want ]] || { echo "compile_fail $name: no '// expect: REGEX' line" >&2; exit 1; }
flags=(-std=c++20 -fsyntax-only -Wall -Wextra -I "$inc")
if ! out=$("$cxx" "${flags[@]}" "$src" 2>&1); then
  echo "$out" >&2
  echo "compile_fail $name: FAILED: the control (without USRTRACE_COMPILE_FAIL) does not compile" >&2
  exit 1
fi
if out=$("$cxx" "${flags[@]}" -DUSRTRACE_COMPILE_FAIL "$src" 2>&1); then
  echo "compile_fail $name: FAILED: compiled with USRTRACE_COMPILE_FAIL" >&2
  exit 1
fi
if ! grep -Eq -- "$want" <<<"$out"; then
  echo "$out" | head -40 >&2
  echo "compile_fail $name: FAILED: refused, but no /$want/ in the compiler's output (above)" >&2
  exit 1
fi
echo "compile_fail $name: refused as expected (/$want/)"
