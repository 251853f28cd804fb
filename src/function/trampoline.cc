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
// and when it says so, put the return hook into *slot. Not saved: the upper
// halves of ymm/zmm registers and the x87 stack (the core is compiled
// without AVX and never uses long double: neither is touched), rflags
// (no argument lives there; DF is clear at every call by the ABI).
//
// No lock, no allocation, no system call here: only register saves.
//
// The frame: 8 xmm (128 bytes) then 9 general registers (72 bytes): 200,
// and 8 more so that rsp stays 16-aligned (it is at entry: the function's rsp
// was 8 mod 16 after its call, and the site's call pushed 8 more). Symbols:
// _ZN8usrtrace8function13patched_entryEmmPm and ...14patched_returnEPm are
// usrtrace::function::patched_entry(uint64_t, uint64_t, uint64_t*) and
// patched_return(uint64_t*) (function.h).
#include "function/function.h"
#include "function/patch_internal.h"

// Top-level asm rather than a .S file: the sources share one set of
// compile options (cmake/UsrtraceHelpers.cmake), C++ warnings included.
asm(R"(
    .pushsection .text



    .globl usrtrace_function_trampoline
    .hidden usrtrace_function_trampoline
    .type usrtrace_function_trampoline, @function
    .p2align 4
usrtrace_function_trampoline:
    .cfi_startproc
    subq $208, %rsp
    .cfi_adjust_cfa_offset 208
    movaps %xmm0, 0(%rsp)
    movaps %xmm1, 16(%rsp)
    movaps %xmm2, 32(%rsp)
    movaps %xmm3, 48(%rsp)
    movaps %xmm4, 64(%rsp)
    movaps %xmm5, 80(%rsp)
    movaps %xmm6, 96(%rsp)
    movaps %xmm7, 112(%rsp)
    movq %rdi, 128(%rsp)
    movq %rsi, 136(%rsp)
    movq %rdx, 144(%rsp)
    movq %rcx, 152(%rsp)
    movq %r8, 160(%rsp)
    movq %r9, 168(%rsp)
    movq %rax, 176(%rsp)
    movq %r10, 184(%rsp)
    movq %r11, 192(%rsp)

    movq 208(%rsp), %rdi          /* fn + 5 */
    subq $5, %rdi                   /* fn */
    leaq 216(%rsp), %rdx        /* slot */
    movq (%rdx), %rsi               /* parent: the return address in the caller */
    call _ZN8usrtrace8function13patched_entryEmmPm@PLT
    testb %al, %al
    jz 1f
    leaq usrtrace_function_return_hook(%rip), %rax
    movq %rax, 216(%rsp)        /* redirect the function's return */
1:
    movaps 0(%rsp), %xmm0
    movaps 16(%rsp), %xmm1
    movaps 32(%rsp), %xmm2
    movaps 48(%rsp), %xmm3
    movaps 64(%rsp), %xmm4
    movaps 80(%rsp), %xmm5
    movaps 96(%rsp), %xmm6
    movaps 112(%rsp), %xmm7
    movq 128(%rsp), %rdi
    movq 136(%rsp), %rsi
    movq 144(%rsp), %rdx
    movq 152(%rsp), %rcx
    movq 160(%rsp), %r8
    movq 168(%rsp), %r9
    movq 176(%rsp), %rax
    movq 184(%rsp), %r10
    movq 192(%rsp), %r11
    addq $208, %rsp
    .cfi_adjust_cfa_offset -208
    ret                             /* to fn + 5: the function's body */
    .cfi_endproc
    .size usrtrace_function_trampoline, .-usrtrace_function_trampoline

/* The return hook. A traced function's `ret` lands here with
 *
 *   rsp = slot + 8         (the slot held the hook; the frame is gone)
 *
 * and its return values in rax, rdx, xmm0, xmm1 (st0/st1 for long double:
 * untouched, see above). patched_return(slot) records the exit and hands
 * back the original return address, which we jump to with the stack as the
 * function's ret would have left it.
 *
 * Unwind info: a frame whose return address is the hook says nothing an
 * unwinder can follow, since the real return address is on the shadow
 * stack (thread-local, out of DWARF's reach). So the hook's CFI marks the
 * return address undefined: debuggers and libgcc see the hook as the
 * outermost frame and stop there, cleanly, instead of walking garbage.
 * Exceptions never unwind through it: shadow_unhook_all() puts the real
 * addresses back first (interpose.cc). The nop before the label puts
 * hook-1, where an unwinder looks up a return address's FDE, inside it.
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
    andq $-16, %rsp                 /* whatever the function left */
    subq $48, %rsp
    movq %rax, 0(%rsp)
    movq %rdx, 8(%rsp)
    movaps %xmm0, 16(%rsp)
    movaps %xmm1, 32(%rsp)
    movq %rbp, %rdi                 /* slot = rsp at entry - 8 = rbp */
    call _ZN8usrtrace8function14patched_returnEPm@PLT
    movq %rax, %r11                 /* free at a return: neither saved nor a result */
    movq 0(%rsp), %rax
    movq 8(%rsp), %rdx
    movaps 16(%rsp), %xmm0
    movaps 32(%rsp), %xmm1
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa rsp, 0
    .cfi_restore rbp
    jmp *%r11
    .cfi_endproc
    .size usrtrace_function_return_hook, .-usrtrace_function_return_hook
    .popsection
)");
