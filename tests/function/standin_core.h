// A test-only stand-in for the function core (src/function/core.cc): the
// entry points the trampoline and the interposers call, with a plain
// per-thread shadow stack and counters, so that the patcher, the trampoline
// and the return hook are tested on their own.
#pragma once

#include <cstdint>

namespace standin {

// When true, patched_entry() redirects returns through the return hook.
void set_redirect(bool on);
// Entries of `fn` seen by patched_entry (all threads). Only functions
// passed to watch() are counted (at most 16).
void watch(uint64_t fn);
uint64_t entries(uint64_t fn);
uint64_t exits(uint64_t fn);    // returns through the hook
uint64_t pruned();              // frames dropped by longjmp / unwind
uint64_t unhooks();             // shadow_unhook_all() calls
uint64_t rehooks();             // shadow_rehook() calls
uint64_t objects_changed_calls();
int depth();                    // this thread's shadow stack depth
uint64_t last_parent();         // parent of the last watched entry (any thread)
uint64_t last_rehook_sp();
void reset();

}  // namespace standin
