// A counter per CPU, incremented without a locked instruction: one rseq
// critical section (rseq.h) reads the thread's CPU and adds 1 to that CPU's
// slot, the add being the commit. A thread preempted, moved or signalled in
// between restarts the section, so no other thread of that CPU can come
// between the read and the add, and threads of other CPUs never touch the
// slot: each slot is exact, and so is the sum. A thread without an rseq
// registration (or a CPU past the slots) adds atomically to a slot of its
// own. For hot statistics (a probe's hits) that a `lock xadd` on a shared
// line made cost more than the rest of the hit's bookkeeping.
#pragma once

#include <cstdint>

#include "base/rseq.h"

namespace usrtrace::base {

class PerCpuCounter {
 public:
  PerCpuCounter();
  ~PerCpuCounter();
  PerCpuCounter(const PerCpuCounter&) = delete;
  PerCpuCounter& operator=(const PerCpuCounter&) = delete;

  // Context: any thread, signal handlers too; no lock, no system call.
  // Inline: the probe dispatch's reader counts and hits take four a hit.
  void inc() {
    int fallback;
    asm volatile(
        USRTRACE_RSEQ_CS_BEGIN("rax")
        "cmpq %[n], %%rax\n\t"  // unsigned: -1 and -2 (unregistered) too
        "jae 5f\n\t"
        "shlq $6, %%rax\n\t"
        "incq (%[slots],%%rax)\n\t"  // commit
        "2:\n\t"
        "movl $0, %[fb]\n\t"
        "jmp 9f\n\t"
        "5:\n\t"
        "movl $1, %[fb]\n\t"
        "9:\n\t" USRTRACE_RSEQ_CS_TRAILER("rax")
        : [fb] "=&r"(fallback)
        : [slots] "r"(slots_), [n] "r"(n_), [rseqoff] "r"(usrtrace_rseq_offset)
        : "rax", "cc", "memory");
    // order: relaxed; a statistic (the patch engine's reader counts get
    // their order from its fences).
    if (fallback) __atomic_fetch_add(&slots_[n_ * kStride], 1, __ATOMIC_RELAXED);
  }
  // The sum: exact once the increments it should see have returned.
  // Context: any thread.
  uint64_t sum() const;

 private:
  // One cache line per CPU, then the fallback's.
  static constexpr uint32_t kStride = 64 / sizeof(uint64_t);
  uint64_t* slots_ = nullptr;
  uint64_t n_ = 0;  // CPUs with a slot
};

}  // namespace usrtrace::base
