// Benchmarks of the ring buffer write path against its floor and against the
// other tracers on this machine, all in one binary so that every ratio comes
// from the same run (bench/README.md; bench/run.sh prints the table).
//
//   BM_IdealWrite             rdtsc + one 16-byte store (the floor)
//   BM_UsrtraceWrite          rb->write<28>(&ev), overwrite mode
//   BM_IdealWrite/threads:2, BM_UsrtraceWrite/threads:2
//                             the same, one thread pinned on each CPU
//   BM_UsrtraceWriteDisabled  the same write after record_off()
//   BM_LttngUst               the same event through an LTTng-UST tracepoint
//                             (needs an active session with it enabled)
//   BM_TraceMarker            write() of a text line to the trace_marker of a
//                             private tracefs instance
//
// Every benchmark thread is pinned to its own CPU (thread i to the i-th CPU
// the process may run on) for the timed loop, and gets its old mask back
// afterwards.
//
// Google Benchmark reports, for threads:N, wall time / events of all threads;
// the cost of one event on one thread is that times N (run.sh does this).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ring_buffer/ring_buffer.h"
#include "write_ops.h"

#ifdef USRTRACE_BENCH_HAVE_LTTNG
#include "usrtrace_bench_tp.h"
#endif

namespace {

using usrtrace::bench::Event;
using usrtrace::bench::kEventName;

// ---------------------------------------------------------------------------
// Shared state, set up in main() before any benchmark runs.

struct Buffers {
  std::unique_ptr<usrtrace::rb::RingBuffer> on;   // BM_UsrtraceWrite
  std::unique_ptr<usrtrace::rb::RingBuffer> off;  // BM_UsrtraceWriteDisabled
  std::string error;                              // why they are missing
};
Buffers g_buffers;

void create_buffers() {
  usrtrace::rb::Options opts;  // 4 KiB pages, 1408 KiB per CPU, overwrite, TSC clock
  opts.mode = usrtrace::rb::Mode::kOverwrite;
  int err = 0;
  g_buffers.on = usrtrace::rb::RingBuffer::create(opts, &err);
  if (g_buffers.on) g_buffers.off = usrtrace::rb::RingBuffer::create(opts, &err);
  if (!g_buffers.on || !g_buffers.off) {
    g_buffers.error = std::string("RingBuffer::create failed: ") + strerror(err);
    g_buffers.on.reset();
    g_buffers.off.reset();
    return;
  }
  g_buffers.off->record_off();
}

Event make_event() {
  Event ev{};
  memcpy(ev.s, kEventName, sizeof ev.s);
  return ev;
}

// Pins the calling benchmark thread to the (thread_index)-th CPU of the
// process's affinity mask; restores the old mask when it goes out of scope
// (thread 0 is the main thread, which runs every other benchmark too).
class PinToOwnCpu {
 public:
  explicit PinToOwnCpu(const benchmark::State& state) {
    CPU_ZERO(&saved_);
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0) {
      error_ = std::string("sched_getaffinity: ") + strerror(errno);
      return;
    }
    std::vector<size_t> cpus;
    for (size_t c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &saved_)) cpus.push_back(c);
    }
    const auto index = static_cast<size_t>(state.thread_index());
    if (index >= cpus.size()) {
      error_ = "more benchmark threads than CPUs to pin them to";
      return;
    }
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[index], &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
      error_ = std::string("sched_setaffinity: ") + strerror(errno);
      return;
    }
    pinned_ = true;
  }
  ~PinToOwnCpu() {
    if (pinned_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  PinToOwnCpu(const PinToOwnCpu&) = delete;
  PinToOwnCpu& operator=(const PinToOwnCpu&) = delete;

  // Empty when pinned.
  const std::string& error() const { return error_; }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
  std::string error_;
};

#define USRTRACE_BENCH_PIN_OR_SKIP(state)        \
  PinToOwnCpu pin_(state);                       \
  if (!pin_.error().empty()) {                   \
    (state).SkipWithError(pin_.error().c_str()); \
    return;                                      \
  }

// ---------------------------------------------------------------------------
// The floor.

void BM_IdealWrite(benchmark::State& state) {
  USRTRACE_BENCH_PIN_OR_SKIP(state);
  // Per thread, touched before the timed loop.
  auto* slots = static_cast<__m128i*>(std::aligned_alloc(64, usrtrace::bench::kIdealSlots * sizeof(__m128i)));
  memset(slots, 0, usrtrace::bench::kIdealSlots * sizeof(__m128i));
  benchmark::DoNotOptimize(slots);  // escapes: the stores below must happen
  uint64_t i = 0;
  for (auto _ : state) {
    usrtrace::bench::ideal_write(slots, i);
    ++i;
    benchmark::ClobberMemory();
  }
  std::free(slots);
}

// ---------------------------------------------------------------------------
// usrtrace.

void BM_UsrtraceWrite(benchmark::State& state) {
  if (!g_buffers.on) {
    state.SkipWithError(g_buffers.error.c_str());
    return;
  }
  USRTRACE_BENCH_PIN_OR_SKIP(state);
  usrtrace::rb::RingBuffer& rb = *g_buffers.on;
  Event ev = make_event();
  // Threads start at different values so their payloads differ too.
  uint32_t i = static_cast<uint32_t>(state.thread_index()) << 28;
  uint64_t failed = 0;
  for (auto _ : state) {
    if (USRTRACE_UNLIKELY(!usrtrace::bench::usrtrace_write(rb, &ev, i))) ++failed;
    ++i;
  }
  // Overwrite mode never refuses an event: a false here would mean the
  // benchmark timed something other than a recorded event.
  if (failed != 0) state.SkipWithError("RingBuffer::write returned false (event not recorded)");
}

void BM_UsrtraceWriteDisabled(benchmark::State& state) {
  if (!g_buffers.off) {
    state.SkipWithError(g_buffers.error.c_str());
    return;
  }
  USRTRACE_BENCH_PIN_OR_SKIP(state);
  usrtrace::rb::RingBuffer& rb = *g_buffers.off;
  Event ev = make_event();
  uint32_t i = 0;
  uint64_t recorded = 0;
  for (auto _ : state) {
    if (USRTRACE_UNLIKELY(usrtrace::bench::usrtrace_write(rb, &ev, i))) ++recorded;
    ++i;
  }
  if (recorded != 0) state.SkipWithError("write() recorded an event after record_off()");
}

// ---------------------------------------------------------------------------
// LTTng-UST.

#ifdef USRTRACE_BENCH_HAVE_LTTNG
void BM_LttngUst(benchmark::State& state) {
  if (!tracepoint_enabled(usrtrace_bench, event)) {
    state.SkipWithError(
        "tracepoint usrtrace_bench:event is not enabled: no LTTng session has it "
        "(lttng create --snapshot; lttng enable-event -u 'usrtrace_bench:*'; lttng start; "
        "bench/run.sh does this)");
    return;
  }
  USRTRACE_BENCH_PIN_OR_SKIP(state);
  Event ev = make_event();
  uint32_t i = 0;
  for (auto _ : state) {
    usrtrace::bench::fill_event(&ev, i);
    tracepoint(usrtrace_bench, event, ev.a, ev.b, ev.c, ev.s);
    ++i;
  }
}
#endif

// ---------------------------------------------------------------------------
// The kernel's trace_marker, in a private tracefs instance.

constexpr const char* kTracefs = "/sys/kernel/tracing";
constexpr const char* kInstance = "/sys/kernel/tracing/instances/usrtrace_bench";

struct TraceMarker {
  int fd = -1;
  bool made_instance = false;
  std::string error;
};
TraceMarker g_marker;
bool g_marker_tried = false;

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + strerror(err); }

// Mounts tracefs if needed, makes the instance and opens its trace_marker.
// Once per process; close_trace_marker() undoes it.
TraceMarker& trace_marker() {
  if (g_marker_tried) return g_marker;
  g_marker_tried = true;
  const std::string instances = std::string(kTracefs) + "/instances";
  if (access(instances.c_str(), F_OK) != 0) {
    if (mount("nodev", kTracefs, "tracefs", 0, nullptr) != 0) {
      const int err = errno;
      g_marker.error =
          "tracefs unavailable: " + errno_text("mount -t tracefs nodev /sys/kernel/tracing", err);
      return g_marker;
    }
  }
  if (mkdir(kInstance, 0755) == 0) {
    g_marker.made_instance = true;
  } else if (errno == EEXIST) {
    g_marker.made_instance = true;  // left by a killed run: ours by name, reuse and remove it
  } else {
    const int err = errno;
    g_marker.error = "tracefs unavailable: " + errno_text("mkdir instances/usrtrace_bench", err);
    return g_marker;
  }
  const std::string marker = std::string(kInstance) + "/trace_marker";
  g_marker.fd = open(marker.c_str(), O_WRONLY | O_CLOEXEC);
  if (g_marker.fd < 0) {
    const int err = errno;
    g_marker.error = "tracefs unavailable: " + errno_text("open instances/usrtrace_bench/trace_marker", err);
  }
  return g_marker;
}

void close_trace_marker() {
  if (g_marker.fd >= 0) close(g_marker.fd);
  g_marker.fd = -1;
  if (g_marker.made_instance && rmdir(kInstance) != 0)
    fprintf(stderr, "warning: rmdir %s: %s\n", kInstance, strerror(errno));
  g_marker.made_instance = false;
}

void BM_TraceMarker(benchmark::State& state) {
  TraceMarker& tm = trace_marker();
  if (tm.fd < 0) {
    state.SkipWithError(tm.error.c_str());
    return;
  }
  USRTRACE_BENCH_PIN_OR_SKIP(state);
  // The event as text, formatted once: the loop times write() alone.
  char line[64];
  const int n = snprintf(line, sizeof line, "a=%d b=%d c=%d s=%s\n", 123456, 124456, -123457, kEventName);
  const size_t len = static_cast<size_t>(n);
  uint64_t failed = 0;
  int last_err = 0;
  for (auto _ : state) {
    if (USRTRACE_UNLIKELY(write(tm.fd, line, len) != static_cast<ssize_t>(len))) {
      ++failed;
      last_err = errno;
    }
  }
  if (failed != 0) state.SkipWithError(errno_text("write trace_marker", last_err).c_str());
  state.SetLabel(std::to_string(len) + "-byte line");
}

}  // namespace

BENCHMARK(BM_IdealWrite)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_IdealWrite)->Threads(2)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_UsrtraceWrite)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_UsrtraceWrite)->Threads(2)->Unit(benchmark::kNanosecond);
BENCHMARK(BM_UsrtraceWriteDisabled)->Unit(benchmark::kNanosecond);
#ifdef USRTRACE_BENCH_HAVE_LTTNG
BENCHMARK(BM_LttngUst)->Unit(benchmark::kNanosecond);
#endif
BENCHMARK(BM_TraceMarker)->Unit(benchmark::kNanosecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
#ifdef USRTRACE_BENCH_HAVE_LTTNG
  benchmark::AddCustomContext("usrtrace_lttng_ust", "built");
#else
  benchmark::AddCustomContext("usrtrace_lttng_ust", "not built (liblttng-ust not found)");
#endif
  create_buffers();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  close_trace_marker();
  return 0;
}
