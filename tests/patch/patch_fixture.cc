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
  .globl patch_fixture_zmm
  .type patch_fixture_zmm, @function
/* void patch_fixture_zmm(const void* in, void* out): zmm0-31 and k0-7
 * from `in` (32 x 64 bytes, then 8 x 8), a probe site (patch_fixture_zmm_at,
 * a mid-function nop), then all of them to `out`. AVX-512 (F, BW) only. */
patch_fixture_zmm:
  vmovdqu64 0(%rdi), %zmm0
  vmovdqu64 64(%rdi), %zmm1
  vmovdqu64 128(%rdi), %zmm2
  vmovdqu64 192(%rdi), %zmm3
  vmovdqu64 256(%rdi), %zmm4
  vmovdqu64 320(%rdi), %zmm5
  vmovdqu64 384(%rdi), %zmm6
  vmovdqu64 448(%rdi), %zmm7
  vmovdqu64 512(%rdi), %zmm8
  vmovdqu64 576(%rdi), %zmm9
  vmovdqu64 640(%rdi), %zmm10
  vmovdqu64 704(%rdi), %zmm11
  vmovdqu64 768(%rdi), %zmm12
  vmovdqu64 832(%rdi), %zmm13
  vmovdqu64 896(%rdi), %zmm14
  vmovdqu64 960(%rdi), %zmm15
  vmovdqu64 1024(%rdi), %zmm16
  vmovdqu64 1088(%rdi), %zmm17
  vmovdqu64 1152(%rdi), %zmm18
  vmovdqu64 1216(%rdi), %zmm19
  vmovdqu64 1280(%rdi), %zmm20
  vmovdqu64 1344(%rdi), %zmm21
  vmovdqu64 1408(%rdi), %zmm22
  vmovdqu64 1472(%rdi), %zmm23
  vmovdqu64 1536(%rdi), %zmm24
  vmovdqu64 1600(%rdi), %zmm25
  vmovdqu64 1664(%rdi), %zmm26
  vmovdqu64 1728(%rdi), %zmm27
  vmovdqu64 1792(%rdi), %zmm28
  vmovdqu64 1856(%rdi), %zmm29
  vmovdqu64 1920(%rdi), %zmm30
  vmovdqu64 1984(%rdi), %zmm31
  kmovq 2048(%rdi), %k0
  kmovq 2056(%rdi), %k1
  kmovq 2064(%rdi), %k2
  kmovq 2072(%rdi), %k3
  kmovq 2080(%rdi), %k4
  kmovq 2088(%rdi), %k5
  kmovq 2096(%rdi), %k6
  kmovq 2104(%rdi), %k7
  .globl patch_fixture_zmm_at
patch_fixture_zmm_at:
  nopl 0(%rax,%rax,1)
  vmovdqu64 %zmm0, 0(%rsi)
  vmovdqu64 %zmm1, 64(%rsi)
  vmovdqu64 %zmm2, 128(%rsi)
  vmovdqu64 %zmm3, 192(%rsi)
  vmovdqu64 %zmm4, 256(%rsi)
  vmovdqu64 %zmm5, 320(%rsi)
  vmovdqu64 %zmm6, 384(%rsi)
  vmovdqu64 %zmm7, 448(%rsi)
  vmovdqu64 %zmm8, 512(%rsi)
  vmovdqu64 %zmm9, 576(%rsi)
  vmovdqu64 %zmm10, 640(%rsi)
  vmovdqu64 %zmm11, 704(%rsi)
  vmovdqu64 %zmm12, 768(%rsi)
  vmovdqu64 %zmm13, 832(%rsi)
  vmovdqu64 %zmm14, 896(%rsi)
  vmovdqu64 %zmm15, 960(%rsi)
  vmovdqu64 %zmm16, 1024(%rsi)
  vmovdqu64 %zmm17, 1088(%rsi)
  vmovdqu64 %zmm18, 1152(%rsi)
  vmovdqu64 %zmm19, 1216(%rsi)
  vmovdqu64 %zmm20, 1280(%rsi)
  vmovdqu64 %zmm21, 1344(%rsi)
  vmovdqu64 %zmm22, 1408(%rsi)
  vmovdqu64 %zmm23, 1472(%rsi)
  vmovdqu64 %zmm24, 1536(%rsi)
  vmovdqu64 %zmm25, 1600(%rsi)
  vmovdqu64 %zmm26, 1664(%rsi)
  vmovdqu64 %zmm27, 1728(%rsi)
  vmovdqu64 %zmm28, 1792(%rsi)
  vmovdqu64 %zmm29, 1856(%rsi)
  vmovdqu64 %zmm30, 1920(%rsi)
  vmovdqu64 %zmm31, 1984(%rsi)
  kmovq %k0, 2048(%rsi)
  kmovq %k1, 2056(%rsi)
  kmovq %k2, 2064(%rsi)
  kmovq %k3, 2072(%rsi)
  kmovq %k4, 2080(%rsi)
  kmovq %k5, 2088(%rsi)
  kmovq %k6, 2096(%rsi)
  kmovq %k7, 2104(%rsi)
  vzeroupper
  ret
  .size patch_fixture_zmm, . - patch_fixture_zmm

  .p2align 4
  .globl patch_fixture_zmm_clobber
  .type patch_fixture_zmm_clobber, @function
/* void patch_fixture_zmm_clobber(void): every bit of zmm0-31 and k0-7 set. */
patch_fixture_zmm_clobber:
  vpternlogd $0xff, %zmm0, %zmm0, %zmm0
  vpternlogd $0xff, %zmm1, %zmm1, %zmm1
  vpternlogd $0xff, %zmm2, %zmm2, %zmm2
  vpternlogd $0xff, %zmm3, %zmm3, %zmm3
  vpternlogd $0xff, %zmm4, %zmm4, %zmm4
  vpternlogd $0xff, %zmm5, %zmm5, %zmm5
  vpternlogd $0xff, %zmm6, %zmm6, %zmm6
  vpternlogd $0xff, %zmm7, %zmm7, %zmm7
  vpternlogd $0xff, %zmm8, %zmm8, %zmm8
  vpternlogd $0xff, %zmm9, %zmm9, %zmm9
  vpternlogd $0xff, %zmm10, %zmm10, %zmm10
  vpternlogd $0xff, %zmm11, %zmm11, %zmm11
  vpternlogd $0xff, %zmm12, %zmm12, %zmm12
  vpternlogd $0xff, %zmm13, %zmm13, %zmm13
  vpternlogd $0xff, %zmm14, %zmm14, %zmm14
  vpternlogd $0xff, %zmm15, %zmm15, %zmm15
  vpternlogd $0xff, %zmm16, %zmm16, %zmm16
  vpternlogd $0xff, %zmm17, %zmm17, %zmm17
  vpternlogd $0xff, %zmm18, %zmm18, %zmm18
  vpternlogd $0xff, %zmm19, %zmm19, %zmm19
  vpternlogd $0xff, %zmm20, %zmm20, %zmm20
  vpternlogd $0xff, %zmm21, %zmm21, %zmm21
  vpternlogd $0xff, %zmm22, %zmm22, %zmm22
  vpternlogd $0xff, %zmm23, %zmm23, %zmm23
  vpternlogd $0xff, %zmm24, %zmm24, %zmm24
  vpternlogd $0xff, %zmm25, %zmm25, %zmm25
  vpternlogd $0xff, %zmm26, %zmm26, %zmm26
  vpternlogd $0xff, %zmm27, %zmm27, %zmm27
  vpternlogd $0xff, %zmm28, %zmm28, %zmm28
  vpternlogd $0xff, %zmm29, %zmm29, %zmm29
  vpternlogd $0xff, %zmm30, %zmm30, %zmm30
  vpternlogd $0xff, %zmm31, %zmm31, %zmm31
  kxnorq %k0, %k0, %k0
  kxnorq %k1, %k1, %k1
  kxnorq %k2, %k2, %k2
  kxnorq %k3, %k3, %k3
  kxnorq %k4, %k4, %k4
  kxnorq %k5, %k5, %k5
  kxnorq %k6, %k6, %k6
  kxnorq %k7, %k7, %k7
  ret
  .size patch_fixture_zmm_clobber, . - patch_fixture_zmm_clobber

  .p2align 4
  .globl patch_fixture_ymm
  .type patch_fixture_ymm, @function
/* void patch_fixture_ymm(const void* in, void* out): the same for ymm0-15
 * (16 x 32 bytes). AVX only. */
patch_fixture_ymm:
  vmovdqu 0(%rdi), %ymm0
  vmovdqu 32(%rdi), %ymm1
  vmovdqu 64(%rdi), %ymm2
  vmovdqu 96(%rdi), %ymm3
  vmovdqu 128(%rdi), %ymm4
  vmovdqu 160(%rdi), %ymm5
  vmovdqu 192(%rdi), %ymm6
  vmovdqu 224(%rdi), %ymm7
  vmovdqu 256(%rdi), %ymm8
  vmovdqu 288(%rdi), %ymm9
  vmovdqu 320(%rdi), %ymm10
  vmovdqu 352(%rdi), %ymm11
  vmovdqu 384(%rdi), %ymm12
  vmovdqu 416(%rdi), %ymm13
  vmovdqu 448(%rdi), %ymm14
  vmovdqu 480(%rdi), %ymm15
  .globl patch_fixture_ymm_at
patch_fixture_ymm_at:
  nopl 0(%rax,%rax,1)
  vmovdqu %ymm0, 0(%rsi)
  vmovdqu %ymm1, 32(%rsi)
  vmovdqu %ymm2, 64(%rsi)
  vmovdqu %ymm3, 96(%rsi)
  vmovdqu %ymm4, 128(%rsi)
  vmovdqu %ymm5, 160(%rsi)
  vmovdqu %ymm6, 192(%rsi)
  vmovdqu %ymm7, 224(%rsi)
  vmovdqu %ymm8, 256(%rsi)
  vmovdqu %ymm9, 288(%rsi)
  vmovdqu %ymm10, 320(%rsi)
  vmovdqu %ymm11, 352(%rsi)
  vmovdqu %ymm12, 384(%rsi)
  vmovdqu %ymm13, 416(%rsi)
  vmovdqu %ymm14, 448(%rsi)
  vmovdqu %ymm15, 480(%rsi)
  vzeroupper
  ret
  .size patch_fixture_ymm, . - patch_fixture_ymm

  .p2align 4
  .globl patch_fixture_ymm_clobber
  .type patch_fixture_ymm_clobber, @function
patch_fixture_ymm_clobber:
  vpcmpeqd %ymm0, %ymm0, %ymm0
  vpcmpeqd %ymm1, %ymm1, %ymm1
  vpcmpeqd %ymm2, %ymm2, %ymm2
  vpcmpeqd %ymm3, %ymm3, %ymm3
  vpcmpeqd %ymm4, %ymm4, %ymm4
  vpcmpeqd %ymm5, %ymm5, %ymm5
  vpcmpeqd %ymm6, %ymm6, %ymm6
  vpcmpeqd %ymm7, %ymm7, %ymm7
  vpcmpeqd %ymm8, %ymm8, %ymm8
  vpcmpeqd %ymm9, %ymm9, %ymm9
  vpcmpeqd %ymm10, %ymm10, %ymm10
  vpcmpeqd %ymm11, %ymm11, %ymm11
  vpcmpeqd %ymm12, %ymm12, %ymm12
  vpcmpeqd %ymm13, %ymm13, %ymm13
  vpcmpeqd %ymm14, %ymm14, %ymm14
  vpcmpeqd %ymm15, %ymm15, %ymm15
  ret
  .size patch_fixture_ymm_clobber, . - patch_fixture_ymm_clobber

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
