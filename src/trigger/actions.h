// The actions event triggers and set_ftrace_filter's function commands share
// (the kernel's trigger ops and ftrace probes do the same things): one
// implementation, called by trigger/fire.cc and function/probes.cc.
//
// Each takes one firing from its ":N" count (-1: unlimited), and
// traceon/traceoff and enable_/disable_event spend one only when they change
// the state, as the kernel's do. Counts are taken with a compare-and-swap,
// so a count of N fires at most N times whatever the number of threads.
// Context: the write path (between writers::enter and exit); no lock, no
// allocation, no exception.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "usrtrace/internal/event_impl.h"

namespace usrtrace::trigger::actions {

// What an event trigger (events/SYS/EVENT/trigger) or a function command
// (set_ftrace_filter's FUNC:CMD) does: one list for both, with one name
// each. Some belong to one side only, as in the kernel: the hist ones to
// triggers, dump and cpudump to function commands.
enum class Action : uint8_t {
  kTraceOn,
  kTraceOff,
  kSnapshot,
  kStacktrace,
  kEnableEvent,
  kDisableEvent,
  kEnableHist,   // triggers only
  kDisableHist,  // triggers only
  kHist,         // triggers only
  kDump,         // function commands only
  kCpuDump,      // function commands only
};
// Who may name an action.
enum User : uint8_t { kTrigger = 1, kFunctionCommand = 2 };
// The action `name` names for `user`; false if none. Context: control plane.
bool by_name(std::string_view name, User user, Action* out);
const char* name(Action a);

// Takes one firing from `count`; false when none is left.
bool take_count(std::atomic<long>& count);

// tracing_on of the instance in `slot`: on or off.
void tracing_on(int slot, bool on, std::atomic<long>& count);
// A snapshot of the instance in `slot`; `why` names the cause in its info.
void snapshot(int slot, const char* why, std::atomic<long>& count);
// `target` enabled or disabled in `slot` (its soft mode is held by the
// control plane while the trigger or command exists).
void set_event(internal::EventDesc& target, int slot, bool on, std::atomic<long>& count);

}  // namespace usrtrace::trigger::actions
