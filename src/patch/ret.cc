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
// back and keeps the entries; __cxa_begin_catch's interposer then calls
// rehook_returns(sp of the catching frame): entries below it are frames the
// unwind removed (dropped), those above it are frames still live, whose
// slots get the trampoline again, so their returns are still seen (as the
// function tracers' shadow_rehook does). A new hook drops entries at or
// below its own slot: a call reusing that stack means those frames are gone
// (longjmp), and a loop of longjmps must not fill the stack.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "patch/patch.h"

extern "C" {
extern uint32_t usrtrace_patch_vec_mode;  // detour.cc: 0 xmm, 1 ymm, 2 zmm
void usrtrace_patch_ret_tramp();
uint64_t usrtrace_patch_on_return(usrtrace::patch::Regs* regs);
}

// The trampoline: entered by the hooked function's `ret`, with rsp as the
// caller expects it after the return (16-byte aligned at a call site).
// Saves the return registers (rax, rdx, vector registers 0 and 1 whole, at
// the width the detour's stub uses: an __m256/__m512 result survives a
// handler whose glibc calls end in vzeroupper) and the rest into a Regs on
// the stack, asks for the real return address, restores, jumps there. rbx
// (saved in the Regs) keeps the Regs' address across the call.
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
  mov %rsp, %rbx
  sub $128, %rsp
  and $-64, %rsp
  mov usrtrace_patch_vec_mode(%rip), %eax
  cmp $1, %eax
  je 2f
  ja 3f
  movdqu %xmm0, 0(%rsp)
  movdqu %xmm1, 64(%rsp)
  jmp 4f
2:
  vmovdqu %ymm0, 0(%rsp)
  vmovdqu %ymm1, 64(%rsp)
  jmp 4f
3:
  vmovdqu64 %zmm0, 0(%rsp)
  vmovdqu64 %zmm1, 64(%rsp)
4:
  mov %rbx, %rdi
  call usrtrace_patch_on_return
  mov %rax, %r11
  mov usrtrace_patch_vec_mode(%rip), %eax
  cmp $1, %eax
  je 5f
  ja 6f
  movdqu 0(%rsp), %xmm0
  movdqu 64(%rsp), %xmm1
  jmp 7f
5:
  vmovdqu 0(%rsp), %ymm0
  vmovdqu 64(%rsp), %ymm1
  jmp 7f
6:
  vmovdqu64 0(%rsp), %zmm0
  vmovdqu64 64(%rsp), %zmm1
7:
  mov %rbx, %rsp
  mov 40(%rsp), %rbx
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
  bool unhooked;  // unhook_returns() put `ret` back into the slot
  uint64_t func;
  uint64_t args[6];
  RetHandler handler;
  void* cookie;
};

struct ReturnStack {
  int depth;
  Entry e[kReturnDepth];
};

// Each thread's stack is mapped at its first hooked return and unmapped as
// it exits (a pthread key's destructor), so that the TLS block stays a
// pointer: libusrtrace's initial-exec TLS must fit the few hundred bytes
// glibc keeps for libraries loaded late, or attaching to a running process
// (dlopen, docs/guide/attach.md) fails ("cannot allocate memory in static
// TLS block"). The stack itself is 1.5 KiB.
constinit __attribute__((tls_model("initial-exec"))) thread_local ReturnStack* t_stack = nullptr;
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_stack_gone = false;
pthread_key_t g_stack_key;
pthread_once_t g_stack_once = PTHREAD_ONCE_INIT;

void free_stack(void* p) {
  t_stack = nullptr;
  t_stack_gone = true;  // a later destructor's hooked call maps none
  munmap(p, sizeof(ReturnStack));
}

// The thread's stack, mapped on first use (zero-filled: empty); nullptr
// when it cannot be. Context: a Handler (async-signal-safe: mmap, and
// pthread_once/pthread_setspecific, which glibc makes without a lock or an
// allocation for a key below PTHREAD_KEY_2NDLEVEL_SIZE).
ReturnStack* stack() {
  if (ReturnStack* s = t_stack; s != nullptr) return s;
  if (t_stack_gone) return nullptr;
  pthread_once(&g_stack_once, [] { pthread_key_create(&g_stack_key, free_stack); });
  void* p = mmap(nullptr, sizeof(ReturnStack), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  t_stack = static_cast<ReturnStack*>(p);
  pthread_setspecific(g_stack_key, p);
  return t_stack;
}

[[noreturn]] void lost() {
  static constexpr char kMsg[] = "usrtrace: a return probe's trampoline found no return address; aborting\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  abort();
}

}  // namespace

bool hook_return(const Regs* at_entry, RetHandler ret, void* cookie) {
  ReturnStack* sp = stack();
  if (sp == nullptr) return false;
  ReturnStack& st = *sp;
  // Entries at or below this slot are frames gone (longjmp): a live frame's
  // slot is above every callee's.
  while (st.depth > 0 && st.e[st.depth - 1].slot <= at_entry->sp) --st.depth;
  if (st.depth == kReturnDepth) return false;
  Entry& e = st.e[st.depth];
  e.unhooked = false;
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
  if (t_stack == nullptr) return;
  ReturnStack& st = *t_stack;
  for (int i = st.depth - 1; i >= 0; --i) {
    Entry& e = st.e[i];
    auto* slot = reinterpret_cast<uint64_t*>(e.slot);
    // Only a slot that still holds the hook: a frame gone by longjmp has
    // been reused, and what is there now is someone else's.
    if (!e.unhooked && *slot == reinterpret_cast<uint64_t>(&usrtrace_patch_ret_tramp)) {
      *slot = e.ret;
      e.unhooked = true;
    }
  }
}

void rehook_returns(uint64_t sp) {
  if (t_stack == nullptr) return;
  ReturnStack& st = *t_stack;
  // Frames the unwind removed: their slots are below the catcher's sp.
  while (st.depth > 0 && st.e[st.depth - 1].slot < sp) --st.depth;
  for (int i = 0; i < st.depth; ++i) {
    Entry& e = st.e[i];
    auto* slot = reinterpret_cast<uint64_t*>(e.slot);
    if (e.unhooked && *slot == e.ret) {
      *slot = reinterpret_cast<uint64_t>(&usrtrace_patch_ret_tramp);
      e.unhooked = false;
    }
  }
}

}  // namespace usrtrace::patch

extern "C" uint64_t usrtrace_patch_on_return(usrtrace::patch::Regs* regs) {
  using usrtrace::patch::ReturnStack;
  ReturnStack* sp = usrtrace::patch::t_stack;
  if (sp == nullptr) usrtrace::patch::lost();
  ReturnStack& st = *sp;
  const uint64_t slot = regs->sp - 8;
  // Frames below this one never returned (longjmp): dropped.
  while (st.depth > 0 && st.e[st.depth - 1].slot < slot) --st.depth;
  if (st.depth == 0 || st.e[st.depth - 1].slot != slot) usrtrace::patch::lost();
  const usrtrace::patch::Entry e = st.e[--st.depth];
  regs->ip = e.ret;
  e.handler(regs, e.cookie, e.func, e.args);
  return e.ret;
}
