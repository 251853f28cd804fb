#!/usr/bin/env bash
# The FUSE mount used as a shell user uses tracefs: ls, cat, echo >, mkdir,
# rmdir, a blocking cat of trace_pipe, and the process's exit.
#
#   fuse_test.sh USRTRACE CLI_TARGET
#
# Exits 77 (ctest: skipped) without /dev/fuse (or one this user may not
# open) or fusermount3. Every step names itself; a failure says which one.
set -euo pipefail

USRTRACE=$1
TARGET=$2
step="setup"

skip() {
  echo "fuse_test: SKIP: $*"
  exit 77
}
[[ -c /dev/fuse ]] || skip "no /dev/fuse (FUSE is not available here)"
command -v fusermount3 >/dev/null || skip "no fusermount3 (apt-get install fuse3)"
# libfuse opens /dev/fuse itself before it tries fusermount3.
[[ -r /dev/fuse && -w /dev/fuse ]] || skip "/dev/fuse is not open to $(id -un)"

work=$(mktemp -d "${TMPDIR:-/tmp}/usrtrace-fuse.XXXXXX")
mnt=$work/mnt
mkdir "$mnt"
target_pid=""
cat_pid=""

mounted() { grep -q " $mnt fuse.usrtrace " /proc/mounts; }
# The daemons serving $mnt (their command line names it); builtins only,
# no process per entry of /proc.
daemons() {
  local d args
  for d in /proc/[0-9]*; do
    mapfile -d '' -t args 2>/dev/null <"$d/cmdline" || continue
    ((${#args[@]} >= 4)) || continue
    if [[ ${args[0]} == *usrtrace && ${args[1]} == mount && ${args[-1]} == "$mnt" ]]; then
      echo "${d#/proc/}"
    fi
  done
}
no_daemons() { [[ -z $(daemons) ]]; }

on_exit() {
  local rc=$?
  set +e
  if ((rc != 0 && rc != 77)); then
    echo "fuse_test: FAILED at step: $step" >&2
    [[ -f $work/target.err ]] && sed 's/^/  target stderr: /' "$work/target.err" >&2
  fi
  [[ -n $cat_pid ]] && kill "$cat_pid" 2>/dev/null
  exec 3>&- 4<&- 2>/dev/null
  if mounted; then fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null; fi
  [[ -n $target_pid ]] && kill "$target_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
  exit "$rc"
}
trap on_exit EXIT

fail() {
  echo "fuse_test: $step: $*" >&2
  exit 1
}
# wait_until SECONDS CMD...: polls CMD until it succeeds, or fails the step.
wait_until() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out waiting for: $*"
    sleep 0.05
  done
}
# expect_fail PATTERN CMD...: CMD must fail, its stderr matching PATTERN.
expect_fail() {
  local pattern=$1
  shift
  if "$@" 2>"$work/err"; then fail "succeeded, should fail: $*"; fi
  grep -q -- "$pattern" "$work/err" || fail "'$*' failed without '$pattern': $(cat "$work/err")"
}

# The target: commands on fd 3 (a fifo), one "ok" line each on target.out.
oks=0
start_target() {
  rm -f "$work/in"
  mkfifo "$work/in"
  "$TARGET" <"$work/in" >"$work/target.out" 2>"$work/target.err" &
  target_pid=$!
  exec 3>"$work/in"
  oks=0
  wait_until 10 grep -q '^ready' "$work/target.out"
  [[ $(awk '/^ready/ {print $2}' "$work/target.out") == "$target_pid" ]] || fail "ready line names another pid"
}
count() { grep -c -- "$1" "$2" || true; }
# at_least N PATTERN FILE: FILE has N lines matching PATTERN (polled: counts anew each time).
at_least() { (($(count "$2" "$3") >= $1)); }
send() {
  echo "$*" >&3
  oks=$((oks + 1))
  wait_until 10 at_least "$oks" '^ok$' "$work/target.out"
}

step="mount refuses a dead pid"
true &
dead=$!
wait "$dead"
expect_fail "no process $dead" "$USRTRACE" mount "$dead" "$mnt"
mounted && fail "mounted anyway"

step="mount refuses another user's process (it would attach: docs/guide/attach.md)"
if ((EUID == 0)); then
  chmod 0755 "$(dirname "$mnt")" "$mnt"
  expect_fail "is another user's" setpriv --reuid=65534 --regid=65534 --clear-groups "$USRTRACE" mount $$ "$mnt"
  mounted && fail "mounted anyway"
  grep -q usrtrace /proc/$$/maps && fail "the runtime was loaded anyway"
fi

start_target

step="mount refuses a directory that is not empty"
mkdir "$work/full"
touch "$work/full/file"
expect_fail "not an empty directory" "$USRTRACE" mount "$target_pid" "$work/full"
expect_fail "not a directory" "$USRTRACE" mount "$target_pid" "$work/full/file"

step="mount takes the process as -P PID, as every subcommand does, or as PID; once"
expect_fail "the process is named twice" "$USRTRACE" mount -P "$target_pid" "$target_pid" "$mnt"
expect_fail "which process" "$USRTRACE" mount "$mnt"
expect_fail "is not a process id" "$USRTRACE" mount nopid "$mnt"
mounted && fail "mounted anyway"

step="mount"
# 3>&-: the daemon must not keep the target's stdin open.
"$USRTRACE" mount "$target_pid" "$mnt" 3>&-
mounted || fail "the command returned before the mount was up"
[[ -n $(daemons) ]] || fail "no daemon serves the mount"

step="ls DIR"
ls "$mnt" >"$work/ls"
for f in trace trace_pipe trace_marker trace_clock events instances per_cpu error_log; do
  grep -qx "$f" "$work/ls" || fail "no $f in: $(tr '\n' ' ' <"$work/ls")"
done
[[ -d $mnt/events/clitest/tick ]] || fail "events/clitest/tick is not a directory"
[[ $(stat -c %a "$mnt/trace_marker") == 220 ]] || fail "trace_marker's mode is $(stat -c %a "$mnt/trace_marker")"
[[ $(stat -c %u "$mnt/trace") == "$(id -u)" ]] || fail "trace is not the mounting user's"

step="cat trace_clock"
grep -q '\[[a-z0-9-]*\]' "$mnt/trace_clock" || fail "no [current] clock in: $(cat "$mnt/trace_clock")"

step="echo 1 > events/clitest/tick/enable"
echo 1 >"$mnt/events/clitest/tick/enable"
[[ $(cat "$mnt/events/clitest/tick/enable") == 1 ]] || fail "enable reads $(cat "$mnt/events/clitest/tick/enable")"

step="N ticks in trace"
send "tick 7"
cat "$mnt/trace" >"$work/trace"
[[ $(count 'tick: seq=' "$work/trace") == 7 ]] || fail "$(count 'tick: seq=' "$work/trace") tick lines, not 7"

step="echo > trace clears it"
echo 1 >"$mnt/trace"
[[ $(count 'tick: seq=' "$mnt/trace") == 0 ]] || fail "trace still has ticks"

step="mkdir, ls, rmdir instances/foo"
mkdir "$mnt/instances/foo"
ls "$mnt/instances" | grep -x foo >/dev/null || fail "foo not listed"
[[ -f $mnt/instances/foo/trace ]] || fail "instances/foo/trace missing"
rmdir "$mnt/instances/foo"
if ls "$mnt/instances" | grep -x foo >/dev/null; then fail "foo still listed"; fi
[[ ! -e $mnt/instances/foo ]] || fail "instances/foo still there"

step="echo hello > trace_marker"
echo hello >"$mnt/trace_marker"
grep -q 'hello' "$mnt/trace" || fail "no hello in trace"
expect_fail "Permission denied" cat "$mnt/trace_marker"

step="cat per_cpu/cpu0/stats"
grep -q '^entries:' "$mnt/per_cpu/cpu0/stats" || fail "no entries: line"

step="a bad value: EINVAL and an error_log line"
before=$(wc -l <"$mnt/error_log")
expect_fail "Invalid argument" bash -c "echo bad > '$mnt/buffer_size_kb'"
after=$(wc -l <"$mnt/error_log")
((after > before)) || fail "error_log did not grow ($before -> $after lines)"

step="writing a read-only file: Permission denied"
expect_fail "Permission denied" bash -c "echo x > '$mnt/available_events'"
expect_fail "Permission denied" bash -c "echo x > '$mnt/per_cpu/cpu0/stats'"

step="missing paths: ENOENT"
expect_fail "No such file" ls "$mnt/no_such_file"
expect_fail "No such file" cat "$mnt/events/clitest/no_such_event/enable"

step="O_NONBLOCK read of an empty trace_pipe: EAGAIN"
cat "$mnt/trace_pipe" >/dev/null &  # drains what is there now (the marker)
wait_until 10 sh -c "! grep -q hello '$mnt/trace'"
kill $! 2>/dev/null || true
wait $! 2>/dev/null || true
expect_fail "Resource temporarily unavailable" dd if="$mnt/trace_pipe" of=/dev/null iflag=nonblock bs=4096 count=1

step="cat trace_pipe blocks until ticks come"
cat "$mnt/trace_pipe" >"$work/pipe.out" 3>&- &
cat_pid=$!
# It has nothing to print yet and keeps waiting.
[[ ! -s $work/pipe.out ]] || fail "trace_pipe printed before any event: $(cat "$work/pipe.out")"
kill -0 "$cat_pid" || fail "cat of trace_pipe ended instead of blocking"
send "tick 5"
wait_until 10 at_least 5 'tick: seq=' "$work/pipe.out"
[[ $(count 'tick: seq=' "$work/pipe.out") == 5 ]] || fail "$(count 'tick: seq=' "$work/pipe.out") ticks, not 5"
kill -0 "$cat_pid" || fail "cat of trace_pipe ended after the ticks"

step="a blocked cat of trace_pipe dies promptly when killed"
kill "$cat_pid"
wait_until 3 sh -c "! kill -0 $cat_pid 2>/dev/null"
wait "$cat_pid" 2>/dev/null || true
cat_pid=""
expect_fail "Resource temporarily unavailable" dd if="$mnt/per_cpu/cpu0/trace_pipe" of=/dev/null iflag=nonblock bs=4096 count=1

step="umount"
"$USRTRACE" umount "$mnt"
if mounted; then fail "still mounted"; fi
wait_until 10 no_daemons
expect_fail "not a usrtrace mount" "$USRTRACE" umount "$mnt"

step="mount -f stays in the foreground until umount"
"$USRTRACE" mount -f "$target_pid" "$mnt" 3>&- 2>"$work/fg.err" &
fg_pid=$!
wait_until 10 mounted
ls "$mnt/trace" >/dev/null
kill -0 "$fg_pid" || fail "mount -f returned while mounted"
"$USRTRACE" umount "$mnt"
wait "$fg_pid" || fail "mount -f exited with $?"

step="umount of a mount whose daemon died (mounted by -P)"
"$USRTRACE" mount -P "$target_pid" "$mnt" 3>&-
daemon=$(daemons)
[[ -n $daemon ]] || fail "no daemon"
kill -9 $daemon
wait_until 10 no_daemons
# ENOTCONN once the kernel has torn the connection down; ECONNABORTED while
# it is still aborting it (fuse_abort_conn), which a loaded machine shows.
expect_fail "Transport endpoint is not connected\|Software caused connection abort" ls "$mnt"
"$USRTRACE" umount "$mnt"
if mounted; then fail "still mounted"; fi

step="the process exits: open files fail with ENODEV, the mount goes away"
"$USRTRACE" mount "$target_pid" "$mnt" 3>&-
exec 4<"$mnt/trace"
echo "exit 0" >&3
exec 3>&-
wait "$target_pid" || true
target_pid=""
wait_until 10 sh -c "! grep -q ' $mnt fuse.usrtrace ' /proc/mounts"
expect_fail "No such device" cat <&4
exec 4<&-
wait_until 10 no_daemons
expect_fail "not a usrtrace mount" "$USRTRACE" umount "$mnt"
[[ -z $(ls -A "$mnt") ]] || fail "$mnt is not empty after the mount went away"

step="done"
echo "fuse_test: all steps passed"
