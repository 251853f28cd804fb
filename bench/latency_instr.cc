// Instructions per latency section under callgrind (bench/run.sh section
// 11): `latency_instr MODE N` runs N iterations of MODE's loop, a function
// of its own that callgrind's --toggle-collect counts alone.
//
//   rdtsc2    two rdtsc: the baseline a section must pay
//   section   begin + end of a section while section_KIND runs, not a max
//   unwatched begin + end of a section no tracer watches
#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "latency/internal.h"
#include "usrtrace/latency.h"

extern "C" {
[[gnu::noinline]] uint64_t usrtrace_bench_lat_rdtsc2_loop(long n) {
  uint64_t sum = 0;
  for (long i = 0; i < n; ++i) {
    sum += __rdtsc();
    sum += __rdtsc();
    asm volatile("" ::: "memory");
  }
  return sum;
}

[[gnu::noinline]] uint64_t usrtrace_bench_lat_section_loop(long n) {
  for (long i = 0; i < n; ++i) {
    USRTRACE_SECTION("instr_lock");
    asm volatile("" ::: "memory");
  }
  return 0;
}

[[gnu::noinline]] uint64_t usrtrace_bench_lat_unwatched_loop(long n) {
  for (long i = 0; i < n; ++i) {
    USRTRACE_SECTION("instr_idle");
    asm volatile("" ::: "memory");
  }
  return 0;
}
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s rdtsc2|section|unwatched N\n", argv[0]);
    return 2;
  }
  const long n = strtol(argv[2], nullptr, 10);
  // What `current_tracer = section_instr_lock` in slot 5 with a bar no
  // section reaches sets, without an instance: valgrind has no rseq, which
  // instances need, and the section's own path does not touch them.
  namespace d = usrtrace::latency::detail;
  auto* k = static_cast<d::KindImpl*>(usrtrace_section_kind_get("instr_lock"));
  k->own.store(uint64_t{1} << 5);
  k->watched.store(uint64_t{1} << 5);
  d::g_bars[5].max.store(UINT64_MAX);
  uint64_t r = 0;
  if (strcmp(argv[1], "rdtsc2") == 0)
    r = usrtrace_bench_lat_rdtsc2_loop(n);
  else if (strcmp(argv[1], "section") == 0)
    r = usrtrace_bench_lat_section_loop(n);
  else if (strcmp(argv[1], "unwatched") == 0)
    r = usrtrace_bench_lat_unwatched_loop(n);
  else
    return 2;
  printf("%llu\n", static_cast<unsigned long long>(r & 1));
  return 0;
}
