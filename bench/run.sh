#!/usr/bin/env bash
# Builds and runs the ring buffer write-path benchmarks and prints a Markdown
# summary (bench/README.md explains every row).
#
#   bash bench/run.sh
#
# Steps: apt-get what is missing; configure a Release build in build-bench/;
# build ring_buffer_bench and instr_count; start lttng-sessiond if none runs;
# create a snapshot-mode LTTng session with usrtrace_bench:* enabled; run the
# benchmarks (JSON to build-bench/bench_results.json); destroy the session;
# count instructions per event with callgrind; print the table.
#
# Environment (all optional):
#   USRTRACE_BENCH_BUILD_DIR     build directory            (default: <repo>/build-bench)
#   USRTRACE_BENCH_REPETITIONS   --benchmark_repetitions    (default: 9)
#   USRTRACE_BENCH_MIN_TIME      --benchmark_min_time, s    (default: 0.2)
#   USRTRACE_BENCH_FILTER        --benchmark_filter         (default: all)
#   USRTRACE_BENCH_INSTR_N       callgrind N (runs N, 2N)   (default: 100000)
#   USRTRACE_BENCH_WERROR        USRTRACE_WERROR for the build (default: ON)
#   USRTRACE_BENCH_KEEP_SESSIOND 1: leave a session daemon this script started running
#   USRTRACE_BENCH_WHOLE_ROUNDS  rounds of the whole-job comparison (default: 5)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${USRTRACE_BENCH_BUILD_DIR:-$ROOT/build-bench}
REPS=${USRTRACE_BENCH_REPETITIONS:-9}
MIN_TIME=${USRTRACE_BENCH_MIN_TIME:-0.2}
FILTER=${USRTRACE_BENCH_FILTER:-.}
INSTR_N=${USRTRACE_BENCH_INSTR_N:-100000}
WERROR=${USRTRACE_BENCH_WERROR:-ON}
WHOLE_ROUNDS=${USRTRACE_BENCH_WHOLE_ROUNDS:-5}

SESSION="usrtrace_bench_$$"
INSTANCE=/sys/kernel/tracing/instances/usrtrace_bench
RESULTS="$BUILD/bench_results.json"
CG_DIR="$BUILD/callgrind"

log() { echo "run.sh: $*" >&2; }

# ---------------------------------------------------------------------------
# Cleanup, whatever happens: the benchmark process, the LTTng session, the
# tracefs instance, a session daemon we started, the temporary directory.

TMP=""
BENCH_PID=""
SESSION_CREATED=0
SESSIOND_PID=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $BENCH_PID ]] && kill -0 "$BENCH_PID" 2>/dev/null; then
    log "stopping the benchmark (pid $BENCH_PID)"
    kill "$BENCH_PID" 2>/dev/null || true
    wait "$BENCH_PID" 2>/dev/null || true
  fi
  if ((SESSION_CREATED)); then
    lttng destroy "$SESSION" >/dev/null 2>&1 || log "warning: lttng destroy $SESSION failed"
  fi
  # The benchmark removes its instance itself; this catches a crash or a kill.
  if [[ -d $INSTANCE ]]; then
    rmdir "$INSTANCE" 2>/dev/null || log "warning: could not remove $INSTANCE"
  fi
  if [[ -n $SESSIOND_PID && ${USRTRACE_BENCH_KEEP_SESSIOND:-0} != 1 ]]; then
    kill "$SESSIOND_PID" 2>/dev/null || true
    # Wait for it to go, so that a next run does not find a dying daemon.
    for _ in $(seq 50); do kill -0 "$SESSIOND_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  [[ -n $TMP ]] && rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d /tmp/usrtrace-bench.XXXXXX)

# ---------------------------------------------------------------------------
# 1. Packages.

PKGS=(cmake ninja-build g++ libbenchmark-dev valgrind liblttng-ust-dev lttng-tools pkg-config uftrace
  libcli11-dev libtraceevent-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
command -v python3 >/dev/null || { missing+=(python3); PKGS+=(python3); }
if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  SUDO=()
  ((EUID == 0)) || SUDO=(sudo)
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${PKGS[@]}"
fi

# ---------------------------------------------------------------------------
# 2. Build (Release, benchmarks only).

log "configuring $BUILD"
cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DUSRTRACE_BUILD_BENCH=ON -DUSRTRACE_BUILD_TESTS=OFF -DUSRTRACE_BUILD_EXAMPLES=OFF \
  -DUSRTRACE_WERROR="$WERROR" >"$TMP/cmake.log" || { cat "$TMP/cmake.log" >&2; exit 1; }
grep '^-- bench:' "$TMP/cmake.log" >&2 || true
log "building"
cmake --build "$BUILD" --target ring_buffer_bench instr_count event_bench event_instr snapshot_bench trigger_bench record_bench control_bench \
  function_bench function_instr function_uftrace_target latency_bench latency_instr

BENCH="$BUILD/bench/ring_buffer_bench"
INSTR="$BUILD/bench/instr_count"

# ---------------------------------------------------------------------------
# 3. LTTng session (only if BM_LttngUst was built).

HAVE_LTTNG=0
TESTS=$("$BENCH" --benchmark_list_tests=true)
if grep -qx 'BM_LttngUst' <<<"$TESTS"; then HAVE_LTTNG=1; fi

if ((HAVE_LTTNG)); then
  if ! pgrep -x lttng-sessiond >/dev/null; then
    log "starting lttng-sessiond"
    lttng-sessiond --daemonize --no-kernel
    # The daemon writes its pid in its run directory.
    if ((EUID == 0)); then piddir=/var/run/lttng; else piddir="${LTTNG_HOME:-$HOME}/.lttng"; fi
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      [[ -s $piddir/lttng-sessiond.pid ]] && break
      sleep 0.2
    done
    SESSIOND_PID=$(cat "$piddir/lttng-sessiond.pid" 2>/dev/null || true)
  fi
  log "creating snapshot-mode LTTng session $SESSION"
  lttng create "$SESSION" --snapshot --output="$TMP/lttng" >/dev/null
  SESSION_CREATED=1
  lttng enable-event --userspace 'usrtrace_bench:*' --session="$SESSION" >/dev/null
  lttng start "$SESSION" >/dev/null
else
  log "liblttng-ust not found at build time: BM_LttngUst is not built (apt-get install liblttng-ust-dev)"
fi

# ---------------------------------------------------------------------------
# 4. Benchmarks. Repetitions run in random order across benchmarks, so drift
# of the shared machine hits every benchmark alike.

log "running $BENCH ($REPS repetitions, min time ${MIN_TIME}s)"
# Run in the background and wait, so that INT/TERM reach the trap at once.
LTTNG_UST_REGISTER_TIMEOUT=10000 "$BENCH" \
  --benchmark_filter="$FILTER" \
  --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true \
  --benchmark_min_time="$MIN_TIME" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$RESULTS" --benchmark_out_format=json &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""

LTTNG_NOTE=""
if ((SESSION_CREATED)); then
  lttng stop "$SESSION" >/dev/null
  # Evidence that the tracepoint really recorded: events in a snapshot.
  if lttng snapshot record --session="$SESSION" >/dev/null 2>&1 && command -v babeltrace >/dev/null; then
    n=$(babeltrace "$TMP/lttng" 2>/dev/null | grep -c 'usrtrace_bench:event' || true)
    LTTNG_NOTE="LTTng snapshot taken after the run holds ${n} usrtrace_bench:event events (the newest; snapshot mode overwrites)."
  fi
  lttng destroy "$SESSION" >/dev/null
  SESSION_CREATED=0
fi

# ---------------------------------------------------------------------------
# 5. Instructions per event: callgrind, collection restricted to each loop
# function, at N and 2N; (Ir(2N) - Ir(N)) / N cancels everything constant.

mkdir -p "$CG_DIR"
ir_of() {  # mode n -> collected Ir
  local mode=$1 n=$2 out="$CG_DIR/$1.$2.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" \
    --toggle-collect="usrtrace_bench_${mode}_loop" "$INSTR" "$mode" "$n" \
    >"$CG_DIR/$mode.$n.log" 2>&1 || { cat "$CG_DIR/$mode.$n.log" >&2; return 1; }
  # A --toggle-collect pattern that matched nothing would give 0: refuse it.
  awk '/^summary:/ { print $2; found = ($2 > 0) } END { if (!found) exit 1 }' "$out" ||
    { log "callgrind collected nothing for usrtrace_bench_${mode}_loop ($out)"; return 1; }
}
IR_ARGS=()
for mode in ideal baseline usrtrace; do
  log "callgrind: $mode at N=$INSTR_N and 2N"
  ir1=$(ir_of "$mode" "$INSTR_N")
  ir2=$(ir_of "$mode" $((2 * INSTR_N)))
  IR_ARGS+=("$mode=$ir1,$ir2")
done

# ---------------------------------------------------------------------------
# 6. Summary.

python3 - "$RESULTS" "$INSTR_N" "$HAVE_LTTNG" "$LTTNG_NOTE" "${IR_ARGS[@]}" <<'PY'
import json
import statistics
import sys

results_path, instr_n, have_lttng, lttng_note = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
ir = {}
for arg in sys.argv[5:]:
    mode, vals = arg.split("=")
    a, b = (int(v) for v in vals.split(","))
    ir[mode] = (b - a) / instr_n

with open(results_path) as f:
    data = json.load(f)

to_ns = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
runs = {}    # name -> {"threads", "cpu": [...], "wall": [...]}
errors = {}  # name -> message
order = []
for b in data["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    name = b["run_name"]
    if name not in order:
        order.append(name)
    if b.get("error_occurred"):
        errors[name] = b.get("error_message", "error")
        continue
    r = runs.setdefault(name, {"threads": b["threads"], "cpu": [], "wall": []})
    unit = to_ns[b.get("time_unit", "ns")]
    # Google Benchmark: cpu_time = CPU of all threads / events of all threads
    # (one event on one thread); real_time = wall / events of all threads.
    r["cpu"].append(b["cpu_time"] * unit)
    r["wall"].append(b["real_time"] * unit * b["threads"])

def med(name, key="cpu"):
    r = runs.get(name)
    return statistics.median(r[key]) if r and r[key] else None

ideal1 = med("BM_IdealWrite")
ideal2 = med("BM_IdealWrite/threads:2")

def fmt(x, spec=".2f"):
    return "–" if x is None else format(x, spec)

def ratio(x, base):
    return None if x is None or not base else x / base

instr = {"BM_IdealWrite": ir.get("ideal"), "BM_IdealWrite/threads:2": ir.get("ideal"),
         "BM_UsrtraceWrite": ir.get("usrtrace"), "BM_UsrtraceWrite/threads:2": ir.get("usrtrace")}

reps = max((len(r["cpu"]) for r in runs.values()), default=0)
print()
print(f"## usrtrace write path ({reps} repetitions, medians; ns per event per thread)")
print()
print("| Benchmark | median ns (CPU) | median ns (wall) | min–max ns (CPU) | × BM_IdealWrite | × BM_IdealWrite/threads:2 | instr/event |")
print("|---|---:|---:|---:|---:|---:|---:|")
wanted = ["BM_IdealWrite", "BM_IdealWrite/threads:2", "BM_UsrtraceWrite", "BM_UsrtraceWrite/threads:2",
          "BM_UsrtraceWriteDisabled", "BM_LttngUst", "BM_TraceMarker"]
for name in wanted + [n for n in order if n not in wanted]:
    if name == "BM_LttngUst" and not have_lttng:
        print(f"| {name} | not built: liblttng-ust not found (pkg-config lttng-ust) | | | | | |")
        continue
    if name in errors and name not in runs:
        print(f"| {name} | skipped: {errors[name]} | | | | | |")
        continue
    if name not in runs:
        if name in order or name in wanted[:5]:
            print(f"| {name} | not run | | | | | |")
        continue
    r = runs[name]
    c, w = med(name), med(name, "wall")
    two = name.endswith("/threads:2")
    print(f"| {name} | {fmt(c)} | {fmt(w)} | {fmt(min(r['cpu']))}–{fmt(max(r['cpu']))} "
          f"| {fmt(ratio(c, ideal1))} | {fmt(ratio(c, ideal2)) if two else '–'} "
          f"| {fmt(instr.get(name), '.1f')} |")

print()
print(f"Instructions per event (callgrind, exact; (Ir(2N) - Ir(N)) / N with N = {instr_n}, "
      "collection toggled on the loop function only):")
print()
print("| loop | instr/event |")
print("|---|---:|")
rows = [("ideal: rdtsc + one 16-byte store + loop", ir.get("ideal")),
        ("baseline: payload fill + loop, no write", ir.get("baseline")),
        ("usrtrace: payload fill + write<28>() + loop", ir.get("usrtrace"))]
if ir.get("usrtrace") is not None and ir.get("baseline") is not None:
    rows.append(("usrtrace write<28>() alone (usrtrace - baseline; page switches amortised)",
                 ir["usrtrace"] - ir["baseline"]))
for label, v in rows:
    print(f"| {label} | {fmt(v)} |")

print()
print("Checks (CPU-time medians of this run):")
def check(label, value, limit, unit=""):
    if value is None:
        print(f"- {label}: not measured")
    else:
        verdict = "ok" if value <= limit else "ABOVE TARGET"
        print(f"- {label}: {value:.2f}{unit} (target <= {limit}{unit}) {verdict}")
check("BM_UsrtraceWrite / BM_IdealWrite", ratio(med("BM_UsrtraceWrite"), ideal1), 1.25, "x")
check("BM_UsrtraceWrite/threads:2 / BM_IdealWrite/threads:2",
      ratio(med("BM_UsrtraceWrite/threads:2"), ideal2), 1.25, "x")
check("BM_UsrtraceWriteDisabled", med("BM_UsrtraceWriteDisabled"), 1.0, " ns")
if ir.get("usrtrace") is not None:
    check("usrtrace loop instructions per event", ir["usrtrace"], 40)
    if ir.get("baseline") is not None:
        check("write<28>() alone, instructions per event", ir["usrtrace"] - ir["baseline"], 40)
if lttng_note:
    print()
    print(lttng_note)
PY
# ---------------------------------------------------------------------------
# 7. Typed events against the ring buffer's own write (event_bench).

EVENT_RESULTS="$BUILD/event_results.json"
log "running $BUILD/bench/event_bench ($REPS repetitions)"
"$BUILD/bench/event_bench" --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time="$MIN_TIME" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$EVENT_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""
# Instructions per typed event: event_instr's loop at N and 2N, as section 5.
EV_IR=""
for n in "$INSTR_N" $((2 * INSTR_N)); do
  out="$CG_DIR/event.$n.out"
  if valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect=usrtrace_bench_event_loop \
       "$BUILD/bench/event_instr" "$n" >"$CG_DIR/event.$n.log" 2>&1; then
    EV_IR+="$(awk '/^summary:/ { print $2 }' "$out"),"
  else
    log "event_instr failed: $(tail -1 "$CG_DIR/event.$n.log")"
  fi
done
python3 - "$EVENT_RESULTS" "$INSTR_N" "$EV_IR" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
instr_n, ev_ir = int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",") if x]
med = {b["run_name"]: b["cpu_time"] for b in data["benchmarks"]
       if b.get("aggregate_name") == "median"}
base = med["BM_RingBufferWrite"]
print()
print("## Typed events (medians, ns CPU; ratios to BM_RingBufferWrite of the same run)")
print()
print("| Benchmark | median ns | x ring buffer write |")
print("|---|---:|---:|")
for name in ["BM_RingBufferWrite", "BM_EventDisabled", "BM_EventEnabled", "BM_EventEnabled3"]:
    print(f"| {name} | {med[name]:.2f} | {med[name] / base:.2f} |")
print()
def check(label, value, limit, unit):
    print(f"- {label}: {value:.2f}{unit} (target <= {limit}{unit}) {'ok' if value <= limit else 'MISSED'}")
check("BM_EventDisabled", med["BM_EventDisabled"], 1.0, " ns")
check("BM_EventEnabled / BM_RingBufferWrite", med["BM_EventEnabled"] / base, 1.1, "x")
check("BM_EventEnabled3 / BM_RingBufferWrite", med["BM_EventEnabled3"] / base, 3.3, "x")
if len(ev_ir) == 2:
    print(f"- instructions per enabled event (callgrind, the loop's argument building included; "
          f"write<28>() and its loop are section 5's usrtrace row): {(ev_ir[1] - ev_ir[0]) / instr_n:.1f}")
PY
# ---------------------------------------------------------------------------
# 8. The snapshot swap at 1 MiB and 1 GiB (snapshot_bench).

SNAP_RESULTS="$BUILD/snapshot_results.json"
log "running $BUILD/bench/snapshot_bench ($REPS repetitions)"
"$BUILD/bench/snapshot_bench" --benchmark_repetitions="$REPS" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$SNAP_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""
python3 - "$SNAP_RESULTS" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b["real_time"] for b in data["benchmarks"]
       if b.get("aggregate_name") == "median"}
base = med["BM_EventEnabled"]
print()
print("## Snapshots (medians, ns wall; ratios to one enabled event of the same run)")
print()
print("| Benchmark | median ns | x event write |")
print("|---|---:|---:|")
for name in ["BM_EventEnabled", "BM_Snapshot/1", "BM_Snapshot/1024"]:
    print(f"| {name} | {med[name]:.1f} | {med[name] / base:.1f} |")
print()
for name, label in [("BM_Snapshot/1", "1 MiB"), ("BM_Snapshot/1024", "1 GiB")]:
    v = med[name]
    print(f"- snapshot (event + swap) at {label}: {v:.0f} ns (target < 1000 ns) {'ok' if v < 1000 else 'MISSED'}")
PY
# ---------------------------------------------------------------------------
# 9. Filters and hist triggers against an unfiltered event (trigger_bench).

TRIG_RESULTS="$BUILD/trigger_results.json"
log "running $BUILD/bench/trigger_bench ($REPS repetitions)"
"$BUILD/bench/trigger_bench" --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time="$MIN_TIME" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$TRIG_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""
python3 - "$TRIG_RESULTS" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b["cpu_time"] for b in data["benchmarks"]
       if b.get("aggregate_name") == "median"}
base = med["BM_Unfiltered"]
print()
print("## Filters and hist triggers (medians, ns CPU; ratios to BM_Unfiltered of the same run)")
print()
print("| Benchmark | median ns | x unfiltered event |")
print("|---|---:|---:|")
for name in ["BM_Unfiltered", "BM_FilteredIn", "BM_FilteredOut", "BM_FilteredOutLong",
             "BM_HistOnly", "BM_HistKeysVals", "BM_HistAndRecorded"]:
    print(f"| {name} | {med[name]:.2f} | {med[name] / base:.2f} |")
print()
v = med["BM_FilteredOut"] / base
print(f"- filtered-out / recorded: {v:.2f}x (target <= 1.5x) {'ok' if v <= 1.5 else 'MISSED'}")
pair = med["BM_HistPairPlain"]
print()
print("## Inter-event hist triggers (medians, ns CPU per begin+end pair; ratios to a plain hist trigger on each)")
print()
print("| Benchmark | median ns | x plain hist pair |")
print("|---|---:|---:|")
for name in ["BM_HistPairPlain", "BM_HistPairLatency", "BM_HistPairOnmax", "BM_HistPairSynth"]:
    print(f"| {name} | {med[name]:.2f} | {med[name] / pair:.2f} |")
PY
# ---------------------------------------------------------------------------
# 10. The trace.dat recorder against the rate one writer fills a buffer
# (record_bench). Fixed iterations (each records 4M events); no repetitions.

REC_RESULTS="$BUILD/record_results.json"
log "running $BUILD/bench/record_bench"
"$BUILD/bench/record_bench" --benchmark_out="$REC_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""
python3 - "$REC_RESULTS" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
rows = {b["run_name"].split("/real_time")[0].replace("/iterations:3", ""): b for b in data["benchmarks"]}
fill = rows["BM_FillRate"]
print()
print("## Recording to trace.dat (one writer thread, discard mode, 4 MiB buffer, buffer_percent 50)")
print()
print("| Benchmark | writer Mevents/s | x fill rate | recorded MB/s | lost % |")
print("|---|---:|---:|---:|---:|")
for name, b in rows.items():
    ev = b["events_per_s"] / 1e6
    print(f"| {name} | {ev:.1f} | {b['events_per_s'] / fill['events_per_s']:.2f} | {b['MB_per_s']:.0f} | {b['lost_pct']:.2f} |")
PY
# ---------------------------------------------------------------------------
# 11. The write path while a control-socket client reads the same instance
# at full speed (control_bench).

CTL_RESULTS="$BUILD/control_results.json"
log "running $BUILD/bench/control_bench ($REPS repetitions)"
"$BUILD/bench/control_bench" --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time="$MIN_TIME" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$CTL_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""
python3 - "$CTL_RESULTS" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
med = {b["run_name"]: b for b in data["benchmarks"] if b.get("aggregate_name") == "median"}
base = med["BM_WriteUnread"]["cpu_time"]
print()
print("## Writing while a client reads through the control socket (medians, ns CPU of the writer;")
print("## ratios to BM_WriteUnread of the same run)")
print()
print("| Benchmark | median ns | x unread | reader Mevents/s | read % of written |")
print("|---|---:|---:|---:|---:|")
for name in ["BM_WriteUnread", "BM_WriteTracePipe", "BM_WriteRawPages", "BM_WritePages"]:
    b = med[name]
    print(f"| {name} | {b['cpu_time']:.2f} | {b['cpu_time'] / base:.2f} | "
          f"{b['read_events_per_s'] / 1e6:.2f} | {b['read_pct']:.1f} |")
PY
# ---------------------------------------------------------------------------
# 12. Function tracing (function_bench, function_instr, function_uftrace_target):
# ns per call of a small leaf under each instrumentation, as ratios to the
# ideal hooks of the same run; instructions per call under callgrind; uftrace
# recording the same workload.

FN_RESULTS="$BUILD/function_results.json"
log "running $BUILD/bench/function_bench ($REPS repetitions)"
"$BUILD/bench/function_bench" --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time="$MIN_TIME" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$FN_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""

FN_IR_ARGS=()
for mode in plain ideal graph filtered patch; do
  log "callgrind: function_instr $mode at N=$INSTR_N and 2N"
  irs=()
  for n in "$INSTR_N" $((2 * INSTR_N)); do
    out="$CG_DIR/function_$mode.$n.out"
    loop=fb_cyg_loop
    case $mode in plain) loop=fb_plain_loop ;; ideal) loop=fb_ideal_loop ;;
                  filtered) loop=fb_cyg_other_loop ;; patch) loop=fb_patch_loop ;; esac
    if valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect="$loop" \
         "$BUILD/bench/function_instr" "$mode" "$n" >"$CG_DIR/function_$mode.$n.log" 2>&1; then
      irs+=("$(awk '/^summary:/ { print $2 }' "$out")")
    else
      log "function_instr $mode failed: $(tail -1 "$CG_DIR/function_$mode.$n.log")"
      irs=()
      break
    fi
  done
  ((${#irs[@]} == 2)) && FN_IR_ARGS+=("$mode=${irs[0]},${irs[1]}")
done

# uftrace: the same workload as a plain program, timed by itself (thread CPU
# time and wall time of the loop, best of 5 rounds of UF_CALLS calls), once
# alone and once under `uftrace record`; the ratio is to the ideal hooks
# timed in that same process.
UF_CALLS=200000
UF_ALONE="" UF_UNDER=""
if command -v uftrace >/dev/null; then
  log "uftrace: function_uftrace_target alone and under uftrace record"
  UF_ALONE=$("$BUILD/bench/function_uftrace_target" "$UF_CALLS" | tr '\n' ';')
  UF_UNDER=$(uftrace record --no-libcall --no-event -d "$TMP/uftrace.data" \
               "$BUILD/bench/function_uftrace_target" "$UF_CALLS" | tr '\n' ';')
  uf_calls=$(uftrace report -d "$TMP/uftrace.data" -f call --no-pager 2>/dev/null |
               awk '$2 == "fb_cyg_leaf" { print $1 }')
  log "uftrace recorded ${uf_calls:-no} calls of fb_cyg_leaf (expected $((5 * UF_CALLS)))"
else
  log "uftrace not installed: its row is left out (apt-get install uftrace)"
fi

python3 - "$FN_RESULTS" "$INSTR_N" "$UF_ALONE" "$UF_UNDER" "${FN_IR_ARGS[@]}" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
instr_n = int(sys.argv[2])
batch = 1000  # calls per benchmark iteration (function_bench.cc kBatch)
med, errors = {}, {}
for b in data["benchmarks"]:
    if b.get("error_occurred"):
        errors[b["run_name"]] = b.get("error_message", "error")
    elif b.get("aggregate_name") == "median":
        med[b["run_name"]] = {"cpu": b["cpu_time"] / batch, "wall": b["real_time"] / batch}
ir = {}
for arg in sys.argv[5:]:
    mode, vals = arg.split("=")
    a, b = (int(v) for v in vals.split(","))
    ir[mode] = (b - a) / instr_n

def parse(s):
    out = {}
    for line in s.split(";"):
        p = line.split()
        if len(p) == 3:
            out[p[0]] = (float(p[1]), float(p[2]))
    return out
uf_alone, uf_under = parse(sys.argv[3]), parse(sys.argv[4])

ideal = med.get("BM_IdealHooks", {}).get("cpu")
plain = med.get("BM_Plain", {}).get("cpu")
print()
print("## Function tracing (medians, ns per call, CPU; ratios to BM_IdealHooks of the same run)")
print()
print("| Benchmark | ns per call | ns wall | x ideal hooks | overhead x ideal overhead | instr/call |")
print("|---|---:|---:|---:|---:|---:|")
rows = [("BM_Plain", "plain"), ("BM_IdealHooks", "ideal"), ("BM_CygNoTracer", None),
        ("BM_FunctionGraph", "graph"), ("BM_FunctionFilteredOut", "filtered"),
        ("BM_PatchableNop", "patch"), ("BM_PatchableGraph", None)]
for name, mode in rows:
    if name not in med:
        print(f"| {name} | skipped: {errors.get(name, 'not run')} | | | | |")
        continue
    c, w = med[name]["cpu"], med[name]["wall"]
    x = f"{c / ideal:.2f}" if ideal else "–"
    ov = f"{(c - plain) / (ideal - plain):.2f}" if ideal and plain is not None and ideal > plain else "–"
    n = f"{ir[mode]:.1f}" if mode in ir else "–"
    print(f"| {name} | {c:.2f} | {w:.2f} | {x} | {ov} | {n} |")
if uf_under.get("cyg") and uf_under.get("ideal"):
    (uc, uw), (ic, iw) = uf_under["cyg"], uf_under["ideal"]
    print(f"| uftrace record (function_uftrace_target) | {uc:.2f} | {uw:.2f} | {uc / ic:.2f} "
          f"(wall {uw / iw:.2f}) | | |")
    if uf_alone.get("cyg"):
        print()
        print(f"function_uftrace_target alone: plain {uf_alone['plain'][0]:.2f}, ideal "
              f"{uf_alone['ideal'][0]:.2f}, glibc's empty hooks {uf_alone['cyg'][0]:.2f} ns per call; "
              f"under uftrace: plain {uf_under['plain'][0]:.2f}, ideal {ic:.2f}, uftrace {uc:.2f}.")
print()
def check(label, value, limit, unit):
    if value is None:
        print(f"- {label}: not measured")
    else:
        print(f"- {label}: {value:.2f}{unit} (target <= {limit}{unit}) {'ok' if value <= limit else 'MISSED'}")
g = med.get("BM_FunctionGraph", {}).get("cpu")
check("BM_FunctionGraph / BM_IdealHooks", g / ideal if g and ideal else None, 1.3, "x")
f = med.get("BM_FunctionFilteredOut", {}).get("cpu")
check("BM_FunctionFilteredOut", f, 10.0, " ns")
p = med.get("BM_PatchableNop", {}).get("cpu")
check("BM_PatchableNop - BM_Plain", p - plain if p is not None and plain is not None else None, 0.5, " ns")
if "graph" in ir and "ideal" in ir:
    print(f"- instructions per call: function_graph {ir['graph']:.1f}, ideal hooks {ir['ideal']:.1f} "
          f"({ir['graph'] / ir['ideal']:.2f}x), plain {ir.get('plain', float('nan')):.1f}")
PY
# ---------------------------------------------------------------------------
# 11. Latency sections against two rdtsc (latency_bench, latency_instr).

LAT_RESULTS="$BUILD/latency_results.json"
log "running $BUILD/bench/latency_bench ($REPS repetitions)"
"$BUILD/bench/latency_bench" --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time="$MIN_TIME" \
  --benchmark_display_aggregates_only=true \
  --benchmark_out="$LAT_RESULTS" --benchmark_out_format=json >/dev/null &
BENCH_PID=$!
wait "$BENCH_PID"
BENCH_PID=""
LAT_IR=()
for mode in rdtsc2 section unwatched; do
  for n in "$INSTR_N" $((2 * INSTR_N)); do
    out="$CG_DIR/lat_$mode.$n.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" \
      --toggle-collect="usrtrace_bench_lat_${mode}_loop" "$BUILD/bench/latency_instr" "$mode" "$n" \
      >"$CG_DIR/lat_$mode.$n.log" 2>&1 || { cat "$CG_DIR/lat_$mode.$n.log" >&2; exit 1; }
    LAT_IR+=("$mode.$n=$(awk '/^summary:/ { print $2 }' "$out")")
  done
done
python3 - "$LAT_RESULTS" "$INSTR_N" "${LAT_IR[@]}" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
ir = dict(a.split("=") for a in sys.argv[3:])
per = {m: (int(ir[f"{m}.{2 * n}"]) - int(ir[f"{m}.{n}"])) / n for m in ("rdtsc2", "section", "unwatched")}
med = {b["run_name"]: b["cpu_time"] for b in data["benchmarks"] if b.get("aggregate_name") == "median"}
base = med["BM_TwoRdtsc"]
print()
print("## Latency sections (medians, ns cpu; ratios to two rdtsc of the same run)")
print()
print("| Benchmark | median ns | x two rdtsc |")
print("|---|---:|---:|")
for name in ["BM_TwoRdtsc", "BM_SectionUnwatched", "BM_SectionNotMax", "BM_SectionNotMaxAnyKind",
             "BM_SectionNested", "BM_WakeAndWait"]:
    print(f"| {name} | {med[name]:.2f} | {med[name] / base:.2f} |")
print()
r = med["BM_SectionNotMax"] / base
print(f"- a section that is not the new max: {r:.2f}x two timestamps (target <= 1.1x) {'ok' if r <= 1.1 else 'MISSED'}")
print(f"- instructions per section (callgrind): {per['section']:.1f} watched, {per['unwatched']:.1f} unwatched, "
      f"two rdtsc {per['rdtsc2']:.1f}")
PY
# ---------------------------------------------------------------------------
# 13. The whole job (whole_job.py): `usrtrace record` and `uftrace record` of
# a real program (Lua, tests/realworld's), end to end: wall, cpu, peak
# memory, file size and events lost, paired within rounds.

if cmake --build "$BUILD" --target usrtrace_cli usrtrace_preload >"$TMP/cli-build.log" 2>&1; then
  log "whole job: Lua under usrtrace record and uftrace record ($WHOLE_ROUNDS rounds)"
  echo
  echo "## The whole job: recording a real program (whole_job.py)"
  echo
  python3 "$ROOT/bench/whole_job.py" --cli "$BUILD/tools/usrtrace" --rounds "$WHOLE_ROUNDS"
  # 14. The views' numbers (profile_vs_uftrace.py): `usrtrace report
  # --profile` beside `uftrace report` on the same binary, calls checked
  # equal, times set side by side.
  log "profile: usrtrace report --profile beside uftrace report ($WHOLE_ROUNDS rounds)"
  echo
  echo "## report --profile beside uftrace report (profile_vs_uftrace.py)"
  echo
  python3 "$ROOT/bench/profile_vs_uftrace.py" --cli "$BUILD/tools/usrtrace" --rounds "$WHOLE_ROUNDS"
  # 15. Code built with no flag (plain_vs_uftrace.py): per call against
  # `uftrace record -P`, the attach, and a trivial run's whole job.
  if cmake --build "$BUILD" --target plain_bench_target >"$TMP/plain-build.log" 2>&1; then
    log "plain code: usrtrace beside uftrace -P, and the attach ($WHOLE_ROUNDS rounds)"
    echo
    echo "## Code built with no flag, beside uftrace -P (plain_vs_uftrace.py)"
    echo
    python3 "$ROOT/bench/plain_vs_uftrace.py" --cli "$BUILD/tools/usrtrace" \
      --target "$BUILD/bench/plain_bench_target" --rounds "$WHOLE_ROUNDS"
  fi
else
  log "whole job: skipped, the usrtrace command did not build: $(tail -1 "$TMP/cli-build.log")"
fi

log "JSON: $RESULTS, $EVENT_RESULTS, $SNAP_RESULTS, $TRIG_RESULTS, $REC_RESULTS, $CTL_RESULTS, $FN_RESULTS, $LAT_RESULTS; callgrind profiles: $CG_DIR"
