// Recording throughput: how fast the trace.dat recorder drains a buffer
// that one thread fills at full speed, against the rate the buffer fills,
// in one run. Counters (per benchmark):
//   events_per_s  events written per second of the writer's loop
//   MB_per_s      trace data (pages) per second, written for BM_FillRate,
//                 recorded to the file for the BM_Record* rows
//   lost_pct      events dropped (discard mode) because the recorder fell
//                 behind, in percent of those written
// bench/run.sh section 10 prints them as a table with the ratios.
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "instance/instance.h"
#include "pin.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"
#include "usrtrace/tracedat.h"

USRTRACE_EVENT(recbench, tick, (uint64_t, seq)(uint64_t, value), "seq=%llu value=%llu", REC->seq, REC->value)

namespace {

using usrtrace::instance::Instance;

constexpr const char* kInst = "record_bench";
constexpr uint64_t kEventBytes = 24 + 4;  // 8 common + 16 payload, + the entry header

void setup(const char* size_kb) {
  usrtrace::tracefs::mkdir(std::string("instances/") + kInst);
  const std::string p = std::string("instances/") + kInst + "/";
  usrtrace::tracefs::write_file(p + "set_event", "recbench:tick");
  usrtrace::tracefs::write_file(p + "options/overwrite", "0");  // discard mode: loss is counted
  usrtrace::tracefs::write_file(p + "buffer_size_kb", size_kb);
  usrtrace::tracefs::write_file(p + "buffer_percent", "50");
  usrtrace::tracefs::write_file(p + "trace", "");
}

uint64_t dropped() {
  usrtrace::rb::RingBuffer& rb = Instance::find(kInst)->buffer();
  uint64_t d = 0;
  for (int c = 0; c < rb.nr_cpus(); ++c) d += rb.stats(c).dropped_events;
  return d;
}

// The rate the buffer fills: events that fit in it, written at full speed,
// with nothing draining.
void BM_FillRate(benchmark::State& state) {
  usrtrace::bench::Pin pin;
  setup("65536");
  const uint64_t n = 1'000'000;
  double secs = 0;
  for (auto _ : state) {
    state.PauseTiming();
    usrtrace::tracefs::write_file(std::string("instances/") + kInst + "/trace", "");
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < n; ++i) trace_recbench_tick(i, i * 3);
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double total = static_cast<double>(n) * static_cast<double>(state.iterations());
  state.counters["events_per_s"] = total / secs;
  state.counters["MB_per_s"] = total * kEventBytes / secs / 1e6;
  state.counters["lost_pct"] = 100.0 * static_cast<double>(dropped()) / total;
}

// The same writer with the recorder draining into a file as it goes; the
// time is the writer's loop plus stop() (the last pages and the file).
// `gap`: iterations of a dependent loop between two events (0: full speed),
// to find the rate up to which nothing is lost.
void record(benchmark::State& state, int version, bool compress, int gap = 0) {
  usrtrace::bench::Pin pin;
  setup("4096");
  const uint64_t n = getenv("RB_N") ? strtoull(getenv("RB_N"), nullptr, 10) : 4000000;
  double secs = 0, loop_secs = 0, bytes = 0, lost = 0;
  const std::string out =
      std::string(getenv("USRTRACE_BENCH_RECORD_DIR") ? getenv("USRTRACE_BENCH_RECORD_DIR") : "/tmp") +
      "/usrtrace-record-bench-" + std::to_string(getpid()) + ".dat";
  for (auto _ : state) {
    state.PauseTiming();
    usrtrace::tracefs::write_file(std::string("instances/") + kInst + "/trace", "");
    const uint64_t d0 = dropped();
    usrtrace::RecordOptions o;
    o.output = out;
    o.instances = {kInst};
    o.file_version = version;
    o.compress = compress;
    std::string err;
    auto rec = usrtrace::TraceRecorder::start(o, &err);
    if (!rec) {
      state.SkipWithError(err.c_str());
      return;
    }
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t work = 1;
    for (uint64_t i = 0; i < n; ++i) {
      trace_recbench_tick(i, i * 3);
      for (int k = 0; k < gap; ++k) work = work * 6364136223846793005ull + 1442695040888963407ull;
      benchmark::DoNotOptimize(work);
    }
    const auto t1 = std::chrono::steady_clock::now();
    rec->stop(&err);
    const auto t2 = std::chrono::steady_clock::now();
    loop_secs += std::chrono::duration<double>(t1 - t0).count();
    secs += std::chrono::duration<double>(t2 - t0).count();
    bytes += static_cast<double>(rec->stats().bytes);
    lost += static_cast<double>(dropped() - d0);
  }
  unlink(out.c_str());
  const double total = static_cast<double>(n) * static_cast<double>(state.iterations());
  state.counters["events_per_s"] = total / loop_secs;
  state.counters["MB_per_s"] = bytes / secs / 1e6;
  state.counters["lost_pct"] = 100.0 * lost / total;
}

void BM_RecordV7(benchmark::State& state) { record(state, 7, false); }
void BM_RecordV7Zstd(benchmark::State& state) { record(state, 7, true); }
void BM_RecordV7Paced(benchmark::State& state) { record(state, 7, false, static_cast<int>(state.range(0))); }

BENCHMARK(BM_FillRate)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RecordV7)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_RecordV7Zstd)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_RecordV7Paced)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
