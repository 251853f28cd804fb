#!/usr/bin/env bash
# histogram.rst section 2.2 (inter-event hist triggers), its commands run
# verbatim through a FUSE mount of a running program whose user events are
# shaped as the kernel's sched_waking, sched_switch and tcp_probe
# (tests/hist/wakeup_target.cc):
#
#   1. synthetic_events + onmatch().wakeup_latency(): the wakeup_latency
#      histogram and records;
#   2. onmax($wakeup_lat).save(...);
#   3. onmax($wakeup_lat).save(...):onmax($wakeup_lat).snapshot();
#   4. onchange($cwnd).save(...):onchange($cwnd).snapshot().
#
# Every value printed is computed again here, independently: each latency
# from the time stamps the instance's trace prints for the two events (the
# histograms' common_timestamp), checked also against the program's own
# measurement (CLOCK_MONOTONIC, a few microseconds apart); saved fields
# against what the program wrote.
#
#   inter_event_test.sh USRTRACE WAKEUP_TARGET
#
# Exits 77 (skipped) without FUSE. Every step names itself.
set -euo pipefail

USRTRACE=$1
TARGET=$2
step="setup"

skip() {
  echo "inter_event_test: SKIP: $*"
  exit 77
}
[[ -c /dev/fuse ]] || skip "no /dev/fuse (FUSE is not available here)"
command -v fusermount3 >/dev/null || skip "no fusermount3 (apt-get install fuse3)"
[[ -r /dev/fuse && -w /dev/fuse ]] || skip "/dev/fuse is not open to $(id -un)"

work=$(mktemp -d "${TMPDIR:-/tmp}/usrtrace-hist.XXXXXX")
mnt=$work/mnt
mkdir "$mnt"
target_pid=""
mounted() { grep -q " $mnt fuse.usrtrace " /proc/mounts; }
on_exit() {
  local rc=$?
  set +e
  if ((rc != 0 && rc != 77)); then
    echo "inter_event_test: FAILED at step: $step" >&2
    [[ -f $work/target.err ]] && sed 's/^/  target stderr: /' "$work/target.err" >&2
    [[ -d $mnt ]] && mounted && sed 's/^/  error_log: /' "$mnt/error_log" >&2
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
  echo "inter_event_test: $step: $*" >&2
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
count() { grep -c -- "$1" "$2" || true; }
at_least() { (($(count "$2" "$3") >= $1)); }
oks=0
send() {
  echo "$*" >&3
  oks=$((oks + 1))
  wait_until 30 at_least "$oks" '^ok$' "$work/target.out"
}
# wr FILE TEXT: echo TEXT >> FILE, as the document does (failures name the
# error_log line).
wr() {
  if ! echo "$2" >>"$1" 2>"$work/err"; then
    fail "echo '$2' >> ${1#"$mnt"/}: $(cat "$work/err"); error_log: $(tail -3 "$mnt/error_log")"
  fi
}

mkfifo "$work/in"
"$TARGET" <"$work/in" >"$work/target.out" 2>"$work/target.err" &
target_pid=$!
exec 3>"$work/in"
wait_until 10 grep -q '^ready' "$work/target.out"

step="mount"
"$USRTRACE" mount "$target_pid" "$mnt" 3>&-
mounted || fail "not mounted"

# A first wakeup before any trigger: both threads' first events (their
# registration) are out of the measured ones.
send "run 1"

# ---- 1. onmatch(): the wakeup_latency synthetic event (2.2.2, 2.2.3).
step="define wakeup_latency"
wr "$mnt/synthetic_events" 'wakeup_latency u64 lat; pid_t pid; int prio'
# The kernel's listing: the name, a tab, the fields.
[[ $(cat "$mnt/synthetic_events") == $'wakeup_latency\tu64 lat; pid_t pid; int prio' ]] ||
  fail "synthetic_events reads: $(cat "$mnt/synthetic_events")"
for f in enable filter format hist id trigger; do
  [[ -e $mnt/events/synthetic/wakeup_latency/$f ]] || fail "no events/synthetic/wakeup_latency/$f"
done

step="usrtrace stat and show list it"
"$USRTRACE" stat -P "$target_pid" >"$work/stat"
grep -A1 '^Synthetic events:$' "$work/stat" | grep -q $'^  wakeup_latency\tu64 lat; pid_t pid; int prio$' ||
  fail "stat: $(cat "$work/stat")"
[[ $("$USRTRACE" show -P "$target_pid" --synthetic_events) == $'wakeup_latency\tu64 lat; pid_t pid; int prio' ]] ||
  fail "show --synthetic_events: $("$USRTRACE" show -P "$target_pid" --synthetic_events)"

step="the onmatch triggers"
echo 1 >"$mnt/events/sched/enable"
echo 1 >"$mnt/events/synthetic/wakeup_latency/enable"
wr "$mnt/events/sched/sched_waking/trigger" \
  'hist:keys=$saved_pid:saved_pid=pid:ts0=common_timestamp.usecs if comm=="cyclictest"'
wr "$mnt/events/sched/sched_switch/trigger" \
  'hist:keys=next_pid:wakeup_lat=common_timestamp.usecs-$ts0:onmatch(sched.sched_waking).wakeup_latency($wakeup_lat,$saved_pid,next_prio) if next_comm=="cyclictest"'
wr "$mnt/events/synthetic/wakeup_latency/trigger" 'hist:keys=pid,prio,lat:sort=pid,lat'

# ---- 2. onmax().save() in an instance of its own.
step="the onmax save triggers"
mkdir "$mnt/instances/onmax"
echo 1 >"$mnt/instances/onmax/events/sched/enable"
wr "$mnt/instances/onmax/events/sched/sched_waking/trigger" \
  'hist:keys=pid:ts0=common_timestamp.usecs if comm=="cyclictest"'
wr "$mnt/instances/onmax/events/sched/sched_switch/trigger" \
  'hist:keys=next_pid:wakeup_lat=common_timestamp.usecs-$ts0:onmax($wakeup_lat).save(next_comm,prev_pid,prev_prio,prev_comm) if next_comm=="cyclictest"'

# ---- 3. onmax().save() and .snapshot().
step="the onmax snapshot triggers"
mkdir "$mnt/instances/snap"
echo 1 >"$mnt/instances/snap/events/sched/enable"
wr "$mnt/instances/snap/events/sched/sched_waking/trigger" \
  'hist:keys=pid:ts0=common_timestamp.usecs if comm=="cyclictest"'
wr "$mnt/instances/snap/events/sched/sched_switch/trigger" \
  'hist:keys=next_pid:wakeup_lat=common_timestamp.usecs-$ts0:onmax($wakeup_lat).save(next_prio,next_comm,prev_pid,prev_prio,prev_comm):onmax($wakeup_lat).snapshot() if next_comm=="cyclictest"'

# ---- 4. onchange().save() and .snapshot().
step="the onchange triggers"
mkdir "$mnt/instances/tcp"
echo 1 >"$mnt/instances/tcp/events/tcp/enable"
wr "$mnt/instances/tcp/events/tcp/tcp_probe/trigger" \
  'hist:keys=dport:cwnd=snd_cwnd:onchange($cwnd).save(snd_wnd,srtt,rcv_wnd):onchange($cwnd).snapshot()'

step="run"
send "run 30"
send "tcp"

# LATS FILE: "pid lat" per waking..sched_switch pair of a trace, from its
# time stamps (microseconds as printed), the first switch after a waking.
lats() {
  sed -nE -e 's/.* ([0-9]+)\.([0-9]{6}): sched_waking: .* pid=([0-9]+) .*/W \1\2 \3/p' \
    -e 's/.* ([0-9]+)\.([0-9]{6}): sched_switch: .* next_pid=([0-9]+) .*/S \1\2 \3/p' "$1" |
    awk '$1 == "W" { w[$3] = $2; next } ($3 in w) { print $3, $2 - w[$3]; delete w[$3] }'
}

step="1: the wakeup_latency records and histogram"
cat "$mnt/trace" >"$work/trace"
lats "$work/trace" >"$work/want"
[[ $(wc -l <"$work/want") == 30 ]] || fail "$(wc -l <"$work/want") pairs in the trace, not 30"
# The records, as the trace prints them: lat=L pid=P prio=19.
grep -o 'wakeup_latency: lat=[0-9]* pid=[0-9]* prio=[0-9]*' "$work/trace" |
  awk '{split($2, l, "="); split($3, p, "="); print p[2], l[2]}' >"$work/got"
diff "$work/want" "$work/got" >/dev/null || fail "records differ from the trace's time stamps: $(diff "$work/want" "$work/got" | head)"
grep -q 'wakeup_latency: lat=[0-9]* pid=[0-9]* prio=19$' "$work/trace" || fail "prio is not next_prio (19)"
# The program's own measurement brackets the two events: each latency is at
# most its own (and at most a few microseconds less: the clock reads and
# the event writes between them).
# (A preemption between a clock read and its event, or a sanitizer's
# slowness, widens the gap: 5 ms is allowed; the time stamps above are the
# exact check, and the upper bound holds whatever the machine.)
grep '^lat ' "$work/target.out" | tail -n +2 | awk '{print $2, $3}' >"$work/own"
paste -d' ' "$work/want" "$work/own" | awk '
  $1 != $3 { print "pid " $1 " vs " $3; bad = 1 }
  $2 > $4 + 1 || $2 + 5000 < $4 { print "lat " $2 " vs own " $4; bad = 1 }
  END { exit bad }' || fail "latencies disagree with the program's own"
# The histogram: one entry per (pid, prio, lat), hitcounts adding up.
cat "$mnt/events/synthetic/wakeup_latency/hist" >"$work/hist"
"$USRTRACE" show -P "$target_pid" --hist synthetic:wakeup_latency | diff - "$work/hist" >/dev/null ||
  fail "show --hist differs from the mount's hist file"
grep -q '^# trigger info: hist:keys=pid,prio,lat:vals=hitcount:sort=pid,lat:size=2048 \[active\]$' "$work/hist" ||
  fail "trigger info: $(grep 'trigger info' "$work/hist")"
awk '/^\{ pid:/ { gsub(/[{},]/, ""); print $2, $6, $8 }' "$work/hist" | sort >"$work/hist_got"
sort "$work/want" | uniq -c | awk '{print $2, $3, $1}' | sort >"$work/hist_want"
diff "$work/hist_want" "$work/hist_got" >/dev/null ||
  fail "histogram differs: $(diff "$work/hist_want" "$work/hist_got" | head)"
grep -q '^    Hits: 30$' "$work/hist" || fail "Hits: $(grep Hits "$work/hist")"

step="2: onmax save: each entry's max and the fields of its record"
cat "$mnt/instances/onmax/events/sched/sched_switch/hist" >"$work/onmax"
lats <(cat "$mnt/instances/onmax/trace") | awk '$2 > m[$1] || !($1 in m) { m[$1] = $2 } END { for (p in m) print p, m[p] }' >"$work/max_want"
worker=$(awk 'NR == 1 {print $1}' "$work/want")
main_tid=$(grep -o 'prev_pid=[0-9]*' "$work/trace" | head -1 | cut -d= -f2)
want_max=$(awk '{print $2}' "$work/max_want")
# { next_pid: P } hitcount: N \n\tmax: M  next_comm: cyclictest  prev_pid: T  prev_prio: 120  prev_comm: main
grep -q "^{ next_pid: *$worker } hitcount: *30\$" "$work/onmax" || fail "entry: $(head -8 "$work/onmax")"
line=$(grep -A1 "^{ next_pid: *$worker }" "$work/onmax" | tail -1)
[[ $line =~ ^$'\t'max:\ +([0-9]+)\ \ next_comm:\ cyclictest\ +\ \ prev_pid:\ +([0-9]+)\ \ prev_prio:\ +120\ \ prev_comm:\ main\ *$ ]] ||
  fail "saved line: '$line'"
[[ ${BASH_REMATCH[1]} == "$want_max" ]] || fail "max ${BASH_REMATCH[1]}, the trace says $want_max"
[[ ${BASH_REMATCH[2]} == "$main_tid" ]] || fail "prev_pid ${BASH_REMATCH[2]}, not main's $main_tid"

step="3: onmax snapshot: the worst case's value, key and trace"
cat "$mnt/instances/snap/events/sched/sched_switch/hist" >"$work/snaphist"
grep -q '^Snapshot taken (see tracing/snapshot).  Details:$' "$work/snaphist" || fail "no snapshot notice: $(cat "$work/snaphist")"
notice=$(grep -A1 '^Snapshot taken' "$work/snaphist" | tail -1)
[[ $notice =~ ^$'\t'triggering\ value\ \{\ onmax\(\$wakeup_lat\)\ \}:\ +([0-9]+)$'\t'triggered\ by\ event\ with\ key:\ \{\ next_pid:\ +([0-9]+)\ \}$ ]] ||
  fail "notice: '$notice'"
value=${BASH_REMATCH[1]}
key=${BASH_REMATCH[2]}
[[ $key == "$worker" ]] || fail "key $key, not the worker $worker"
entry_max=$(grep -A1 "^{ next_pid: *$key }" "$work/snaphist" | tail -1 | awk '{print $2}')
[[ $entry_max == "$value" ]] || fail "the entry's max $entry_max is not the triggering value $value"
# The snapshot's last pair has that latency, by its own time stamps.
cat "$mnt/instances/snap/snapshot" >"$work/snapshot"
last=$(lats "$work/snapshot" | tail -1)
[[ $last == "$key $value" ]] || fail "the snapshot's last pair is '$last', not '$key $value'"
# And it is the worst of the run: no pair in the live trace since is worse
# than it... of the pairs the live trace still has, none is above it.
lats <(cat "$mnt/instances/snap/trace") | awk -v v="$value" '$2 > v { bad = 1 } END { exit bad }' ||
  fail "a later pair is worse than the snapshot's $value"

step="4: onchange save and snapshot"
cat "$mnt/instances/tcp/events/tcp/tcp_probe/hist" >"$work/tcphist"
# The last change of each dport, from what the program wrote.
awk '/^tcp / { if (!($2 in c) || c[$2] != $3) { c[$2] = $3; s[$2] = $4 " " $5 " " $6 } }
     END { for (d in c) print d, c[d], s[d] }' "$work/target.out" | sort -n >"$work/chg_want"
awk '/^\{ dport:/ { d = $3; getline; print d, $2, $4, $6, $8 }' "$work/tcphist" | sort -n >"$work/chg_got"
diff "$work/chg_want" "$work/chg_got" >/dev/null || fail "onchange entries: $(diff "$work/chg_want" "$work/chg_got")"
# The snapshot notice: the last change of the run (1521's 8 -> 10... or the
# newest change the program made), and the snapshot ends with that event.
last_change=$(awk '/^tcp / { if (($2 in c) && c[$2] != $3 || !($2 in c)) { l = $2 " " $3 } c[$2] = $3 } END { print l }' "$work/target.out")
notice=$(grep -A1 '^Snapshot taken' "$work/tcphist" | tail -1)
[[ $notice =~ ^$'\t'triggering\ value\ \{\ onchange\(\$cwnd\)\ \}:\ +([0-9]+)$'\t'triggered\ by\ event\ with\ key:\ \{\ dport:\ +([0-9]+)\ \}$ ]] ||
  fail "notice: '$notice'"
[[ "${BASH_REMATCH[2]} ${BASH_REMATCH[1]}" == "$last_change" ]] || fail "notice says '${BASH_REMATCH[2]} ${BASH_REMATCH[1]}', not '$last_change'"
tail -1 "$mnt/instances/tcp/snapshot" | grep -q "tcp_probe: dport=${last_change% *} snd_cwnd=${last_change#* } " ||
  fail "the snapshot ends with: $(tail -1 "$mnt/instances/tcp/snapshot")"

step="removal: a synthetic event in use, then the triggers, then it"
if echo '!wakeup_latency' >>"$mnt/synthetic_events" 2>/dev/null; then fail "removed while in use"; fi
echo '!hist:keys=pid,prio,lat:sort=pid,lat' >>"$mnt/events/synthetic/wakeup_latency/trigger"
echo '!hist:keys=next_pid:wakeup_lat=common_timestamp.usecs-$ts0:onmatch(sched.sched_waking).wakeup_latency($wakeup_lat,$saved_pid,next_prio) if next_comm=="cyclictest"' \
  >>"$mnt/events/sched/sched_switch/trigger"
echo 0 >"$mnt/events/synthetic/wakeup_latency/enable"
wr "$mnt/synthetic_events" '!wakeup_latency'
[[ -z $(cat "$mnt/synthetic_events") ]] || fail "still listed: $(cat "$mnt/synthetic_events")"
[[ ! -e $mnt/events/synthetic/wakeup_latency ]] || fail "events/synthetic/wakeup_latency still there"

step="done"
echo "inter_event_test: OK"
