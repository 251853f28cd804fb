// Return probes (patch.h's hook_return): the function's return address is
// swapped for the return trampoline's, and the real one kept on a
// per-thread stack (initial-exec TLS, fixed size: no allocation on a hit).
//
// Each entry remembers the stack slot it hooked. At the trampoline the
// slot of the returning call is sp - 8, and entries with a lower slot are
// frames that never returned (longjmp, or an exception that unhooked them:
// unhook_returns): they are dropped. An exception unwinds through real
// return addresses only: the unwind interposers (src/function/interpose.cc)
// call unhook_returns() first, which puts every hooked slot of the thread
// back.
#include <unistd.h>
#include <cstdlib>
#include <cstring>

#include "patch/patch.h"

extern "C" {
void usrtrace_patch_ret_tramp();
uint64_t usrtrace_patch_on_return(usrtrace::patch::Regs* regs);
}

// The trampoline: entered by the hooked function's `ret`, with rsp as the
// caller expects it after the return (16-byte aligned at a call site).
// Saves the return registers (rax, rdx, xmm0, xmm1) and the rest into a
// Regs on the stack, asks for the real return address, restores, jumps
// there. 224 bytes keep rsp 16-byte aligned at the call.
asm(R"(
  .text
  .p2align 4
  .globl usrtrace_patch_ret_tramp
  .hidden usrtrace_patch_ret_tramp
  .type usrtrace_patch_ret_tramp, @function
usrtrace_patch_ret_tramp:
  sub $224, %rsp
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
  movq $0, 120(%rsp)
  movq $0, 128(%rsp)
  movq $0, 136(%rsp)
  pushfq
  popq 144(%rsp)
  lea 224(%rsp), %rax
  mov %rax, 152(%rsp)
  movq $0, 160(%rsp)
  movdqu %xmm0, 168(%rsp)
  movdqu %xmm1, 184(%rsp)
  mov %rsp, %rdi
  call usrtrace_patch_on_return
  mov %rax, %r11
  movdqu 168(%rsp), %xmm0
  movdqu 184(%rsp), %xmm1
  mov 80(%rsp), %rax
  mov 96(%rsp), %rdx
  add $224, %rsp
  jmp *%r11
  .size usrtrace_patch_ret_tramp, . - usrtrace_patch_ret_tramp
)");

namespace usrtrace::patch {
namespace {

struct Entry {
  uint64_t slot;  // where the return address was
  uint64_t ret;   // the real return address
  uint64_t func;
  uint64_t args[6];
  RetHandler handler;
  void* cookie;
};

struct ReturnStack {
  int depth;
  Entry e[kReturnDepth];
};

constinit __attribute__((tls_model("initial-exec"))) thread_local ReturnStack t_stack{};

[[noreturn]] void lost() {
  static constexpr char kMsg[] = "usrtrace: a return probe's trampoline found no return address; aborting\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  abort();
}

}  // namespace

bool hook_return(const Regs* at_entry, RetHandler ret, void* cookie) {
  ReturnStack& st = t_stack;
  if (st.depth == kReturnDepth) return false;
  Entry& e = st.e[st.depth];
  auto* slot = reinterpret_cast<uint64_t*>(at_entry->sp);
  e.slot = at_entry->sp;
  e.ret = *slot;
  e.func = at_entry->ip;
  e.args[0] = at_entry->di;
  e.args[1] = at_entry->si;
  e.args[2] = at_entry->dx;
  e.args[3] = at_entry->cx;
  e.args[4] = at_entry->r8;
  e.args[5] = at_entry->r9;
  e.handler = ret;
  e.cookie = cookie;
  ++st.depth;
  *slot = reinterpret_cast<uint64_t>(&usrtrace_patch_ret_tramp);
  return true;
}

void unhook_returns() {
  ReturnStack& st = t_stack;
  for (int i = st.depth - 1; i >= 0; --i) {
    auto* slot = reinterpret_cast<uint64_t*>(st.e[i].slot);
    // Only a slot that still holds the hook: a frame gone by longjmp has
    // been reused, and what is there now is someone else's.
    if (*slot == reinterpret_cast<uint64_t>(&usrtrace_patch_ret_tramp)) *slot = st.e[i].ret;
  }
  st.depth = 0;
}

}  // namespace usrtrace::patch

extern "C" uint64_t usrtrace_patch_on_return(usrtrace::patch::Regs* regs) {
  using usrtrace::patch::ReturnStack;
  ReturnStack& st = usrtrace::patch::t_stack;
  const uint64_t slot = regs->sp - 8;
  // Frames below this one never returned (longjmp): dropped.
  while (st.depth > 0 && st.e[st.depth - 1].slot < slot) --st.depth;
  if (st.depth == 0 || st.e[st.depth - 1].slot != slot) usrtrace::patch::lost();
  const usrtrace::patch::Entry e = st.e[--st.depth];
  regs->ip = e.ret;
  e.handler(regs, e.cookie, e.func, e.args);
  return e.ret;
}
