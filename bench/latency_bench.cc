// The bookkeeping of a latency section (src/latency) against its target,
// two timestamps (issue 9), measured side by side in one run
// (bench/README.md "Latency sections"):
//
//   BM_TwoRdtsc               two rdtsc, the baseline: what a section must
//                             read at least (its start and its end)
//   BM_SectionUnwatched       USRTRACE_SECTION with no latency tracer: one
//                             load and a branch
//   BM_SectionNotMax          begin/end while `section_KIND` runs and the
//                             bar is far above: the common case
//   BM_SectionNotMaxAnyKind   the same under the `section` tracer (every
//                             kind, nesting across kinds)
//   BM_SectionNested          an inner section of another kind inside an
//                             outer one, per inner pair
//   BM_WakeAndWait            usrtrace_wake + wait_begin/end (wakeup tracer,
//                             no new max), the wrappers' cost per wake-up
//
// The target: BM_SectionNotMax <= ~1.1x BM_TwoRdtsc (the two timestamps
// are the section's cost; the rest is a few TLS stores and compares).
#include <benchmark/benchmark.h>
#include <x86intrin.h>

#include "tracefs/tracefs.h"
#include "usrtrace/latency.h"

namespace {

constexpr const char* kInst = "instances/latbench/";

bool set_tracer(const char* name) {
  usrtrace::tracefs::rmdir("instances/latbench");
  if (usrtrace::tracefs::mkdir("instances/latbench") != 0) return false;
  if (usrtrace::tracefs::write_file(std::string(kInst) + "current_tracer", name) <= 0) return false;
  // A bar no section here reaches: every section is "not the new max".
  return usrtrace::tracefs::write_file(std::string(kInst) + "tracing_max_latency", "1000000") > 0;
}

void done() { usrtrace::tracefs::rmdir("instances/latbench"); }

void BM_TwoRdtsc(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(__rdtsc());
    benchmark::DoNotOptimize(__rdtsc());
  }
}
BENCHMARK(BM_TwoRdtsc);

void BM_SectionUnwatched(benchmark::State& state) {
  usrtrace::tracefs::rmdir("instances/latbench");
  for (auto _ : state) {
    USRTRACE_SECTION("bench_idle");
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SectionUnwatched);

void BM_SectionNotMax(benchmark::State& state) {
  usrtrace_section_kind_get("bench_lock");
  if (!set_tracer("section_bench_lock")) return state.SkipWithError("no tracer");
  for (auto _ : state) {
    USRTRACE_SECTION("bench_lock");
    benchmark::ClobberMemory();
  }
  done();
}
BENCHMARK(BM_SectionNotMax);

void BM_SectionNotMaxAnyKind(benchmark::State& state) {
  if (!set_tracer("section")) return state.SkipWithError("no tracer");
  for (auto _ : state) {
    USRTRACE_SECTION("bench_lock");
    benchmark::ClobberMemory();
  }
  done();
}
BENCHMARK(BM_SectionNotMaxAnyKind);

void BM_SectionNested(benchmark::State& state) {
  if (!set_tracer("section")) return state.SkipWithError("no tracer");
  USRTRACE_SECTION("bench_request");
  for (auto _ : state) {
    USRTRACE_SECTION("bench_lock");
    benchmark::ClobberMemory();
  }
  done();
}
BENCHMARK(BM_SectionNested);

void BM_WakeAndWait(benchmark::State& state) {
  if (!set_tracer("wakeup")) return state.SkipWithError("no tracer");
  int obj = 0;
  for (auto _ : state) {
    const uint64_t t = usrtrace_wait_begin(&obj);
    usrtrace_wake(&obj);
    usrtrace_wait_end(&obj, t);
  }
  done();
}
BENCHMARK(BM_WakeAndWait);

}  // namespace

BENCHMARK_MAIN();
