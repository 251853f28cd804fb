// -finstrument-functions: the compiler calls these at every entry and exit
// of an instrumented function. With no function tracer running anywhere they
// cost one load and one predictable branch.
#include "base/compiler.h"
#include "function/core.h"

using usrtrace::function::g_tracing;

extern "C" USRTRACE_EXPORT __attribute__((no_instrument_function)) void __cyg_profile_func_enter(void* fn,
                                                                                                 void* site) {
  if (USRTRACE_LIKELY(g_tracing.load(std::memory_order_relaxed) == 0)) return;
  usrtrace::function::instrumented_entry(reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(site),
                                         reinterpret_cast<uint64_t>(__builtin_frame_address(0)));
}

extern "C" USRTRACE_EXPORT __attribute__((no_instrument_function)) void __cyg_profile_func_exit(
    void* fn, void* /*site*/) {
  if (USRTRACE_LIKELY(g_tracing.load(std::memory_order_relaxed) == 0)) return;
  usrtrace::function::instrumented_exit(reinterpret_cast<uint64_t>(fn),
                                        reinterpret_cast<uint64_t>(__builtin_frame_address(0)));
}

// The same, for libusrtrace-preload.so's hooks (src/preload/preload.cc).
extern "C" USRTRACE_EXPORT __attribute__((no_instrument_function)) void usrtrace_internal_func_enter(
    void* fn, void* site) {
  if (USRTRACE_LIKELY(g_tracing.load(std::memory_order_relaxed) == 0)) return;
  usrtrace::function::instrumented_entry(reinterpret_cast<uint64_t>(fn), reinterpret_cast<uint64_t>(site),
                                         reinterpret_cast<uint64_t>(__builtin_frame_address(0)));
}

extern "C" USRTRACE_EXPORT __attribute__((no_instrument_function)) void usrtrace_internal_func_exit(void* fn,
                                                                                                    void*) {
  if (USRTRACE_LIKELY(g_tracing.load(std::memory_order_relaxed) == 0)) return;
  usrtrace::function::instrumented_exit(reinterpret_cast<uint64_t>(fn),
                                        reinterpret_cast<uint64_t>(__builtin_frame_address(0)));
}
