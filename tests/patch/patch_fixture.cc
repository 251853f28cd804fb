// Functions the patch engine's tests probe (tests/patch/patch_test.cc),
// compiled with plain -O2 and no tracing flag (tests/CMakeLists.txt),
// noinline so that every call is a call. The assembly ones have bytes the
// tests rely on: a jump target inside the first 5 bytes, a short jcc, a
// call and a jmp at the entry.
#include <csetjmp>
#include <stdexcept>

extern "C" {

__attribute__((noinline)) long patch_fixture_add3(long a, long b, long c) { return a + 2 * b + 3 * c; }

// Reads a global through a rip-relative load among its first instructions.
int patch_fixture_global = 7;
__attribute__((noinline)) int patch_fixture_read_global(int x) { return patch_fixture_global * x + 1; }

__attribute__((noinline)) long patch_fixture_mix(long a, long b, long c, long d) {
  long r = a;
  for (long i = 0; i < d; ++i) r = r * 3 + (b ^ i) - c;
  return r;
}

}  // extern "C"

__attribute__((noinline)) int patch_fixture_throw(int x) {
  if (x < 0) throw std::runtime_error("negative");
  return x + 1;
}

// Catches what patch_fixture_throw throws: an exception that starts and ends
// below this function's frame.
__attribute__((noinline)) int patch_fixture_catch(int x) {
  int (*volatile t)(int) = patch_fixture_throw;
  try {
    return t(-x);
  } catch (const std::runtime_error&) {
    return x + 100;
  }
}

std::jmp_buf patch_fixture_env;
__attribute__((noinline)) int patch_fixture_jump(int x) {
  if (x < 0) std::longjmp(patch_fixture_env, 42);
  return x + 2;
}

// clang-format off
asm(R"(
  .pushsection .text
  .p2align 4
  .globl patch_fixture_loop
  .type patch_fixture_loop, @function
/* long patch_fixture_loop(long n): n + (n-1) + ... + 1, n >= 1. The loop's
 * head, a jump target, is at +2: a 5-byte window at +0 covers it. */
patch_fixture_loop:
  xorl %eax, %eax        /* +0  31 c0 */
1:
  addq %rdi, %rax        /* +2  48 01 f8 */
  decq %rdi              /* +5  48 ff cf */
  jnz 1b                 /* +8  75 f8 */
  ret                    /* +10 */
  .size patch_fixture_loop, . - patch_fixture_loop

  .p2align 4
  .globl patch_fixture_short
  .type patch_fixture_short, @function
/* long patch_fixture_short(long x): x, in 4 bytes, then two int3 of
 * padding (as clang pads): no 5-byte window fits in the function. */
patch_fixture_short:
  movq %rdi, %rax        /* +0  48 89 f8 */
  ret                    /* +3  c3 */
  .size patch_fixture_short, . - patch_fixture_short
  .byte 0xcc, 0xcc

  .p2align 4
  .globl patch_fixture_branch
  .type patch_fixture_branch, @function
/* long patch_fixture_branch(long x): x < 0 ? -x : x + 1. The window at +0
 * is test + a short js: relocated as js rel32. */
patch_fixture_branch:
  testq %rdi, %rdi       /* +0  48 85 ff */
  js 2f                  /* +3  78 05 */
  leaq 1(%rdi), %rax     /* +5  48 8d 47 01 */
  ret                    /* +9 */
2:
  movq %rdi, %rax        /* +10 */
  negq %rax
  ret
  .size patch_fixture_branch, . - patch_fixture_branch

  .p2align 4
  .globl patch_fixture_triple
  .type patch_fixture_triple, @function
patch_fixture_triple:    /* long (long x): 3x */
  leaq (%rdi,%rdi,2), %rax
  ret
  .size patch_fixture_triple, . - patch_fixture_triple

  .p2align 4
  .globl patch_fixture_call
  .type patch_fixture_call, @function
/* long patch_fixture_call(long x): 3x + 1. The window at +0 is the call
 * alone: emulated, the original return address pushed. */
patch_fixture_call:
  call patch_fixture_triple   /* +0  e8 rel32 */
  addq $1, %rax               /* +5 */
  ret
  .size patch_fixture_call, . - patch_fixture_call

  .p2align 4
  .globl patch_fixture_tail
  .type patch_fixture_tail, @function
/* long patch_fixture_tail(long x): 3x, by a tail call (jmp rel32). */
patch_fixture_tail:
  .byte 0xe9                  /* +0  jmp rel32 (the assembler would pick rel8) */
  .long patch_fixture_triple - . - 4
  .size patch_fixture_tail, . - patch_fixture_tail

  .p2align 4
  .globl patch_fixture_icall
  .type patch_fixture_icall, @function
/* long patch_fixture_icall(long x, long (*f)(long)): f(x) + 1. At +0 a
 * 2-byte call *%rsi: a call before the window's end, so int3, its copy
 * emulated (return address pushed, jmp *%rsi). */
patch_fixture_icall:
  call *%rsi                  /* +0  ff d6 */
  addq $1, %rax
  ret
  .size patch_fixture_icall, . - patch_fixture_icall

  .p2align 4
  .globl patch_fixture_icall2
  .type patch_fixture_icall2, @function
/* The same after a 3-byte nop: the window [0,5) ends with the call: a
 * detour whose copy emulates it. */
patch_fixture_icall2:
  .byte 0x0f, 0x1f, 0x00      /* +0  nopl (%rax) */
  call *%rsi                  /* +3  ff d6 */
  addq $1, %rax
  ret
  .size patch_fixture_icall2, . - patch_fixture_icall2

  .p2align 4
  .globl patch_fixture_nop
  .type patch_fixture_nop, @function
/* long patch_fixture_nop(long x): x + 5, after a 5-byte nop. */
patch_fixture_nop:
  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
  leaq 5(%rdi), %rax
  ret
  .size patch_fixture_nop, . - patch_fixture_nop

  .p2align 4
  .globl patch_fixture_flags_entry
  .type patch_fixture_flags_entry, @function
/* long patch_fixture_flags_entry(void): CF | OF << 1, as its caller left
 * them (patch_fixture_flags_call): the flags at a function's entry. */
patch_fixture_flags_entry:
  setc %al                    /* +0  0f 92 c0 */
  seto %cl                    /* +3  0f 90 c1 */
  movzbl %al, %eax
  movzbl %cl, %ecx
  leal (%rax,%rcx,2), %eax
  ret
  .size patch_fixture_flags_entry, . - patch_fixture_flags_entry

  .p2align 4
  .globl patch_fixture_flags_call
  .type patch_fixture_flags_call, @function
/* long patch_fixture_flags_call(long mode): sets CF (mode bit 0) and OF
 * (bit 1), then tail-calls patch_fixture_flags_entry. */
patch_fixture_flags_call:
  cmpl $1, %edi
  je 1f
  cmpl $2, %edi
  je 2f
  cmpl $3, %edi
  je 3f
  xorl %eax, %eax             /* CF 0, OF 0 */
  jmp patch_fixture_flags_entry
1:
  xorl %eax, %eax
  stc                         /* CF 1, OF 0 */
  jmp patch_fixture_flags_entry
2:
  movb $0x7f, %al
  addb $1, %al                /* CF 0, OF 1 */
  jmp patch_fixture_flags_entry
3:
  movb $0x7f, %al
  addb $1, %al
  stc                         /* CF 1, OF 1 */
  jmp patch_fixture_flags_entry
  .size patch_fixture_flags_call, . - patch_fixture_flags_call

  .p2align 4
  .globl patch_fixture_backward
  .type patch_fixture_backward, @function
/* void patch_fixture_backward(char* buf, long n): moves buf[0..n) to
 * buf[1..n+1) with std; rep movsb; cld, which is right only if the copy
 * runs backward: the site at +1 is inside the std..cld region. */
patch_fixture_backward:
  std                         /* +0  fd */
  leaq (%rdi,%rsi), %rdi      /* +1  48 8d 3c 37: dst, the last byte */
  movq %rsi, %rcx             /* +5 */
  leaq -1(%rdi), %rsi         /* src, the last byte */
  rep movsb
  cld
  ret
  .size patch_fixture_backward, . - patch_fixture_backward
  .popsection
)");
// clang-format on
