#!/usr/bin/env bash
# The function-tracer fixtures (tests/function/fixtures/) built over the matrix
# {g++, clang++} x {-O0, -O2} x {-finstrument-functions, -fpatchable-function-entry=5},
# each run once on its own (the fixture checks its own counts against its call
# tree) and once under a tracer, whose per-function call counts must equal the
# fixture's.
#
#   fixtures_test.sh uftrace WORKDIR
#   fixtures_test.sh usrtrace WORKDIR USRTRACE_CLI KINDS [EXTRA_CXXFLAGS...]
#
# usrtrace: `usrtrace record -p function_graph -o FILE -- fx_main` for the
# builds of KINDS ("instrument", or "instrument,patchable" once the patcher
# is built), then `trace-cmd report -R FILE`: every funcgraph_entry counted per
# function must equal the fixture's count, every funcgraph_exit must close
# the innermost open entry of its thread at the same depth, and no line may
# be [UNKNOWN EVENT]. EXTRA_CXXFLAGS (the sanitizer flags of the build) are
# added to the fixtures' flags. Exits 77 when current_tracer does not know
# function_graph (function tracers not in this build) or trace-cmd is missing.
#
# uftrace: `uftrace record` then `uftrace report`; what uftrace 0.13 can and
# cannot record is listed at uftrace_args() below. Exits 77 (ctest: skipped)
# when uftrace is not installed.
#
# The builds go to WORKDIR/fixtures-MODE (removed first). Every step names itself;
# a failure says which build and which function.
set -euo pipefail

mode=$1
work=$2/fixtures-$mode
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/fixtures

skip() {
  echo "fixtures_test: SKIP: $*"
  exit 77
}
fail() {
  echo "fixtures_test: FAILED: $*" >&2
  exit 1
}

# ---- The matrix.
compilers=()
for c in g++ clang++; do
  if command -v "$c" >/dev/null; then compilers+=("$c"); else echo "fixtures_test: note: no $c, its builds are left out"; fi
done
((${#compilers[@]})) || skip "neither g++ nor clang++ is installed"
# FX_COMPILERS: only these (a sanitized build's fixtures must use its
# compiler, whose sanitizer runtime the preloaded library was built with).
if [[ -n ${FX_COMPILERS:-} ]]; then read -r -a compilers <<<"$FX_COMPILERS"; fi
opts=(-O0 -O2)
kinds=(instrument patchable)
declare -A kind_flag=([instrument]=-finstrument-functions [patchable]=-fpatchable-function-entry=5)
extra_flags=()

# build DIR CXX OPT KIND: libfx_shared.so, libfx_plugin.so (both with the same
# flags) and fx_main, which finds them through its RUNPATH ($ORIGIN).
build() {
  local dir=$1 cxx=$2 opt=$3 kind=$4
  local flags=(-std=c++20 -g "$opt" "${kind_flag[$kind]}" -fPIC -pthread -Wall -Wextra -Werror
               "${extra_flags[@]}")
  mkdir -p "$dir"
  {
    "$cxx" "${flags[@]}" -shared -o "$dir/libfx_shared.so" "$src/fx_shared.cc" &&
      "$cxx" "${flags[@]}" -shared -o "$dir/libfx_plugin.so" "$src/fx_plugin.cc" \
        -L"$dir" -lfx_shared -Wl,-rpath,'$ORIGIN' &&
      "$cxx" "${flags[@]}" -o "$dir/fx_main" "$src/fx_main.cc" \
        -L"$dir" -lfx_shared -Wl,-rpath,'$ORIGIN' -ldl
  } >"$dir/build.log" 2>&1
}

# Builds every combination, nproc at a time; fills `builds` with their names.
builds=()
build_all() {
  rm -rf "$work"
  mkdir -p "$work"
  local jobs=$(nproc) pids=() names=() i
  for cxx in "${compilers[@]}"; do
    for opt in "${opts[@]}"; do
      for kind in "${kinds[@]}"; do
        local name=$cxx$opt-$kind
        build "$work/$name" "$cxx" "$opt" "$kind" &
        pids+=($!)
        names+=("$name")
        while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
      done
    done
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      cat "$work/${names[$i]}/build.log" >&2
      fail "building ${names[$i]}"
    fi
  done
  builds=("${names[@]}")
}

# run_plain NAME: the fixture alone; its counts go to NAME/counts.
run_plain() {
  local d=$work/$1
  local rc=0
  FX_COUNTS_FILE=$d/counts "$d/fx_main" "$depth" "$loop" >/dev/null 2>"$d/plain.err" || rc=$?
  if ((rc != 0)); then
    cat "$d/plain.err" >&2
    fail "$1: the fixture alone exited $rc (3: its own counts are wrong)"
  fi
}

# compare NAME EXPECTED GOT: EXPECTED has "COUNT fn n" lines (the fixture's),
# GOT "fn n" lines (the tracer's). Every function the fixture called must have
# its exact count; one it did not call must be absent (or 0).
compare() {
  local name=$1
  awk -v build="$name" '
    NR == FNR { want[$2] = $3; next }
    { got[$1] += $2 }
    END {
      bad = 0
      for (f in want) {
        g = (f in got) ? got[f] : 0
        if (g != want[f]) {
          printf "%s: %s: the fixture counted %d calls, the tracer %d\n", build, f, want[f], g
          bad = 1
        }
      }
      exit bad
    }' "$2" "$3" >&2
}

depth=10000
loop=1000

# ---------------------------------------------------------------------------
# uftrace

# uftrace_args NAME: what `uftrace record` needs for this build (one option
# a line), and FX_SKIP for the scenarios uftrace 0.13 cannot record.
#  * Every build: --no-libcall (the PLT hooks count a call into libfx_shared.so
#    twice, once as a library call and once as the function, and with them the
#    frames a longjmp leaves are dropped from the report), --no-event, and
#    -D/--max-stack above the recursion depth (the default depth is 1024 and
#    report -D too).
#  * -fpatchable-function-entry: -P ^fx_@MODULE for each object (a bare -P .
#    patches only the executable); libfx_plugin.so is patched although it is
#    loaded by dlopen() after start-up. Only the fx_ functions: with -P .
#    uftrace also rewrites, with capstone, the prologues of the functions
#    that have no nops (the fixture's FX_NOTRACE helpers), and the clang -O0
#    build's helpers then break (readlink("") and exit 2).
#  * g++ -fpatchable-function-entry (five one-byte nops): uftrace 0.13 dies
#    (SIGSEGV) at the first longjmp out of patched frames, so the longjmp
#    scenario is left out there. (clang's builds, one five-byte nop, record it.)
uftrace_args() {
  local name=$1
  echo --no-libcall
  echo --no-event
  echo "-D"
  echo $((depth + 100))
  echo "--max-stack=$((depth + 100))"
  if [[ $name == *patchable ]]; then
    for m in fx_main libfx_shared.so libfx_plugin.so; do
      echo "-P"
      echo "^fx_@$m"
    done
  fi
}
#  * uftrace 0.13 puts its 16-byte trampoline in the slack after the end of
#    an object's executable segment, and when there are fewer than 16 bytes
#    there it maps a new page at the next page address, over whatever is
#    mapped there: the clang -O0 patchable fx_main ended 15 bytes before a
#    page, its .rodata became zeros and the fixture read "" for every string.
#    So an object with less than 16 bytes of slack is relinked with
#    -z noseparate-code for uftrace (same code, other layout), see
#    uftrace_layout().
uftrace_skip() {
  [[ $1 == g++*patchable ]] && echo longjmp || true
}

# text_slack FILE: bytes between the end of FILE's (first) executable
# PT_LOAD segment and the end of its page.
text_slack() {
  local type off vaddr paddr filesz memsz rest
  while read -r type off vaddr paddr filesz memsz rest; do
    if [[ $type == LOAD && $rest == *E* ]]; then
      echo $((4096 - (vaddr + memsz) % 4096))
      return
    fi
  done < <(readelf -lW "$1")
  echo 4096
}

# uftrace_layout NAME: relinks the objects of build NAME whose executable
# segment leaves uftrace no room for its trampoline (see above).
uftrace_layout() {
  local name=$1 d=$work/$1 cxx=${1%%-O*} opt f slack
  opt=${name#"$cxx"}
  opt=${opt%%-*}
  for f in fx_main libfx_shared.so libfx_plugin.so; do
    slack=$(text_slack "$d/$f")
    ((slack >= 16)) && continue
    echo "fixtures_test: $name: $f's code ends $slack bytes before a page end; relinked with -z noseparate-code for uftrace"
    extra_flags+=(-Wl,-z,noseparate-code)
    build "$d" "$cxx" "$opt" "${name##*-}" || { cat "$d/build.log" >&2; fail "relinking $name"; }
    unset 'extra_flags[-1]'
    for f in fx_main libfx_shared.so libfx_plugin.so; do
      slack=$(text_slack "$d/$f")
      ((slack >= 16)) || fail "$name: $f still ends $slack bytes before a page end"
    done
    return
  done
}

run_uftrace() {
  command -v uftrace >/dev/null || skip "uftrace is not installed (apt-get install uftrace)"
  build_all
  local name d args skip_list
  for name in "${builds[@]}"; do
    d=$work/$name
    [[ $name == *patchable ]] && uftrace_layout "$name"
    skip_list=$(uftrace_skip "$name")
    FX_SKIP=$skip_list run_plain "$name"
    mapfile -t args < <(uftrace_args "$name")
    (cd "$d" && FX_SKIP=$skip_list FX_COUNTS_FILE=$d/counts.uftrace \
      uftrace record "${args[@]}" -d "$d/uftrace.data" ./fx_main "$depth" "$loop") \
      >"$d/uftrace.out" 2>&1 || { cat "$d/uftrace.out" >&2; fail "$name: uftrace record"; }
    # The fixture checked its counts under uftrace too (exit 3 otherwise).
    cmp -s "$d/counts" "$d/counts.uftrace" || fail "$name: the fixture counted differently under uftrace"
    uftrace report -d "$d/uftrace.data" -D $((depth + 100)) -f call --no-pager \
      >"$d/uftrace.report" 2>&1 || { cat "$d/uftrace.report" >&2; fail "$name: uftrace report"; }
    # "      10  fx_leaf": the call count, then the name.
    awk '$2 ~ /^fx_/ && NF == 2 { print $2, $1 }' "$d/uftrace.report" >"$d/uftrace.counts"
    compare "$name" "$d/counts" "$d/uftrace.counts" || fail "$name: uftrace's counts differ (above)"
    echo "fixtures_test: $name: uftrace counts match${skip_list:+ (without: $skip_list)}"
  done
}

# ---------------------------------------------------------------------------
# usrtrace

# check_graph NAME REPORT: the per-function entry counts to NAME/usrtrace.counts
# and the nesting check, from `trace-cmd report -R` (each record's own fields):
#   "COMM-TID [CPU] TS: funcgraph_entry: func=NAME depth=N"
#   "COMM-TID [CPU] TS: funcgraph_exit:  func=NAME depth=N overrun=..."
# Not the folded function_graph layout: trace-cmd 3.1.6 (Debian 12) folds an
# entry with the next record by time on *any* CPU into a leaf, consuming the
# exit from another CPU's stream behind its merge's back, and then prints
# later records out of time order (fixed upstream in 7f078cfd, "Break function
# graph line if exit is on another CPU"). A thread that migrates inside a call
# hits it; tests/realworld/counts.py reads -R for the same reason.
check_graph() {
  local name=$1 report=$2
  python3 - "$name" "$report" "$work/$name/usrtrace.counts" <<'PY'
import re, sys
name, report, counts_path = sys.argv[1:4]
line_re = re.compile(r"-(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(funcgraph_entry|funcgraph_exit):\s+func=(.+?) depth=(\d+)")
counts, stacks, errors, unknown, seen = {}, {}, [], 0, 0
last_ts, last_line = 0.0, 0
first_bad = None  # line number of the first error: its neighbourhood is printed
for lineno, line in enumerate(open(report, errors="replace"), 1):
    if errors and first_bad is None:
        first_bad = lineno - 1
    if "UNKNOWN EVENT" in line:
        unknown += 1
        continue
    m = line_re.search(line)
    if not m:
        continue
    seen += 1
    tid, ts, kind, fn, depth = int(m.group(1)), float(m.group(3)), m.group(4), m.group(5), int(m.group(6))
    # trace-cmd merges the CPUs' streams by time: a record earlier than the
    # one before it is a CPU's stream out of order in the file.
    if ts < last_ts:
        errors.append(f"line {lineno}: {ts:.6f} comes after {last_ts:.6f} (line {last_line})")
    last_ts, last_line = ts, lineno
    st = stacks.setdefault(tid, [])
    if kind == "funcgraph_entry":
        counts[fn] = counts.get(fn, 0) + 1
        if depth != len(st):
            errors.append(f"thread {tid}: entry of {fn} at depth {depth}, {len(st)} frames open")
        st.append((fn, depth))
    elif not st:
        errors.append(f"thread {tid}: exit of {fn} at depth {depth} with no open entry")
    else:
        top = st.pop()
        if top != (fn, depth):
            errors.append(f"thread {tid}: exit of {fn} at depth {depth} closes {top[0]} at depth {top[1]}")
for tid, st in stacks.items():
    for fn, depth in st:
        if fn != "main":
            errors.append(f"thread {tid}: {fn} (depth {depth}) entered and never exited")
with open(counts_path, "w") as f:
    for fn, n in sorted(counts.items()):
        f.write(f"{fn} {n}\n")
if unknown:
    errors.insert(0, f"{unknown} lines of [UNKNOWN EVENT] in trace-cmd report")
if not seen:
    errors.insert(0, "no funcgraph_entry/funcgraph_exit line in trace-cmd report -R")
for e in errors[:20]:
    print(f"{name}: {e}", file=sys.stderr)
if len(errors) > 20:
    print(f"{name}: ... and {len(errors) - 20} more", file=sys.stderr)
# The report around the first error, with CPUs and times: whether a record
# is out of time order, or wrong in itself, shows there.
if first_bad is not None:
    lines = open(report, errors="replace").read().splitlines()
    lo = max(first_bad - 12, 0)
    print(f"{name}: trace-cmd report lines {lo + 1}..{min(first_bad + 6, len(lines))}:", file=sys.stderr)
    for i in range(lo, min(first_bad + 6, len(lines))):
        print(f"{name}: {'>' if i + 1 == first_bad else ' '}{i + 1}: {lines[i]}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
}

run_usrtrace() {
  local cli=$1 kinds_arg=$2
  shift 2
  extra_flags=("$@")
  command -v trace-cmd >/dev/null || skip "trace-cmd is not installed (apt-get install trace-cmd)"
  command -v python3 >/dev/null || skip "python3 is not installed"
  # A sanitized build: the preloaded runtime is sanitized too, and comes
  # before the fixture's sanitizer runtime (as in cli_test).
  export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
  # Whether this build has the tracer at all: record a program that does
  # nothing; only an unknown tracer is a reason to skip.
  mkdir -p "$work"
  if ! "$cli" record -p function_graph -o "$work/probe.dat" -- true >"$work/probe.out" 2>&1; then
    grep -q 'Unknown tracer' "$work/probe.out" &&
      skip "current_tracer has no function_graph: the function tracers are not in this build (src/function/core.cc)"
    cat "$work/probe.out" >&2
    fail "usrtrace record -p function_graph -- true"
  fi
  IFS=',' read -r -a kinds <<<"$kinds_arg"
  build_all
  local name d rc
  for name in "${builds[@]}"; do
    d=$work/$name
    run_plain "$name"
    rc=0
    (cd "$d" && FX_COUNTS_FILE=$d/counts.usrtrace       "$cli" record -p function_graph -b 16384 -o "$d/trace.dat" -- ./fx_main "$depth" "$loop")       >"$d/record.out" 2>&1 || rc=$?
    if ((rc != 0)); then
      cat "$d/record.out" >&2
      fail "$name: usrtrace record -p function_graph exited $rc"
    fi
    grep -q '; 0 events lost' "$d/record.out" || { cat "$d/record.out" >&2; fail "$name: the recording lost events"; }
    cmp -s "$d/counts" "$d/counts.usrtrace" || fail "$name: the fixture counted differently under usrtrace"
    trace-cmd report -R "$d/trace.dat" >"$d/report.txt" 2>"$d/report.err" ||
      { cat "$d/report.err" >&2; fail "$name: trace-cmd report"; }
    check_graph "$name" "$d/report.txt" || fail "$name: the function_graph trace is wrong (above)"
    compare "$name" "$d/counts" "$d/usrtrace.counts" || fail "$name: usrtrace's counts differ (above)"
    # The JSON export (ui.perfetto.dev, chrome://tracing): begin/end slices
    # that nest per thread, one begin per traced call.
    "$cli" report -i "$d/trace.dat" --format=json >"$d/trace.json" 2>"$d/json.err" ||
      { cat "$d/json.err" >&2; fail "$name: usrtrace report --format=json"; }
    python3 - "$name" "$d/trace.json" "$d/usrtrace.counts" <<'PY' || fail "$name: the JSON slices are wrong (above)"
import json, sys
name, path, counts_path = sys.argv[1:4]
events = json.load(open(path))["traceEvents"]
want = dict(l.split() for l in open(counts_path))
begins, stacks, errors = {}, {}, []
for e in events:
    if e.get("ph") == "B":
        begins[e["name"]] = begins.get(e["name"], 0) + 1
        stacks.setdefault(e["tid"], []).append(e["name"])
    elif e.get("ph") == "E":
        st = stacks.setdefault(e["tid"], [])
        if not st or st[-1] != e["name"]:
            errors.append(f"tid {e['tid']}: end of {e['name']} closes {st[-1] if st else 'nothing'}")
        elif st:
            st.pop()
for fn, n in want.items():
    if begins.get(fn, 0) != int(n):
        errors.append(f"{fn}: {begins.get(fn, 0)} begin slices, the trace has {n} calls")
for e in errors[:10]:
    print(f"{name}: json: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    echo "fixtures_test: $name: usrtrace function_graph counts and nesting match"
    # Checked: the report (200 MB a build) goes; a failure keeps it.
    rm -f "$d/report.txt" "$d/trace.json"
  done
}

case $mode in
  uftrace) run_uftrace ;;
  usrtrace) run_usrtrace "$@" ;;
  *) fail "unknown mode '$mode' (uftrace, usrtrace)" ;;
esac
echo "fixtures_test: all ${#builds[@]} builds passed"
