// Typed events against the ring buffer's own write, in one run so the ratios
// hold (bench/README.md):
//
//   BM_RingBufferWrite     rb->write<28>() of 3 integers + a 16-byte string
//                          (the ring buffer alone; BM_UsrtraceWrite's body)
//   BM_EventDisabled       trace_bench_event(...) while the event is off
//   BM_EventEnabled        the same call, enabled in the top instance
//   BM_EventEnabled3       enabled in the top instance and two more
//
// The event's record is the kernel's 8-byte common header + the same 28
// bytes. Single thread, pinned to the first CPU of the process.
#include <benchmark/benchmark.h>
#include <sched.h>

#include <cstring>

#include "instance/instance.h"
#include "pin.h"
#include "usrtrace/event.h"
#include "write_ops.h"

USRTRACE_EVENT(bench, event, (int32_t, a)(int32_t, b)(int32_t, c)(char[16], s), "a=%d b=%d c=%d s=%s", REC->a,
               REC->b, REC->c, REC->s)

namespace {

using usrtrace::instance::Instance;

using usrtrace::bench::Pin;

constexpr std::string_view kName(usrtrace::bench::kEventName);

void BM_RingBufferWrite(benchmark::State& state) {
  Pin pin;
  auto rb = usrtrace::rb::RingBuffer::create(usrtrace::rb::Options{});
  if (!rb) return state.SkipWithError("no rseq");
  usrtrace::bench::Event ev{};
  std::memcpy(ev.s, usrtrace::bench::kEventName, sizeof ev.s);
  uint32_t i = 0;
  for (auto _ : state) usrtrace::bench::usrtrace_write(*rb, &ev, i++);
}
BENCHMARK(BM_RingBufferWrite);

template <int kInstances>
void run_event(benchmark::State& state) {
  Pin pin;
  Instance* top = Instance::top();
  if (!top) return state.SkipWithError("no rseq");
  Instance* extra[2] = {};
  const char* names[2] = {"bench_a", "bench_b"};
  for (int k = 0; k + 1 < kInstances; ++k) {
    int err = 0;
    extra[k] = Instance::create(names[k], &err);
    if (!extra[k]) return state.SkipWithError("instance create failed");
    extra[k]->set_event("bench", "event", true);
  }
  if (kInstances > 0) top->set_event("bench", "event", true);
  uint32_t i = 0;
  for (auto _ : state) {
    trace_bench_event(static_cast<int32_t>(i), static_cast<int32_t>(i + 1000u), static_cast<int32_t>(~i),
                      kName);
    ++i;
  }
  top->set_event("bench", "event", false);
  for (int k = 0; k + 1 < kInstances; ++k) Instance::destroy(names[k]);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_EventDisabled(benchmark::State& state) { run_event<0>(state); }
void BM_EventEnabled(benchmark::State& state) { run_event<1>(state); }
void BM_EventEnabled3(benchmark::State& state) { run_event<3>(state); }
BENCHMARK(BM_EventDisabled);
BENCHMARK(BM_EventEnabled);
BENCHMARK(BM_EventEnabled3);

}  // namespace

BENCHMARK_MAIN();
