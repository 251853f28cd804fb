// Exact instructions per typed event, under callgrind (bench/run.sh
// section 7), beside instr_count's rb->write<28>():
//
//   valgrind --tool=callgrind --toggle-collect=usrtrace_bench_event_loop event_instr N
//
// One loop of N trace_bench_event() calls (event_bench's event: the
// kernel's 8-byte common header + 3 integers + a 16-byte string), the event
// enabled in the top instance; run.sh takes N and 2N and reports
// (Ir(2N) - Ir(N)) / N. The loop's own cost (varying the arguments) is
// instr_count's baseline's.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/compiler.h"
#include "base/rseq.h"
#include "instance/instance.h"
#include "usrtrace/event.h"
#include "write_ops.h"
#ifdef USRTRACE_BENCH_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#endif

USRTRACE_EVENT(bench, event, (int32_t, a)(int32_t, b)(int32_t, c)(char[16], s), "a=%d b=%d c=%d s=%s", REC->a,
               REC->b, REC->c, REC->s)

extern "C" USRTRACE_NOINLINE void usrtrace_bench_event_loop(uint64_t n) {
  constexpr std::string_view kName(usrtrace::bench::kEventName);
  for (uint64_t i = 0; i < n; ++i)
    trace_bench_event(static_cast<int32_t>(i), static_cast<int32_t>(i + 1000u), static_cast<int32_t>(~i),
                      kName);
}

int main(int argc, char** argv) {
  char* end = nullptr;
  const unsigned long long n = argc == 2 ? strtoull(argv[1], &end, 10) : 0;
  if (n == 0 || *end != '\0') {
    fprintf(stderr, "usage: event_instr N\n");
    return 2;
  }
#ifdef USRTRACE_BENCH_HAVE_VALGRIND_H
  // valgrind has no rseq: one thread, a fixed CPU (as instr_count does).
  if (RUNNING_ON_VALGRIND) usrtrace::base::rseq_emulate_for_instrumentation();
#endif
  usrtrace::instance::Instance* top = usrtrace::instance::Instance::top();
  if (!top || top->set_event("bench", "event", true) != 1) {  // the count matched
    fprintf(stderr, "event_instr: cannot enable bench:event (no rseq?)\n");
    return 1;
  }
  usrtrace_bench_event_loop(n);
  printf("event_instr n=%llu\n", n);
  return 0;
}
