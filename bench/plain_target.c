/* The unmodified binary of bench/plain_vs_uftrace.py: built with plain -O2,
 * no tracing flag, never linked with usrtrace. `leaf` is called CALLS
 * times per round; prints "CPU_NS WALL_NS" per call, best of 5 rounds.
 *
 *   plain_target CALLS          measure at once
 *   plain_target CALLS wait     first wait for a line on stdin (an attach
 *                               comes meanwhile), then measure */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) long leaf(long x) { return x * 3 + 1; }

__attribute__((noinline)) long loop(long n) {
  long s = 0;
  for (long i = 0; i < n; ++i) s += leaf(i);
  return s;
}

static double now(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1000000;
  if (argc > 2 && strcmp(argv[2], "wait") == 0) {
    char line[16];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
  }
  double best_cpu = 0, best_wall = 0;
  volatile long sink = 0;
  for (int r = 0; r < 5; ++r) {
    const double c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
    sink += loop(n);
    const double c = now(CLOCK_THREAD_CPUTIME_ID) - c0, w = now(CLOCK_MONOTONIC) - w0;
    if (r == 0 || c < best_cpu) best_cpu = c;
    if (r == 0 || w < best_wall) best_wall = w;
  }
  printf("%.3f %.3f\n", best_cpu / (double)n, best_wall / (double)n);
  return 0;
}
