// The code patcher: a probe at any instruction boundary of the process's
// code (docs/design/patch-engine.md). Every site is first armed with
// `int3`, as the kernel's uprobes are, but the trap is handled in the
// process: its SIGTRAP handler runs the probe's handlers and then the
// displaced instruction out of line (a copy in a slot near the object,
// rip-relative operands relocated with Zydis), or emulates it (call, jmp).
// Where the first instructions cover 5 bytes, can all run out of line and
// hold no jump target, the site then becomes a `jmp` to a slot that calls
// the handlers without a trap (detour.cc): tens of nanoseconds, not a
// signal's microseconds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "patch/regs.h"

namespace usrtrace::patch {

// How a site is armed (docs/design/patch-engine.md): kDetour, a jmp to the
// site's slot that runs the handlers and then the displaced instructions;
// kNop, the same over a nop of 5 bytes or more (nothing displaced runs);
// kPun, a punned jump (E9Patch's instruction punning): where no 5-byte
// window can be taken (a jump target inside it, a jump table in the
// function, a function under 5 bytes), the first instruction alone
// becomes a jmp whose rel32 ends in the unchanged bytes after it, to a slot
// at the address those bytes choose; kInt3, the trap, where neither can be
// (no free page there, an instruction that cannot run out of line), or
// while a detour is being armed.
// method_name(): "nop", "detour", "pun", "int3".
enum class Method : uint8_t { kNop, kDetour, kPun, kInt3 };
const char* method_name(Method m);

// A probe at `addr`, an instruction boundary in the process's executable
// code (the caller's promise: a symbol and an offset the user gave; with
// fn_start/fn_size known, addr is also checked by decoding from fn_start).
// Several (handler, cookie) pairs may share one address; the site is armed
// while it has one. 0, or -errno with *err a one-line reason (an
// instruction this cannot run out of line, a bad boundary, no memory near
// the object for its slot).
// Context: control plane (the engine's lock; mprotect).
int add(uintptr_t addr, uintptr_t fn_start, size_t fn_size, Handler h, void* cookie, Method* how,
        std::string* err);
// Many probes at once, as add() each, with every step of the arming done
// once for the whole batch (one publish, one int3 pass, one sweep, one
// pass per jump step, the pages of neighbouring sites made writable
// together): the function tracers arm tens of thousands of entries so.
// One Outcome per request, in order. Context: control plane.
struct Request {
  uintptr_t addr;
  uintptr_t fn_start;
  size_t fn_size;
  Handler h;
  void* cookie;
  // A jump or nothing: a site that cannot be a jump (detour, nop, pun) is
  // refused (-EOPNOTSUPP, err: why) instead of staying on int3, whose trap
  // costs microseconds and needs our SIGTRAP handler for as long as the
  // site lives (the function tracers' choice, as uftrace and kprobes
  // refuse such sites).
  bool jump_only = false;
};
struct Outcome {
  int rc = 0;  // 0, or -errno with err
  Method how = Method::kInt3;
  std::string err;
  std::string why;  // how == kInt3: why not a jump (a jump target in the window, ...)
};
std::vector<Outcome> add_many(const std::vector<Request>& reqs);
// Removes the pair; the last one disarms the site (its first byte back).
// Returns once no handler of the pair can still run. `code_gone`: the
// site's object was unloaded (dlclose), so nothing is written there (the
// address may hold another object's code by now). Context: control plane.
int remove(uintptr_t addr, Handler h, void* cookie, bool code_gone = false);
// Many removals at once, as remove() each (pairs not found are skipped),
// each step of the disarming once for the batch. Context: control plane.
struct Removal {
  uintptr_t addr;
  Handler h;
  void* cookie;
};
void remove_many(const std::vector<Removal>& rs, bool code_gone = false);

// Calls `hook` each time the dynamic loader changed the link map (dlopen,
// dlclose), on the thread that changed it, before dlopen returns: the
// loader's r_debug.r_brk, the function debuggers break on, is trapped
// (int3), and `hook` runs in that SIGTRAP handler, where the thread is in
// the loader and holds none of ours nor malloc's locks. _r_debug.r_state
// says which (RT_CONSISTENT: done). Once per process; 0 or -ENOTSUP with
// *err (no loader: a static program). Context: control plane.
int watch_loads(void (*hook)(), std::string* err);

// Return probes. From a Handler at a function's entry (regs->sp points at
// the return address): the return address is replaced with the engine's
// return trampoline and kept, with the function and its six argument
// registers, on a per-thread stack of kReturnDepth entries. On return,
// `ret` runs with the registers there (ax = the return value, ip = the
// original return address, sp = after the return), then the thread goes
// on at the original return address. false (nothing changed) when the
// thread's stack is full: the caller counts a miss.
// Context: a Handler.
inline constexpr int kReturnDepth = 16;
using RetHandler = void (*)(const Regs* at_return, void* cookie, uint64_t func, const uint64_t entry_args[6]);
bool hook_return(const Regs* at_entry, RetHandler ret, void* cookie);
// Puts back every return address this thread's hooks replaced (an
// exception is about to unwind through them: the unwinder must see the
// real callers). The entries stay, until rehook_returns(). Context: the
// thread itself (the unwind interposers, src/function/interpose.cc).
void unhook_returns();
// An exception was caught by the frame whose stack pointer is `sp`: the
// entries of frames below it (gone) are dropped, those above it (still
// live) hook their returns again, so their `ret` runs. Context: the thread
// itself (__cxa_begin_catch's interposer).
void rehook_returns(uint64_t sp);

// The sites whose code is no longer what the engine wrote there: their
// object was unloaded (the address is in no loaded object now), or
// unloaded and another (or the same) loaded there since (the first byte
// is not the int3 or jmp armed there). The caller removes them with
// code_gone. Context: control plane.
std::vector<uintptr_t> stale_sites();

struct SiteInfo {
  uintptr_t addr;
  Method method;
  size_t handlers;
  uint64_t hits;  // times the handlers ran since the site was armed
};
std::vector<SiteInfo> sites();

}  // namespace usrtrace::patch
