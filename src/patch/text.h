// Writing the program's code while its threads run it: what every patcher of
// usrtrace shares (the probe engine, patch.cc, and the function tracers'
// -fpatchable-function-entry patcher, src/function/patch.cc). Kernel:
// text_poke(), text_poke_sync() and the pages of arch/x86/kernel/kprobes.
//
//   map_near()     a page within rel32 reach of a range of code, for the
//                  stubs and slots a patched instruction jumps to
//   poke()         one byte of code, with a store no sanitizer instruments
//   sync_cores()   every thread executes a serializing instruction before it
//                  returns (membarrier SYNC_CORE, or its fallbacks)
//   sweep_threads() every other thread runs the registered fixups in its
//                  signal context: a thread stopped inside a window about to
//                  be overwritten is moved out of it
//
// The argument for each step is in docs/design/function-patching.md
// ("The patching order") and docs/design/patch-engine.md ("Arming").
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace usrtrace::patch {

// Maps `size` bytes (a multiple of the page size) with `prot` at the first
// free 1 MiB step below, else above, [lo, hi) from which every byte of
// [lo, hi) is within a rel32 of every byte of the mapping
// (MAP_FIXED_NOREPLACE: never over anything mapped). 0 with *why when there
// is no room. Context: control plane.
uintptr_t map_near(uintptr_t lo, uintptr_t hi, size_t size, int prot, std::string* why);

// One byte of code (its page made writable by the caller). An instruction
// fetch sees the old byte or the new one. In asm so that no sanitizer
// instruments it (TSan has no writable shadow for code).
// Context: control plane, the caller's patch lock held.
inline void poke(uintptr_t at, uint8_t b) {
  asm volatile("movb %1, %0" : "=m"(*reinterpret_cast<uint8_t*>(at)) : "q"(b) : "memory");
}

// Every thread of the process executes a serializing instruction before
// this returns (the user-space analogue of text_poke_sync()). The method is
// chosen once, at the first call: "membarrier-sync-core",
// "membarrier-expedited" or "mprotect-ipi" (see text.cc).
// Context: control plane; a system call.
void sync_cores();
const char* sync_method();
uint64_t sync_count();

// The sweep. A fixup looks at a thread's interrupted context and, when its
// rip is strictly inside an instruction window some patcher is about to
// overwrite, moves it to the equivalent point outside (returns true). It
// runs in the sweep's signal handler, so it must be async-signal-safe, and
// it may run late (a signal delivered after its sweep ended), so moving a
// thread must be correct at any time, not only during its own sweep.
// Registered once per patcher, never removed (at most 4). `dry`: only say
// whether the thread would be moved (neither move it nor count it): the
// sweep asks so of a thread blocked in the kernel, which it then need not
// signal (see sweep_threads).
using SweepFixup = bool (*)(ucontext_t* uc, bool dry);
void add_sweep_fixup(SweepFixup fixup);
// The sweep's signal, SIGRTMAX-3 (a real-time one, so that it queues).
// Threads that block every signal must leave this one open, or a sweep
// waits for them in vain (3 s, then the patch fails).
int sweep_signal();
// Every other thread of the process runs every fixup once, in its signal
// handler; except a thread that is not on a CPU (blocked in a system call,
// or preempted) at an address no fixup would move: a signal would make its
// nanosleep, poll or read return EINTR (a handler ran), which the program
// did not ask for, and it cannot be inside a window (it is at an address
// outside all of them, and no thread enters a window but at its first
// byte, which is int3 by then). Sweeps are serialized (one at a time in the process). false and
// *why when some thread did not answer within 3 s.
// Context: control plane; signals, sleeps.
bool sweep_threads(std::string* why);
// Threads the fixups moved, over the process's life.
uint64_t sweep_moves();

}  // namespace usrtrace::patch
