// Private to src/function: the state the hooks read and the control plane
// writes (see core.cc for the invariants).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "clock/trace_clock.h"
#include "events/builtin.h"
#include "function/function.h"
#include "instance/instance.h"
#include "trigger/actions.h"
#include "usrtrace/internal/event_impl.h"
#include "writers/writers.h"

namespace usrtrace::function {

// ftrace's event ids for its function events, as on the kernel
// (events/builtin.h).
inline constexpr uint16_t kFunctionId = events::FunctionEvent::kId;
inline constexpr uint16_t kGraphExitId = events::GraphExitEvent::kId;
inline constexpr uint16_t kGraphEntryId = events::GraphEntryEvent::kId;

// One traceable function: the instances (bit = slot) whose tracer traces it
// (set_ftrace_filter / set_ftrace_notrace), for which it begins a graph
// (set_graph_function) and for which it and its callees are not graphed
// (set_graph_notrace).
struct Probe;
struct Site {
  uint64_t fn;
  uint64_t trace;  // bit kProfileBit: the function profiler times it
  uint64_t start;
  uint64_t notrace;
  uint32_t index;  // the function's index (the profiler's tables)
  uint32_t nprobes;
  const Probe* const* probes;  // the function commands on it (nprobes), or null
};

// A function command of set_ftrace_filter ("FUNC:COMMAND[:ARGS]"): one per
// (function, command, instance). The hooks read it between writers::enter
// and exit; the control plane frees it only after a grace period that
// follows the publication of a table without it. `count` lives here, so a
// probe keeps its count across table rebuilds.
// The command's action (trigger/actions.h: the list event triggers share).
using ProbeKind = trigger::actions::Action;
struct Probe {
  ProbeKind kind;
  uint8_t slot;
  mutable std::atomic<long> count{-1};    // firings left; -1: unlimited
  internal::EventDesc* target = nullptr;  // enable_/disable_event
};
// The dump and cpudump commands call the crash dump (src/crash), which the
// core cannot link to: crash.cc registers it at load. `prepare` allocates
// its storage (control plane); `dump` writes the top instance, every CPU or
// only the current one, to the dump-on-crash file (write path).
struct DumpHooks {
  int (*prepare)();
  int (*dump)(bool orig_cpu);
};
void register_dump(const DumpHooks& hooks);
extern std::atomic<const DumpHooks*> g_dump_hooks;

// Runs the probes of `s` on an entry of its function called from `parent`
// (stacktrace records the stack from there): the traceon ones when
// `traceon` is true, the others when false. Between writers::enter/exit.
void fire_probes(const Site& s, uint64_t parent, const writers::ThreadState& t, bool traceon);

// Instances use bits 0..62 of the masks; bit 63 is the function profiler.
inline constexpr uint64_t kProfileBit = uint64_t{1} << 63;

// function_profile_enabled's tables: per CPU, per function, updated with
// relaxed atomic adds by the thread that returns (threads migrate: a CPU's
// row is shared). Published with a release store; replaced (reset) when
// profiling is enabled again, the old one freed after a grace period.
struct ProfileStats {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> time_ns{0};
  std::atomic<uint64_t> time_sq{0};
};
struct Profile {
  uint32_t gen = 0;
  uint32_t nfuncs = 0;
  int ncpus = 0;
  std::unique_ptr<ProfileStats[]> stats;  // [cpu * nfuncs + index]
};
extern std::atomic<Profile*> g_profile;

// Open addressing over the functions with a nonzero mask; empty slots have
// fn == 0. Immutable once published.
struct SiteTable {
  std::unique_ptr<Site[]> sites;
  std::unique_ptr<const Probe*[]> probes;  // the sites' probe lists, end to end
  uint64_t mask = 0;                       // capacity - 1
  int shift = 64;                          // 64 - log2(capacity)
  const Site* find(uint64_t fn) const;
};

// Per instance slot, read by the hooks.
struct SlotSettings {
  std::atomic<uint32_t> max_depth{0};                     // max_graph_depth; 0: no limit
  std::atomic<uint64_t> thresh_ns{0};                     // tracing_thresh (function_graph)
  std::atomic<const instance::PidFilter*> pids{nullptr};  // set_ftrace_pid / notrace_pid
};

// Nonzero when some instance runs a function tracer: the hooks' first test.
extern std::atomic<uint64_t> g_tracing;
extern std::atomic<const SiteTable*> g_table;
extern SlotSettings g_slots[instance::kMaxInstances];
extern std::atomic<uint64_t> g_function_slots;    // current_tracer = function
extern std::atomic<uint64_t> g_graph_slots;       // current_tracer = function_graph
extern std::atomic<uint64_t> g_graph_restricted;  // set_graph_function not empty
// The fast path's instance: slot + 1 while exactly one instance runs
// function_graph and nothing else needs a look per call (core.cc); else 0.
// Kept by control.cc with every change of the conditions.
extern std::atomic<uint32_t> g_fast;
// Instances whose sleep-time option is off, among those running
// function_graph (bit 63: the profiler, for the top instance's option):
// their calls are timed by the thread's CPU time. graph-time off for the
// profiler: g_profile_self_time.
extern std::atomic<uint64_t> g_cpu_time_slots;
extern std::atomic<bool> g_profile_self_time;
// Where a signal handler returns to (glibc's sa_restorer, __restore_rt): a
// call whose return address is this is a signal handler's (0: unknown).
extern std::atomic<uint64_t> g_sigreturn;
// The TSC calibration calltime/rettime use; set before g_graph_slots.
extern clock::TscCalibration g_calibration;

// -finstrument-functions (hooks.cc). `sp`: the hook's stack pointer, which
// orders frames (a deeper frame has a lower one).
//
// force_align_arg_pointer: these realign the stack on entry. A compiler
// calls the hooks with the stack the program was built for, and a program
// built with -mpreferred-stack-boundary=3 (kernel-style code, with
// -mgeneral-regs-only) calls them with rsp 8 mod 16, where our code, built
// for the ABI's 16, keeps SSE values on the stack with aligned moves. The
// hooks' own test of g_tracing needs no stack; only the traced path pays
// the few instructions.
__attribute__((force_align_arg_pointer)) void instrumented_entry(uint64_t fn, uint64_t parent, uint64_t sp);
__attribute__((force_align_arg_pointer)) void instrumented_exit(uint64_t fn, uint64_t sp);

}  // namespace usrtrace::function
