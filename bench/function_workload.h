// The function-tracing benchmarks' workload (bench/README.md, "function_bench"):
// one small leaf function called in a loop, compiled once per case, each
// time with that case's instrumentation flags (function_workload.cc, built
// with -DFB_CASE=<case>):
//
//   plain   no instrumentation                      (a)
//   ideal   -finstrument-functions, hooks renamed to fb_ideal_enter/exit (the
//           ideal hooks: rdtsc + one 16-byte store, function_ideal_hooks.cc) (b)
//   cyg     -finstrument-functions, the real __cyg_profile_func_* hooks
//           (libusrtrace's; glibc's empty ones where usrtrace is not linked) (c, d)
//   patch   -fpatchable-function-entry=5            (e)
//
// fb_<case>_loop(n) calls fb_<case>_leaf n times and is itself neither
// instrumented nor patchable; fb_cyg_other_loop calls fb_cyg_other_leaf, the
// function kept outside set_ftrace_filter in (d).
#pragma once

#define FB_NOTRACE __attribute__((no_instrument_function, patchable_function_entry(0, 0)))

#define FB_DECLARE(c)                        \
  extern "C" int fb_##c##_leaf(int x);       \
  extern "C" long fb_##c##_loop(long n);     \
  extern "C" int fb_##c##_other_leaf(int x); \
  extern "C" long fb_##c##_other_loop(long n);

FB_DECLARE(plain)
FB_DECLARE(ideal)
FB_DECLARE(cyg)
FB_DECLARE(patch)

// The ideal hooks (function_ideal_hooks.cc). Context: any thread; no lock,
// no allocation.
extern "C" void fb_ideal_enter(void* fn, void* site);
extern "C" void fb_ideal_exit(void* fn, void* site);
