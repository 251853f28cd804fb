// The latency tracers: section (every kind), section_KIND, sigsoff, wakeup,
// wakeup_rt and timerlat, the user-space irqsoff/preemptoff, wakeup and
// timerlat. docs/design/latency.md has the long form.
//
// Each keeps, per instance, the worst latency seen (tracing_max_latency)
// and the trace of it: when a measured latency beats the instance's bar
// (the max, or tracing_thresh when set), the live buffer is swapped into
// the max buffer (the instance's snapshot spare, Snapshots::take, O(1) and
// lock-free) with the measurement's window, and `trace` shows that buffer,
// only the entries inside the window, under the kernel's latency header.
//
// Times are TSC readings: a latency tracer needs a TSC trace_clock (local,
// global, perf, x86-tsc), so that the window compares with the buffer's
// stamps and a section costs two rdtsc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "instance/snapshot.h"

namespace usrtrace::instance {
class Instance;
}

namespace usrtrace::latency {

inline constexpr int kMaxKinds = 32;
inline constexpr size_t kMaxKindName = 23;

enum class Tracer : uint8_t { kNone, kSection, kSectionKind, kSigsoff, kWakeup, kWakeupRt, kTimerlat };

// The latency tracers' names for available_tracers: section, section_KIND
// for each kind registered, sigsoff, timerlat, wakeup, wakeup_rt.
std::vector<std::string> tracer_names();
// Whether `name` is a latency tracer (section_KIND only once KIND exists).
bool is_tracer(std::string_view name);

// current_tracer = a latency tracer: allocates the max buffer, turns
// latency-format on (restored when the tracer goes, as the kernel does),
// sets tracing_max_latency to 0 and, with the function-trace option,
// traces functions as the `function` tracer would. Returns 0 or -errno
// with *why: EINVAL (a clock that is not TSC), ENOMEM.
// Context: control plane.
int set_tracer(instance::Instance& inst, std::string_view name, std::string* why);
// Any other tracer: the latency tracer, if any, stops.
void clear_tracer(instance::Instance& inst);
Tracer tracer(const instance::Instance& inst);
std::string tracer_name(const instance::Instance& inst);  // "" when none
// While a latency tracer runs, `trace` shows the max buffer and `snapshot`
// cannot be written (EBUSY), as the kernel's use_max_tr.
bool uses_max_buffer(const instance::Instance& inst);

// tracing_max_latency in microseconds. Writing sets the bar (0 restarts
// the search).
uint64_t max_latency_us(const instance::Instance& inst);
void set_max_latency_us(instance::Instance& inst, uint64_t us);
// tracing_thresh changed (microseconds, 0: off).
void set_thresh_us(instance::Instance& inst, uint64_t us);
// The latency tracers' option (function-trace) or the clock changed.
void options_changed(instance::Instance& inst);

// The window of a kept max trace (raw clock), or {0, UINT64_MAX}.
struct Window {
  uint64_t start = 0, end = UINT64_MAX;
};
Window window_of(const instance::SnapshotInfo& info);
// The latency a max trace measured, in nanoseconds (0 for another snapshot).
uint64_t latency_ns(const instance::SnapshotInfo& info);

// timerlat_period_us (the timer thread's period).
uint64_t timerlat_period_us(const instance::Instance& inst);
int set_timerlat_period_us(instance::Instance& inst, uint64_t us);

// The instance in `slot` goes away.
void instance_removed(int slot);

// sigsoff's hook (the preloaded runtime's pthread_sigmask/sigprocmask):
// the thread's blocked set went from `before` to `after` (64-bit masks of
// signals 1..64), at return address `ip`. Context: any thread.
void signals_changed(uint64_t before, uint64_t after, uintptr_t ip);

}  // namespace usrtrace::latency
