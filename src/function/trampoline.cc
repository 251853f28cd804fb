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
// and zmm0-15. So the registers are saved whole, at the width the CPU and
// the OS enable (usrtrace_function_vector_mode, set at load from cpuid and
// XCR0): 0 xmm0-7 (no AVX state), 1 ymm0-7 (AVX), 2 zmm0-7 (AVX-512).
//
// The upper state. Restoring a ymm register with a VEX.256 load (and
// saving it, on some cores) marks the upper state dirty even when the bits
// are zero, and on Intel cores every later legacy-SSE instruction of a
// program that never used AVX would then pay a merge (a false dependency)
// until the next vzeroupper. So the saves also OR together the upper bits
// of the live registers (0-7 at entry, 0-1 at return; into ymm8-11 /
// zmm8-11, which are call-clobbered and hold no argument or result), and
// when they were all zero the restore ends with vzeroupper: the values are
// unchanged (it zeroes bits that were zero, and those of registers 8-15,
// dead at a call and at a return) and the state is clean, as it was.
// (Asking XGETBV(ECX=1) which state is in use, glibc 2.26's
// _dl_runtime_resolve_avx_opt test, costs about 30 cycles per call on the
// machines we measured: twice what the rest of the trampoline costs.)
// This relies on the caller treating the call as clobbering every
// call-clobbered register, as the ABI has it: gcc turns its interprocedural
// register allocation (-fipa-ra) off for calls to functions with patchable
// entries, and clang's is off by default.
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
//   588          nonzero when the upper bits of a live register were set
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
// tracer, set long after load); 0 until then, which any CPU runs. Hidden:
// the asm reaches it rip-relative.
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
  if ((xcr0_lo & 0x6) != 0x6) return 0;     // the OS keeps no ymm state: none is usable
  return (xcr0_lo & 0xe0) == 0xe0 ? 2 : 1;  // opmask, ZMM_Hi256, Hi16_ZMM: AVX-512
}

uint8_t vector_mode() { return usrtrace_function_vector_mode; }
void set_vector_mode(uint8_t mode) { usrtrace_function_vector_mode = mode; }

namespace {
// Before any other constructor of ours: nothing can be patched before
// this runs (patching needs a tracer), but make it so by order too.
__attribute__((constructor(101))) void init_vector_mode() {
  usrtrace_function_vector_mode = detect_vector_mode();
}
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

/* usrtrace_vsave_all N, FLAG: saves registers 0..N-1 (N = 8 or 2) at the
 * width in %r11d (usrtrace_function_vector_mode, kept by the caller) from
 * 0(%rsp), and for ymm/zmm stores into FLAG(%rsp) whether any of their
 * bits above 127 is set (see "The upper state"). Clobbers 8-11. */
    .macro usrtrace_vsave_all n, flag
    cmpl $1, %r11d
    jb 1f
    je 2f
    usrtrace_vsave vmovdqu64, zmm, 64, \n
    .if \n == 8
    vpord %zmm1, %zmm0, %zmm8
    vpord %zmm3, %zmm2, %zmm9
    vpord %zmm5, %zmm4, %zmm10
    vpord %zmm7, %zmm6, %zmm11
    vpord %zmm9, %zmm8, %zmm8
    vpord %zmm11, %zmm10, %zmm10
    vpord %zmm10, %zmm8, %zmm8
    .else
    vpord %zmm1, %zmm0, %zmm8
    .endif
    vextracti64x4 $1, %zmm8, %ymm9  /* bits 256-511 */
    vorps %ymm9, %ymm8, %ymm8
    jmp 4f
2:  usrtrace_vsave vmovdqu, ymm, 32, \n
    .if \n == 8
    vorps %ymm1, %ymm0, %ymm8
    vorps %ymm3, %ymm2, %ymm9
    vorps %ymm5, %ymm4, %ymm10
    vorps %ymm7, %ymm6, %ymm11
    vorps %ymm9, %ymm8, %ymm8
    vorps %ymm11, %ymm10, %ymm10
    vorps %ymm10, %ymm8, %ymm8
    .else
    vorps %ymm1, %ymm0, %ymm8
    .endif
4:  vextractf128 $1, %ymm8, %xmm8   /* bits 128-255 (and 256-511, or-ed in) */
    vptest %xmm8, %xmm8
    setnz \flag(%rsp)
    jmp 3f
1:  usrtrace_vsave movups, xmm, 16, \n
3:
    .endm
/* usrtrace_vload_all N, FLAG: the restore, at the width in %r11d; ends
 * with vzeroupper when FLAG(%rsp) says the upper bits were all zero. */
    .macro usrtrace_vload_all n, flag
    cmpl $1, %r11d
    jb 1f
    je 2f
    usrtrace_vload vmovdqu64, zmm, 64, \n
    jmp 4f
2:  usrtrace_vload vmovdqu, ymm, 32, \n
4:  cmpb $0, \flag(%rsp)
    jne 3f
    vzeroupper
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
    movzbl usrtrace_function_vector_mode(%rip), %r11d
    movl %r11d, 584(%rsp)
    usrtrace_vsave_all 8, 588

    movq 8(%rbp), %rdi              /* fn + 5 */
    subq $5, %rdi                   /* fn */
    leaq 16(%rbp), %rdx             /* slot */
    movq (%rdx), %rsi               /* parent: the return address in the caller */
    call _ZN8usrtrace8function13patched_entryEmmPm@PLT
    testb %al, %al
    jz 5f
    leaq usrtrace_function_return_hook(%rip), %rax
    movq %rax, 16(%rbp)             /* redirect the function's return */
5:
    movl 584(%rsp), %r11d
    usrtrace_vload_all 8, 588
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
 * 128 rax, 136 rdx, 144 the width, 148 the upper-bits flag, 152 where to
 * return.
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
    movzbl usrtrace_function_vector_mode(%rip), %r11d  /* free at a return: neither saved nor a result */
    movl %r11d, 144(%rsp)
    usrtrace_vsave_all 2, 148
    movq %rbp, %rdi                 /* slot = rsp at entry - 8 = rbp */
    call _ZN8usrtrace8function14patched_returnEPm@PLT
    movq %rax, 152(%rsp)
    movl 144(%rsp), %r11d
    usrtrace_vload_all 2, 148
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

/* The full return hook, for plain functions (plain.cc): code built with
 * no tracing flag. Its callers may keep values in call-clobbered registers
 * across a call whose callee they know leaves them alone (gcc's
 * interprocedural register allocation, -fipa-ra, on at -O2; off only for
 * callees with patchable entries), so every register but rsp and rip
 * comes back as the function left it: the general ones, the flags, and
 * the whole vector state, saved as the patch engine's stub saves it
 * (usrtrace_patch_vec_mode: xmm0-15, ymm0-15, zmm0-31 and k0-7, or xsave;
 * src/patch/detour.cc sets it when the first site is planned, before any
 * plain function can be armed).
 *
 * The frame, down from rbp = slot (the dead slot holds the saved rbp):
 *   -8 the flags, -16 rax, -24 rcx, -32 rdx, -40 rsi, -48 rdi, -56 r8,
 *   -64 r9, -72 r10, -80 r11, -88 where to return; then the vector state,
 *   64-aligned below. The last jump reads where to return from 96 bytes
 *   below the restored rsp: inside the red zone, which the kernel leaves
 *   alone when it delivers a signal.
 */
    .globl usrtrace_function_full_return_hook
    .hidden usrtrace_function_full_return_hook
    .type usrtrace_function_full_return_hook, @function
    .p2align 4
    .cfi_startproc
    .cfi_def_cfa rsp, 0
    .cfi_undefined rip
    nop
usrtrace_function_full_return_hook:
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset rbp, -8
    movq %rsp, %rbp
    .cfi_def_cfa_register rbp
    pushfq
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    subq $8, %rsp
    cld
    movq usrtrace_patch_xsave_size(%rip), %rax
    subq %rax, %rsp
    andq $-64, %rsp
    movl usrtrace_patch_vec_mode(%rip), %eax
    cmpl $1, %eax
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
    cmpl $2, %eax
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
    movq $0, 512(%rsp)              /* the xsave header: xsave64 writes only the components it saves */
    movq $0, 520(%rsp)
    movq $0, 528(%rsp)
    movq $0, 536(%rsp)
    movq $0, 544(%rsp)
    movq $0, 552(%rsp)
    movq $0, 560(%rsp)
    movq $0, 568(%rsp)
    movl usrtrace_patch_xsave_mask(%rip), %eax
    xorl %edx, %edx
    xsave64 (%rsp)
4:
    movq %rbp, %rdi                 /* slot = rsp at entry - 8 = rbp */
    call _ZN8usrtrace8function14patched_returnEPm@PLT
    movq %rax, -88(%rbp)
    movl usrtrace_patch_vec_mode(%rip), %eax
    cmpl $1, %eax
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
    cmpl $2, %eax
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
    movl usrtrace_patch_xsave_mask(%rip), %eax
    xorl %edx, %edx
    xrstor64 (%rsp)
7:
    leaq -80(%rbp), %rsp
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    popfq
    popq %rbp
    .cfi_def_cfa rsp, 0
    .cfi_restore rbp
    jmp *-96(%rsp)
    .cfi_endproc
    .size usrtrace_function_full_return_hook, .-usrtrace_function_full_return_hook
    .popsection
)");
