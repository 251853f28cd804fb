// The write side of events beyond the inline call sites: the built-in
// ftrace:print event (trace_marker, printk).
#pragma once

#include <cstdint>
#include <string_view>

#include "instance/writers.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::events {

const internal::EventDesc& print_event();

// Writes an ftrace:print record into the instance in `slot` (not through
// the enabled mask: trace_marker belongs to its instance). `ip` 0 prints as
// tracing_mark_write. Returns the text bytes recorded.
// Context: any thread; async-signal-safe; no lock, no allocation.
long write_print(int slot, std::string_view text, uint64_t ip);
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

// Fills a record's common header (flags, nesting depth, pid) for thread `t`.
void fill_common(void* rec, const writers::ThreadState& t);

}  // namespace usrtrace::events
