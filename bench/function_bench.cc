// What tracing a function costs, per call, next to the ideal hooks
// (bench/README.md, "function_bench"). Every benchmark calls a small leaf
// function kBatch times per iteration, from a loop in the same translation
// unit, compiled with its case's flags (function_workload.h):
//
//   BM_Plain                (a) no instrumentation
//   BM_IdealHooks           (b) -finstrument-functions into the ideal hooks
//                               (rdtsc + one 16-byte store, entry and exit)
//   BM_CygNoTracer              -finstrument-functions into usrtrace's hooks,
//                               current_tracer nop
//   BM_FunctionGraph        (c) the same with function_graph on and the leaf in
//                               set_ftrace_filter
//   BM_FunctionGraphGeneral     the same through the general path (a
//                               max_graph_depth turns the fast path off)
//   BM_FunctionFilteredOut  (d) function_graph on, the leaf outside the filter
//   BM_PatchableNop         (e) -fpatchable-function-entry=5, no tracer (nops)
//   BM_PatchableGraph       (e) the same entries patched, function_graph on
//
// Items are calls: run.sh divides by items, so every number is ns per call.
// The thread is pinned to one CPU for the timed loop.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include "function_workload.h"
#include "pin.h"
#include "usrtrace/usrtrace.h"

namespace {

constexpr long kBatch = 1000;

template <long (*Loop)(long)>
void run_loop(benchmark::State& state) {
  usrtrace::bench::Pin pin;
  long sink = 0;
  for (auto _ : state) {
    sink += Loop(kBatch);
    benchmark::DoNotOptimize(sink);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// Writes a control file (`echo -n TEXT > PATH`); false and a message in
// *why when it fails.
bool tracefs_write(const char* path, const std::string& text, std::string* why) {
  long r = usrtrace_tracefs_write(path, text.data(), text.size());
  if (r < 0) {
    *why = std::string("echo '") + text + "' > " + path + ": " + strerror(static_cast<int>(-r));
    return false;
  }
  return true;
}

// Sets current_tracer and set_ftrace_filter for the scope of a benchmark,
// and puts nop and an empty filter back after it.
class Tracer {
 public:
  Tracer(const char* tracer, const char* filter) {
    ok_ = tracefs_write("set_ftrace_filter", filter, &why_) && tracefs_write("current_tracer", tracer, &why_);
  }
  ~Tracer() {
    std::string ignored;
    tracefs_write("current_tracer", "nop", &ignored);
    tracefs_write("set_ftrace_filter", "", &ignored);
  }
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

 private:
  bool ok_ = false;
  std::string why_;
};

// Skips with the reason when the tracer cannot be set up.
#define FB_TRACER_OR_SKIP(state, tracer, filter)  \
  Tracer tracer_(tracer, filter);                 \
  if (!tracer_.ok()) {                            \
    (state).SkipWithError(tracer_.why().c_str()); \
    return;                                       \
  }

void BM_Plain(benchmark::State& state) { run_loop<fb_plain_loop>(state); }
void BM_IdealHooks(benchmark::State& state) { run_loop<fb_ideal_loop>(state); }
void BM_CygNoTracer(benchmark::State& state) { run_loop<fb_cyg_loop>(state); }

void BM_FunctionGraph(benchmark::State& state) {
  FB_TRACER_OR_SKIP(state, "function_graph", "fb_cyg_leaf");
  run_loop<fb_cyg_loop>(state);
}

// The same through the hooks' general path: a max_graph_depth makes every
// call look at the per-instance settings (core.cc's fast path is off).
void BM_FunctionGraphGeneral(benchmark::State& state) {
  FB_TRACER_OR_SKIP(state, "function_graph", "fb_cyg_leaf");
  std::string why;
  if (!tracefs_write("max_graph_depth", "1000", &why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  run_loop<fb_cyg_loop>(state);
  tracefs_write("max_graph_depth", "0", &why);
}

void BM_FunctionFilteredOut(benchmark::State& state) {
  FB_TRACER_OR_SKIP(state, "function_graph", "fb_cyg_leaf");
  run_loop<fb_cyg_other_loop>(state);
}

void BM_PatchableNop(benchmark::State& state) { run_loop<fb_patch_loop>(state); }

void BM_PatchableGraph(benchmark::State& state) {
  FB_TRACER_OR_SKIP(state, "function_graph", "fb_patch_leaf");
  run_loop<fb_patch_loop>(state);
}

}  // namespace

BENCHMARK(BM_Plain);
BENCHMARK(BM_IdealHooks);
BENCHMARK(BM_CygNoTracer);
BENCHMARK(BM_FunctionGraph);
BENCHMARK(BM_FunctionGraphGeneral);
BENCHMARK(BM_FunctionFilteredOut);
BENCHMARK(BM_PatchableNop);
BENCHMARK(BM_PatchableGraph);

BENCHMARK_MAIN();
