// Function tracing: the function and function_graph tracers of every
// instance, fed by two kinds of instrumentation:
//
//   * -finstrument-functions: the compiler calls __cyg_profile_func_enter /
//     __cyg_profile_func_exit around every function (hooks.cc);
//   * -fpatchable-function-entry=N[,M]: nops at each function's entry,
//     patched into a call to usrtrace's trampoline while some tracer wants the
//     function (patch.cc); exits are caught by redirecting the return address
//     to a return hook, with the original kept on a per-thread shadow stack.
//
// Both end in entry() / exit_*() here. Which instances trace a function is
// decided when a filter or a tracer changes, not per call: each function's
// site holds the mask of interested instances (bit = instance slot), in a
// table published with a release store and freed after a writers' grace
// period (writers/writers.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace usrtrace::function {

// ---- The shadow stack: one per thread, allocated (mmap) at the first
// traced entry. A frame is pushed for every entry that some function_graph
// tracer records or whose return address was redirected, and for an
// unrecorded -finstrument-functions call of the function on top, for its
// exit to pop (core.cc, hold_unrecorded).
struct ShadowFrame {
  uint64_t fn;        // the function's entry address (its symbol)
  uint64_t ret;       // the original return address (patched entries), else 0
  uint64_t* slot;     // where that return address lives on the stack (patched),
                      // or the hook's stack pointer (instrumented)
  uint64_t calltime;  // raw TSC at entry
  uint64_t mask;      // instances that recorded the entry (function_graph)
  uint64_t started;   // instances for which this call began a set_graph_function graph
  uint64_t notraced;  // instances for which this call began a set_graph_notrace region
  uint64_t flags;     // kFrame*; bits 32..63: the profile generation
  uint64_t index;     // the function's index in the profile (kFrameProfiled)
  uint64_t children;  // ns spent in traced callees (the profiler without graph-time)
  uint64_t cputime;   // the thread's CPU time at entry, ns (kFrameCpuTime)
};
inline constexpr uint32_t kFrameRedirected = 1;  // *slot holds the return hook
inline constexpr uint32_t kFrameUnhooked = 2;    // restored for an unwind
inline constexpr uint32_t kFrameProfiled = 4;    // the function profiler times this call
inline constexpr uint32_t kFrameWalked = 8;      // restored while the thread walks its stack
inline constexpr uint32_t kFrameCpuTime = 16;    // `cputime` is set (some tracer has sleep-time off)
inline constexpr uint32_t kFrameInSignal = 32;   // a signal handler's call, or one it made
inline constexpr uint32_t kFrameFullSave = 64;   // a plain function's: *slot holds the full return hook

// ---- Entry points of the instrumentation. Context: any thread, signal
// handlers included; no lock, no allocation (but the thread's first traced
// entry maps its shadow stack), no exception. Recursion (a hook reached
// from inside a hook) is ignored.

// A patched entry of `fn`, called from `parent` (the return address in the
// caller), whose return address is at `slot`. Returns true when it pushed a
// frame holding *slot and the trampoline must store the return hook's
// address into *slot.
bool patched_entry(uint64_t fn, uint64_t parent, uint64_t* slot);
// The same for a plain function's entry (plain.cc): the hook to store is
// the full one (full_return_hook_address), since the caller may keep
// values in call-clobbered registers across the call (gcc's -fipa-ra).
bool plain_entry(uint64_t fn, uint64_t parent, uint64_t* slot);
// The return hook, reached with the stack pointer just above `slot` (the
// slot that held the return address). Pops the frames down to and
// including the one for `slot` (frames above it were left by longjmp or an
// unwind that did not come back through here: their exits are recorded
// now) and returns the original return address to jump to. Never fails:
// a slot not on the shadow stack is a fatal corruption (abort with a
// message).
uint64_t patched_return(uint64_t* slot);

// Before an exception unwinds this thread's stack (_Unwind_RaiseException,
// _Unwind_ForcedUnwind): every redirected slot gets its original return
// address back, so the unwinder sees the real callers.
void shadow_unhook_all();
// Around a walk of the thread's own stack (stacktrace command,
// func_stack_trace): the redirected slots get their return addresses back,
// so the unwinder sees the real callers, and are redirected again after.
// Slots restored for an exception are left as they are.
void unwind_stack_begin();
void unwind_stack_end();
// After a catch (__cxa_begin_catch) at stack pointer `sp`: frames whose slot
// is below `sp` are gone (their exits are recorded now); the others are
// redirected again.
void shadow_rehook(uint64_t sp);

// Where the program's calls of the unwinder and of __cxa_begin_catch do not
// reach the interposers (a runtime loaded into a running process), probes
// at the functions they do reach do the interposers' work
// (src/function/plain.cc). Once; called by every rebuild of the
// sites. Context: control plane, under the function tracers' lock.
void ensure_unwind_hooks();

// ---- Objects: called by the dlopen/dlclose hooks (and at start-up) when
// the set of loaded objects may have changed; rebuilds the site table and
// patches the new objects' sites per the current filters. With no tracer,
// probe or profile it only forgets the table of traceable functions, which
// is read again when one is first needed.
// Context: control plane (may allocate, take locks, sleep).
void objects_changed();

// ---- The patcher, as the core sees it (patch.cc).
namespace patch {
// The signal the patcher sends every thread (once per site) to move threads
// out of a site of several nops before patching it (g++'s sites). Threads
// that block every other signal must leave this one unblocked: usrtrace's
// own threads do.
int sweep_signal();
// The return hook's address, what a redirected slot holds.
uint64_t return_hook_address();
// The return hook of plain functions (trampoline.cc): it keeps every
// register but rsp and rip, the flags and the whole vector state.
uint64_t full_return_hook_address();
// The entry addresses of every patchable function of the loaded objects
// (from each object's __patchable_function_entries section), sorted.
std::vector<uint64_t> patchable_functions();
// Makes exactly the functions in `wanted` (sorted, a subset of
// patchable_functions()) call the trampoline, and every other patchable
// site a nop again. Returns 0 or -errno (with *why).
// Context: control plane; safe while other threads run through the sites.
int apply(const std::vector<uint64_t>& wanted, std::string* why);
}  // namespace patch

}  // namespace usrtrace::function
