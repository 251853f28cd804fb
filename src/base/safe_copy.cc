// Fault-safe reads (safe_copy.h): the routines, their fixup, the handler.
#include "base/safe_copy.h"

#include <ucontext.h>

#include <atomic>
#include <cerrno>
#include <mutex>

extern "C" {
// Hidden: the labels are compared with a faulting rip, never called from
// outside this file.
int usrtrace_safe_copy_asm(void* dst, const void* src, size_t n);
long usrtrace_safe_strncpy_asm(char* dst, const char* src, size_t max);
extern const char usrtrace_safe_start[], usrtrace_safe_end[], usrtrace_safe_fixup[];
}

// The exception table has one row: every instruction in [start, end) may
// fault, and each resumes at the fixup. Both routines are leaves that push
// nothing, so at any of their instructions rsp holds the caller's return
// address and the fixup's `ret` returns -EFAULT to the caller.
//   safe_copy:    rdi = dst, rsi = src, rdx = n.      8 bytes at a time, then
//                 the tail's bytes (rep movsb's start-up cost 60 ns a call on
//                 this VM's EPYC, for the 1-8 byte reads a fetch makes).
//   safe_strncpy: rdi = dst, rsi = src, rdx = max.    Bytes up to an 8-byte
//                 boundary of src, then aligned words (an aligned load never
//                 crosses into the next page, so it faults only where the
//                 string goes on) while no byte of the word is NUL, then
//                 bytes (do_strncpy_from_user()'s way). Returns the count,
//                 NUL included, or max when it found none.
// clang-format off
asm(R"(
  .text
  .p2align 4
  .globl usrtrace_safe_start
  .hidden usrtrace_safe_start
  .globl usrtrace_safe_end
  .hidden usrtrace_safe_end
  .globl usrtrace_safe_fixup
  .hidden usrtrace_safe_fixup
  .globl usrtrace_safe_copy_asm
  .hidden usrtrace_safe_copy_asm
  .type usrtrace_safe_copy_asm, @function
  .globl usrtrace_safe_strncpy_asm
  .hidden usrtrace_safe_strncpy_asm
  .type usrtrace_safe_strncpy_asm, @function
usrtrace_safe_start:
usrtrace_safe_copy_asm:
  .cfi_startproc
  cmp $8, %rdx
  jb 3f
1:
  mov (%rsi), %rax
  mov %rax, (%rdi)
  add $8, %rsi
  add $8, %rdi
  sub $8, %rdx
  cmp $8, %rdx
  jae 1b
3:
  test %rdx, %rdx
  jz 5f
4:
  movzbl (%rsi), %eax
  mov %al, (%rdi)
  inc %rsi
  inc %rdi
  dec %rdx
  jnz 4b
5:
  xor %eax, %eax
  ret
  .cfi_endproc
  .size usrtrace_safe_copy_asm, . - usrtrace_safe_copy_asm
  .p2align 4
usrtrace_safe_strncpy_asm:
  .cfi_startproc
  xor %eax, %eax
  test %rdx, %rdx
  jz .Lsc_done
.Lsc_head:
  lea (%rsi,%rax), %rcx
  test $7, %cl
  jz .Lsc_words
  movzbl (%rsi,%rax), %ecx
  mov %cl, (%rdi,%rax)
  inc %rax
  test %cl, %cl
  jz .Lsc_done
  cmp %rdx, %rax
  jb .Lsc_head
  ret
.Lsc_words:
  lea 8(%rax), %rcx
  cmp %rdx, %rcx
  ja .Lsc_tail
  mov (%rsi,%rax), %r8
  movabs $0x0101010101010101, %r10
  mov %r8, %r9
  sub %r10, %r9
  mov %r8, %r11
  not %r11
  and %r11, %r9
  movabs $0x8080808080808080, %r10
  test %r10, %r9
  jnz .Lsc_tail
  mov %r8, (%rdi,%rax)
  add $8, %rax
  jmp .Lsc_words
.Lsc_tail:
  cmp %rdx, %rax
  jae .Lsc_done
  movzbl (%rsi,%rax), %ecx
  mov %cl, (%rdi,%rax)
  inc %rax
  test %cl, %cl
  jnz .Lsc_tail
.Lsc_done:
  ret
  .cfi_endproc
  .size usrtrace_safe_strncpy_asm, . - usrtrace_safe_strncpy_asm
usrtrace_safe_end:
usrtrace_safe_fixup:
  .cfi_startproc
  mov $-14, %rax
  ret
  .cfi_endproc
)");
// clang-format on

namespace usrtrace::base {
namespace {

static_assert(EFAULT == 14, "the fixup returns -14");

// The actions before ours: [0] SIGSEGV, [1] SIGBUS. Written once, under
// call_once, before our handler can run.
struct sigaction g_prev[2];
std::atomic<uint64_t> g_fixed{0};

// Context: signal handler, async-signal-safe.
void on_fault(int sig, siginfo_t* info, void* uc) {
  if (fixup_fault(sig, info, uc)) return;
  // Not ours: what the program (or whoever was there before us) asked for.
  const struct sigaction& prev = g_prev[sig == SIGSEGV ? 0 : 1];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, uc);
    return;
  }
  const bool hardware = info != nullptr && info->si_code > 0;
  if (prev.sa_handler == SIG_IGN && !hardware) return;  // a kill() the program ignores
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
    // Die as the program would have: the default action, delivered when this
    // handler returns (the signal is blocked while it runs). A hardware
    // fault cannot be ignored: the kernel would have killed with it too.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  prev.sa_handler(sig);
}

}  // namespace

int safe_copy(void* dst, const void* src, size_t n) { return usrtrace_safe_copy_asm(dst, src, n); }

long safe_strncpy(char* dst, const char* src, size_t max) { return usrtrace_safe_strncpy_asm(dst, src, max); }

bool fixup_fault(int sig, const siginfo_t* info, void* ucontext) {
  if ((sig != SIGSEGV && sig != SIGBUS) || info == nullptr || info->si_code <= 0 || ucontext == nullptr)
    return false;
  auto* uc = static_cast<ucontext_t*>(ucontext);
  const auto rip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  if (rip < reinterpret_cast<uintptr_t>(usrtrace_safe_start) ||
      rip >= reinterpret_cast<uintptr_t>(usrtrace_safe_end))
    return false;
  uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(reinterpret_cast<uintptr_t>(usrtrace_safe_fixup));
  g_fixed.fetch_add(1, std::memory_order_relaxed);  // order: a statistic
  return true;
}

uint64_t fixed_faults() { return g_fixed.load(std::memory_order_relaxed); }

void install_fault_fixup() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev[0]);
    sigaction(SIGBUS, &sa, &g_prev[1]);
  });
}

}  // namespace usrtrace::base
