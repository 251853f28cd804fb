// Trace text formatting speed: lines per second of `cat trace`
// (read_trace: iterate + format) and of format_event alone, over ~100k
// events of a typed event with three integers and a 16-byte string.
// Target: >= 2 million lines/s.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "instance/instance.h"
#include "output/trace_output.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(bench, request, (uint64_t, id)(uint32_t, bytes)(int32_t, status)(char[16], name),
               "id=%llu bytes=%u status=%d name=%s", REC->id, REC->bytes, REC->status, REC->name)

namespace usrtrace::output {
namespace {

constexpr int kEvents = 100000;

instance::Instance* filled() {
  static instance::Instance* inst = [] {
    int err = 0;
    instance::Instance* i = instance::Instance::create("output_bench", &err);
    if (!i) return i;
    // Room for every event on one CPU (48-byte entries).
    i->buffer().resize(-1, uint64_t{kEvents} * 64);
    i->set_event("bench", "request", true);
    for (int n = 0; n < kEvents; ++n)
      trace_bench_request(static_cast<uint64_t>(n), 512u + static_cast<uint32_t>(n % 100), -n % 7,
                          "request-name-16");
    i->clear_events();
    return i;
  }();
  return inst;
}

void BM_ReadTrace(benchmark::State& state) {
  instance::Instance* inst = filled();
  if (!inst) return state.SkipWithError("no instance (rseq?)");
  size_t lines = 0, bytes = 0;
  for (auto _ : state) {
    std::string text = read_trace(*inst, -1);
    bytes += text.size();
    benchmark::DoNotOptimize(text.data());
    lines += kEvents;
  }
  state.SetItemsProcessed(static_cast<int64_t>(lines));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadTrace)->Unit(benchmark::kMillisecond);

void BM_FormatEvent(benchmark::State& state) {
  instance::Instance* inst = filled();
  if (!inst) return state.SkipWithError("no instance (rseq?)");
  // Copies of the records, so only formatting is timed.
  std::vector<std::vector<uint8_t>> recs;
  std::vector<rb::Event> evs;
  rb::RingBuffer::Iterator it(inst->buffer());
  rb::Event ev;
  while (it.next(&ev) && recs.size() < 4096) {
    recs.emplace_back(ev.data, ev.data + ev.len);
    evs.push_back(ev);
  }
  for (size_t i = 0; i < evs.size(); ++i) evs[i].data = recs[i].data();
  std::string out;
  size_t i = 0;
  for (auto _ : state) {
    out.clear();
    format_event(*inst, evs[i], evs[i].ts, &out);
    benchmark::DoNotOptimize(out.data());
    if (++i == evs.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FormatEvent);

void BM_FormatEventLatency(benchmark::State& state) {
  instance::Instance* inst = filled();
  if (!inst) return state.SkipWithError("no instance (rseq?)");
  inst->set_option(instance::kOptLatencyFormat, true);
  size_t lines = 0;
  for (auto _ : state) {
    std::string text = read_trace(*inst, -1);
    benchmark::DoNotOptimize(text.data());
    lines += kEvents;
  }
  inst->set_option(instance::kOptLatencyFormat, false);
  state.SetItemsProcessed(static_cast<int64_t>(lines));
}
BENCHMARK(BM_FormatEventLatency)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace usrtrace::output

BENCHMARK_MAIN();
