#include "base/rseq.h"

#include <linux/membarrier.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "base/compiler.h"

extern "C" {
// The storage behind rseq.h's const usrtrace_rseq_offset: the same symbol
// under another name, so that this file alone may write it.
__attribute__((visibility("hidden")))
ptrdiff_t usrtrace_rseq_offset_storage __asm__("usrtrace_rseq_offset") = 0;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t usrtrace_rseq_aborts = 0;
}

namespace {
// glibc's dynamic linker (or static start-up code) sets __rseq_offset before
// any constructor runs; priority 101 runs this before unprioritized ones.
__attribute__((constructor(101))) void usrtrace_init_rseq_offset() {
  usrtrace_rseq_offset_storage = __rseq_offset;
}
}  // namespace

namespace usrtrace::base {
namespace {

std::atomic<int> g_membarrier_ok{-1};  // -1 unknown, 0 no, 1 registered
std::atomic<bool> g_emulated{false};

struct rseq* thread_area() {
  return reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
}

}  // namespace

bool rseq_init() {
  if (g_membarrier_ok.load(std::memory_order_acquire) < 0) {
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    int ok = 0;
    if (q >= 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) != 0 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0)
      ok = 1;
    g_membarrier_ok.store(ok, std::memory_order_release);
  }
  if (g_emulated.load(std::memory_order_relaxed)) return true;
  return g_membarrier_ok.load(std::memory_order_acquire) == 1 && rseq_register_current_thread();
}

void rseq_emulate_for_instrumentation() {
  struct rseq* area = thread_area();
  if (static_cast<int>(area->cpu_id) < 0 && !rseq_register_current_thread()) {
    area->cpu_id_start = 0;
    area->cpu_id = 0;
  }
  g_emulated.store(true, std::memory_order_relaxed);
}

bool rseq_register_current_thread() {
  struct rseq* area = thread_area();
  if (static_cast<int>(area->cpu_id) >= 0) return true;
  // glibc reserved the area in the thread control block but did not register
  // it (registration disabled); register it ourselves with glibc's signature.
  long r = syscall(SYS_rseq, area, 32, 0, kRseqSig);
  return r == 0 && static_cast<int>(area->cpu_id) >= 0;
}

void rseq_fence() {
  if (g_membarrier_ok.load(std::memory_order_acquire) == 1) {
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0);
  } else {
    // Without the rseq fence no writer can be running a critical section:
    // rseq_init() failed and every write takes the refusing slow path.
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

}  // namespace usrtrace::base
