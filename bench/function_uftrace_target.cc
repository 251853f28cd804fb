// The function-tracing workload as a plain program, for tracers that attach
// from outside (uftrace): times kCalls calls of each case's leaf and prints
// one line per case, "CASE ns_per_call_cpu ns_per_call_wall", best of
// kRounds. Run once alone and once under `uftrace record` (bench/run.sh):
// under uftrace, case cyg's hooks are libmcount's, and plain and ideal
// (whose hooks are renamed) are the baselines of that same run.
//
//   function_uftrace_target [CALLS]     (default 1000000)
#include <time.h>

#include <cstdio>
#include <cstdlib>

#include "function_workload.h"

namespace {

FB_NOTRACE double now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

FB_NOTRACE void measure(const char* name, long (*loop)(long), long calls) {
  constexpr int kRounds = 5;
  double best_cpu = 0, best_wall = 0;
  volatile long sink = 0;
  for (int r = 0; r < kRounds; ++r) {
    double c0 = now_ns(CLOCK_THREAD_CPUTIME_ID), w0 = now_ns(CLOCK_MONOTONIC);
    sink = sink + loop(calls);
    double cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0, wall = now_ns(CLOCK_MONOTONIC) - w0;
    if (r == 0 || cpu < best_cpu) best_cpu = cpu;
    if (r == 0 || wall < best_wall) best_wall = wall;
  }
  printf("%s %.3f %.3f\n", name, best_cpu / static_cast<double>(calls),
         best_wall / static_cast<double>(calls));
}

}  // namespace

FB_NOTRACE int main(int argc, char** argv) {
  const long calls = argc > 1 ? atol(argv[1]) : 1000000;
  measure("plain", fb_plain_loop, calls);
  measure("ideal", fb_ideal_loop, calls);
  measure("cyg", fb_cyg_loop, calls);
  return 0;
}
