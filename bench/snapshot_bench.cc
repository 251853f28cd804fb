// The snapshot swap (Snapshots::take) at 1 MiB and 1 GiB of buffer, against
// one typed event write in the same run (bench/README.md):
//
//   BM_EventEnabled        trace_bench_snap(...) enabled: the baseline
//   BM_Snapshot/<MiB>      take(): empty the next spare in O(1), swap the
//                          live buffer's pages with it; an event is written
//                          between takes so each swap moves real data (and
//                          the next write opens a page). Both buffers are
//                          filled once first, so no page is touched fresh.
//
// The target is < 1 us per snapshot whatever the size: the swap exchanges
// one pointer per CPU and the clear stores a few words per CPU.
#include <benchmark/benchmark.h>

#include "instance/instance.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(bench, snap, (uint64_t, seq), "seq=%llu", static_cast<unsigned long long>(REC->seq))

namespace {

using usrtrace::instance::Instance;

Instance* make(uint64_t total_bytes) {
  Instance::destroy("snapbench");
  int err = 0;
  Instance* inst = Instance::create("snapbench", &err);
  if (!inst) return nullptr;
  const uint64_t per_cpu = total_bytes / static_cast<uint64_t>(inst->buffer().nr_cpus());
  if (inst->snapshots().resize(-1, per_cpu) != 0 || inst->snapshots().allocate() != 0) return nullptr;
  inst->set_event("bench", "snap", true);
  // Touch every page of the live buffer and of the spare once, as a
  // recorder that has run a while has: a first touch of fresh memory (a
  // page fault, or zeroing a transparent huge page) is not the swap's cost.
  const uint64_t events = total_bytes / 16 + 1024;  // > one ring of 24-byte entries
  for (int round = 0; round < 2; ++round) {
    for (uint64_t i = 0; i < events; ++i) trace_bench_snap(i);
    inst->snapshots().take("prefault");
  }
  return inst;
}

void BM_EventEnabled(benchmark::State& state) {
  Instance* inst = make(1 << 20);
  if (!inst) return state.SkipWithError("no instance");
  uint64_t i = 0;
  for (auto _ : state) trace_bench_snap(i++);
  Instance::destroy("snapbench");
}
BENCHMARK(BM_EventEnabled);

void BM_Snapshot(benchmark::State& state) {
  Instance* inst = make(static_cast<uint64_t>(state.range(0)) << 20);
  if (!inst) return state.SkipWithError("cannot allocate the buffers");
  uint64_t i = 0;
  for (auto _ : state) {
    trace_bench_snap(i++);
    inst->snapshots().take("bench");
  }
  state.counters["buffer_MiB"] = static_cast<double>(state.range(0));
  Instance::destroy("snapbench");
}
BENCHMARK(BM_Snapshot)->Arg(1)->Arg(1024);

}  // namespace

BENCHMARK_MAIN();
