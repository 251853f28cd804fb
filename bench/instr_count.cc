// Exact instructions per event, for callgrind (hardware counters are not
// available on the machines we benchmark on; callgrind counts exactly).
//
//   instr_count usrtrace N   N x rb->write<28>(&ev) (payload varied per event)
//   instr_count ideal N      N x (rdtsc + one 16-byte store), BM_IdealWrite's body
//   instr_count baseline N   N x (vary the payload, let it escape): the loop
//                            and payload cost without the write, so that
//                            usrtrace - baseline is write<28>() alone
//   [--emulate-rseq]         force usrtrace::base::rseq_emulate_for_instrumentation()
//
// Each mode runs in its own noinline extern "C" function
// (usrtrace_bench_{usrtrace,ideal,baseline}_loop). bench/run.sh runs
//
//   valgrind --tool=callgrind --toggle-collect=usrtrace_bench_usrtrace_loop
//            instr_count usrtrace N            (and again with 2N)
//
// so that only the loop (and what it calls, the slow path included) is
// counted, and reports (Ir(2N) - Ir(N)) / N: the function's entry and exit
// and the first pass over fresh ring buffer pages cancel, leaving the steady
// state cost of one event, page switches amortised.
//
// valgrind implements neither rseq nor membarrier, so under valgrind (or with
// --emulate-rseq) the program gives its single thread an emulated rseq
// registration (cpu 0) before creating the buffer. Only this program does
// that, and only then: it is unsound with more than one writer thread.
#include <emmintrin.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/compiler.h"
#include "base/rseq.h"
#include "ring_buffer/ring_buffer.h"
#include "write_ops.h"

#ifdef USRTRACE_BENCH_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

using usrtrace::bench::Event;

extern "C" {

// Returns the number of writes that returned false (0 in overwrite mode).
USRTRACE_NOINLINE uint64_t usrtrace_bench_usrtrace_loop(usrtrace::rb::RingBuffer* rb, Event* ev, uint64_t n) {
  uint64_t failed = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (USRTRACE_UNLIKELY(!usrtrace::bench::usrtrace_write(*rb, ev, static_cast<uint32_t>(i)))) ++failed;
  }
  return failed;
}

USRTRACE_NOINLINE void usrtrace_bench_ideal_loop(__m128i* slots, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    usrtrace::bench::ideal_write(slots, i);
    asm volatile("" : : : "memory");  // as benchmark::ClobberMemory()
  }
}

USRTRACE_NOINLINE void usrtrace_bench_baseline_loop(Event* ev, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    usrtrace::bench::fill_event(ev, static_cast<uint32_t>(i));
    asm volatile("" : : "r"(ev) : "memory");  // what write()'s asm does to the payload
  }
}

}  // extern "C"

namespace {

bool running_on_valgrind() {
#ifdef USRTRACE_BENCH_HAVE_VALGRIND_H
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

int usage(const char* argv0) {
  fprintf(stderr, "usage: %s {usrtrace|ideal|baseline} N [--emulate-rseq]\n", argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage(argv[0]);
  const char* mode = argv[1];
  char* end = nullptr;
  const unsigned long long n = strtoull(argv[2], &end, 10);
  if (end == argv[2] || *end != '\0' || n == 0) return usage(argv[0]);
  bool emulate = running_on_valgrind();
  for (int a = 3; a < argc; ++a) {
    if (strcmp(argv[a], "--emulate-rseq") == 0) {
      emulate = true;
    } else {
      return usage(argv[0]);
    }
  }

  if (strcmp(mode, "ideal") == 0) {
    auto* slots =
        static_cast<__m128i*>(std::aligned_alloc(64, usrtrace::bench::kIdealSlots * sizeof(__m128i)));
    memset(slots, 0, usrtrace::bench::kIdealSlots * sizeof(__m128i));
    usrtrace_bench_ideal_loop(slots, n);
    std::free(slots);
    printf("mode=ideal n=%llu\n", n);
    return 0;
  }

  Event ev{};
  memcpy(ev.s, usrtrace::bench::kEventName, sizeof ev.s);
  if (strcmp(mode, "baseline") == 0) {
    usrtrace_bench_baseline_loop(&ev, n);
    printf("mode=baseline n=%llu\n", n);
    return 0;
  }
  if (strcmp(mode, "usrtrace") != 0) return usage(argv[0]);

  if (emulate) usrtrace::base::rseq_emulate_for_instrumentation();
  usrtrace::rb::Options opts;  // 4 KiB pages, 1408 KiB per CPU, overwrite, TSC clock
  opts.mode = usrtrace::rb::Mode::kOverwrite;
  int err = 0;
  auto rb = usrtrace::rb::RingBuffer::create(opts, &err);
  if (!rb) {
    fprintf(stderr, "RingBuffer::create failed: %s%s\n", strerror(err),
            err == ENOSYS && !emulate ? " (under valgrind? pass --emulate-rseq)" : "");
    return 1;
  }
  const uint64_t failed = usrtrace_bench_usrtrace_loop(rb.get(), &ev, n);
  uint64_t written = 0, overrun = 0;
  for (int cpu = 0; cpu < rb->nr_cpus(); ++cpu) {
    const usrtrace::rb::CpuStats st = rb->stats(cpu);
    written += st.written;
    overrun += st.overrun;
  }
  printf("mode=usrtrace n=%llu failed=%" PRIu64 " emulated_rseq=%d written=%" PRIu64 " overrun=%" PRIu64 "\n",
         n, failed, emulate ? 1 : 0, written, overrun);
  return failed == 0 ? 0 : 1;
}
