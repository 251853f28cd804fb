// The 5-byte detour of the patch engine (detour.cc), for patch.cc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace usrtrace::patch::detail {

inline constexpr int kMaxWindowInsns = 8;
inline constexpr size_t kDetourSlotSize = 160;

// How one instruction of the window runs from the copy (relocate()).
enum class Reloc : uint8_t {
  kCopy,     // as it is
  kRipRel,   // a rip-relative memory operand: its displacement re-encoded
  kJcc,      // a conditional branch (rel8 or rel32): jcc rel32 to the same target
  kJmp,      // jmp rel8/rel32: jmp rel32 to the same target
  kCall,     // call rel32 (the window's last instruction only): the original
             // return address pushed, then jmp rel32: the callee returns to
             // the original code, and no slot address is ever on the stack
  kCallInd,  // call *r/m (the window's last instruction only, no rsp in the
             // operand): the original return address pushed, then the jmp
             // form of the same operand (ff /4), rip-relative re-encoded
};

// One detoured site. Allocated once and never freed: a thread may be in its
// slot after the site is gone. The first two fields are read by the common
// stub's assembly: their offsets are fixed.
struct Detour {
  uintptr_t addr = 0;   // offset 0: the probed address (Regs::ip)
  uintptr_t copy = 0;   // offset 8: the relocated window, where the stub returns
  uintptr_t win = 0;    // the window's first byte: addr, or addr + 4 past an endbr64
  uintptr_t entry = 0;  // the slot's first byte, the jump's target
  uintptr_t xol = 0;    // the int3 path's copy of the first instruction
  uint8_t xol_len = 0;  // its length
  uint8_t len = 0;      // the window's bytes (>= 5)
  bool nop = false;     // the window is one nop: nothing to run out of line
  int ninsn = 0;
  uint8_t from[kMaxWindowInsns] = {};  // each instruction's offset in the window
  uint8_t to[kMaxWindowInsns] = {};    // and in the copy
  uint8_t ilen[kMaxWindowInsns] = {};
  Reloc reloc[kMaxWindowInsns] = {};
  uint8_t disp_off[kMaxWindowInsns] = {};   // kRipRel: where the displacement is
  uint8_t cc[kMaxWindowInsns] = {};         // kJcc: the condition (low nibble of the opcode)
  uint8_t modrm_off[kMaxWindowInsns] = {};  // kCallInd: where the ModRM byte is
  uintptr_t target[kMaxWindowInsns] = {};   // kRipRel, kJcc, kJmp, kCall: the absolute address
  uint8_t orig[24] = {};                    // the window's bytes (len <= 4 + 15)
  // A punned jump (plan_pun): the window is the first instruction alone,
  // len < 5, and the jump's rel32 ends in the 5 - len bytes after it, which
  // stay as they are. span(): the bytes the jump covers, which no other
  // site may change.
  bool pun = false;
  // The site at `win` in the patcher's published table (patch.cc's Site),
  // or nullptr: set by each publish, so that a hit finds its handlers
  // without a search. Written with std::atomic_ref (release), read with
  // __atomic_load_n (acquire) through the hit's const Detour*.
  const void* live = nullptr;
  uint8_t span() const { return pun ? uint8_t{5} : len; }
};
static_assert(offsetof(Detour, addr) == 0 && offsetof(Detour, copy) == 8);

// Whether the CPU and OS allow the slots' xsave (and the detour was not
// turned off: USRTRACE_PROBE_INT3=1 keeps every site on int3).
bool detour_supported();
// The window at `win` (its instructions, relocatable, no jump target of the
// function strictly inside it). Multi-instruction windows need the function's
// bounds (fn_size != 0) and a function whose jumps are all known (no indirect
// jmp through a register, every byte decodable). 0, or -errno with *why.
// `code`: the original bytes of the function (or of the window, at least 19
// bytes from win, when the bounds are unknown), with any other probe's bytes
// in it put back: plan_detour reads nothing else.
struct Code {
  uintptr_t base;
  const uint8_t* bytes;
  size_t size;
};
int plan_detour(uintptr_t win, uintptr_t fn_start, size_t fn_size, const Code& code, Detour* d,
                std::string* why);
// Instruction punning (E9Patch, PLDI'20): where no 5-byte window can be
// taken (a jump of the function lands inside it, its jumps are not all
// known, it is shorter than 5 bytes), the first instruction alone (len
// < 5) is displaced, and the jmp written over it takes its rel32's high
// 5 - len bytes from the code after it, unchanged: a jump to those bytes
// still finds them, whatever the function does, and nothing past the
// instruction is ever written. The slot must then be where such a rel32
// points: [*lo, *hi] (pun_range). 0, or -errno with *why.
int plan_pun(uintptr_t win, const Code& code, Detour* d, std::string* why);
// The addresses a punned jump at d->win can reach with the code's own bytes
// after the instruction (`after`, 5 - d->len of them) as its rel32's high
// bytes. false when none is a canonical user address.
bool pun_range(const Detour* d, const uint8_t* after, uintptr_t* lo, uintptr_t* hi);
// Whether the bytes at p are endbr64 (f3 0f 1e fa).
bool is_endbr64(uintptr_t p);
// One instruction, decoded at `from`, re-encoded to run at `to` into out
// (room bytes). Returns its length there, or 0 and *why when it cannot run
// out of line: a relative branch with no rel32 form (loop, jrcxz), xbegin,
// a call that is not `last`, an indirect call, a rip-relative operand out of
// reach. Context: control plane.
size_t relocate(uintptr_t from, uintptr_t to, bool last, uint8_t* out, size_t room, std::string* why);
// Writes the slot at `slot` (room bytes): entry stub and relocated window.
// `df_clear`: the site is a function's entry, where the ABI has the
// direction flag clear, so the slot saves the flags with lahf/seto (a
// pushfq costs four times as much here) and Regs::flags shows the
// arithmetic ones, IF and bit 1 alone.
int build_slot(Detour* d, uintptr_t slot, size_t room, bool df_clear, std::string* why);
// One write of code, `n` bytes at `at`: the arming's steps write many at
// once (patch.cc's poke_many: the pages of a run of writes are made
// writable once). `rc`: 0, or -errno when it could not be written.
struct CodeWrite {
  uintptr_t at = 0;
  uint8_t n = 0;
  uint8_t b[24] = {};
  int rc = 0;
};
using PokeMany = void (*)(CodeWrite* w, size_t n);
// With byte 0 of each window already int3: one sweep for all of them, then
// the jumps ([B] [C] [D], each step once for the whole batch). ok[i]: false
// when ds[i] was left on int3 (its bytes after the first may have changed:
// the caller puts them back).
void arm_detours(Detour* const* ds, size_t n, bool* ok, PokeMany poke);
// Back to int3 over the original bytes after byte 0.
void disarm_detour(const Detour* d, int (*poke)(uintptr_t, const uint8_t*, size_t));

}  // namespace usrtrace::patch::detail
