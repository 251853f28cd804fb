// The trampoline a patched entry calls, and the return hook a traced
// function returns into (docs/design/function-patching.md).
//
// Entry, through the object's stub (a jmp, so no frame of its own):
//
// rsp+8  ->  the function's return address   (the "slot")
// rsp    ->  fn + 5                          (pushed by the site's call)
//
// The function has not run yet: every argument register is live. We save
// those the SysV ABI passes arguments in, and those it does not but that
// hold state across an entry (rax: the vector count of a variadic call;
// r10: the static chain of nested functions; r11: free, but cheap), call
//
// bool usrtrace::function::patched_entry(fn, parent = *slot, slot)
//
// and when it says so, put the return hook into *slot.
//
// The stack. Nothing is assumed of rsp at entry: the ABI wants it 16-aligned
// at every call, but a compiler may drop that for calls it can see
// (gcc's -fipa-stack-alignment, on at every -O level, calls a leaf of the
// same unit with rsp 8 mod 16), and such a leaf's patched nops bring us here
// with rsp 0 mod 16 instead of the 8 the ABI would give. So the trampoline
// keeps its own frame pointer and aligns rsp itself (to 64, for zmm
// saves), as the kernel's and uftrace's fentry/mcount trampolines do. The
// return hook does the same (it always did: a function's ret leaves any
// alignment).
//
// Vector registers. Arguments travel in xmm0-7 and, for __m256 / __m512
// arguments of code built with AVX / AVX-512, in the whole of ymm0-7 /
// zmm0-7; results in xmm0-1 / ymm0 / zmm0. The C++ code we call is built
// without AVX, so it only ever writes the low 128 bits, which legacy SSE
// instructions do without touching the upper bits; but whatever it calls
// in glibc (memcpy, strlen, ...: chosen by ifunc for this CPU) may be AVX2
// code that ends in vzeroupper, which clears the upper halves of ymm0-15
// and zmm0-15. So the upper halves are saved too, when they hold anything:
//
//   g_vector_mode (set at load from cpuid and xgetbv):
//     0  no AVX state enabled: xmm0-7 only
//     1  AVX: ymm0-7 always (the CPU cannot say what is in use)
//     2  AVX-512: zmm0-7 always (the same)
//     3  the CPU has XGETBV(ECX=1), XINUSE: ask it. ZMM_Hi256 in use (bit 6):
//        zmm0-7; else AVX in use (bit 2): ymm0-7; else xmm0-7.
//
// Why ask rather than always save the widest (as glibc's lazy-binding
// trampoline does with xsavec): restoring a ymm register with a VEX.256
// load marks the upper state dirty even when the bits are zero, and on
// Intel cores every later legacy-SSE instruction of a program that never
// used AVX then pays a merge (a false dependency) until the next vzeroupper.
// Restoring only what was in use leaves the state as the program had it.
// XINUSE is the glibc 2.26 _dl_runtime_resolve_avx_opt test.
//
// Not saved: k0-7 and zmm16-31 (call-clobbered and never arguments), the
// x87 stack (empty at every call by the ABI; long double arguments go in
// memory), rflags (no argument lives there; DF is clear at every call by
// the ABI). MXCSR and the x87 control word are callee-saved, and the C++
// code keeps them.
//
// No lock, no allocation, no system call here: only register saves.
//
// The frame, from the 64-aligned rsp:
//     0 .. 511   vector registers 0-7, at 16, 32 or 64 bytes a register
//   512 .. 583   rdi rsi rdx rcx r8 r9 rax r10 r11
//   584          the width used (0 xmm, 1 ymm, 2 zmm), for the restore
// 640 bytes in all, so that rsp stays 64-aligned. rbp: the entry rsp - 8,
// so 8(%rbp) = fn + 5 and 16(%rbp) = the slot. Symbols:
// _ZN8usrtrace8function13patched_entryEmmPm and ...14patched_returnEPm are
// usrtrace::function::patched_entry(uint64_t, uint64_t, uint64_t*) and
// patched_return(uint64_t*) (function.h).
#include <cpuid.h>

#include <cstdint>

#include "function/function.h"
#include "function/patch_internal.h"

// Read by the trampoline and the return hook; written once, by the
// constructor below, before anything can be patched (patching needs a
// tracer, set long after load). Hidden: the asm reaches it rip-relative.
extern "C" {
__attribute__((visibility("hidden"))) uint8_t usrtrace_function_vector_mode = 0;
}

namespace usrtrace::function::patch::internal {

uint8_t detect_vector_mode() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  if (!osxsave || !avx) return 0;  // no AVX state: xmm is all there is
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6) != 0x6) return 0;  // the OS keeps no ymm state: none is usable
  if (__get_cpuid_max(0, nullptr) >= 0xd) {
    __cpuid_count(0xd, 1, a, b, c, d);
    if (a & (1u << 2)) return 3;  // XGETBV with ECX=1 (XINUSE)
  }
  return (xcr0_lo & 0xe0) == 0xe0 ? 2 : 1;  // opmask, ZMM_Hi256, Hi16_ZMM: AVX-512
}

uint8_t vector_mode() { return usrtrace_function_vector_mode; }
void set_vector_mode(uint8_t mode) { usrtrace_function_vector_mode = mode; }

namespace {
// Before any other constructor of ours: nothing can be patched before
// this runs (patching needs a tracer), but make it so by order too.
__attribute__((constructor(101))) void init_vector_mode() { usrtrace_function_vector_mode = detect_vector_mode(); }
}  // namespace

}  // namespace usrtrace::function::patch::internal

// Top-level asm rather than a .S file: the sources share one set of
// compile options (cmake/UsrtraceHelpers.cmake), C++ warnings included.
asm(R"(
    .pushsection .text

/* Vector saves and restores: \op is the move, \w the register width in
 * bytes, \r the register prefix (xmm, ymm, zmm), \n the count. */
    .macro usrtrace_vsave op, r, w, n
    .irp i, 0, 1, 2, 3, 4, 5, 6, 7
    .if \i < \n
    \op %\r\i, (\i * \w)(%rsp)
    .endif
    .endr
    .endm
    .macro usrtrace_vload op, r, w, n
    .irp i, 0, 1, 2, 3, 4, 5, 6, 7
    .if \i < \n
    \op (\i * \w)(%rsp), %\r\i
    .endif
    .endr
    .endm

/* usrtrace_vwidth: %r11d := the width to save (0 xmm, 1 ymm, 2 zmm), per
 * usrtrace_function_vector_mode. Clobbers eax, ecx, edx. */
    .macro usrtrace_vwidth
    movzbl usrtrace_function_vector_mode(%rip), %r11d
    cmpl $3, %r11d
    jne 9f
    movl $1, %ecx
    xgetbv                          /* edx:eax = XINUSE */
    xorl %r11d, %r11d
    testb $0x04, %al                /* AVX (ymm upper halves) in use */
    setnz %r11b
    testb $0x40, %al                /* ZMM_Hi256 in use */
    jz 9f
    movl $2, %r11d
9:
    .endm

/* usrtrace_vsave_all N / usrtrace_vload_all N: registers 0..N-1 at the
 * width in %r11d (kept by the caller), from 0(%rsp). */
    .macro usrtrace_vsave_all n
    cmpl $1, %r11d
    jb 1f
    je 2f
    usrtrace_vsave vmovdqu64, zmm, 64, \n
    jmp 3f
2:  usrtrace_vsave vmovdqu, ymm, 32, \n
    jmp 3f
1:  usrtrace_vsave movups, xmm, 16, \n
3:
    .endm
    .macro usrtrace_vload_all n
    cmpl $1, %r11d
    jb 1f
    je 2f
    usrtrace_vload vmovdqu64, zmm, 64, \n
    jmp 3f
2:  usrtrace_vload vmovdqu, ymm, 32, \n
    jmp 3f
1:  usrtrace_vload movups, xmm, 16, \n
3:
    .endm

    .globl usrtrace_function_trampoline
    .hidden usrtrace_function_trampoline
    .type usrtrace_function_trampoline, @function
    .p2align 4
usrtrace_function_trampoline:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbp, 0
    movq %rsp, %rbp
    .cfi_def_cfa_register rbp
    andq $-64, %rsp                 /* whatever the caller's alignment was */
    subq $640, %rsp
    movq %rdi, 512(%rsp)
    movq %rsi, 520(%rsp)
    movq %rdx, 528(%rsp)
    movq %rcx, 536(%rsp)
    movq %r8, 544(%rsp)
    movq %r9, 552(%rsp)
    movq %rax, 560(%rsp)
    movq %r10, 568(%rsp)
    movq %r11, 576(%rsp)
    usrtrace_vwidth
    movl %r11d, 584(%rsp)
    usrtrace_vsave_all 8

    movq 8(%rbp), %rdi              /* fn + 5 */
    subq $5, %rdi                   /* fn */
    leaq 16(%rbp), %rdx             /* slot */
    movq (%rdx), %rsi               /* parent: the return address in the caller */
    call _ZN8usrtrace8function13patched_entryEmmPm@PLT
    testb %al, %al
    jz 4f
    leaq usrtrace_function_return_hook(%rip), %rax
    movq %rax, 16(%rbp)             /* redirect the function's return */
4:
    movl 584(%rsp), %r11d
    usrtrace_vload_all 8
    movq 512(%rsp), %rdi
    movq 520(%rsp), %rsi
    movq 528(%rsp), %rdx
    movq 536(%rsp), %rcx
    movq 544(%rsp), %r8
    movq 552(%rsp), %r9
    movq 560(%rsp), %rax
    movq 568(%rsp), %r10
    movq 576(%rsp), %r11
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa rsp, 8
    .cfi_restore rbp
    ret                             /* to fn + 5: the function's body */
    .cfi_endproc
    .size usrtrace_function_trampoline, .-usrtrace_function_trampoline

/* The return hook. A traced function's `ret` lands here with
 *
 *   rsp = slot + 8         (the slot held the hook; the frame is gone)
 *
 * and its return values in rax, rdx, and vector register 0 and 1 (xmm,
 * or the whole ymm0 / zmm0 of an __m256 / __m512 result: saved at the
 * width the entry's rule gives), or in st0/st1 for long double: the C++
 * code never touches the x87 stack (no long double anywhere on the exit
 * path; tests/function/patch_test.cc returns long double and complex long
 * double through the hook). patched_return(slot) records the exit and
 * hands back the original return address, which we jump to with the stack
 * as the function's ret would have left it.
 *
 * Unwind info: a frame whose return address is the hook says nothing an
 * unwinder can follow, since the real return address is on the shadow
 * stack (thread-local, out of DWARF's reach). So the hook's CFI marks the
 * return address undefined: debuggers and libgcc see the hook as the
 * outermost frame and stop there, cleanly, instead of walking garbage.
 * Exceptions never unwind through it: shadow_unhook_all() puts the real
 * addresses back first (interpose.cc). The nop before the label puts
 * hook-1, where an unwinder looks up a return address's FDE, inside it.
 *
 * The frame, from the 64-aligned rsp: 0..127 vector registers 0-1,
 * 128 rax, 136 rdx, 144 the width, 152 where to return.
 */
    .globl usrtrace_function_return_hook
    .hidden usrtrace_function_return_hook
    .type usrtrace_function_return_hook, @function
    .p2align 4
    .cfi_startproc
    .cfi_def_cfa rsp, 0             /* entered by a ret: nothing pushed */
    .cfi_undefined rip
    nop
usrtrace_function_return_hook:
    pushq %rbp                      /* overwrites the dead slot: only its address matters */
    .cfi_adjust_cfa_offset 8
    .cfi_offset rbp, -8
    movq %rsp, %rbp
    .cfi_def_cfa_register rbp
    andq $-64, %rsp                 /* whatever the function left */
    subq $192, %rsp
    movq %rax, 128(%rsp)
    movq %rdx, 136(%rsp)
    usrtrace_vwidth                 /* rcx and r11: free at a return (neither saved nor a result) */
    movl %r11d, 144(%rsp)
    usrtrace_vsave_all 2
    movq %rbp, %rdi                 /* slot = rsp at entry - 8 = rbp */
    call _ZN8usrtrace8function14patched_returnEPm@PLT
    movq %rax, 152(%rsp)
    movl 144(%rsp), %r11d
    usrtrace_vload_all 2
    movq 128(%rsp), %rax
    movq 136(%rsp), %rdx
    movq 152(%rsp), %r11
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa rsp, 0
    .cfi_restore rbp
    jmp *%r11
    .cfi_endproc
    .size usrtrace_function_return_hook, .-usrtrace_function_return_hook
    .popsection
)");
