#!/usr/bin/env bash
# Formats (or, with --check, checks) every C and C++ source of the project
# with .clang-format (clang-format 14, Debian 12's). The format_check test
# runs --check; run this without it before committing.
# Usage: scripts/format.sh [--check]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cf=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n $cf ]] || { echo "format: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
cd "$root"
# Every directory we write; not the build trees, nor the vendored sources
# of tests/realworld (tarballs, pinned by hash).
mapfile -t files < <(find include src tools tests bench examples fuzz \
  \( -name '*.cc' -o -name '*.h' -o -name '*.hpp' -o -name '*.c' \) -print | LC_ALL=C sort)
if [[ ${1:-} == --check ]]; then
  if ! "$cf" --dry-run -Werror "${files[@]}"; then
    echo "format: the files above differ from .clang-format: run scripts/format.sh" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files as .clang-format says"
else
  "$cf" -i "${files[@]}"
fi
