// Event filters and triggers per instance: the control plane behind
// events/SYS/EVENT/{filter,trigger,hist} and events/SYS/filter, and the
// write path that applies them (trace_events_trigger.c's role).
//
// Per event, an EventControl (allocated on the first filter or trigger and
// kept until the event is unregistered) holds one published SlotControl per
// instance slot. A SlotControl is immutable once published: a change builds
// a new one (sharing the unchanged Trigger objects, so counts and tables
// carry over), publishes it with a release store, waits for a grace period
// (writers/writers.h) and frees the old one. Writers therefore read
// filters and trigger lists with plain loads and no lock.
//
// The write path (write_controlled, called by write_event when bit
// kControlBit of the event's enabled word is set):
//
//   for each slot that records the event or has triggers on it:
//     run its traceon triggers            (so the event that turns tracing
//                                          on is itself recorded)
//     if it records the event and the record passes its filter: write it
//     run its other triggers              (so a snapshot or traceoff keeps
//                                          the event that fired it)
//
// The record is filtered before it is written, on the writer's stack: a
// rejected record never reaches the ring buffer. Triggers fire whether or
// not the event is enabled in the instance (the kernel's soft mode), each
// gated by its own filter and count.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "filter/filter.h"
#include "hist/hist.h"
#include "instance/instance.h"
#include "trigger/actions.h"
#include "usrtrace/internal/event_impl.h"
#include "writers/writers.h"

namespace usrtrace::trigger {

// A trigger's action (trigger/actions.h: the list function commands share).
using Kind = actions::Action;

struct Trigger {
  Kind kind;
  // Firings left; -1 is unlimited. Decremented by the write path.
  std::atomic<long> count{-1};
  std::unique_ptr<filter::Program> filter;  // null: fires on every record
  // enable_/disable_event, enable_/disable_hist: the event acted on (kept
  // valid: its unregistration removes this trigger first).
  internal::EventDesc* target = nullptr;
  std::unique_ptr<hist::Histogram> hist;  // kHist
};

struct SlotControl {
  std::shared_ptr<const filter::Program> filter;   // the event filter; null: none
  std::vector<std::shared_ptr<Trigger>> triggers;  // newest first, as the kernel lists them
};

// Errors of the control-plane calls: the message and caret for error_log.
struct Error {
  std::string subsystem;  // "event filter parse error", "hist:SYS:EVENT", "event trigger"
  std::string message;
  std::string command;  // what the caret points into
  size_t pos = 0;
};

// ---- Control plane. Context: any thread but not a writer or a signal
// handler; takes the control lock, allocates, may wait for a grace period.

// events/SYS/EVENT/filter: "" or "0" clears. -EINVAL with *err on a bad
// expression (the filter in force stays).
int set_filter(int slot, internal::EventDesc& ev, std::string_view expr, Error* err);
// The filter in force ("none" if unset), without a newline.
std::string filter_text(int slot, const internal::EventDesc& ev);

// events/SYS/filter: sets the filter of every event of `system` that has
// the fields it names; "0" clears them all. -EINVAL if the expression is
// malformed or fits no event of the system.
int set_system_filter(int slot, std::string_view system, std::string_view expr, Error* err);
// The text events/SYS/filter shows.
std::string system_filter_text(int slot, std::string_view system);

// events/SYS/EVENT/trigger: one command, "[!]cmd[:args][ if FILTER]".
// Returns 0 or -errno (EINVAL bad command, EEXIST a duplicate, ENOENT for
// continuing or clearing a missing histogram, ENOMEM).
int write_trigger(int slot, internal::EventDesc& ev, std::string_view cmd, Error* err);
// The trigger file: one line per trigger, or the list of available ones.
std::string trigger_text(int slot, const internal::EventDesc& ev);
// The hist file: every hist trigger of the event, as the kernel prints them.
std::string hist_text(int slot, const internal::EventDesc& ev);
// The enable file shows "0*"/"1*" while enable_/disable_event triggers name
// the event in the slot (the kernel's soft mode).
bool soft_mode(int slot, const internal::EventDesc& ev);
// Whether `ev` is in soft mode in some instance: soft_mode() of every slot,
// under one lock (the dynamic probes ask it of each probe on every change).
bool soft_mode_any(const internal::EventDesc& ev);
// Other parts that enable or disable `ev` on a hit (set_ftrace_filter's
// enable_event/disable_event commands) hold its soft mode too: +1 / -1.
void hold_soft_mode(int slot, internal::EventDesc& ev, int delta);

// An instance went away: drops every filter and trigger of its slot.
void clear_slot(int slot);

// ---- Write path. Context: any thread, signal handlers included; no lock,
// no allocation, no system call (except the stacktrace trigger's
// unwinding, which reads /proc-free libgcc tables; see stacktrace.cc).

// Writes `rec` into the slots of `record_mask` it passes the filter of, and
// runs the triggers of every slot that has some. Called between
// writers::enter() and exit().
void write_controlled(const internal::EventDesc& ev, void* rec, uint32_t len, const writers::ThreadState& t,
                      uint64_t record_mask);

}  // namespace usrtrace::trigger
