// Pins the calling thread to the first CPU it may run on, or to `cpu`, for
// the scope (no migration in the middle of a run).
#pragma once

#include <sched.h>

#include <cstddef>

namespace usrtrace::bench {

// The nth CPU (from 0) the calling thread may run on, the last one when
// there are fewer. Ask before pinning: a pinned thread, and the threads it
// starts, see only its one CPU.
inline int nth_cpu(size_t nth) {
  cpu_set_t mask;
  sched_getaffinity(0, sizeof mask, &mask);
  int found = 0;
  for (size_t c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mask)) continue;
    found = static_cast<int>(c);
    if (nth-- == 0) break;
  }
  return found;
}

struct Pin {
  cpu_set_t old;
  explicit Pin(int cpu = -1) {
    if (cpu < 0) cpu = nth_cpu(0);
    sched_getaffinity(0, sizeof old, &old);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(static_cast<size_t>(cpu), &one);
    sched_setaffinity(0, sizeof one, &one);
  }
  ~Pin() { sched_setaffinity(0, sizeof old, &old); }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
};

}  // namespace usrtrace::bench
