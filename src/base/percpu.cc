#include "base/percpu.h"

#include <sys/sysinfo.h>

#include <cstdlib>
#include <new>

#include "base/rseq.h"

namespace usrtrace::base {

PerCpuCounter::PerCpuCounter() {
  // Read once: get_nprocs_conf() reads sysfs each time, and the patch
  // engine makes a counter per site (40,000 for libLLVM's functions).
  static const int cpus = get_nprocs_conf();
  n_ = cpus > 0 ? static_cast<uint64_t>(cpus) : 1;
  const size_t bytes = (n_ + 1) * kStride * sizeof(uint64_t);
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  slots_ = static_cast<uint64_t*>(p);
  for (size_t i = 0; i < (n_ + 1) * kStride; ++i) slots_[i] = 0;
}

PerCpuCounter::~PerCpuCounter() { std::free(slots_); }

void PerCpuCounter::inc() {
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

uint64_t PerCpuCounter::sum() const {
  uint64_t s = 0;
  for (uint64_t i = 0; i <= n_; ++i) s += __atomic_load_n(&slots_[i * kStride], __ATOMIC_RELAXED);
  return s;
}

}  // namespace usrtrace::base
