#include "base/sys.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/compiler.h"

namespace usrtrace::base {

void check_failed(const char* file, int line, const char* expr) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "usrtrace: check failed at %s:%d: %s\n", file, line, expr);
  if (n > 0)
    (void)!write(2, buf, static_cast<size_t>(n) < sizeof buf ? static_cast<size_t>(n) : sizeof buf - 1);
  abort();
}

namespace {
// Parses a cpulist such as "0-3,8-11" and returns the highest id + 1.
int parse_cpulist_max(const char* s) {
  int max_id = -1;
  while (*s) {
    char* end = nullptr;
    long a = strtol(s, &end, 10);
    if (end == s) break;
    long b = a;
    s = end;
    if (*s == '-') {
      b = strtol(s + 1, &end, 10);
      s = end;
    }
    if (b > max_id) max_id = static_cast<int>(b);
    if (*s == ',')
      ++s;
    else
      break;
  }
  return max_id + 1;
}
}  // namespace

int nr_possible_cpus() {
  static const int n = [] {
    int result = 0;
    int fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[256] = {};
      ssize_t r = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (r > 0) result = parse_cpulist_max(buf);
    }
    if (result <= 0) result = static_cast<int>(sysconf(_SC_NPROCESSORS_CONF));
    return result > 0 ? result : 1;
  }();
  return n;
}

void name_own_thread(const char* name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

namespace {
std::atomic<uint32_t> g_metadata_generation{0};
}

// order: relaxed; the count only tells a recorder to ask again, and what it
// then reads is taken under the registry's and the function tracer's locks.
uint32_t metadata_generation() { return g_metadata_generation.load(std::memory_order_relaxed); }
void metadata_changed() { g_metadata_generation.fetch_add(1, std::memory_order_relaxed); }

int gettid_cached() {
  static thread_local int tid = 0;
  // A signal handler may race with the first call on this thread; both store
  // the same value, so the race is benign.
  if (USRTRACE_UNLIKELY(tid == 0)) tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  struct timespec ts;
  if (timeout_ms >= 0) {
    ts.tv_sec = timeout_ms / 1000;
    ts.tv_nsec = (timeout_ms % 1000) * 1000000L;
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
          timeout_ms >= 0 ? &ts : nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

void* map_aligned(size_t bytes, size_t align) {
  size_t total = bytes + align;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto base = reinterpret_cast<uintptr_t>(p);
  uintptr_t aligned = (base + align - 1) & ~(uintptr_t{align} - 1);
  if (aligned > base) munmap(p, aligned - base);
  uintptr_t end = aligned + bytes;
  if (base + total > end) munmap(reinterpret_cast<void*>(end), base + total - end);
  return reinterpret_cast<void*>(aligned);
}

void unmap_aligned(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

}  // namespace usrtrace::base
