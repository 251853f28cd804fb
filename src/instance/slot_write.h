// Writing a record into an instance's buffer, through its tracing_cpumask and
// pid filter, and the built-in ftrace:print event (trace_marker, printk).
// Every writer above this level (events, function and latency tracers,
// triggers) ends here.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/compiler.h"
#include "base/rseq.h"
#include "events/flags.h"
#include "instance/instance.h"
#include "usrtrace/internal/event_impl.h"
#include "writers/writers.h"

namespace usrtrace::events {

const internal::EventDesc& print_event();

// Writes an ftrace:print record into the instance in `slot` (not through
// the enabled mask: trace_marker belongs to its instance). `ip` 0 prints as
// tracing_mark_write. Returns the text bytes recorded.
// Context: any thread; async-signal-safe; no lock, no allocation.
long write_print(int slot, std::string_view text, uint64_t ip);
// The same for a trace_marker write, which also fires the instance's
// triggers on ftrace:print (events/ftrace/print/trigger), as the kernel's
// tracing_mark_write() does; printk and the tracers' own prints do not.
long write_marker(int slot, std::string_view text);

// Where a trace_marker record goes when ftrace:print has triggers in some
// instance (kControlBit of its enabled word): the trigger level's writer,
// installed before it sets the bit (this level calls nothing above it).
// The same signature as events::ControlledWriter (write/write.h).
using MarkerWriter = void (*)(const internal::EventDesc& ev, void* rec, uint32_t len,
                              const writers::ThreadState& t, uint64_t record_mask);
// Context: control plane; stored with release before the control bit.
void set_marker_writer(MarkerWriter w);
// trace_marker_raw: a u32 id then data; -EINVAL if shorter than 4 bytes or
// longer than a record holds.
long write_raw(int slot, std::string_view data);

// Writes a record whose common fields are filled into the instance in
// `slot`, through its tracing_cpumask and pid filter (thread `tid`).
// Returns whether it was written. Context: the write path, between
// writers::enter() and exit().
bool write_to_slot(int slot, const void* rec, uint32_t len, int tid);
// The same with the time stamp read by the caller (RingBuffer::write_at).
bool write_to_slot_at(int slot, const void* rec, uint32_t len, int tid, uint64_t tsc);

// The instance's buffer if an event of thread `tid` on this CPU passes its
// tracing_cpumask and pid filter, else nullptr.
USRTRACE_ALWAYS_INLINE rb::RingBuffer* admit(int slot, int tid) {
  instance::SlotState& s = instance::g_slot_state[slot];
  // order: acquire pairs with the release that published the buffer.
  rb::RingBuffer* rb = s.buffer.load(std::memory_order_acquire);
  if (!rb) return nullptr;
  // order: relaxed is enough; see SlotState::filters.
  if (USRTRACE_LIKELY(s.filters.load(std::memory_order_relaxed) == 0)) return rb;
  // tracing_cpumask. order: relaxed is enough; the mask is a soft switch
  // like tracing_on. The CPU is the one this thread ran on a moment ago: a
  // thread migrated before the ring buffer's own critical section records
  // on its new CPU, so the mask is exact only for threads that stay put
  // (negative ids, rseq not registered yet, are let through).
  if (const unsigned cpu = static_cast<unsigned>(base::rseq_cpu_id());
      USRTRACE_LIKELY(cpu < instance::kMaxCpus) &&
      USRTRACE_UNLIKELY(
          (instance::g_slot_cpus_off[slot][cpu / 64].load(std::memory_order_relaxed) >> (cpu % 64)) & 1))
    return nullptr;
  if (const instance::PidFilter* f = s.pids.load(std::memory_order_acquire);
      USRTRACE_UNLIKELY(f != nullptr) && !f->admits(tid))
    return nullptr;
  return rb;
}

// write_to_slot_at() inline, for a record of kLen bytes.
template <uint32_t kLen>
USRTRACE_ALWAYS_INLINE bool write_to_slot_at_n(int slot, const void* rec, int tid, uint64_t tsc) {
  rb::RingBuffer* rb = admit(slot, tid);
  return rb != nullptr && rb->template write_at<kLen>(rec, tsc);
}

// Fills a record's common header (flags, nesting depth, pid) for thread
// `t`: a write nested in another on the thread (a signal handler's) is
// shown as the kernel shows a hard interrupt's, with its depth.
// `depth`: the thread's writes in progress, this one included.
USRTRACE_ALWAYS_INLINE void fill_header(void* rec, uint32_t depth, int32_t tid) {
  auto* h = static_cast<internal::CommonHeader*>(rec);
  const uint32_t nested = depth - 1;
  h->flags = nested > 0 ? output::kFlagHardirq : 0;
  h->preempt_count = static_cast<uint8_t>(nested < 15 ? nested : 15);
  h->pid = tid;
}
USRTRACE_ALWAYS_INLINE void fill_common(void* rec, const writers::ThreadState& t) {
  fill_header(rec, t.depth(), t.tid);
}

}  // namespace usrtrace::events
