// wakeup and wakeup_rt: the time from a notification to the woken thread
// running (the kernel's wakeup tracers, from sched_waking to sched_switch).
//
// A notifier stamps the object's entry in a small table (hashed by the
// object's address); a waiter that runs again after the stamp and whose
// wait began before it claims the stamp (one CAS: each wake is measured
// once, by the first waiter to run) and reports the time since. wakeup_rt
// counts only waiters with a real-time policy, which the waiter reads when
// it starts waiting (one system call, only while wakeup_rt runs; a thread
// about to block pays little for it).
//
// Entries are shared by objects whose addresses hash alike: the newest
// notification wins and a waiter of another object finds a different
// address and measures nothing. Each field is its own atomic; a waiter
// reads the stamp, then the rest, then the stamp again, and measures only
// if nothing moved (the claim's CAS checks the stamp too).
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock/trace_clock.h"
#include "latency/internal.h"
#include "usrtrace/latency.h"

namespace usrtrace::latency::detail {
namespace {

struct WakeEntry {
  std::atomic<uint64_t> ts{0};  // the notification's TSC; 0: none or claimed
  std::atomic<uintptr_t> obj{0};
  std::atomic<uintptr_t> ip{0};
};
constexpr int kWakeEntries = 256;
WakeEntry g_wakes[kWakeEntries];

WakeEntry& entry_of(const void* obj) {
  const auto a = reinterpret_cast<uintptr_t>(obj);
  return g_wakes[((a >> 3) * 0x9E3779B97F4A7C15ull) >> 56];
}

uint64_t watching() {
  return g_wakeup_slots.load(std::memory_order_relaxed) | g_wakeup_rt_slots.load(std::memory_order_relaxed);
}

constexpr uint64_t kTokenRt = 2;

}  // namespace
}  // namespace usrtrace::latency::detail

extern "C" {

USRTRACE_EXPORT void usrtrace_wake(const void* obj) {
  using namespace usrtrace::latency::detail;  // NOLINT
  if (watching() == 0 || obj == nullptr) return;
  WakeEntry& e = entry_of(obj);
  e.ts.store(0, std::memory_order_relaxed);
  e.obj.store(reinterpret_cast<uintptr_t>(obj), std::memory_order_relaxed);
  e.ip.store(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), std::memory_order_relaxed);
  // order: release; a waiter that sees this stamp sees obj and ip.
  e.ts.store(usrtrace::clock::rdtsc() | 1, std::memory_order_release);
}

USRTRACE_EXPORT uint64_t usrtrace_wait_begin(const void* obj) {
  using namespace usrtrace::latency::detail;  // NOLINT
  if (watching() == 0 || obj == nullptr) return 0;
  bool rt = false;
  if (g_wakeup_rt_slots.load(std::memory_order_relaxed) != 0) {
    const int policy = sched_getscheduler(0);
    rt = policy >= 0 &&
         ((policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO || (policy & ~SCHED_RESET_ON_FORK) == SCHED_RR);
  }
  return (usrtrace::clock::rdtsc() & ~uint64_t{3}) | 1 | (rt ? kTokenRt : 0);
}

USRTRACE_EXPORT void usrtrace_wait_end(const void* obj, uint64_t token) {
  using namespace usrtrace::latency::detail;  // NOLINT
  if (token == 0) return;
  const uint64_t now = usrtrace::clock::rdtsc();
  const bool rt = (token & kTokenRt) != 0;
  const uint64_t slots_fair = g_wakeup_slots.load(std::memory_order_relaxed);
  const uint64_t slots_rt = rt ? g_wakeup_rt_slots.load(std::memory_order_relaxed) : 0;
  if ((slots_fair | slots_rt) == 0) return;
  WakeEntry& e = entry_of(obj);
  uint64_t ts = e.ts.load(std::memory_order_acquire);
  // Not woken since this wait began (a timeout, a spurious wake-up, a
  // notification for another waiter already claimed).
  if (ts == 0 || ts < (token & ~uint64_t{3}) || ts > now) return;
  if (e.obj.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(obj)) return;
  const uintptr_t wake_ip = e.ip.load(std::memory_order_relaxed);
  if (!e.ts.compare_exchange_strong(ts, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) return;
  const uintptr_t ip = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (slots_fair != 0) report(slots_fair, Measure{ts, now, wake_ip, ip, "wakeup", 0});
  if (slots_rt != 0) report(slots_rt, Measure{ts, now, wake_ip, ip, "wakeup_rt", 0});
}

}  // extern "C"

extern "C" {

USRTRACE_EXPORT long usrtrace_futex_wake(uint32_t* uaddr, int n) {
  usrtrace_wake(uaddr);
  return syscall(SYS_futex, uaddr, FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

USRTRACE_EXPORT long usrtrace_futex_wait(uint32_t* uaddr, uint32_t val, const struct timespec* timeout) {
  const uint64_t t = usrtrace_wait_begin(uaddr);
  const long rc = syscall(SYS_futex, uaddr, FUTEX_WAIT_PRIVATE, val, timeout, nullptr, 0);
  usrtrace_wait_end(uaddr, t);
  return rc;
}

}  // extern "C"
