// Private to src/trigger: the per-event control object and the built-in
// user_stack event of the stacktrace trigger.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "trigger/control.h"

namespace usrtrace::internal {

// One per event that ever had a filter or trigger (see trigger/control.h).
struct EventControl {
  // What writers read: the published SlotControl of each slot.
  std::atomic<const trigger::SlotControl*> slots[instance::kMaxInstances] = {};
  // Bit s: slot s has triggers, which fire even where the event is not
  // enabled. order: relaxed; published after slots[s] (release) and read
  // before it (acquire), as a hint of which slots to look at.
  std::atomic<uint64_t> trigger_slots{0};

  // Control plane only, under the control lock.
  std::unique_ptr<trigger::SlotControl> owned[instance::kMaxInstances];
  int soft[instance::kMaxInstances] = {};  // enable_/disable_event triggers naming this event
};

}  // namespace usrtrace::internal

namespace usrtrace::trigger {

// ftrace:user_stack (the kernel's id 13 and layout): the stacktrace
// trigger's record. Registered with the built-in events.
const internal::EventDesc& user_stack_event();

// Writes the calling thread's user-space backtrace, from the caller of
// write_event() up, as a user_stack record into `slot`, with the common
// fields of the record that fired it. `caller_ip` is write_controlled()'s
// return address (in write_event): the frames up to and including the one
// it belongs to are the library's own and are skipped, and one more for an
// event with dynamic fields, whose call site calls write_event from the
// event's out-of-line emit_dynamic() (usrtrace/event.h).
// Context: the write path (between writers::enter and exit).
void write_user_stack(int slot, const internal::CommonHeader& common, const void* caller_ip, bool dynamic);

// The same frames into `out` (up to `max`; returns how many): a hist
// trigger's common_stacktrace key.
int user_stack(const void* caller_ip, bool dynamic, uint64_t* out, int max);

// The same from the frame whose return address is `first_ip` up (the
// function tracers: the traced function's caller first).
void write_user_stack_from(int slot, const internal::CommonHeader& common, uint64_t first_ip);

// Whether the event's call site goes through emit_dynamic().
bool has_dynamic_fields(const internal::EventDesc& ev);

}  // namespace usrtrace::trigger
