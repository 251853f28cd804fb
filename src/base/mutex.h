// A std::mutex that clang's -Wthread-safety understands (libstdc++'s is not
// annotated). Control-plane and reader code only; never the write path.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "base/sys.h"

#if defined(__clang__)
#define USRTRACE_CAPABILITY(x) __attribute__((capability(x)))
#define USRTRACE_SCOPED_CAPABILITY __attribute__((scoped_lockable))
#define USRTRACE_ACQUIRE(...) __attribute__((acquire_capability(__VA_ARGS__)))
#define USRTRACE_RELEASE(...) __attribute__((release_capability(__VA_ARGS__)))
#define USRTRACE_TRY_ACQUIRE(...) __attribute__((try_acquire_capability(__VA_ARGS__)))
#define USRTRACE_NO_THREAD_SAFETY_ANALYSIS __attribute__((no_thread_safety_analysis))
#else
#define USRTRACE_CAPABILITY(x)
#define USRTRACE_SCOPED_CAPABILITY
#define USRTRACE_ACQUIRE(...)
#define USRTRACE_RELEASE(...)
#define USRTRACE_TRY_ACQUIRE(...)
#define USRTRACE_NO_THREAD_SAFETY_ANALYSIS
#endif

namespace usrtrace::base {

class USRTRACE_CAPABILITY("mutex") Mutex {
 public:
  void lock() USRTRACE_ACQUIRE() { m_.lock(); }
  void unlock() USRTRACE_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

// A futex lock whose try_lock() is one compare-and-swap, so a signal handler
// may try it (never lock() it: the interrupted thread may be the holder).
// States: 0 free, 1 held, 2 held with sleepers.
class USRTRACE_CAPABILITY("mutex") SignalSafeLock {
 public:
  void lock() USRTRACE_ACQUIRE() {
    uint32_t c = 0;
    if (w_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    if (c != 2) c = w_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
      futex_wait(&w_, 2);
      c = w_.exchange(2, std::memory_order_acquire);
    }
  }
  // Context: async-signal-safe.
  bool try_lock() USRTRACE_TRY_ACQUIRE(true) {
    uint32_t c = 0;
    return w_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  // Context: async-signal-safe (one futex wake when someone sleeps).
  void unlock() USRTRACE_RELEASE() {
    if (w_.exchange(0, std::memory_order_release) == 2) futex_wake_all(&w_);
  }

 private:
  std::atomic<uint32_t> w_{0};
};

class USRTRACE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* m) USRTRACE_ACQUIRE(m) : m_(m) { m_->lock(); }
  ~MutexLock() USRTRACE_RELEASE() { m_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* m_;
};

}  // namespace usrtrace::base
