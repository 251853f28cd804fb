// Compiler helpers shared by every component.
#pragma once

#define USRTRACE_LIKELY(x) __builtin_expect(!!(x), 1)
#define USRTRACE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define USRTRACE_ALWAYS_INLINE inline __attribute__((always_inline))
#define USRTRACE_NOINLINE __attribute__((noinline))
#define USRTRACE_COLD __attribute__((cold))
#ifndef USRTRACE_EXPORT
#define USRTRACE_EXPORT __attribute__((visibility("default")))
#endif

#if defined(__clang__)
#define USRTRACE_GUARDED_BY(x) __attribute__((guarded_by(x)))
#define USRTRACE_REQUIRES(...) __attribute__((requires_capability(__VA_ARGS__)))
#else
#define USRTRACE_GUARDED_BY(x)
#define USRTRACE_REQUIRES(...)
#endif

namespace usrtrace::base {
// Always-on invariant check: prints and aborts, with no allocation, so it can
// fire anywhere (signal handlers included).
[[noreturn]] USRTRACE_COLD void check_failed(const char* file, int line, const char* expr);
}  // namespace usrtrace::base

#define USRTRACE_CHECK(cond)                                                                   \
  do {                                                                                         \
    if (USRTRACE_UNLIKELY(!(cond))) ::usrtrace::base::check_failed(__FILE__, __LINE__, #cond); \
  } while (0)

#ifdef NDEBUG
#define USRTRACE_DCHECK(cond) \
  do {                        \
  } while (0)
#else
#define USRTRACE_DCHECK(cond) USRTRACE_CHECK(cond)
#endif
