#!/usr/bin/env bash
# "A function slower than N ms keeps its trace", on a plain program that
# never linked usrtrace (tests/hist/slow_target.c) and logs its own slow
# calls: one `usrtrace start -P PID` attaches to it and sets up
#
#   - a p: probe at work()'s entry and an r: probe at its return (ret =
#     the call's index), with hist triggers: ts0 at the entry, the latency
#     $lat at the return, onmax($lat).save(ret) and onmax($lat).snapshot();
#   - function_graph on work, step and nap (the calls that led there);
#
# in an instance that keeps 3 snapshots (snapshot_ring_size, this
# project's): the 3 worst calls are kept, each with its trace.
#
# Checked against the program's own log: the hist's max is the slowest
# call's (identified by ret, its duration within the program's own timing
# of the call, which brackets the probes'), the three snapshots are the
# three slowest calls, each ending with that call's return and holding its
# nap() in the function graph.
#
#   slow_call_test.sh USRTRACE SLOW_TARGET
#
# Exits 77 (skipped) without FUSE (the files are read through a mount).
set -euo pipefail

USRTRACE=$1
TARGET=$2
step="setup"
skip() {
  echo "slow_call_test: SKIP: $*"
  exit 77
}
[[ -c /dev/fuse ]] || skip "no /dev/fuse (FUSE is not available here)"
command -v fusermount3 >/dev/null || skip "no fusermount3 (apt-get install fuse3)"
[[ -r /dev/fuse && -w /dev/fuse ]] || skip "/dev/fuse is not open to $(id -un)"

work=$(mktemp -d "${TMPDIR:-/tmp}/usrtrace-slow.XXXXXX")
mnt=$work/mnt
mkdir "$mnt"
target_pid=""
mounted() { grep -q " $mnt fuse.usrtrace " /proc/mounts; }
on_exit() {
  local rc=$?
  set +e
  if ((rc != 0 && rc != 77)); then
    echo "slow_call_test: FAILED at step: $step" >&2
    [[ -f $work/target.err ]] && sed 's/^/  target stderr: /' "$work/target.err" >&2
    [[ -f $work/start.err ]] && sed 's/^/  start: /' "$work/start.err" >&2
  fi
  exec 3>&- 2>/dev/null
  if mounted; then fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null; fi
  [[ -n $target_pid ]] && kill "$target_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
  exit "$rc"
}
trap on_exit EXIT
fail() {
  echo "slow_call_test: $step: $*" >&2
  exit 1
}
wait_until() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out waiting for: $*"
    sleep 0.05
  done
}

mkfifo "$work/in"
"$TARGET" <"$work/in" >"$work/target.out" 2>"$work/target.err" &
target_pid=$!
exec 3>"$work/in"
wait_until 10 grep -q '^ready' "$work/target.out"
grep -q usrtrace "/proc/$target_pid/maps" && fail "the target has usrtrace loaded before the attach"

step="mount (attaches) and keep 3 snapshots"
"$USRTRACE" mount "$target_pid" "$mnt" 3>&-
mounted || fail "not mounted"
echo 3 >"$mnt/snapshot_ring_size"

step="usrtrace start -P: probes, hist triggers, function_graph"
if ! "$USRTRACE" start -P "$target_pid" -p function_graph -l work -l step -l nap \
  --probe "p:slow/enter $TARGET:work n=%di:s32" -R 'hist:keys=common_pid:ts0=common_timestamp.usecs' \
  --probe "r:slow/exit $TARGET:work ret=\$retval:s32" \
  -R 'hist:keys=common_pid:lat=common_timestamp.usecs-$ts0:onmax($lat).save(ret):onmax($lat).snapshot()' \
  >"$work/start.out" 2>"$work/start.err" 3>&-; then
  fail "start failed"
fi

step="run"
echo "go 200" >&3
wait_until 60 grep -q '^done' "$work/target.out"
grep '^slow ' "$work/target.out" | sort -k3,3nr >"$work/slow"
(($(wc -l <"$work/slow") >= 6)) || fail "the program logged $(wc -l <"$work/slow") slow calls: $(cat "$work/slow")"
read -r _ worst_i worst_us < <(head -1 "$work/slow")

step="the hist: the max and the call that set it"
cat "$mnt/events/slow/exit/hist" >"$work/hist"
line=$(grep -A1 '^{ common_pid:' "$work/hist" | sed -n 2p)
[[ $line =~ ^$'\t'max:\ +([0-9]+)\ \ ret:\ +([0-9]+)$ ]] || fail "saved line: '$line' in $(cat "$work/hist")"
max=${BASH_REMATCH[1]}
ret=${BASH_REMATCH[2]}
[[ $ret == "$worst_i" ]] || fail "the max was set by call $ret, the program's slowest is $worst_i"
# The program times the call from outside, the probes from its first
# instruction to its return: within that, and a millisecond at most less.
((max <= worst_us + 1 && max + 1000 >= worst_us)) || fail "max $max us, the program's own: $worst_us us"

step="the 3 kept snapshots: the 3 slowest calls, worst first, each with its trace"
grep -q '^Snapshots taken (see tracing/snapshot and snapshot.AGE).  Details:$' "$work/hist" ||
  fail "no notice: $(cat "$work/hist")"
grep -o 'onmax($lat) }: *[0-9]*' "$work/hist" | awk '{print $NF}' >"$work/kept"
[[ $(wc -l <"$work/kept") == 3 ]] || fail "$(wc -l <"$work/kept") kept: $(cat "$work/kept")"
[[ $(head -1 "$work/kept") == "$max" ]] || fail "the worst kept is $(head -1 "$work/kept"), the max $max"
head -3 "$work/slow" | awk '{print $2}' | sort -n >"$work/want_calls"
for f in snapshot snapshot.1 snapshot.2; do
  cat "$mnt/$f" >"$work/$f"
  # Its newest exit: the kept call's return.
  grep -o 'exit: ([^)]*) ret=[0-9]*' "$work/$f" | tail -1 | sed 's/.*ret=//'
  # And the call's nap() in the function graph, after its entry probe (a
  # call that naps: on a loaded machine another may be slow too, the first
  # traced call of the thread most of all).
  n=$(grep -o 'exit: ([^)]*) ret=[0-9]*' "$work/$f" | tail -1 | sed 's/.*ret=//')
  if ((n % 37 == 5)); then
    awk -v n="$n" '/enter: .* n=/ { split($0, a, "n="); if (a[2] + 0 == n) e = 1 } e && /nap\(\)/ { found = 1 }
      END { exit !found }' "$work/$f" || fail "$f: no nap() of call $n after its entry"
  fi
done | sort -n >"$work/got_calls"
diff "$work/want_calls" "$work/got_calls" >/dev/null ||
  fail "kept calls $(tr '\n' ' ' <"$work/got_calls"), the program's 3 slowest: $(tr '\n' ' ' <"$work/want_calls")"

step="the program goes on"
echo "go 3" >&3
wait_until 20 test "$(grep -c '^done' "$work/target.out")" -ge 2
echo quit >&3
exec 3>&-
wait "$target_pid" || fail "the program exited $?"
target_pid=""
echo "slow_call_test: OK"
