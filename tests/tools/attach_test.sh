#!/usr/bin/env bash
# Attaching to a process that has no usrtrace runtime (docs/guide/attach.md):
# a plain multi-threaded program (attach/ticker.c, built with plain -O2 and
# never linked with usrtrace), its main thread blocked in read(2) and the
# other one in a nanosleep(2) loop, is recorded with `usrtrace record -P PID
# -p function_graph` while the test feeds it bytes:
#   - the ticks fed during the recording are all in the trace (the main
#     thread's step() once per tick), and the second thread's calls too;
#   - after the recording ends, the program's text is byte for byte its
#     file's again, and it goes on: every line it prints is right, and no
#     system call it was in came back with EINTR (ticker exits 2 if one did);
#   - a second attach (the runtime is loaded now) records again;
#   - another user is refused, with the reason; the program never notices;
#   - a C++ program whose exceptions cross the traced calls goes on: the
#     late runtime's probes at the unwinder keep the return hooks out of it.
#
#   attach_test.sh WORKDIR USRTRACE_CLI
set -euo pipefail
mkdir -p "$1"
work=$(realpath "$1")
cli=$(realpath "$2")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "attach: FAILED: $*" >&2; exit 1; }

prog=$work/ticker
gcc -O2 -pthread -o "$prog" "$here/attach/ticker.c" || fail "building ticker"
rm -f "$work/in" "$work/out"
mkfifo "$work/in"
"$prog" <"$work/in" >"$work/out" 2>"$work/ticker.err" &
pid=$!
exec 3>"$work/in"
rec_pid=
cleanup() {
  exec 3>&- || true
  [[ -n $rec_pid ]] && kill "$rec_pid" 2>/dev/null
  kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT

# wait_until SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_until() {
  local limit=$(($1 * 100))
  shift
  for ((i = 0; i < limit; ++i)); do
    "$@" && return 0
    sleep 0.01
  done
  return 1
}
lines_at_least() { (($(wc -l <"$work/out") >= $1)); }
feed() {  # feed N: N bytes, then wait for their N lines
  local want=$(($(wc -l <"$work/out") + $1))
  head -c "$1" /dev/zero >&3
  wait_until 20 lines_at_least "$want" || fail "the program printed $(wc -l <"$work/out") lines, not $want"
}
recording() { grep -q "recording process" "$1"; }

# record TAG TRACER N: records while N ticks are fed, then Ctrl-C.
record() {
  local tag=$1 tracer=$2 n=$3
  "$cli" record -P "$pid" -p "$tracer" -o "$work/$tag.dat" 2>"$work/$tag.err" &
  rec_pid=$!
  wait_until 30 recording "$work/$tag.err" || { cat "$work/$tag.err" >&2; fail "$tag: the recording did not start"; }
  feed "$n"
  kill -INT "$rec_pid"
  local rc=0
  wait "$rec_pid" || rc=$?
  rec_pid=
  ((rc == 0)) || { cat "$work/$tag.err" >&2; fail "$tag: record exited with $rc"; }
  grep -q ' 0 events lost' "$work/$tag.err" || { cat "$work/$tag.err" >&2; fail "$tag: events lost"; }
  kill -0 "$pid" || fail "$tag: the program is gone"
}

# main_steps FILE EVENT: the main thread's step() entries in the trace.
main_steps() {
  "$cli" report "$1" >"$1.txt"
  grep -c -- "-$pid *\[[0-9]*\].* $2: *\(--> \)\?step\b" "$1.txt" || true
}

# The text of the program in its memory against its file.
text_is_the_files() {
  python3 - "$pid" "$prog" <<'PY'
import subprocess, sys
pid, exe = int(sys.argv[1]), sys.argv[2]
base = None
for line in open(f"/proc/{pid}/maps"):
    f = line.split()
    if len(f) >= 6 and f[5] == exe and int(f[2], 16) == 0:
        base = int(f[0].split("-")[0], 16)
        break
loads = []
for line in subprocess.run(["readelf", "-lW", exe], capture_output=True, text=True, check=True).stdout.splitlines():
    f = line.split()
    if f and f[0] == "LOAD" and "E" in f[-2]:
        loads.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
data = open(exe, "rb").read()
with open(f"/proc/{pid}/mem", "rb") as mem:
    for off, vaddr, size in loads:
        mem.seek(base + vaddr)
        if mem.read(size) != data[off:off + size]:
            print(f"attach: FAILED: the text at {vaddr:#x} (+{size:#x}) is not the file's", file=sys.stderr)
            sys.exit(1)
PY
}

feed 3
grep -q usrtrace "/proc/$pid/maps" && fail "the runtime is loaded before any attach"

# 1. The first attach loads the runtime.
record first function_graph 20
grep -q usrtrace "/proc/$pid/maps" || fail "no runtime in the process after the attach"
n=$(main_steps "$work/first.dat" funcgraph_entry)
[[ $n == 20 ]] || fail "first: the main thread's step() is in the trace $n times, not 20 (one per tick fed)"
"$cli" report "$work/first.dat" >"$work/first.txt"
others=$(grep -v -- "-$pid *\[" "$work/first.txt" | grep -c "funcgraph_entry: *--> step" || true)
((others > 0)) || fail "first: no call of the second thread in the trace"
text_is_the_files || exit 1
feed 5

# 2. Again, with the function tracer: the runtime is there.
record second function 10
n=$(main_steps "$work/second.dat" function)
[[ $n == 10 ]] || fail "second: the main thread's step() is in the trace $n times, not 10"
text_is_the_files || exit 1
feed 5

# 3. Another user may not attach.
if ((EUID == 0)); then
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$cli" record -P "$pid" -p function -o /dev/null 2>&1) &&
    fail "another user attached"
  [[ $err == *"is another user's"* ]] || fail "another user's attach said: $err"
fi
feed 2

# The program's own view: every line right, no system call failed, exit 0.
exec 3>&-
rc=0
wait "$pid" || rc=$?
trap - EXIT
[[ $rc == 0 ]] || { cat "$work/ticker.err" >&2; fail "the program exited with $rc"; }
python3 - "$work/out" <<'PY' || exit 1
import sys
def work(i):
    return sum(k * k for k in range(i % 50))
lines = open(sys.argv[1]).read().splitlines()
for i, line in enumerate(lines):
    if line != f"tick {i} {work(i) + work(i + 1)}":
        print(f"attach: FAILED: line {i} is {line!r}", file=sys.stderr)
        sys.exit(1)
print(f"attach: {len(lines)} lines, every one right")
PY
# 4. A C++ program whose exceptions cross the calls function_graph hooks
# (attach/thrower.cc): the runtime, loaded late, cannot interpose the
# unwinder; its probes at the unwinder's entries must keep every return
# hook out of the unwinder's sight, or std::terminate ends the program.
thrower=$work/thrower
g++ -O2 -o "$thrower" "$here/attach/thrower.cc" || fail "building thrower"
rm -f "$work/tin" "$work/tout"
mkfifo "$work/tin"
"$thrower" <"$work/tin" >"$work/tout" 2>"$work/thrower.err" &
tpid=$!
exec 4>"$work/tin"
trap 'exec 4>&- || true; kill $tpid 2>/dev/null || true' EXIT
tlines() { (($(wc -l <"$work/tout") >= $1)); }
echo x >&4
wait_until 20 tlines 1 || fail "thrower printed nothing"
"$cli" start -P "$tpid" -p function_graph >"$work/tstart.err" 2>&1 || { cat "$work/tstart.err" >&2; fail "thrower: start"; }
for _ in $(seq 30); do echo x >&4; done
wait_until 20 tlines 31 || { cat "$work/thrower.err" >&2; fail "thrower printed $(wc -l <"$work/tout") lines, not 31"; }
"$cli" show -P "$tpid" >"$work/tshow.txt"
grep -q "deep" "$work/tshow.txt" || fail "thrower: deep() is not in the trace"
"$cli" reset -P "$tpid" >/dev/null 2>&1 || fail "thrower: reset"
exec 4>&-
rc=0
wait "$tpid" || rc=$?
trap - EXIT
[[ $rc == 0 ]] || { cat "$work/thrower.err" >&2; fail "thrower exited with $rc (an exception met a return hook?)"; }
python3 - "$work/tout" <<'PY' || exit 1
import sys
lines = open(sys.argv[1]).read().splitlines()
for i, line in enumerate(lines):
    want = f"call {i} {-1 if i % 3 == 0 else 2 * i + 1}"
    if line != want:
        print(f"attach: FAILED: thrower line {i} is {line!r}, not {want!r}", file=sys.stderr)
        sys.exit(1)
print(f"attach: thrower: {len(lines)} calls, {sum(1 for i in range(len(lines)) if i % 3 == 0)} exceptions through traced calls, every result right")
PY
echo "attach: passed"
