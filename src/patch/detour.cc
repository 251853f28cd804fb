// The 5-byte detour (docs/design/patch-engine.md, "The detour"): a site
// whose first instructions cover at least 5 bytes, can all run out of line,
// and contain no jump target of their function, gets `jmp rel32` to a
// per-site slot instead of staying on int3:
//
//   slot:  lea -128(%rsp),%rsp          the red zone (a mid-function site may
//                                       have live data below rsp)
//          lea -8(%rsp),%rsp; mov %rax,-8(%rsp); movabs $D,%rax;
//          mov %rax,(%rsp); mov -8(%rsp),%rax          [rsp] = the Detour
//          call *common(%rip)
//          lea 136(%rsp),%rsp           the Detour and the red zone
//   copy:  the window's instructions, relocated; jmp *0(%rip); .quad addr+len
//   common: .quad usrtrace_patch_detour_common[_entry]
//   (no `xchg` with memory: it is locked, a third of the stub's cost; the
//   kernel puts a signal frame below the red zone, so -8(%rsp) is safe;
//   `lea` and `mov` leave the flags as the site had them. A `call` paired
//   with common's `ret`, not a jmp there and a `ret $128` to the copy: an
//   unpaired ret is mispredicted, and so is every ret of the thread after
//   it, its return stack being one off: 20 ns of a hit, bench/README.md)
//
//   common (usrtrace_patch_detour_common, below): saves every general
//   register and the flags into a Regs (pt_regs order), the vector state
//   with xsave, calls usrtrace_patch_detour_hit(regs, D), restores, and
//   returns to the stub, which runs the copy with the stack exactly as at
//   the site again. usrtrace_patch_detour_common_entry, for a site at a
//   function's entry, differs in the flags alone (lahf/seto, no pushfq).
//
// Arming (text_poke_bp's order; the site is already armed with int3, whose
// handler runs the probe and the first instruction out of line):
//   [A] int3 at byte 0 (done by patch.cc), cores synced;
//   [B] the sweep: every other thread runs a signal handler that moves it,
//       if it is stopped strictly inside the window, to the same
//       instruction in the copy (threads that enter now trap on the int3);
//   [C] bytes 1..4 := the jump's offset, bytes 5..len-1 := int3 (never
//       executed: the jump covers them), cores synced;
//   [D] byte 0 := 0xE9, cores synced.
// A thread that does not answer the sweep in time (a blocked signal) keeps
// the site on int3: correct, only slower. Disarming goes back to int3 with
// the original bytes 1..len-1 under it ([A]', [C]') and patch.cc restores
// byte 0; no sweep is needed, since no thread runs the window's bytes
// while the jump is there (those inside the copy finish there).
#include <Zydis/Zydis.h>
#include <cpuid.h>
#include <signal.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "patch/detour.h"
#include "patch/text.h"

// The common part, shared by every slot. Its stack on entry: [rsp] = the
// return address into the stub, [rsp + 8] = the Detour*, then the 128 bytes
// skipped, then the site's stack.
//
// The flags are the site's until they are saved and again from their
// restore on: a mid-function site may sit between a `cmp` and its `jcc`, so
// the stack moves around them are `lea`, never `sub`/`add`. The restore is
// `popfq` (tens of cycles) only for flags other than the arithmetic ones,
// IF and bit 1 (a DF set by `std`, say); else OF by an `add` that
// overflows exactly when it was set (1 + 0x7f), then the others by `sahf`,
// which leaves OF alone.
//
// The save: at a function's entry (the _entry variant) the ABI has DF
// clear, and nothing here changes IF, TF or AC, so the arithmetic flags are
// all there is to keep: `lahf` and `seto`, a quarter of a `pushfq` here.
// Elsewhere `pushfq` keeps them all, and `cld` gives the handlers the DF
// clear that their C code assumes (a site inside a std..cld region: the
// restore's popfq sets it again).
asm(R"(
  .text
  .macro usrtrace_save_gprs
  lea -168(%rsp), %rsp
  mov %r15, 0(%rsp)
  mov %r14, 8(%rsp)
  mov %r13, 16(%rsp)
  mov %r12, 24(%rsp)
  mov %rbp, 32(%rsp)
  mov %rbx, 40(%rsp)
  mov %r11, 48(%rsp)
  mov %r10, 56(%rsp)
  mov %r9, 64(%rsp)
  mov %r8, 72(%rsp)
  mov %rax, 80(%rsp)
  mov %rcx, 88(%rsp)
  mov %rdx, 96(%rsp)
  mov %rsi, 104(%rsp)
  mov %rdi, 112(%rsp)
  .endm

  .p2align 4
  .globl usrtrace_patch_detour_common_entry
  .hidden usrtrace_patch_detour_common_entry
  .type usrtrace_patch_detour_common_entry, @function
usrtrace_patch_detour_common_entry:
  usrtrace_save_gprs
  lahf
  seto %al
  movzbl %al, %ecx
  shl $11, %ecx
  movzbl %ah, %eax
  or %ecx, %eax
  or $0x200, %eax
  mov %rax, 144(%rsp)
  jmp 1f
  .size usrtrace_patch_detour_common_entry, . - usrtrace_patch_detour_common_entry

  .p2align 4
  .globl usrtrace_patch_detour_common
  .hidden usrtrace_patch_detour_common
  .type usrtrace_patch_detour_common, @function
usrtrace_patch_detour_common:
  usrtrace_save_gprs
  pushfq
  popq 144(%rsp)
  cld
1:
  movq $0, 120(%rsp)
  movq $0, 136(%rsp)
  movq $0, 160(%rsp)
  lea 312(%rsp), %rax
  mov %rax, 152(%rsp)
  mov 176(%rsp), %rsi
  mov (%rsi), %rax
  mov %rax, 128(%rsp)
  mov %rsp, %rbx
  mov usrtrace_patch_xsave_size(%rip), %rax
  sub %rax, %rsp
  and $-64, %rsp
  mov usrtrace_patch_vec_mode(%rip), %eax
  cmp $1, %eax
  je 2f
  ja 3f
  movdqu %xmm0, 0(%rsp)
  movdqu %xmm1, 16(%rsp)
  movdqu %xmm2, 32(%rsp)
  movdqu %xmm3, 48(%rsp)
  movdqu %xmm4, 64(%rsp)
  movdqu %xmm5, 80(%rsp)
  movdqu %xmm6, 96(%rsp)
  movdqu %xmm7, 112(%rsp)
  movdqu %xmm8, 128(%rsp)
  movdqu %xmm9, 144(%rsp)
  movdqu %xmm10, 160(%rsp)
  movdqu %xmm11, 176(%rsp)
  movdqu %xmm12, 192(%rsp)
  movdqu %xmm13, 208(%rsp)
  movdqu %xmm14, 224(%rsp)
  movdqu %xmm15, 240(%rsp)
  jmp 4f
2:
  vmovdqu %ymm0, 0(%rsp)
  vmovdqu %ymm1, 32(%rsp)
  vmovdqu %ymm2, 64(%rsp)
  vmovdqu %ymm3, 96(%rsp)
  vmovdqu %ymm4, 128(%rsp)
  vmovdqu %ymm5, 160(%rsp)
  vmovdqu %ymm6, 192(%rsp)
  vmovdqu %ymm7, 224(%rsp)
  vmovdqu %ymm8, 256(%rsp)
  vmovdqu %ymm9, 288(%rsp)
  vmovdqu %ymm10, 320(%rsp)
  vmovdqu %ymm11, 352(%rsp)
  vmovdqu %ymm12, 384(%rsp)
  vmovdqu %ymm13, 416(%rsp)
  vmovdqu %ymm14, 448(%rsp)
  vmovdqu %ymm15, 480(%rsp)
  vzeroupper
  jmp 4f
3:
  cmp $2, %eax
  jne 13f
  vmovdqu64 %zmm0, 0(%rsp)
  vmovdqu64 %zmm1, 64(%rsp)
  vmovdqu64 %zmm2, 128(%rsp)
  vmovdqu64 %zmm3, 192(%rsp)
  vmovdqu64 %zmm4, 256(%rsp)
  vmovdqu64 %zmm5, 320(%rsp)
  vmovdqu64 %zmm6, 384(%rsp)
  vmovdqu64 %zmm7, 448(%rsp)
  vmovdqu64 %zmm8, 512(%rsp)
  vmovdqu64 %zmm9, 576(%rsp)
  vmovdqu64 %zmm10, 640(%rsp)
  vmovdqu64 %zmm11, 704(%rsp)
  vmovdqu64 %zmm12, 768(%rsp)
  vmovdqu64 %zmm13, 832(%rsp)
  vmovdqu64 %zmm14, 896(%rsp)
  vmovdqu64 %zmm15, 960(%rsp)
  vmovdqu64 %zmm16, 1024(%rsp)
  vmovdqu64 %zmm17, 1088(%rsp)
  vmovdqu64 %zmm18, 1152(%rsp)
  vmovdqu64 %zmm19, 1216(%rsp)
  vmovdqu64 %zmm20, 1280(%rsp)
  vmovdqu64 %zmm21, 1344(%rsp)
  vmovdqu64 %zmm22, 1408(%rsp)
  vmovdqu64 %zmm23, 1472(%rsp)
  vmovdqu64 %zmm24, 1536(%rsp)
  vmovdqu64 %zmm25, 1600(%rsp)
  vmovdqu64 %zmm26, 1664(%rsp)
  vmovdqu64 %zmm27, 1728(%rsp)
  vmovdqu64 %zmm28, 1792(%rsp)
  vmovdqu64 %zmm29, 1856(%rsp)
  vmovdqu64 %zmm30, 1920(%rsp)
  vmovdqu64 %zmm31, 1984(%rsp)
  kmovq %k0, 2048(%rsp)
  kmovq %k1, 2056(%rsp)
  kmovq %k2, 2064(%rsp)
  kmovq %k3, 2072(%rsp)
  kmovq %k4, 2080(%rsp)
  kmovq %k5, 2088(%rsp)
  kmovq %k6, 2096(%rsp)
  kmovq %k7, 2104(%rsp)
  vzeroupper
  jmp 4f
13:
  movq $0, 512(%rsp)
  movq $0, 520(%rsp)
  movq $0, 528(%rsp)
  movq $0, 536(%rsp)
  movq $0, 544(%rsp)
  movq $0, 552(%rsp)
  movq $0, 560(%rsp)
  movq $0, 568(%rsp)
  mov usrtrace_patch_xsave_mask(%rip), %eax
  xor %edx, %edx
  xsave64 (%rsp)
4:
  mov %rbx, %rdi
  call usrtrace_patch_detour_hit
  mov usrtrace_patch_vec_mode(%rip), %eax
  cmp $1, %eax
  je 5f
  ja 6f
  movdqu 0(%rsp), %xmm0
  movdqu 16(%rsp), %xmm1
  movdqu 32(%rsp), %xmm2
  movdqu 48(%rsp), %xmm3
  movdqu 64(%rsp), %xmm4
  movdqu 80(%rsp), %xmm5
  movdqu 96(%rsp), %xmm6
  movdqu 112(%rsp), %xmm7
  movdqu 128(%rsp), %xmm8
  movdqu 144(%rsp), %xmm9
  movdqu 160(%rsp), %xmm10
  movdqu 176(%rsp), %xmm11
  movdqu 192(%rsp), %xmm12
  movdqu 208(%rsp), %xmm13
  movdqu 224(%rsp), %xmm14
  movdqu 240(%rsp), %xmm15
  jmp 7f
5:
  vmovdqu 0(%rsp), %ymm0
  vmovdqu 32(%rsp), %ymm1
  vmovdqu 64(%rsp), %ymm2
  vmovdqu 96(%rsp), %ymm3
  vmovdqu 128(%rsp), %ymm4
  vmovdqu 160(%rsp), %ymm5
  vmovdqu 192(%rsp), %ymm6
  vmovdqu 224(%rsp), %ymm7
  vmovdqu 256(%rsp), %ymm8
  vmovdqu 288(%rsp), %ymm9
  vmovdqu 320(%rsp), %ymm10
  vmovdqu 352(%rsp), %ymm11
  vmovdqu 384(%rsp), %ymm12
  vmovdqu 416(%rsp), %ymm13
  vmovdqu 448(%rsp), %ymm14
  vmovdqu 480(%rsp), %ymm15
  jmp 7f
6:
  cmp $2, %eax
  jne 16f
  vmovdqu64 0(%rsp), %zmm0
  vmovdqu64 64(%rsp), %zmm1
  vmovdqu64 128(%rsp), %zmm2
  vmovdqu64 192(%rsp), %zmm3
  vmovdqu64 256(%rsp), %zmm4
  vmovdqu64 320(%rsp), %zmm5
  vmovdqu64 384(%rsp), %zmm6
  vmovdqu64 448(%rsp), %zmm7
  vmovdqu64 512(%rsp), %zmm8
  vmovdqu64 576(%rsp), %zmm9
  vmovdqu64 640(%rsp), %zmm10
  vmovdqu64 704(%rsp), %zmm11
  vmovdqu64 768(%rsp), %zmm12
  vmovdqu64 832(%rsp), %zmm13
  vmovdqu64 896(%rsp), %zmm14
  vmovdqu64 960(%rsp), %zmm15
  vmovdqu64 1024(%rsp), %zmm16
  vmovdqu64 1088(%rsp), %zmm17
  vmovdqu64 1152(%rsp), %zmm18
  vmovdqu64 1216(%rsp), %zmm19
  vmovdqu64 1280(%rsp), %zmm20
  vmovdqu64 1344(%rsp), %zmm21
  vmovdqu64 1408(%rsp), %zmm22
  vmovdqu64 1472(%rsp), %zmm23
  vmovdqu64 1536(%rsp), %zmm24
  vmovdqu64 1600(%rsp), %zmm25
  vmovdqu64 1664(%rsp), %zmm26
  vmovdqu64 1728(%rsp), %zmm27
  vmovdqu64 1792(%rsp), %zmm28
  vmovdqu64 1856(%rsp), %zmm29
  vmovdqu64 1920(%rsp), %zmm30
  vmovdqu64 1984(%rsp), %zmm31
  kmovq 2048(%rsp), %k0
  kmovq 2056(%rsp), %k1
  kmovq 2064(%rsp), %k2
  kmovq 2072(%rsp), %k3
  kmovq 2080(%rsp), %k4
  kmovq 2088(%rsp), %k5
  kmovq 2096(%rsp), %k6
  kmovq 2104(%rsp), %k7
  jmp 7f
16:
  mov usrtrace_patch_xsave_mask(%rip), %eax
  xor %edx, %edx
  xrstor64 (%rsp)
7:
  mov %rbx, %rsp
  mov 144(%rsp), %rax
  mov %rax, %rcx
  and $-2262, %rcx
  cmp $0x202, %rcx
  jne 8f
  mov %eax, %ecx
  shr $11, %ecx
  and $1, %ecx
  add $0x7f, %cl
  mov %al, %ah
  sahf
  jmp 9f
8:
  pushq 144(%rsp)
  popfq
9:
  mov 0(%rsp), %r15
  mov 8(%rsp), %r14
  mov 16(%rsp), %r13
  mov 24(%rsp), %r12
  mov 32(%rsp), %rbp
  mov 40(%rsp), %rbx
  mov 48(%rsp), %r11
  mov 56(%rsp), %r10
  mov 64(%rsp), %r9
  mov 72(%rsp), %r8
  mov 80(%rsp), %rax
  mov 88(%rsp), %rcx
  mov 96(%rsp), %rdx
  mov 104(%rsp), %rsi
  mov 112(%rsp), %rdi
  lea 168(%rsp), %rsp
  ret
  .size usrtrace_patch_detour_common, . - usrtrace_patch_detour_common
)");

extern "C" {
void usrtrace_patch_detour_common();
void usrtrace_patch_detour_common_entry();
// Set once by detour_supported(), before any slot can run.
__attribute__((visibility("hidden"))) uint64_t usrtrace_patch_xsave_size = 0;
__attribute__((visibility("hidden"))) uint32_t usrtrace_patch_xsave_mask = 0;
// What the stub saves of the vector state: 0 xmm0-15 (SSE only), 1 ymm0-15
// (AVX, no AVX-512), 2 zmm0-31 and k0-7 by moves (AVX-512 with BW), 3 all
// of it with xsave (AVX-512 without kmovq). xsave costs 170 ns here once
// zmm16-31 are in use (glibc's evex string functions use them), against
// 18 for the moves (bench/README.md).
__attribute__((visibility("hidden"))) uint32_t usrtrace_patch_vec_mode = 0;
}

namespace usrtrace::patch::detail {
namespace {

// ---- The sweep's fixup (text.h): a thread stopped strictly inside a
// window being armed goes to the same instruction of its copy. The windows
// are those of the last batch (arm_detours), published in g_sweep as two
// sorted arrays, by window and by the int3 path's copy. A late signal (a
// thread that blocked the sweep's signal past its sweep) moves a thread
// into the copy of a window of the last batch armed: correct at any time,
// since copies are never freed and run what the window held.
//
// A set is freed only after a later sweep in which every thread answered:
// the signal is not SA_NODEFER, so each thread's answer to that sweep comes
// after any handler it was running, the one that read the old set included.
struct SweepSet {
  std::vector<const Detour*> by_win;  // sorted by win
  std::vector<const Detour*> by_xol;  // those with an int3 copy, sorted by xol
};
std::atomic<const SweepSet*> g_sweep{nullptr};
std::vector<const SweepSet*> g_sweep_retired;  // under the caller's patch lock

// Context: the sweep's signal handler; async-signal-safe (no allocation:
// binary searches over published arrays).
bool sweep_fixup(ucontext_t* uc, bool dry) {
  // order: acquire pairs with arm_detours' release, made before the sweep's
  // generation is published (text.cc), so a handler answering this sweep
  // sees the set.
  const SweepSet* set = g_sweep.load(std::memory_order_acquire);
  if (set == nullptr) return false;
  const auto rip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  greg_t* ip = &uc->uc_mcontext.gregs[REG_RIP];
  // The last window that starts before rip.
  auto w = std::lower_bound(set->by_win.begin(), set->by_win.end(), rip,
                            [](const Detour* d, uintptr_t a) { return d->win < a; });
  if (w != set->by_win.begin()) {
    const Detour* d = *--w;
    if (rip > d->win && rip < d->win + d->len) {
      for (int i = 0; i < d->ninsn; ++i)
        if (d->win + d->from[i] == rip) {
          const uintptr_t to = d->copy + d->to[i];
          if (!dry) *ip = static_cast<greg_t>(to);
          return true;
        }
    }
  }
  // In the int3 path's copy of a first instruction, whose jump back would
  // land in the window being rewritten: to the same point of the window's
  // copy. The copy at or before rip.
  auto x = std::upper_bound(set->by_xol.begin(), set->by_xol.end(), rip,
                            [](uintptr_t a, const Detour* d) { return a < d->xol; });
  if (x != set->by_xol.begin()) {
    const Detour* d = *--x;
    if (rip == d->xol) {
      if (!dry) *ip = static_cast<greg_t>(d->copy);
      return true;
    }
    if (d->ninsn > 1 && rip == d->xol + d->xol_len) {
      const uintptr_t to = d->copy + d->to[1];
      if (!dry) *ip = static_cast<greg_t>(to);
      return true;
    }
  }
  return false;
}

// One instruction as the copy runs it (relocate(), plan_detour()).
struct Insn {
  uint8_t len = 0;
  Reloc reloc = Reloc::kCopy;
  uint8_t disp_off = 0;
  uint8_t cc = 0;
  uint8_t modrm_off = 0;
  uintptr_t target = 0;
  bool nop = false;
};

ZydisDecoder make_decoder() {
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  return dec;
}

// Decodes the instruction at `at` and says how it runs elsewhere: false and
// *why when it cannot.
// `src` holds the instruction's bytes (the code at `at`, or a copy of it).
bool classify(const ZydisDecoder& dec, uintptr_t at, const uint8_t* src, size_t avail, Insn* out,
              std::string* why) {
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, src, std::min<size_t>(avail, 15), &in, ops))) {
    *why = "the bytes there are not an instruction";
    return false;
  }
  *out = Insn{};
  out->len = in.length;
  out->nop = in.mnemonic == ZYDIS_MNEMONIC_NOP;
  if (in.mnemonic == ZYDIS_MNEMONIC_INT3) {
    *why = "an int3 in the window (a debugger's breakpoint, another tool's probe)";
    return false;
  }
  const bool is_call = in.mnemonic == ZYDIS_MNEMONIC_CALL;
  if (is_call && in.operand_count_visible >= 1 && ops[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE) {
    // call *r/m: emulated as a push of the original return address and
    // jmp *r/m, which is the same instruction with ModRM.reg 4 for 2.
    const ZydisDecodedOperand& op = ops[0];
    const bool uses_rsp = (op.type == ZYDIS_OPERAND_TYPE_REGISTER && op.reg.value == ZYDIS_REGISTER_RSP) ||
                          (op.type == ZYDIS_OPERAND_TYPE_MEMORY &&
                           (op.mem.base == ZYDIS_REGISTER_RSP || op.mem.index == ZYDIS_REGISTER_RSP));
    if (in.opcode_map != ZYDIS_OPCODE_MAP_DEFAULT || in.opcode != 0xff || in.raw.modrm.reg != 2 || uses_rsp) {
      *why = "an indirect call this engine cannot emulate (far, or through rsp)";
      return false;
    }
    out->reloc = Reloc::kCallInd;
    out->modrm_off = in.raw.modrm.offset;
    if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.base == ZYDIS_REGISTER_RIP) {
      if (in.raw.disp.size != 32) {
        *why = "a rip-relative operand without a 32-bit displacement";
        return false;
      }
      out->disp_off = in.raw.disp.offset;
      out->target = at + in.length + static_cast<uintptr_t>(in.raw.disp.value);
    }
    return true;
  }
  for (int i = 0; i < in.operand_count; ++i) {
    const ZydisDecodedOperand& op = ops[i];
    if (op.type == ZYDIS_OPERAND_TYPE_MEMORY && op.mem.base == ZYDIS_REGISTER_RIP) {
      if (is_call) {
        *why = "an indirect call would push the slot's address";
        return false;
      }
      if (in.raw.disp.size != 32) {
        *why = "a rip-relative operand without a 32-bit displacement";
        return false;
      }
      out->reloc = Reloc::kRipRel;
      out->disp_off = in.raw.disp.offset;
      out->target = at + in.length + static_cast<uintptr_t>(in.raw.disp.value);
      return true;
    }
  }
  if (!(in.attributes & ZYDIS_ATTRIB_IS_RELATIVE)) {
    if (is_call) {
      *why = "an indirect call would push the slot's address";
      return false;
    }
    return true;  // kCopy
  }
  ZyanU64 target = 0;
  if (in.operand_count_visible < 1 || ops[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE ||
      ZYAN_FAILED(ZydisCalcAbsoluteAddress(&in, &ops[0], at, &target))) {
    *why = "a relative instruction this engine does not know";
    return false;
  }
  out->target = target;
  const bool short_jcc = in.opcode_map == ZYDIS_OPCODE_MAP_DEFAULT && (in.opcode & 0xf0) == 0x70;
  const bool near_jcc = in.opcode_map == ZYDIS_OPCODE_MAP_0F && (in.opcode & 0xf0) == 0x80;
  if (in.mnemonic == ZYDIS_MNEMONIC_JMP) {
    out->reloc = Reloc::kJmp;
  } else if (is_call) {
    out->reloc = Reloc::kCall;
  } else if (short_jcc || near_jcc) {
    out->reloc = Reloc::kJcc;
    out->cc = in.opcode & 0x0f;
  } else {
    *why = "a branch with no 32-bit form (loop, jrcxz) or xbegin";
    return false;
  }
  return true;
}

bool rel32(uintptr_t target, uintptr_t next, int32_t* out, std::string* why) {
  const int64_t d = static_cast<int64_t>(target) - static_cast<int64_t>(next);
  if (d < INT32_MIN || d > INT32_MAX) {
    *why = "the slot is too far from the instruction's target";
    return false;
  }
  *out = static_cast<int32_t>(d);
  return true;
}

// An emulated call's push of its original return address `ret`, which no
// immediate push can hold: lea -8(%rsp),%rsp; movl $lo,(%rsp);
// movl $hi,4(%rsp) (lea and mov leave the flags alone). kPushRetLen bytes.
constexpr size_t kPushRetLen = 20;
void push_return(uint64_t ret, uint8_t* out) {
  const uint32_t lo = static_cast<uint32_t>(ret), hi = static_cast<uint32_t>(ret >> 32);
  const uint8_t code[kPushRetLen] = {0x48, 0x8d, 0x64, 0x24, 0xf8, 0xc7, 0x04, 0x24, 0, 0,
                                     0,    0,    0xc7, 0x44, 0x24, 0x04, 0,    0,    0, 0};
  std::memcpy(out, code, sizeof code);
  std::memcpy(out + 8, &lo, 4);
  std::memcpy(out + 16, &hi, 4);
}

// Writes `insn` (its bytes at src), decoded at `from`, to run at `to`. Its
// length there, or 0.
size_t emit(const Insn& insn, const uint8_t* src, uintptr_t from, uintptr_t to, bool last, uint8_t* out,
            size_t room, std::string* why) {
  int32_t r = 0;
  switch (insn.reloc) {
    case Reloc::kCopy:
    case Reloc::kRipRel:
      if (room < insn.len) break;
      std::memcpy(out, src, insn.len);
      if (insn.reloc == Reloc::kRipRel) {
        if (!rel32(insn.target, to + insn.len, &r, why)) return 0;
        std::memcpy(out + insn.disp_off, &r, 4);
      }
      return insn.len;
    case Reloc::kJcc:
      if (room < 6 || !rel32(insn.target, to + 6, &r, why)) break;
      out[0] = 0x0f;
      out[1] = static_cast<uint8_t>(0x80 | insn.cc);
      std::memcpy(out + 2, &r, 4);
      return 6;
    case Reloc::kJmp:
      if (room < 5 || !rel32(insn.target, to + 5, &r, why)) break;
      out[0] = 0xe9;
      std::memcpy(out + 1, &r, 4);
      return 5;
    case Reloc::kCallInd:
    case Reloc::kCall: {
      if (!last) {
        *why = "a call before the window's end (its return address would be inside it)";
        return 0;
      }
      // The original return address pushed, then the call as a jump: the
      // callee returns to the code after the window.
      const bool ind = insn.reloc == Reloc::kCallInd;
      const size_t jlen = ind ? insn.len : 5;
      const uintptr_t next = to + kPushRetLen + jlen;
      if (room < kPushRetLen + jlen) break;
      push_return(from + insn.len, out);
      uint8_t* j = out + kPushRetLen;
      if (ind) {
        std::memcpy(j, src, insn.len);
        uint8_t& modrm = j[insn.modrm_off];
        modrm = static_cast<uint8_t>((modrm & ~0x38) | (4 << 3));  // call *r/m (/2) -> jmp *r/m (/4)
        if (insn.disp_off != 0) {
          if (!rel32(insn.target, next, &r, why)) return 0;
          std::memcpy(j + insn.disp_off, &r, 4);
        }
      } else {
        if (!rel32(insn.target, next, &r, why)) return 0;
        j[0] = 0xe9;
        std::memcpy(j + 1, &r, 4);
      }
      return kPushRetLen + jlen;
    }
  }
  if (why->empty()) *why = "no room in the slot";
  return 0;
}

}  // namespace

bool detour_supported() {
  static int ok = -1;
  if (ok >= 0) return ok == 1;
  ok = 0;
  if (getenv("USRTRACE_PROBE_INT3") != nullptr) return false;  // the fallback, forced (bench, tests)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  __cpuid_count(0xd, 0, a, b, c, d);
  if (b < 576) return false;
  // x87, SSE, AVX, AVX-512 (opmask, ZMM_Hi256, Hi16_ZMM): what code may
  // have live across the site; never AMX (its state is the program's to
  // enable, and xsave of it would fault where it is not). The handlers are
  // our code, built for the baseline: x87 state they never touch.
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  usrtrace_patch_xsave_mask = lo & 0xe7;
  if (lo & 0xe0) {
    // AVX-512: zmm0-31 and k0-7 by moves (2 KiB, about 18 ns a hit here)
    // where the OS enables all of its state and the CPU has kmovq
    // (AVX512BW); else xsave, which costs 170 ns here once the program's
    // glibc has used zmm16-31 (its evex memcpy does), the usual case.
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    const bool f = (b7 >> 16) & 1, bw = (b7 >> 30) & 1;
    if ((lo & 0xe6) == 0xe6 && f && bw) {
      usrtrace_patch_vec_mode = 2;
      usrtrace_patch_xsave_size = 32 * 64 + 8 * 8 + 64;
    } else {
      usrtrace_patch_vec_mode = 3;
      usrtrace_patch_xsave_size = b + 64;
    }
  } else {
    usrtrace_patch_vec_mode = (lo & 0x4) ? 1 : 0;
    usrtrace_patch_xsave_size = 512 + 64;
  }
  ok = 1;
  return true;
}

bool is_endbr64(uintptr_t p) {
  static constexpr uint8_t kEndbr64[4] = {0xf3, 0x0f, 0x1e, 0xfa};
  return std::memcmp(reinterpret_cast<const void*>(p), kEndbr64, 4) == 0;
}

size_t relocate(uintptr_t from, uintptr_t to, bool last, uint8_t* out, size_t room, std::string* why) {
  const ZydisDecoder dec = make_decoder();
  Insn insn;
  const auto* src = reinterpret_cast<const uint8_t*>(from);
  if (!classify(dec, from, src, 15, &insn, why)) return 0;
  return emit(insn, src, from, to, last, out, room, why);
}

int plan_detour(uintptr_t win, uintptr_t fn_start, size_t fn_size, const Code& code, Detour* d,
                std::string* why) {
  const uintptr_t fn_end = fn_start + fn_size;
  if (fn_size != 0 && (win < fn_start || win >= fn_end)) {
    *why = "the address is outside the function";
    return -EINVAL;
  }
  // The original bytes at a, with `n` of them there, or nullptr.
  auto orig = [&](uintptr_t a, size_t* n) -> const uint8_t* {
    if (a < code.base || a >= code.base + code.size) return nullptr;
    *n = code.base + code.size - a;
    return code.bytes + (a - code.base);
  };
  const ZydisDecoder dec = make_decoder();
  // The window: whole instructions covering 5 bytes, each one able to run
  // from the copy; a call only as the last one (it returns to the window's
  // end, the original code).
  d->win = win;
  d->len = 0;
  d->ninsn = 0;
  bool nop = false;
  while (d->len < 5) {
    const uintptr_t at = win + d->len;
    if ((fn_size != 0 && at >= fn_end) || d->ninsn == kMaxWindowInsns) {
      *why = "the function ends before 5 bytes";
      return -EINVAL;
    }
    Insn insn;
    size_t avail = 0;
    const uint8_t* src = orig(at, &avail);
    if (src == nullptr) {
      *why = "the window runs past the code given";
      return -EINVAL;
    }
    if (!classify(dec, at, src, avail, &insn, why)) return -EOPNOTSUPP;
    if ((insn.reloc == Reloc::kCall || insn.reloc == Reloc::kCallInd) && d->len + insn.len < 5) {
      *why = "a call before the window's end (its return address would be inside it)";
      return -EOPNOTSUPP;
    }
    const int i = d->ninsn++;
    d->from[i] = d->len;
    d->ilen[i] = insn.len;
    d->reloc[i] = insn.reloc;
    d->disp_off[i] = insn.disp_off;
    d->cc[i] = insn.cc;
    d->modrm_off[i] = insn.modrm_off;
    d->target[i] = insn.target;
    nop = insn.nop;
    d->len = static_cast<uint8_t>(d->len + insn.len);
  }
  if (fn_size != 0 && win + d->len > fn_end) {
    *why = "the window runs past the function's end";
    return -EINVAL;
  }
  d->nop = d->ninsn == 1 && nop;
  // One instruction: no thread can be inside it and nothing can jump into
  // it. Several: a jump of the function to a boundary strictly inside the
  // window would land in the middle of the jmp. Every target the function
  // names (branches, calls, rip-relative operands: an address taken, e.g. a
  // computed goto's) is checked; a function with a jump whose targets are
  // unknown (an indirect jmp, e.g. a switch's jump table) or bytes that do
  // not decode is refused. Not seen: C++ landing pads (reached by the
  // unwinder; docs/design/patch-engine.md, "Limits").
  if (d->ninsn > 1) {
    if (fn_size == 0) {
      *why = "a window of several instructions needs the function's bounds";
      return -EINVAL;
    }
    ZydisDecodedInstruction in;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    for (uintptr_t at = fn_start; at < fn_end; at += in.length) {
      size_t avail = 0;
      const uint8_t* src = orig(at, &avail);
      if (src == nullptr ||
          ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, src, std::min<size_t>(avail, fn_end - at), &in, ops))) {
        *why = "the function has bytes that do not decode";
        return -EINVAL;
      }
      if (in.mnemonic == ZYDIS_MNEMONIC_JMP && !(in.attributes & ZYDIS_ATTRIB_IS_RELATIVE)) {
        *why = "the function has an indirect jump (a jump table?) that may land in the window";
        return -EINVAL;
      }
      for (int i = 0; i < in.operand_count; ++i) {
        ZyanU64 target = 0;
        const bool named =
            (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[i].imm.is_relative) ||
            (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY && ops[i].mem.base == ZYDIS_REGISTER_RIP);
        if (named && ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &ops[i], at, &target)) && target > win &&
            target < win + d->len) {
          *why = "a jump of the function lands inside the window";
          return -EINVAL;
        }
      }
    }
  }
  size_t avail = 0;
  std::memcpy(d->orig, orig(win, &avail), d->len);
  return 0;
}

int plan_pun(uintptr_t win, const Code& code, Detour* d, std::string* why) {
  if (win < code.base || win + 5 > code.base + code.size) {
    *why = "the code after the instruction is not known";
    return -EINVAL;
  }
  const uint8_t* src = code.bytes + (win - code.base);
  Insn insn;
  if (!classify(make_decoder(), win, src, code.base + code.size - win, &insn, why)) return -EOPNOTSUPP;
  if (insn.len >= 5) {
    *why = "the instruction is long enough for a plain jump";
    return -EINVAL;
  }
  *d = Detour{};
  d->win = win;
  d->len = insn.len;
  d->ninsn = 1;
  d->from[0] = 0;
  d->ilen[0] = insn.len;
  d->reloc[0] = insn.reloc;
  d->disp_off[0] = insn.disp_off;
  d->cc[0] = insn.cc;
  d->modrm_off[0] = insn.modrm_off;
  d->target[0] = insn.target;
  d->pun = true;
  std::memcpy(d->orig, src, insn.len);
  return 0;
}

bool pun_range(const Detour* d, const uint8_t* after, uintptr_t* lo, uintptr_t* hi) {
  const unsigned free_bytes = d->len - 1u;  // rel32's low bytes, ours to choose
  uint32_t fixed = 0;
  for (unsigned i = 0; i < 5u - d->len; ++i) fixed |= uint32_t{after[i]} << (8 * (free_bytes + i));
  const int64_t first = static_cast<int32_t>(fixed);
  const int64_t last = first + (int64_t{1} << (8 * free_bytes)) - 1;
  const int64_t next = static_cast<int64_t>(d->win) + 5;
  // Canonical user addresses, above the lowest the kernel maps
  // (vm.mmap_min_addr, 64 KiB by default).
  constexpr int64_t kMin = 1 << 16, kMax = (int64_t{1} << 47) - 4096;
  const int64_t l = std::max(next + first, kMin), h = std::min(next + last, kMax);
  if (l > h) return false;
  *lo = static_cast<uintptr_t>(l);
  *hi = static_cast<uintptr_t>(h);
  return true;
}

int build_slot(Detour* d, uintptr_t slot, size_t room, bool df_clear, std::string* why) {
  uint8_t buf[kDetourSlotSize] = {};
  size_t n = 0;
  auto put = [&](std::initializer_list<uint8_t> bytes) {
    for (uint8_t b : bytes) buf[n++] = b;
  };
  auto put64 = [&](uint64_t v) {
    std::memcpy(buf + n, &v, 8);
    n += 8;
  };
  put({0x48, 0x8d, 0x64, 0x24, 0x80});  // lea -128(%rsp),%rsp
  put({0x48, 0x8d, 0x64, 0x24, 0xf8});  // lea -8(%rsp),%rsp
  put({0x48, 0x89, 0x44, 0x24, 0xf8});  // mov %rax,-8(%rsp)
  put({0x48, 0xb8});                    // movabs $d,%rax
  put64(reinterpret_cast<uint64_t>(d));
  put({0x48, 0x89, 0x04, 0x24});        // mov %rax,(%rsp)
  put({0x48, 0x8b, 0x44, 0x24, 0xf8});  // mov -8(%rsp),%rax
  const size_t call_at = n;
  put({0xff, 0x15, 0, 0, 0, 0});                 // call *common(%rip), below the copy
  put({0x48, 0x8d, 0xa4, 0x24, 0x88, 0, 0, 0});  // lea 136(%rsp),%rsp
  const size_t copy_at = n;
  bool falls_through = true;
  for (int i = 0; i < d->ninsn && !d->nop; ++i) {
    d->to[i] = static_cast<uint8_t>(n - copy_at);
    Insn insn;
    insn.len = d->ilen[i];
    insn.reloc = d->reloc[i];
    insn.disp_off = d->disp_off[i];
    insn.cc = d->cc[i];
    insn.modrm_off = d->modrm_off[i];
    insn.target = d->target[i];
    const size_t k = emit(insn, d->orig + d->from[i], d->win + d->from[i], slot + n, i == d->ninsn - 1,
                          buf + n, room - n - 22, why);
    if (k == 0) return -EOPNOTSUPP;
    n += k;
    falls_through = insn.reloc != Reloc::kCall && insn.reloc != Reloc::kCallInd && insn.reloc != Reloc::kJmp;
  }
  if (falls_through) {
    put({0xff, 0x25, 0, 0, 0, 0});  // jmp *0(%rip)
    put64(d->win + d->len);
  }
  const auto disp = static_cast<int32_t>(n - (call_at + 6));
  std::memcpy(buf + call_at + 2, &disp, 4);
  put64(df_clear ? reinterpret_cast<uint64_t>(&usrtrace_patch_detour_common_entry)
                 : reinterpret_cast<uint64_t>(&usrtrace_patch_detour_common));
  if (n > room) {
    *why = "slot too small";
    return -ENOSPC;
  }
  d->copy = slot + copy_at;
  d->entry = slot;
  std::memcpy(reinterpret_cast<void*>(slot), buf, n);
  __builtin___clear_cache(reinterpret_cast<char*>(slot), reinterpret_cast<char*>(slot + n));
  return 0;
}

// [B] [C] [D] for a batch, with byte 0 of each window already int3.
void arm_detours(Detour* const* ds, size_t n, bool* ok, PokeMany poke) {
  std::fill(ok, ok + n, false);
  if (n == 0) return;
  sync_cores();
  add_sweep_fixup(sweep_fixup);
  auto* set = new SweepSet;
  set->by_win.assign(ds, ds + n);
  std::sort(set->by_win.begin(), set->by_win.end(),
            [](const Detour* a, const Detour* b) { return a->win < b->win; });
  for (const Detour* d : set->by_win)
    if (d->xol != 0) set->by_xol.push_back(d);
  std::sort(set->by_xol.begin(), set->by_xol.end(),
            [](const Detour* a, const Detour* b) { return a->xol < b->xol; });
  // order: release, for the fixup's acquire (the sweep's own release of its
  // generation comes after this store).
  if (const SweepSet* old = g_sweep.exchange(set, std::memory_order_acq_rel); old != nullptr)
    g_sweep_retired.push_back(old);
  std::string why;
  if (!sweep_threads(&why)) return;
  for (const SweepSet* old : g_sweep_retired) delete old;  // every handler that read them is done
  g_sweep_retired.clear();
  // [C]: bytes 1..4 the jump's offset, the rest of the window int3.
  std::vector<CodeWrite> w;
  std::vector<size_t> of;  // w[k] is ds[of[k]]'s
  for (size_t i = 0; i < n; ++i) {
    const Detour* d = ds[i];
    const int32_t rel =
        static_cast<int32_t>(static_cast<int64_t>(d->entry) - static_cast<int64_t>(d->win + 5));
    CodeWrite c;
    c.at = d->win + 1;
    c.n = static_cast<uint8_t>(d->len - 1u);
    std::memcpy(c.b, &rel, 4);
    // A punned jump writes its free bytes alone (1..len-1): the rest of its
    // rel32 is the code after it, as the slot's address was chosen.
    if (d->pun &&
        std::memcmp(c.b + d->len - 1, reinterpret_cast<const void*>(d->win + d->len), 5u - d->len) != 0)
      continue;
    for (size_t k = 4; k + 1 < d->len; ++k) c.b[k] = 0xcc;
    w.push_back(c);
    of.push_back(i);
  }
  poke(w.data(), w.size());
  sync_cores();
  // [D]: byte 0 the jmp, where [C] was written.
  std::vector<CodeWrite> jumps;
  std::vector<size_t> jof;
  for (size_t k = 0; k < w.size(); ++k) {
    if (w[k].rc != 0) continue;
    CodeWrite c;
    c.at = ds[of[k]]->win;
    c.n = 1;
    c.b[0] = 0xe9;
    jumps.push_back(c);
    jof.push_back(of[k]);
  }
  poke(jumps.data(), jumps.size());
  sync_cores();
  for (size_t k = 0; k < jumps.size(); ++k) ok[jof[k]] = jumps[k].rc == 0;
}

// Back to int3 over the original bytes 1..len-1 ([A]' [C]'); patch.cc
// then restores byte 0.
void disarm_detour(const Detour* d, int (*poke)(uintptr_t, const uint8_t*, size_t)) {
  const uint8_t int3 = 0xcc;
  poke(d->win, &int3, 1);
  sync_cores();
  poke(d->win + 1, d->orig + 1, d->len - 1u);
  sync_cores();
}

}  // namespace usrtrace::patch::detail
