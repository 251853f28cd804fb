#include "base/percpu.h"

#include <sys/sysinfo.h>

#include <cstdlib>
#include <new>

namespace usrtrace::base {

PerCpuCounter::PerCpuCounter() {
  const int cpus = get_nprocs_conf();
  n_ = cpus > 0 ? static_cast<uint64_t>(cpus) : 1;
  const size_t bytes = (n_ + 1) * kStride * sizeof(uint64_t);
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  slots_ = static_cast<uint64_t*>(p);
  for (size_t i = 0; i < (n_ + 1) * kStride; ++i) slots_[i] = 0;
}

PerCpuCounter::~PerCpuCounter() { std::free(slots_); }

uint64_t PerCpuCounter::sum() const {
  uint64_t s = 0;
  for (uint64_t i = 0; i <= n_; ++i) s += __atomic_load_n(&slots_[i * kStride], __ATOMIC_RELAXED);
  return s;
}

}  // namespace usrtrace::base
