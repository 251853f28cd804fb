// The 5-byte detour of the patch engine (detour.cc), for patch.cc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace usrtrace::patch::detail {

inline constexpr int kMaxWindowInsns = 8;
inline constexpr size_t kDetourSlotSize = 160;

// One detoured site. Allocated once and never freed: a thread may be in its
// slot after the site is gone. The first two fields are read by the common
// stub's assembly: their offsets are fixed.
struct Detour {
  uintptr_t addr = 0;   // offset 0: the site
  uintptr_t copy = 0;   // offset 8: the relocated window, where the stub returns
  uintptr_t entry = 0;  // the slot's first byte, the jump's target
  uintptr_t xol = 0;    // the int3 path's copy of the first instruction
  uint8_t xol_len = 0;  // its length
  uint8_t len = 0;      // the window's bytes (>= 5)
  int ninsn = 0;
  uint8_t from[kMaxWindowInsns] = {};  // each instruction's offset in the window
  uint8_t to[kMaxWindowInsns] = {};    // and in the copy
  uint8_t ilen[kMaxWindowInsns] = {};
  bool rip_rel[kMaxWindowInsns] = {};
  uint8_t disp_off[kMaxWindowInsns] = {};
  int64_t disp[kMaxWindowInsns] = {};
  uint8_t orig[16] = {};
};
static_assert(offsetof(Detour, addr) == 0 && offsetof(Detour, copy) == 8);

// Whether the CPU and OS allow the slots' xsave (and the detour was not
// turned off: USRTRACE_PROBE_INT3=1 keeps every site on int3).
bool detour_supported();
// The window at addr (its instructions, relocatable, no jump target of the
// function inside it). 0, or -errno with *why.
int plan_detour(uintptr_t addr, uintptr_t fn_start, size_t fn_size, Detour* d, std::string* why);
// Writes the slot at `slot` (room bytes): entry stub and relocated window.
int build_slot(Detour* d, uintptr_t slot, size_t room, std::string* why);
// With byte 0 already int3: the sweep, then the jump. false: left on int3.
bool arm_detour(Detour* d, int (*poke)(uintptr_t, const uint8_t*, size_t));
// Back to int3 over the original bytes after byte 0.
void disarm_detour(const Detour* d, int (*poke)(uintptr_t, const uint8_t*, size_t));

}  // namespace usrtrace::patch::detail
