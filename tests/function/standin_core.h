// A test-only stand-in for the function core (src/function/core.cc): the
// entry points the trampoline and the interposers call, with a plain
// per-thread shadow stack and counters, so that the patcher, the trampoline
// and the return hook are tested on their own.
#pragma once

#include <cstdint>

namespace standin {

// When true, patched_entry() redirects returns through the return hook.
void set_redirect(bool on);
// When true, patched_entry() and patched_return() overwrite every vector
// register a call may clobber, as glibc's AVX2 string functions do (they
// end in vzeroupper, which zeroes the upper halves of ymm0-15 / zmm0-15):
// all of zmm0-15 where the CPU has AVX-512, ymm0-15 then vzeroupper where
// it has AVX, xmm0-15 otherwise. What the trampoline does not save is then
// lost, whatever the real core happens to call.
void set_clobber(bool on);
// Calls of patched_entry() / patched_return() made with the stack not
// 16-aligned, as the ABI wants it at every call (their frame address,
// rsp at the call - 16, tells).
uint64_t misaligned_calls();
// Entries of `fn` seen by patched_entry (all threads). Only functions
// passed to watch() are counted (at most 16).
void watch(uint64_t fn);
uint64_t entries(uint64_t fn);
uint64_t exits(uint64_t fn);  // returns through the hook
uint64_t pruned();            // frames dropped by longjmp / unwind
uint64_t unhooks();           // shadow_unhook_all() calls
uint64_t rehooks();           // shadow_rehook() calls
uint64_t objects_changed_calls();
int depth();             // this thread's shadow stack depth
uint64_t last_parent();  // parent of the last watched entry (any thread)
uint64_t last_rehook_sp();
void reset();

}  // namespace standin
