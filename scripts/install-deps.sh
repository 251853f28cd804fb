#!/usr/bin/env bash
# Installs what usrtrace needs to build and test on Debian 12.
# Usage: scripts/install-deps.sh [--bench]
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev pkg-config
      libgtest-dev libgmock-dev libbenchmark-dev libtraceevent-dev libfmt-dev libcli11-dev trace-cmd valgrind
      libzstd-dev libelf-dev libtracecmd-dev libtracefs-dev python3 fuse3 libfuse3-dev
      clang-format clang-tidy
      uftrace go-md2man bash-completion dpkg-dev man-db libc6-dbg protobuf-compiler
      libzydis-dev systemtap-sdt-dev libbz2-1.0 python3.11 libpython3.11)
if [[ "${1:-}" == "--bench" ]]; then
  pkgs+=(liblttng-ust-dev lttng-tools)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
