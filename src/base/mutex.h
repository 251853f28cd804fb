// A std::mutex that clang's -Wthread-safety understands (libstdc++'s is not
// annotated). Control-plane and reader code only; never the write path.
#pragma once

#include <mutex>

#if defined(__clang__)
#define USRTRACE_CAPABILITY(x) __attribute__((capability(x)))
#define USRTRACE_SCOPED_CAPABILITY __attribute__((scoped_lockable))
#define USRTRACE_ACQUIRE(...) __attribute__((acquire_capability(__VA_ARGS__)))
#define USRTRACE_RELEASE(...) __attribute__((release_capability(__VA_ARGS__)))
#define USRTRACE_NO_THREAD_SAFETY_ANALYSIS __attribute__((no_thread_safety_analysis))
#else
#define USRTRACE_CAPABILITY(x)
#define USRTRACE_SCOPED_CAPABILITY
#define USRTRACE_ACQUIRE(...)
#define USRTRACE_RELEASE(...)
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
