// The registers of a thread at a probed instruction, as the patch engine's
// out-of-line slot (or its int3 handler) saved them, for the probe's
// handler and its fetch programs (src/probe). The layout is the kernel's
// x86-64 struct pt_regs, so that `%REG` names and offsets read as in
// Documentation/trace/uprobetracer.rst; the fields the kernel has and user
// space does not (orig_ax, cs, ss) are kept, zero, so that the order holds.
#pragma once
#include <cstdint>

namespace usrtrace::patch {

struct Regs {
  uint64_t r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di;
  uint64_t orig_ax;  // 0
  uint64_t ip;       // the probed instruction's address (a return probe: the function's)
  uint64_t cs;       // 0
  uint64_t flags;
  uint64_t sp;  // %rsp at the probed instruction, before the slot touched the stack
  uint64_t ss;  // 0
};
static_assert(sizeof(Regs) == 21 * 8);

// A probe's handler: runs on the thread that hit the site, with the
// registers it had there. It must not change them, block, allocate or make
// a system call. `cookie` is what the probe was added with.
using Handler = void (*)(const Regs* regs, void* cookie);

}  // namespace usrtrace::patch
