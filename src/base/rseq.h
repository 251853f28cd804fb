// Restartable sequences (rseq): the per-CPU primitive under usrtrace's write
// path. glibc >= 2.35 registers a `struct rseq` for every thread at
// thread-pointer + __rseq_offset; the kernel keeps its cpu_id current and,
// when it preempts, migrates or delivers a signal to a thread whose
// instruction pointer is inside the critical section named by rseq_cs, moves
// that thread to the section's abort handler. A critical section whose last
// instruction is a single store therefore either commits entirely on one CPU,
// with no other thread of that CPU in between, or not at all.
//
// See docs/design/ring-buffer.md for how the ring buffer builds on this.
#pragma once

#include <cstddef>
#include <cstdint>

namespace usrtrace::base {

// The signature the kernel checks in the 4 bytes before an abort handler; the
// same value glibc registers with on x86-64.
inline constexpr uint32_t kRseqSig = 0x53053053;

// ABI: offsets inside the kernel's struct rseq (include/uapi/linux/rseq.h).
inline constexpr int kRseqCpuIdStartOffset = 0;
inline constexpr int kRseqCpuIdOffset = 4;
inline constexpr int kRseqCsOffset = 8;

// __rseq_offset copied into a hidden variable so the write path reaches it
// with one rip-relative load instead of a GOT indirection. Set when the
// program is loaded (a constructor that runs before any user code) and never
// changed afterwards, so it is declared const: the compiler may then load it
// once for a whole loop of writes. rseq.cc holds the (writable) definition.
extern "C" __attribute__((visibility("hidden"))) const ptrdiff_t usrtrace_rseq_offset;

// Prepares rseq use for the process: caches the offset and registers for
// membarrier's rseq fence. Idempotent. Returns false if the kernel or libc
// lacks rseq. Context: control plane, not async-signal-safe on first call.
bool rseq_init();

// The calling thread's CPU as rseq reports it; negative when the thread has
// no registration (glibc built or started without rseq). Context: any.
inline int rseq_cpu_id() {
  const auto* cpu_id = reinterpret_cast<const uint32_t*>(
      static_cast<const char*>(__builtin_thread_pointer()) + usrtrace_rseq_offset + kRseqCpuIdOffset);
  return static_cast<int>(__atomic_load_n(cpu_id, __ATOMIC_RELAXED));
}

// Registers rseq for the calling thread if glibc did not (GLIBC_TUNABLES=
// glibc.pthread.rseq=0). One system call, once per thread. Returns true when
// the thread is registered afterwards. Context: async-signal-safe.
bool rseq_register_current_thread();

// Grace period for writers: returns once every rseq critical section that was
// running anywhere in the process when it was called has either committed or
// been aborted (membarrier MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ). After
// unpublishing a pointer, a caller may reuse what it pointed to. Context:
// control plane; one system call; async-signal-safe.
void rseq_fence();

// For instruction counting under valgrind, which implements neither rseq nor
// membarrier: gives the calling thread a fixed cpu_id of 0 without a kernel
// registration, and lets rseq_init() succeed. No abort can then happen, so
// this is only sound for a single writer thread; bench/ uses it to run the
// exact write path under callgrind. Never call it in a real program.
void rseq_emulate_for_instrumentation();

// The start of a critical section written in inline asm: label 6 arms it
// (rseq->rseq_cs = the descriptor at label 3, which the trailer emits), label
// 1 is the section's first instruction, which loads the thread's cpu_id
// (-1 or -2 when unregistered) sign-extended into `reg`. The asm needs the
// operand [rseqoff] (usrtrace_rseq_offset).
// clang-format off
#define USRTRACE_RSEQ_CS_BEGIN(reg)          \
  "6:\n\t"                                   \
  "leaq 3f(%%rip), %%" reg "\n\t"            \
  "movq %%" reg ", %%fs:8(%[rseqoff])\n\t"   \
  "1:\n\t"                                   \
  "movslq %%fs:4(%[rseqoff]), %%" reg "\n\t"
// clang-format on

// The end of every critical section written in inline asm: its descriptor
// (in section __rseq_cs: start label 1, post-commit label 2, abort label 4)
// and its abort handler (in __rseq_failure, after the 4-byte signature the
// kernel checks: counts the abort and restarts at label 6, which re-arms).
// `scratch` names a register the section clobbers anyway ("rcx", "rax").
// clang-format off
#define USRTRACE_RSEQ_CS_TRAILER(scratch)                            \
  ".pushsection __rseq_cs, \"aw\"\n\t"                              \
  ".balign 32\n\t"                                                   \
  "3:\n\t"                                                           \
  ".long 0, 0\n\t"                                                   \
  ".quad 1b, 2b - 1b, 4f\n\t"                                        \
  ".popsection\n\t"                                                  \
  ".pushsection __rseq_failure, \"ax\"\n\t"                         \
  ".byte 0x0f, 0xb9, 0x3d\n\t" /* ud1 <sig>(%rip), %edi */           \
  ".long 0x53053053\n\t"       /* the signature: kRseqSig */         \
  "4:\n\t"                                                           \
  "movq usrtrace_rseq_aborts@gottpoff(%%rip), %%" scratch "\n\t"     \
  "incq %%fs:(%%" scratch ")\n\t"                                    \
  "jmp 6b\n\t"                                                       \
  ".popsection\n\t"
// clang-format on

// Counts critical-section aborts taken by this thread (for tests; the abort
// handler increments it with one instruction).
extern "C" thread_local uint64_t usrtrace_rseq_aborts;

}  // namespace usrtrace::base
