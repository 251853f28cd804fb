// Event filters and hist triggers against an unfiltered event, in one run
// so the ratios hold (bench/README.md):
//
//   BM_Unfiltered       trace_bench_trig(...) enabled in the top instance
//   BM_FilteredIn       the same with the filter "a >= 0" (every record passes)
//   BM_FilteredOut      the same with the filter "a < 0" (every record fails)
//   BM_FilteredOutLong  "(a < 0 && b > 5) || s ~ \"zz*\" || c == 3" (fails)
//   BM_HistOnly         event not recorded; hist:keys=b (64 distinct keys)
//   BM_HistKeysVals     event not recorded; hist:keys=b,s:vals=a,c
//   BM_HistAndRecorded  recorded and hist:keys=b
//
// Inter-event hist triggers (histogram.rst 2.2), per pair of events (a
// begin and an end, keys=b, not recorded), against a plain hist trigger on
// each of the two:
//   BM_HistPairPlain    hist:keys=b on both
//   BM_HistPairLatency  begin: ts0=common_timestamp; end: lat=common_timestamp-$ts0
//                       (a read-once variable matched by key)
//   BM_HistPairOnmax    the same with onmax($lat).save(a,s)
//   BM_HistPairSynth    the same with onmatch().trace(SYNTH,$lat,b): a
//                       synthetic event generated for each pair (not recorded)
//
// The targets: BM_FilteredOut <= 1.5x BM_Unfiltered; a hist
// trigger's cost per event is reported as a ratio too. Single thread,
// pinned to the first CPU of the process.
#include <benchmark/benchmark.h>
#include <sched.h>

#include <string>

#include "instance/instance.h"
#include "pin.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(bench, trig, (int32_t, a)(int32_t, b)(int32_t, c)(char[16], s), "a=%d b=%d c=%d s=%s", REC->a,
               REC->b, REC->c, REC->s)
USRTRACE_EVENT(bench, trig_end, (int32_t, a)(int32_t, b)(int32_t, c)(char[16], s), "a=%d b=%d c=%d s=%s",
               REC->a, REC->b, REC->c, REC->s)

namespace {

using usrtrace::instance::Instance;
namespace tracefs = usrtrace::tracefs;

using usrtrace::bench::Pin;

void run(benchmark::State& state, bool record, const char* filter, const char* trigger) {
  Pin pin;
  Instance* top = Instance::top();
  if (!top) return state.SkipWithError("no rseq");
  top->buffer().reset();
  if (record) top->set_event("bench", "trig", true);
  if (filter && tracefs::write_file("events/bench/trig/filter", filter, false) < 0)
    return state.SkipWithError("filter refused");
  if (trigger && tracefs::write_file("events/bench/trig/trigger", trigger, true) < 0)
    return state.SkipWithError("trigger refused");
  uint32_t i = 0;
  for (auto _ : state) {
    trace_bench_trig(static_cast<int32_t>(i & 0x7fffffff), static_cast<int32_t>(i % 64),
                     static_cast<int32_t>(~i), "bench-string");
    ++i;
  }
  top->set_event("bench", "trig", false);
  tracefs::write_file("events/bench/trig/filter", "0", false);
  if (trigger) tracefs::write_file("events/bench/trig/trigger", std::string("!") + trigger, true);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_Unfiltered(benchmark::State& s) { run(s, true, nullptr, nullptr); }
void BM_FilteredIn(benchmark::State& s) { run(s, true, "a >= 0", nullptr); }
void BM_FilteredOut(benchmark::State& s) { run(s, true, "a < 0", nullptr); }
void BM_FilteredOutLong(benchmark::State& s) {
  run(s, true, "(a < 0 && b > 5) || s ~ \"zz*\" || c == 3", nullptr);
}
void BM_HistOnly(benchmark::State& s) { run(s, false, nullptr, "hist:keys=b"); }
void BM_HistKeysVals(benchmark::State& s) { run(s, false, nullptr, "hist:keys=b,s:vals=a,c"); }
void BM_HistAndRecorded(benchmark::State& s) { run(s, true, nullptr, "hist:keys=b"); }
// One begin and one end per iteration, keys=b over 64 values; the
// triggers are removed in reverse (a variable's readers first).
void run_pair(benchmark::State& state, const char* begin, const char* end, const char* synth) {
  Pin pin;
  if (!Instance::top()) return state.SkipWithError("no rseq");
  if (synth && tracefs::write_file("synthetic_events", synth, false) < 0)
    return state.SkipWithError("synthetic event refused");
  if (tracefs::write_file("events/bench/trig/trigger", begin, true) < 0 ||
      tracefs::write_file("events/bench/trig_end/trigger", end, true) < 0)
    return state.SkipWithError("trigger refused");
  uint32_t i = 0;
  for (auto _ : state) {
    const auto b = static_cast<int32_t>(i % 64);
    trace_bench_trig(static_cast<int32_t>(i & 0x7fffffff), b, 0, "bench-string");
    trace_bench_trig_end(static_cast<int32_t>(i & 0x7fffffff), b, 0, "bench-string");
    ++i;
  }
  tracefs::write_file("events/bench/trig_end/trigger", std::string("!") + end, true);
  tracefs::write_file("events/bench/trig/trigger", std::string("!") + begin, true);
  if (synth) tracefs::write_file("synthetic_events", "", false);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_HistPairPlain(benchmark::State& s) { run_pair(s, "hist:keys=b", "hist:keys=b", nullptr); }
void BM_HistPairLatency(benchmark::State& s) {
  run_pair(s, "hist:keys=b:ts0=common_timestamp", "hist:keys=b:lat=common_timestamp-$ts0", nullptr);
}
void BM_HistPairOnmax(benchmark::State& s) {
  run_pair(s, "hist:keys=b:ts0=common_timestamp",
           "hist:keys=b:lat=common_timestamp-$ts0:onmax($lat).save(a,s)", nullptr);
}
void BM_HistPairSynth(benchmark::State& s) {
  run_pair(s, "hist:keys=b:ts0=common_timestamp",
           "hist:keys=b:lat=common_timestamp-$ts0:onmatch(bench.trig).trace(bench_lat,$lat,b)",
           "bench_lat u64 lat; int b");
}

BENCHMARK(BM_Unfiltered);
BENCHMARK(BM_FilteredIn);
BENCHMARK(BM_FilteredOut);
BENCHMARK(BM_FilteredOutLong);
BENCHMARK(BM_HistOnly);
BENCHMARK(BM_HistKeysVals);
BENCHMARK(BM_HistAndRecorded);
BENCHMARK(BM_HistPairPlain);
BENCHMARK(BM_HistPairLatency);
BENCHMARK(BM_HistPairOnmax);
BENCHMARK(BM_HistPairSynth);

}  // namespace

BENCHMARK_MAIN();
