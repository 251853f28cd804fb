// Pins the calling thread to the first CPU it may run on, for the scope
// (single-thread benchmarks: no migration in the middle of a run).
#pragma once

#include <sched.h>

#include <cstddef>

namespace usrtrace::bench {

struct Pin {
  cpu_set_t old;
  Pin() {
    sched_getaffinity(0, sizeof old, &old);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (size_t c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &old)) {
        CPU_SET(c, &one);
        break;
      }
    sched_setaffinity(0, sizeof one, &one);
  }
  ~Pin() { sched_setaffinity(0, sizeof old, &old); }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
};

}  // namespace usrtrace::bench
