// The function tracers' control plane: current_tracer, the filter files,
// the pid files, max_graph_depth and tracing_thresh of each instance, and
// the table of traceable functions (available_filter_functions).
//
// Every change recomputes, for each traceable function, the mask of
// instances that want it, publishes a new site table (core.h) and patches
// the -fpatchable-function-entry sites to match: the RFC's per-site bitmask
// of interested tracers, decided when a filter changes and never searched
// per call.
//
// Context: control plane; allocates, takes a mutex, may sleep (grace
// periods, patching).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace usrtrace::instance {
class Instance;
}

namespace usrtrace::function {

enum class Tracer : uint8_t { kNop, kFunction, kGraph };

// "nop function function_graph".
const std::vector<std::string>& tracer_names();
bool is_tracer(std::string_view name);
// current_tracer: -EINVAL for an unknown name.
int set_tracer(instance::Instance& inst, std::string_view name);
Tracer tracer(const instance::Instance& inst);
std::string tracer_name(const instance::Instance& inst);

// The four function lists of an instance.
enum class List : uint8_t { kFilter, kNotrace, kGraphFunction, kGraphNotrace };

struct Error {
  enum Code : uint8_t {
    kNoFunction,      // no traceable function matches
    kBadModule,       // ":mod:" without a name
    kUnknownCommand,  // FUNC:COMMAND with an unknown COMMAND
    kBadCount,        // a command's count is not a number
    kNoEvent,         // enable_event/disable_event: no such SYS:EVENT
    kNotHere,         // a command outside set_ftrace_filter
    kNoMemory,        // dump: the dump's storage could not be allocated
  };
  Code code = kNoFunction;
  std::string message;
  size_t pos = 0;  // byte of the input the message is about
};

// A write to one of the lists: whitespace-separated globs ("match*",
// "*match", "*match*", exact names, '?' and '[...]'), each optionally
// followed by ":mod:NAME" (NAME a glob on the shared object's file name,
// with or without ".so..."; the main program's is its file name), and
// prefixed by '!' to remove what it matches. `truncate` (O_TRUNC) empties
// the list first. A glob that matches no function is -EINVAL, with *err.
//
// set_ftrace_filter also takes the kernel's function commands,
// "GLOB:COMMAND[:ARGS]", which act when a matching function is entered,
// whatever the instance's tracer, and are not part of the filter (O_TRUNC
// keeps them; "!GLOB:COMMAND" removes them):
//   traceon[:N] traceoff[:N]   tracing_on of the instance (N: changes left)
//   snapshot[:N]               a snapshot of the instance
//   stacktrace[:N]             the caller's stack, as an ftrace:user_stack
//   enable_event:SYS:EVENT[:N] disable_event:SYS:EVENT[:N]
//   dump cpudump               the top instance's buffers (all CPUs, or the
//                              current one) to the dump-on-crash file, once
// Returns 0 or -errno.
int write_list(instance::Instance& inst, List list, std::string_view text, bool truncate, Error* err);
// The functions on the list, one per line; for an empty list the kernel's
// "#### all functions enabled ####" (filters) or "#### no functions
// disabled ####" (notrace lists).
std::string show_list(const instance::Instance& inst, List list);
void clear_list(instance::Instance& inst, List list);

// set_ftrace_pid / set_ftrace_notrace_pid (thread ids).
int set_pids(instance::Instance& inst, bool notrace, std::vector<int> add, bool truncate);
std::vector<int> pids(const instance::Instance& inst, bool notrace);

int set_max_graph_depth(instance::Instance& inst, uint32_t depth);
uint32_t max_graph_depth(const instance::Instance& inst);
// tracing_thresh in microseconds (0: off).
int set_thresh_us(instance::Instance& inst, uint64_t us);
uint64_t thresh_us(const instance::Instance& inst);

// available_filter_functions: every traceable function, "name" or
// "name [module]" per line, in address order.
std::string available_filter_functions();
// enabled_functions: the functions some instance traces, with the number of
// instances ("name (N)").
std::string enabled_functions();
// refused_functions: the plain functions (code built with no tracing flag)
// a filter selects and the patch engine could not take, or left on int3
// (a signal per call), "name [module]\twhy", one per line.
std::string refused_functions();

// function_profile_enabled: times every function the top instance's
// set_ftrace_filter/set_ftrace_notrace select (whatever its tracer), per CPU
// (the CPU a call returned on). Enabling resets the counts.
int set_profiling(bool on);
bool profiling();
// trace_stat/functionN: "Function Hit Time Avg s^2" for CPU `cpu`, the
// longest total time first, as the kernel prints it.
std::string function_stat(int cpu);

// An instance's sleep-time or graph-time option changed.
void options_changed();

// The instance in `slot` is going away: its tracer stops, its lists clear.
void instance_removed(int slot);

}  // namespace usrtrace::function
