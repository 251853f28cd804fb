/* slow_target: a plain C program (no usrtrace, no tracing flag) whose
 * function work(i) is rarely slow, and which logs its slow calls itself:
 *
 *   stdin "go N"   calls work(0..N-1); every call it times itself
 *                  (CLOCK_MONOTONIC around the call) and each one over
 *                  500 us is printed as "slow I US" (US rounded as the
 *                  kernel's ns2usecs); then "done"
 *   stdin "quit"   exits 0
 *
 * "ready PID" comes first. The slow calls are those with i % 37 == 5: they
 * nap() 1 + i / 37 ms, so that no two slow calls are alike. work() returns
 * i, which a return probe can fetch to tell the calls apart. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

volatile unsigned sink;

__attribute__((noinline)) unsigned step(int i) {
  unsigned h = (unsigned)i * 2654435761u;
  for (int k = 0; k < 50; ++k) h = h * 33 + (unsigned)k;
  sink = h;
  return h;
}

__attribute__((noinline)) void nap(int ms) {
  struct timespec t = {0, (long)ms * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

__attribute__((noinline)) int work(int i) {
  for (int k = 0; k < 4; ++k) step(i + k);
  if (i % 37 == 5) nap(1 + i / 37);
  return i;
}

int main(void) {
  char line[64];
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  while (fgets(line, sizeof line, stdin)) {
    int n = 0;
    if (sscanf(line, "go %d", &n) == 1) {
      for (int i = 0; i < n; ++i) {
        const unsigned long long t0 = now_ns();
        if (work(i) != i) return 2;
        const unsigned long long us = (now_ns() - t0 + 500) / 1000;
        if (us > 500) printf("slow %d %llu\n", i, us);
      }
      printf("done\n");
      fflush(stdout);
    } else if (strncmp(line, "quit", 4) == 0) {
      return 0;
    }
  }
  return 0;
}
