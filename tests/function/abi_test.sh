#!/usr/bin/env bash
# Programs that call the function tracer's entry points with the stack other
# than the ABI has it: abi/stack_boundary.c built with
# -mpreferred-stack-boundary=3 (gcc) / -mstack-alignment=8 (clang) and
# -mgeneral-regs-only, as kernel-style code is, so that every call of a
# -finstrument-functions hook and every patched entry may come with rsp only
# 8-aligned; and built as the ABI has it at -O0/-O2/-O3, where gcc's
# -fipa-stack-alignment still calls its leaves misaligned. Each build runs
# alone (exit 0: its sums are right), then under
# `usrtrace record -p function_graph` and `-p function`: it must exit 0 again,
# and trace-cmd must show its 2001 calls (main, 1000 x mid, 1000 x leaf).
# abi/tail_throw.cc, C++ built the same ways but with the ABI's stack: a
# traced function entered by a tail call (sharing its caller's return slot)
# throws to a catch above both, 500 times: 3001 calls, exit 0.
# Three instrumentations: -finstrument-functions, -fpatchable-function-entry=5
# and, with gcc, -pg -mfentry -mnop-mcount -mrecord-mcount (__mcount_loc).
#
#   abi_test.sh WORKDIR USRTRACE_CLI
#
# Exits 77 when trace-cmd is missing or the build has no function tracers.
set -euo pipefail
work=$1/abi
cli=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

skip() { echo "abi_test: SKIP: $*"; exit 77; }
fail() { echo "abi_test: FAILED: $*" >&2; exit 1; }
command -v trace-cmd >/dev/null || skip "trace-cmd is not installed"
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
cli=$(realpath "$cli")
cd "$work"  # where the -pg builds write their gmon.out
if ! "$cli" record -p function -o "$work/probe.dat" -- true >"$work/probe.out" 2>&1; then
  grep -q 'Unknown tracer' "$work/probe.out" && skip "no function tracers in this build"
  cat "$work/probe.out" >&2
  fail "usrtrace record -p function -- true"
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

builds=()
declare -A flags want
for cc in gcc clang; do
  command -v $cc >/dev/null || { echo "abi_test: note: no $cc"; continue; }
  cxx=g++
  narrow=-mpreferred-stack-boundary=3
  [[ $cc == clang ]] && { narrow=-mstack-alignment=8; cxx=clang++; }
  kinds=(instrument patchable)
  [[ $cc == gcc ]] && kinds+=(fentry)
  for kind in "${kinds[@]}"; do
    case $kind in
      instrument) k=-finstrument-functions ;;
      patchable) k=-fpatchable-function-entry=5 ;;
      # gcc only (clang 14 has no -mnop-mcount on x86), and not with -fPIE.
      fentry) k="-fno-pie -no-pie -pg -mfentry -mnop-mcount -mrecord-mcount" ;;
    esac
    for opt in -O0 -O2 -O3; do
      builds+=("$cc$opt-$kind-narrow")
      flags["$cc$opt-$kind-narrow"]="$cc $opt $k $narrow -mgeneral-regs-only $here/abi/stack_boundary.c"
      want["$cc$opt-$kind-narrow"]=2001
      builds+=("$cc$opt-$kind")
      flags["$cc$opt-$kind"]="$cc $opt $k $here/abi/stack_boundary.c"
      want["$cc$opt-$kind"]=2001
      builds+=("$cxx$opt-$kind-tailthrow")
      flags["$cxx$opt-$kind-tailthrow"]="$cxx $opt $k $here/abi/tail_throw.cc"
      want["$cxx$opt-$kind-tailthrow"]=3001
    done
  done
done
((${#builds[@]})) || skip "neither gcc nor clang is installed"

for b in "${builds[@]}"; do
  d=$work/$b
  mkdir -p "$d"
  read -r -a f <<<"${flags[$b]}"
  "${f[@]}" -g -o "$d/prog" 2>"$d/build.log" || { cat "$d/build.log" >&2; fail "$b: building"; }
  "$d/prog" || fail "$b: the program alone exited $?"
  n_want=${want[$b]}
  for tracer in function_graph function; do
    rc=0
    "$cli" record -p "$tracer" -o "$d/$tracer.dat" -- "$d/prog" >"$d/$tracer.out" 2>&1 || rc=$?
    ((rc == 0)) || { cat "$d/$tracer.out" >&2; fail "$b: usrtrace record -p $tracer exited $rc"; }
    if grep -E 'exited with status|killed by signal' "$d/$tracer.out" >&2; then
      fail "$b: the program failed under -p $tracer"
    fi
    trace-cmd report "$d/$tracer.dat" >"$d/$tracer.txt" 2>"$d/$tracer.err" || { cat "$d/$tracer.err" >&2; fail "$b: trace-cmd report"; }
    if [[ $tracer == function_graph ]]; then
      n=$(grep -c 'funcgraph_entry' "$d/$tracer.txt" || true)
    else
      n=$(grep -cE 'function: +(main|mid|leaf|thrower|tail|outer)' "$d/$tracer.txt" || true)
    fi
    ((n == n_want)) || fail "$b: -p $tracer recorded $n calls, the program made $n_want (see $d/$tracer.txt)"
  done
  echo "abi_test: $b: $n_want calls under function_graph and function, exit 0"
done
echo "abi_test: all ${#builds[@]} builds passed"
