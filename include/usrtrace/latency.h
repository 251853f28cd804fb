/*
 * Latency sections and wake-ups: what the latency tracers measure (the
 * user-space irqsoff/preemptoff and wakeup; docs/guide/latency-tracers.md).
 *
 * A section is a stretch of code of some kind ("lock", "request",
 * "frame", any name of [A-Za-z0-9_], up to 23 bytes). While an instance's
 * current_tracer is `section` (every kind) or `section_KIND` (one kind),
 * the longest section is kept with the trace of what happened during it;
 * otherwise a section costs one load and one predicted branch.
 *
 *   static struct usrtrace_section_kind *lock_kind = usrtrace_section_kind_get("lock");
 *   uint64_t s = usrtrace_section_begin(lock_kind);
 *   ...                                      // the critical section
 *   usrtrace_section_end(lock_kind, s);
 *
 * or in C++, a scope guard:
 *
 *   { USRTRACE_SECTION("lock"); ... }
 *
 * Sections nest per thread: a section of a kind inside one of the same
 * kind is part of it (as irqs disabled twice are one irqs-off section),
 * and the `section` tracer measures the outermost section of any kind.
 *
 * Context of begin/end: any thread, signal handlers included; no lock, no
 * allocation, no system call; two clock reads (rdtsc) while a tracer
 * watches the kind. A section that is the new worst case also swaps the
 * instance's buffer into its max buffer (lock-free, O(1)) and reads the
 * thread's uid, nice value and scheduling policy for the trace's head
 * (four system calls).
 */
#ifndef USRTRACE_LATENCY_H_
#define USRTRACE_LATENCY_H_

#include <stdint.h>

#ifndef USRTRACE_EXPORT
#define USRTRACE_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#include <atomic>
extern "C" {
#endif

/* A kind of section. Opaque in C. */
struct usrtrace_section_kind;

/*
 * The kind NAME, registered on first use (it then shows as the tracer
 * section_NAME in available_tracers; register kinds at start-up so that a
 * tracer set before the first section can name them). USRTRACE_SECTION's
 * kinds register themselves when the program is loaded. NULL with errno
 * EINVAL for a bad name, ENOSPC past 32 kinds. Context: not a signal
 * handler (it may allocate and lock the first time); keep the pointer.
 */
USRTRACE_EXPORT struct usrtrace_section_kind *usrtrace_section_kind_get(const char *name);

/*
 * Starts a section of KIND; returns the token to give to
 * usrtrace_section_end(): 0 when no tracer watches KIND (end then does
 * nothing). A NULL KIND is ignored.
 */
USRTRACE_EXPORT uint64_t usrtrace_section_begin(struct usrtrace_section_kind *kind);
USRTRACE_EXPORT void usrtrace_section_end(struct usrtrace_section_kind *kind, uint64_t token);

/*
 * Wake-ups for the wakeup and wakeup_rt tracers, for synchronisation that
 * the preloaded runtime does not hook (it hooks pthread_cond_*, sem_* and
 * eventfd_read/eventfd_write). OBJ is the address both sides use (the
 * futex word, the queue). usrtrace_wake() is the notifier's call, just
 * before the notification (a waiter that runs before the stamp measures
 * nothing); usrtrace_wait_begin() the waiter's,
 * before it blocks, and usrtrace_wait_end() when it runs again. Each wake
 * is measured once, by the first waiter to run after it (among real-time
 * waiters only, for wakeup_rt). Context: any thread; no lock, no
 * allocation; wait_begin makes one system call while wakeup_rt runs (the
 * thread's scheduling policy).
 */
USRTRACE_EXPORT void usrtrace_wake(const void *obj);
USRTRACE_EXPORT uint64_t usrtrace_wait_begin(const void *obj);
USRTRACE_EXPORT void usrtrace_wait_end(const void *obj, uint64_t token);

/*
 * futex(2) with the wake-up measured: FUTEX_WAKE_PRIVATE of up to N
 * waiters, and FUTEX_WAIT_PRIVATE while *UADDR == VAL (TIMEOUT relative,
 * NULL: none). They return what the system call returns (-1 with errno
 * set on error), as syscall(SYS_futex, ...) does.
 */
struct timespec;
USRTRACE_EXPORT long usrtrace_futex_wake(uint32_t *uaddr, int n);
USRTRACE_EXPORT long usrtrace_futex_wait(uint32_t *uaddr, uint32_t val, const struct timespec *timeout);

/*
 * timerlat for a program's own periodic thread: sleeps until WHEN
 * (CLOCK_MONOTONIC, absolute) as clock_nanosleep(TIMER_ABSTIME) does, and
 * reports how late the thread woke to the instances running timerlat
 * (their trace gets a "#N context thread timer_latency L ns" line). Returns
 * clock_nanosleep's result (0, EINTR, EINVAL). Context: any thread, not a
 * signal handler.
 */
USRTRACE_EXPORT int usrtrace_timerlat_sleep_until(const struct timespec *when);

#ifdef __cplusplus
} /* extern "C" */

struct usrtrace_section_kind {
  /* Instances whose tracer watches this kind (bit = instance slot). */
  std::atomic<uint64_t> watched;
};

namespace usrtrace {

/* A section for the scope's lifetime; the check is inline. */
class Section {
 public:
  __attribute__((always_inline)) explicit Section(usrtrace_section_kind *kind)
      : kind_(kind),
        token_(kind != nullptr && __builtin_expect(kind->watched.load(std::memory_order_relaxed) != 0, 0)
                   ? usrtrace_section_begin(kind)
                   : 0) {}
  __attribute__((always_inline)) ~Section() {
    if (__builtin_expect(token_ != 0, 0)) usrtrace_section_end(kind_, token_);
  }
  Section(const Section &) = delete;
  Section &operator=(const Section &) = delete;

 private:
  usrtrace_section_kind *kind_;
  uint64_t token_;
};

}  // namespace usrtrace

namespace usrtrace::internal {

// A string literal as a template argument: one kind per name, registered
// when the program (or shared object) is loaded, as events are, so that a
// tracer can name it before the first section of the kind runs (a
// recorder sets the tracer up before main()).
template <unsigned long N>
struct KindName {
  char text[N];
  constexpr KindName(const char (&s)[N]) {  // NOLINT: implicit on purpose
    for (unsigned long i = 0; i < N; ++i) text[i] = s[i];
  }
};
template <KindName Name>
struct SectionKindOf {
  static inline usrtrace_section_kind *const kind = usrtrace_section_kind_get(Name.text);
};

}  // namespace usrtrace::internal

#define USRTRACE_SECTION_CAT2_(a, b) a##b
#define USRTRACE_SECTION_CAT_(a, b) USRTRACE_SECTION_CAT2_(a, b)
/* A section of kind NAME (a string literal) until the end of the scope. */
#define USRTRACE_SECTION(name)                                 \
  ::usrtrace::Section USRTRACE_SECTION_CAT_(usrtrace_section_, \
                                            __LINE__)(::usrtrace::internal::SectionKindOf<name>::kind)
#endif /* __cplusplus */

#endif /* USRTRACE_LATENCY_H_ */
