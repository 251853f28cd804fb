// timerlat: a periodic thread measures how late it wakes (cyclictest's
// measure, the kernel's timerlat tracer for its own threads). The tracer's
// thread ("timerlat") runs while any instance has the tracer; a program's
// own periodic thread measures itself with usrtrace_timerlat_sleep_until().
// Each wake writes a sample line into the timerlat instances; a wake later
// than the instance's bar becomes its max trace, with the window from the
// time the thread should have woken to the sample.
#include <pthread.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "clock/trace_clock.h"
#include "instance/slot_write.h"
#include "latency/internal.h"
#include "usrtrace/latency.h"

namespace usrtrace::latency::detail {
namespace {

std::atomic<uint64_t> g_period_ns{1000000};
std::atomic<bool> g_stop{false};
std::thread* g_thread = nullptr;  // control plane only (latency's g_mu held)
std::atomic<uint32_t> g_seq{0};

uint64_t mono_ns(const timespec& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

// One wake at `now` that should have been at `due` (CLOCK_MONOTONIC ns).
void sample(uint64_t due_ns, uint64_t now_ns, uint64_t now_tsc, uintptr_t ip) {
  const uint64_t slots = g_timerlat_slots.load(std::memory_order_relaxed);
  if (slots == 0) return;
  const uint64_t late = now_ns > due_ns ? now_ns - due_ns : 0;
  char text[96];
  const int n =
      snprintf(text, sizeof text, "#%u context thread timer_latency %9llu ns\n",
               g_seq.fetch_add(1, std::memory_order_relaxed) + 1, static_cast<unsigned long long>(late));
  for (uint64_t m = slots; m != 0; m &= m - 1)
    events::write_print(__builtin_ctzll(m), std::string_view(text, static_cast<size_t>(n)), ip);
  const uint64_t shown_end = clock::rdtsc();  // the sample line is inside the window
  const uint64_t ticks = ns_to_ticks(late);
  report(slots, Measure{now_tsc - std::min(ticks, now_tsc), now_tsc, ip, ip, "timerlat", 0, shown_end});
}

void timer_loop() {
  pthread_setname_np(pthread_self(), "timerlat");
  timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  const auto ip = reinterpret_cast<uintptr_t>(&timer_loop);
  while (!g_stop.load(std::memory_order_relaxed)) {
    const uint64_t period = g_period_ns.load(std::memory_order_relaxed);
    uint64_t due = mono_ns(next) + period;
    next.tv_sec = static_cast<time_t>(due / 1000000000ull);
    next.tv_nsec = static_cast<long>(due % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
    }
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const uint64_t tsc = clock::rdtsc();
    sample(due, mono_ns(now), tsc, ip);
    // Missed periods are skipped, not made up in a burst.
    if (mono_ns(now) > due + period) next = now;
  }
}

// A process that exits with the tracer set: the thread stops first, before
// static destructors run under it.
void stop_at_exit() {
  if (g_thread == nullptr) return;
  g_stop.store(true, std::memory_order_relaxed);
  g_thread->join();
}

}  // namespace

void timerlat_update(uint64_t period_ns) {
  g_period_ns.store(period_ns, std::memory_order_relaxed);
  const bool want = g_timerlat_slots.load(std::memory_order_relaxed) != 0;
  if (want && g_thread == nullptr) {
    static const bool registered = atexit(stop_at_exit) == 0;
    (void)registered;
    g_stop.store(false, std::memory_order_relaxed);
    g_thread = new std::thread(timer_loop);
  } else if (!want && g_thread != nullptr) {
    g_stop.store(true, std::memory_order_relaxed);
    g_thread->join();  // within one period (at most 1 s)
    delete g_thread;
    g_thread = nullptr;
  }
}

}  // namespace usrtrace::latency::detail

extern "C" USRTRACE_EXPORT int usrtrace_timerlat_sleep_until(const struct timespec* when) {
  using namespace usrtrace::latency::detail;  // NOLINT
  if (when == nullptr) return EINVAL;
  const int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, when, nullptr);
  if (rc != 0) return rc;
  if (g_timerlat_slots.load(std::memory_order_relaxed) == 0) return 0;
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  sample(mono_ns(*when), mono_ns(now), usrtrace::clock::rdtsc(),
         reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  return 0;
}
