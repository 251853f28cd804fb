// Compiled once per case with -DFB_CASE=<case> and that case's flags (see
// function_workload.h and bench/CMakeLists.txt).
#include "function_workload.h"

#ifndef FB_CASE
#error "FB_CASE must name the case (plain, ideal, cyg, patch)"
#endif

#define FB_CAT2(a, b, c) a##b##c
#define FB_CAT(a, b, c) FB_CAT2(a, b, c)
#define FB_NAME(suffix) FB_CAT(fb_, FB_CASE, suffix)

#if defined(__clang__)
#define FB_LEAF extern "C" __attribute__((noinline))
#else
#define FB_LEAF extern "C" __attribute__((noinline, noipa))
#endif

// A little arithmetic, so that the call is not all there is.
FB_LEAF int FB_NAME(_leaf)(int x) { return (x * 3 + (x >> 2)) ^ 0x55; }
FB_LEAF int FB_NAME(_other_leaf)(int x) { return (x * 5 + (x >> 3)) ^ 0x33; }

extern "C" FB_NOTRACE long FB_NAME(_loop)(long n) {
  long sum = 0;
  for (long i = 0; i < n; ++i) sum += FB_NAME(_leaf)(static_cast<int>(i));
  return sum;
}

extern "C" FB_NOTRACE long FB_NAME(_other_loop)(long n) {
  long sum = 0;
  for (long i = 0; i < n; ++i) sum += FB_NAME(_other_leaf)(static_cast<int>(i));
  return sum;
}
