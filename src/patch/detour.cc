// The 5-byte detour (docs/design/patch-engine.md, "The detour"): a site
// whose first instructions cover at least 5 bytes, can all run out of line,
// and contain no jump target of their function, gets `jmp rel32` to a
// per-site slot instead of staying on int3:
//
//   slot:  lea -128(%rsp),%rsp          the red zone (a mid-function site may
//                                       have live data below rsp)
//          push %rax; movabs $D,%rax; xchg %rax,(%rsp)     [rsp] = the Detour
//          jmp *0(%rip); .quad common
//   copy:  the window's instructions, relocated; jmp *0(%rip); .quad addr+len
//
//   common (usrtrace_patch_detour_common, below): saves every general
//   register and the flags into a Regs (pt_regs order), the vector state
//   with xsave, calls usrtrace_patch_detour_hit(regs, D), restores, then
//   `ret $128` to the copy: the stack is exactly as at the site again.
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

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "patch/detour.h"
#include "patch/text.h"

// The common part, shared by every slot. Its stack on entry: [rsp] = the
// Detour*, then the 128 bytes skipped, then the site's stack.
asm(R"(
  .text
  .p2align 4
  .globl usrtrace_patch_detour_common
  .hidden usrtrace_patch_detour_common
  .type usrtrace_patch_detour_common, @function
usrtrace_patch_detour_common:
  sub $168, %rsp
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
  pushfq
  popq 144(%rsp)
  movq $0, 120(%rsp)
  movq $0, 136(%rsp)
  movq $0, 160(%rsp)
  lea 304(%rsp), %rax
  mov %rax, 152(%rsp)
  mov 168(%rsp), %rsi
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
  mov usrtrace_patch_xsave_mask(%rip), %eax
  xor %edx, %edx
  xrstor64 (%rsp)
7:
  mov %rbx, %rsp
  mov 168(%rsp), %rsi
  mov 8(%rsi), %rax
  mov %rax, 168(%rsp)
  pushq 144(%rsp)
  popfq
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
  add $168, %rsp
  ret $128
  .size usrtrace_patch_detour_common, . - usrtrace_patch_detour_common
)");

extern "C" {
void usrtrace_patch_detour_common();
// Set once by detour_supported(), before any slot can run.
__attribute__((visibility("hidden"))) uint64_t usrtrace_patch_xsave_size = 0;
__attribute__((visibility("hidden"))) uint32_t usrtrace_patch_xsave_mask = 0;
// What the stub saves of the vector state: 0 xmm0-15 (SSE only), 1 ymm0-15
// (AVX, no AVX-512), 2 all of it with xsave (AVX-512: zmm16-31, k0-7).
// xsave costs about 200 ns here against 20 for the moves.
__attribute__((visibility("hidden"))) uint32_t usrtrace_patch_vec_mode = 0;
}

namespace usrtrace::patch::detail {
namespace {

// ---- The sweep's fixup (text.h): a thread stopped strictly inside the
// window being armed goes to the same instruction of the copy. The window is
// the one published in g_sweep_d, set before the sweep and left there (a
// late signal moves a thread into the copy of the last window armed: correct
// at any time, since copies are never freed and run what the window held).
std::atomic<const Detour*> g_sweep_d{nullptr};

// Context: the sweep's signal handler; async-signal-safe.
bool sweep_fixup(ucontext_t* uc) {
  // order: acquire pairs with arm_detour's release, made before the sweep's
  // generation is published (text.cc), so a handler acking this sweep sees d.
  const Detour* d = g_sweep_d.load(std::memory_order_acquire);
  if (d == nullptr) return false;
  const auto rip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  greg_t* ip = &uc->uc_mcontext.gregs[REG_RIP];
  if (rip > d->addr && rip < d->addr + d->len) {
    for (int i = 0; i < d->ninsn; ++i)
      if (d->addr + d->from[i] == rip) {
        *ip = static_cast<greg_t>(d->copy + d->to[i]);
        return true;
      }
  }
  // In the int3 path's copy of the first instruction, whose jump back
  // would land in the window being rewritten: to the same point of the
  // window's copy.
  if (d->xol != 0 && rip == d->xol) {
    *ip = static_cast<greg_t>(d->copy);
    return true;
  }
  if (d->xol != 0 && d->ninsn > 1 && rip == d->xol + d->xol_len) {
    *ip = static_cast<greg_t>(d->copy + d->to[1]);
    return true;
  }
  return false;
}

bool is_relative_branch(const ZydisDecodedInstruction& in, const ZydisDecodedOperand* ops) {
  if (!(in.attributes & ZYDIS_ATTRIB_IS_RELATIVE)) return false;
  for (int i = 0; i < in.operand_count; ++i)
    if (ops[i].type == ZYDIS_OPERAND_TYPE_MEMORY && ops[i].mem.base == ZYDIS_REGISTER_RIP) return false;
  return true;
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
    usrtrace_patch_vec_mode = 2;
    usrtrace_patch_xsave_size = b + 64;
  } else {
    usrtrace_patch_vec_mode = (lo & 0x4) ? 1 : 0;
    usrtrace_patch_xsave_size = 512 + 64;
  }
  ok = 1;
  return true;
}

int plan_detour(uintptr_t addr, uintptr_t fn_start, size_t fn_size, Detour* d, std::string* why) {
  if (fn_size == 0 || addr < fn_start || addr >= fn_start + fn_size) {
    *why = "no function bounds";
    return -EINVAL;
  }
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  // The window: whole instructions covering 5 bytes, none a relative branch.
  d->addr = addr;
  d->len = 0;
  d->ninsn = 0;
  while (d->len < 5) {
    const uintptr_t at = addr + d->len;
    if (at >= fn_start + fn_size || d->ninsn == kMaxWindowInsns) {
      *why = "the function ends before 5 bytes";
      return -EINVAL;
    }
    if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, reinterpret_cast<const void*>(at), 15, &in, ops))) {
      *why = "undecodable";
      return -EINVAL;
    }
    // A `ret` runs as well from the copy (it returns to the caller); a
    // relative branch would need its target re-encoded (not yet); an int3
    // is someone else's.
    if (is_relative_branch(in, ops) || in.mnemonic == ZYDIS_MNEMONIC_INT3) {
      *why = "a branch in the window";
      return -EINVAL;
    }
    d->from[d->ninsn] = static_cast<uint8_t>(d->len);
    d->ilen[d->ninsn] = in.length;
    d->rip_rel[d->ninsn] = (in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) != 0;
    d->disp_off[d->ninsn] = in.raw.disp.offset;
    d->disp[d->ninsn] = in.raw.disp.value;
    ++d->ninsn;
    d->len = static_cast<uint8_t>(d->len + in.length);
  }
  // No jump of the function may land inside the window (after its start).
  for (uintptr_t at = fn_start; at < fn_start + fn_size;) {
    if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, reinterpret_cast<const void*>(at), fn_start + fn_size - at,
                                           &in, ops))) {
      ++at;  // data in the text (a jump table): go on, conservatively
      continue;
    }
    if ((in.attributes & ZYDIS_ATTRIB_IS_RELATIVE)) {
      for (int i = 0; i < in.operand_count; ++i) {
        ZyanU64 target = 0;
        if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &ops[i], at, &target)) && target > addr &&
            target < addr + d->len) {
          *why = "a jump lands inside the window";
          return -EINVAL;
        }
      }
    }
    at += in.length;
  }
  std::memcpy(d->orig, reinterpret_cast<const void*>(addr), d->len);
  return 0;
}

int build_slot(Detour* d, uintptr_t slot, size_t room, std::string* why) {
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
  put({0x50});                          // push %rax
  put({0x48, 0xb8});                    // movabs $d,%rax
  put64(reinterpret_cast<uint64_t>(d));
  put({0x48, 0x87, 0x04, 0x24});  // xchg %rax,(%rsp)
  put({0xff, 0x25, 0, 0, 0, 0});  // jmp *0(%rip)
  put64(reinterpret_cast<uint64_t>(&usrtrace_patch_detour_common));
  const size_t copy_at = n;
  for (int i = 0; i < d->ninsn; ++i) {
    d->to[i] = static_cast<uint8_t>(n - copy_at);
    std::memcpy(buf + n, reinterpret_cast<const void*>(d->addr + d->from[i]), d->ilen[i]);
    if (d->rip_rel[i]) {
      const uintptr_t old_next = d->addr + d->from[i] + d->ilen[i];
      const uintptr_t new_next = slot + n + d->ilen[i];
      const int64_t disp = d->disp[i] + static_cast<int64_t>(old_next) - static_cast<int64_t>(new_next);
      if (disp < INT32_MIN || disp > INT32_MAX) {
        *why = "the slot is too far for a rip-relative operand";
        return -ERANGE;
      }
      const int32_t d32 = static_cast<int32_t>(disp);
      std::memcpy(buf + n + d->disp_off[i], &d32, 4);
    }
    n += d->ilen[i];
  }
  put({0xff, 0x25, 0, 0, 0, 0});  // jmp *0(%rip)
  put64(d->addr + d->len);
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

// [B] [C] [D], with byte 0 already int3 and synced. false: left on int3.
bool arm_detour(Detour* d, int (*poke)(uintptr_t, const uint8_t*, size_t)) {
  sync_cores();
  add_sweep_fixup(sweep_fixup);
  // order: release, for the fixup's acquire (the sweep's own release of its
  // generation comes after this store).
  g_sweep_d.store(d, std::memory_order_release);
  std::string why;
  if (!sweep_threads(&why)) return false;
  int32_t rel = static_cast<int32_t>(static_cast<int64_t>(d->entry) - static_cast<int64_t>(d->addr + 5));
  uint8_t tail[16];
  std::memcpy(tail, &rel, 4);
  for (size_t i = 4; i + 1 < d->len; ++i) tail[i] = 0xcc;
  if (poke(d->addr + 1, tail, d->len - 1u) != 0) return false;
  sync_cores();
  const uint8_t jmp = 0xe9;
  if (poke(d->addr, &jmp, 1) != 0) return false;
  sync_cores();
  return true;
}

// Back to int3 over the original bytes 1..len-1 ([A]' [C]'); patch.cc
// then restores byte 0.
void disarm_detour(const Detour* d, int (*poke)(uintptr_t, const uint8_t*, size_t)) {
  const uint8_t int3 = 0xcc;
  poke(d->addr, &int3, 1);
  sync_cores();
  poke(d->addr + 1, d->orig + 1, d->len - 1u);
  sync_cores();
}

}  // namespace usrtrace::patch::detail
