// The patcher's internals (patch.cc), for the tests and the trampoline. See
// docs/design/function-patching.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// The trampoline and the return hook (trampoline.cc). Hidden: never exported
// from libusrtrace.so. Neither is a C function: only their addresses are used.
extern "C" void usrtrace_function_trampoline();
extern "C" void usrtrace_function_return_hook();
extern "C" void usrtrace_function_full_return_hook();

namespace usrtrace::function::patch::internal {

// Length of the x86-64 nop instruction at p (at most `avail` bytes read), or
// 0 when the bytes are not a nop this decoder knows: 0x90 (with 0x66
// prefixes), and `0f 1f /0` (nop Ev, any ModRM/SIB/displacement) with
// 0x66 / segment-override / REX prefixes.
size_t nop_length(const uint8_t* p, size_t avail);

// How wide the trampoline and the return hook save vector registers 0-7
// (trampoline.cc): 0 xmm, 1 ymm, 2 zmm. Detected at load; tests set each
// mode this CPU can run (not while other threads pass through patched
// entries).
uint8_t detect_vector_mode();
uint8_t vector_mode();
void set_vector_mode(uint8_t mode);

// How the patchable bytes at a function's entry look.
struct SiteShape {
  uint8_t len = 0;            // L: the nops at the entry, up to the first instruction
                              // boundary at or after 5 bytes (5 <= L <= kMaxSiteLen);
                              // 0 when the site cannot be patched
  uint8_t insns = 0;          // how many instructions make up those L bytes
  const char* why = nullptr;  // why not, when len == 0
};
inline constexpr size_t kMaxSiteLen = 15;
SiteShape classify(const uint8_t* p, size_t avail);

// The 5-byte nop a site goes back to when it was not one already (gcc's five
// single-byte nops): one instruction, so that later flips are atomic.
inline constexpr uint8_t kNop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};

// Counters, for tests and the design document's claims.
struct Stats {
  uint64_t traps;           // int3 hits our SIGTRAP handler moved past a site
  uint64_t sweeps;          // thread sweeps (first arming of multi-nop sites)
  uint64_t sweep_moves;     // threads a sweep found inside a site and moved
  uint64_t syncs;           // core syncs
  uint64_t batches;         // apply() calls that changed at least one site
  const char* sync_method;  // "membarrier-sync-core", "membarrier-expedited", "mprotect-ipi"
};
Stats stats();

// Sites that discovery refused, with the reason (not nops, outside the
// object's code, ...), for the objects seen so far.
struct Refused {
  uint64_t addr;
  std::string object;
  std::string why;
};
std::vector<Refused> refused_sites();

// The bytes at a function's patchable entry (its first `n` bytes), read
// under the patch lock so that they are never seen mid-patch.
std::vector<uint8_t> read_site(uint64_t fn, size_t n);

// The stub a site's call goes to, for a function of a known object (0 if
// none allocated yet).
uint64_t stub_for(uint64_t fn);

}  // namespace usrtrace::function::patch::internal

// ---- The signal side (patch_signals.cc), for patch.cc.
namespace usrtrace::function::patch::detail {

// A site as the signal handlers know it: its entry and its length.
struct HandlerSite {
  uint64_t fn;
  uint64_t len;
};
// The sweep's signal (a real-time one, so that it queues): SIGRTMAX-3.
int sweep_signal_number();
// Installs the SIGTRAP and sweep handlers (keeping the previous actions,
// which get what is not ours) and picks the core-sync method. Once, under
// the patch lock.
void install_signal_handlers();
// Publishes the sites (sorted by fn) the handlers look up; the old table is
// freed once no handler uses it. Under the patch lock.
void publish_handler_sites(const std::vector<HandlerSite>& sites);
// Every thread of the process executes a serializing instruction before
// this returns (the user-space analogue of text_poke_sync()).
void sync_cores();
// [B]: every other thread runs the sweep handler once. Returns false (and
// *why) when some thread did not answer in time.
bool sweep_threads(std::string* why);

struct SignalStats {
  uint64_t traps, sweep_moves, syncs;
  const char* sync_method;
};
SignalStats signal_stats();

}  // namespace usrtrace::function::patch::detail
