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

namespace usrtrace::base {

class PerCpuCounter {
 public:
  PerCpuCounter();
  ~PerCpuCounter();
  PerCpuCounter(const PerCpuCounter&) = delete;
  PerCpuCounter& operator=(const PerCpuCounter&) = delete;

  // Context: any thread, signal handlers too; no lock, no system call.
  // Out of line: its rseq descriptor (section __rseq_cs) must point into
  // one copy of the code, and an inline function's copies are COMDAT that
  // the linker discards but for one (an -O0 build then fails to link).
  void inc();
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
