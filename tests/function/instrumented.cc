// Compiled with -finstrument-functions (tests/CMakeLists.txt): the functions
// the function tracer tests trace. Each counts its own calls.
#include "function/instrumented.h"

#include <setjmp.h>
#include <signal.h>
#include <time.h>

#include <stdexcept>

extern "C" {

int fxt_calls_leaf = 0;
int fxt_calls_outer = 0;
int fxt_calls_recurse = 0;
int fxt_calls_other = 0;
int fxt_calls_fib = 0;

__attribute__((noinline)) int fxt_leaf(int x) {
  __atomic_fetch_add(&fxt_calls_leaf, 1, __ATOMIC_RELAXED);  // threads call it too
  asm volatile("");
  return x * 3 + 1;
}

__attribute__((noinline)) int fxt_outer(int n) {
  __atomic_fetch_add(&fxt_calls_outer, 1, __ATOMIC_RELAXED);  // threads call it too
  int s = 0;
  for (int i = 0; i < n; ++i) s += fxt_leaf(i);
  return s;
}

__attribute__((noinline)) int fxt_recurse(int depth) {
  __atomic_fetch_add(&fxt_calls_recurse, 1, __ATOMIC_RELAXED);  // threads call it too
  if (depth <= 1) return 1;
  return fxt_recurse(depth - 1) + 1;
}

__attribute__((noinline)) int fxt_fib(int n) {
  __atomic_fetch_add(&fxt_calls_fib, 1, __ATOMIC_RELAXED);
  if (n < 2) return n;
  const int r = fxt_fib(n - 1) + fxt_fib(n - 2);
  return r + fxt_leaf(0) - 1;  // a call after its recursive ones
}

__attribute__((noinline)) int fxt_other(int x) {
  __atomic_fetch_add(&fxt_calls_other, 1, __ATOMIC_RELAXED);  // threads call it too
  return fxt_leaf(x) + 1;
}

__attribute__((noinline)) void fxt_thrower(int depth) {
  if (depth == 0) throw std::runtime_error("fxt");
  fxt_thrower(depth - 1);
  asm volatile("");
}

__attribute__((noinline)) int fxt_catcher(int depth) {
  try {
    fxt_thrower(depth);
  } catch (const std::exception&) {
    return fxt_leaf(1);
  }
  return 0;
}

__attribute__((noinline)) int fxt_around(void (*cb)()) {
  cb();
  return fxt_leaf(2);
}

static long thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) void fxt_spin_cpu(long ns) {
  const long end = thread_cpu_ns() + ns;
  while (thread_cpu_ns() < end) {
  }
}

__attribute__((noinline)) void fxt_spin_caller(long ns) {
  fxt_spin_cpu(ns);
  asm volatile("");
}

__attribute__((noinline)) void fxt_sleep_ms(int ms) {
  const timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

__attribute__((noinline)) void fxt_sig_handler(int) { fxt_leaf(7); }

__attribute__((noinline)) void fxt_raiser(int sig) {
  raise(sig);
  asm volatile("");
}

}  // extern "C"
