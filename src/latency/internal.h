// Private to src/latency: what the measuring side (sections.cc, wakeup.cc,
// timerlat.cc) and the control side (control.cc) share.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "base/compiler.h"
#include "instance/instance.h"
#include "latency/latency.h"
#include "usrtrace/latency.h"

namespace usrtrace::latency::detail {

// A section kind. Never freed: call sites keep the pointer for the life of
// the process. `watched` (the public part) = own | g_any_slots.
struct KindImpl : usrtrace_section_kind {
  int id = 0;
  char name[kMaxKindName + 1] = {};
  std::atomic<uint64_t> own{0};  // slots whose tracer is section_<name>
};
// Registered kinds by id, published with release (g_nkinds after).
extern std::atomic<KindImpl*> g_kinds[kMaxKinds];
extern std::atomic<int> g_nkinds;

// Slots running each measuring tracer (bit = slot). Relaxed: a soft switch.
extern std::atomic<uint64_t> g_any_slots;        // section
extern std::atomic<uint64_t> g_sigsoff_slots;    // sigsoff
extern std::atomic<uint64_t> g_wakeup_slots;     // wakeup
extern std::atomic<uint64_t> g_wakeup_rt_slots;  // wakeup_rt
extern std::atomic<uint64_t> g_timerlat_slots;   // timerlat

// Per slot, what a measurement is compared with: tracing_max_latency and
// tracing_thresh as TSC ticks. A latency is reported when it is above
// thresh (thresh != 0), else above max. Written by the control side and by
// reports (max), read with relaxed loads.
struct Bar {
  std::atomic<uint64_t> max{0};
  std::atomic<uint64_t> thresh{0};
};
extern Bar g_bars[instance::kMaxInstances];

// One measurement: the window [start, end] (TSC), where it began and ended,
// and what it was ("section lock", "sigsoff", ...).
struct Measure {
  uint64_t start, end;
  uintptr_t start_ip, end_ip;
  const char* what;
  int tid;                 // the measured thread; 0: the caller
  uint64_t shown_end = 0;  // the trace shown ends here (0: at `end`)
};

// The slow half of report(): the latency beat slot's bar.
USRTRACE_NOINLINE void report_slow(int slot, const Measure& m);

// Reports `m` to each slot of `slots` whose bar it beats. Context: any
// thread, signal handlers included; no lock, no allocation; a slot whose
// max it beats gets the swap (and a few system calls for the task line).
USRTRACE_ALWAYS_INLINE void report(uint64_t slots, const Measure& m) {
  const uint64_t delta = m.end - m.start;
  for (; slots != 0; slots &= slots - 1) {
    const int slot = __builtin_ctzll(slots);
    const Bar& b = g_bars[slot];
    const uint64_t t = b.thresh.load(std::memory_order_relaxed);
    if (t != 0 ? delta > t : delta > b.max.load(std::memory_order_relaxed)) report_slow(slot, m);
  }
}

// TSC ticks <-> ns with the trace clock's calibration.
uint64_t ticks_to_ns(uint64_t ticks);
uint64_t ns_to_ticks(uint64_t ns);

// sections.cc: the kinds.
KindImpl* find_kind(std::string_view name);
KindImpl* register_kind(const char* name, int* err);

// timerlat.cc: starts, retimes or stops the timer thread to match
// g_timerlat_slots and the period. Context: control plane.
void timerlat_update(uint64_t period_ns);

}  // namespace usrtrace::latency::detail
