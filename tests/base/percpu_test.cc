// base::PerCpuCounter: exact under threads that outnumber the CPUs and move
// between them, with signal handlers counting on the same counter in the
// middle of an increment (each restarts the section it interrupted).
#include "base/percpu.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <atomic>
#include <thread>
#include <vector>

namespace usrtrace::base {
namespace {

PerCpuCounter* g_counter = nullptr;
std::atomic<uint64_t> g_in_handler{0};

void on_signal(int) {
  g_counter->inc();
  g_in_handler.fetch_add(1, std::memory_order_relaxed);
}

TEST(PerCpuCounter, ExactWithThreadsMovingAndSignalsInTheMiddle) {
  PerCpuCounter c;
  g_counter = &c;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  const unsigned threads = 2 * std::max(2u, std::thread::hardware_concurrency()) + 1;
  constexpr uint64_t kEach = 300000;
  std::atomic<bool> go{false};
  std::atomic<unsigned> done{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      while (!go.load()) {
      }
      for (uint64_t i = 0; i < kEach; ++i) {
        c.inc();
        if (i % 50000 == 0) {
          // Move to another CPU now and then.
          cpu_set_t set;
          CPU_ZERO(&set);
          const size_t cpu = (t + i / 50000) % std::max(1u, std::thread::hardware_concurrency());
          CPU_SET(cpu, &set);
          sched_setaffinity(0, sizeof set, &set);
        }
      }
      done.fetch_add(1);
    });
  go.store(true);
  // Signals land in the middle of increments (their handler increments too).
  uint64_t sent = 0;
  while (done.load() < threads) {
    for (unsigned t = 0; t < threads && done.load() < threads; ++t)
      if (pthread_kill(ts[t].native_handle(), SIGUSR2) == 0) ++sent;
    std::this_thread::yield();
    if (sent > 20000) break;
  }
  for (auto& t : ts) t.join();
  sigaction(SIGUSR2, &old, nullptr);
  // Every handler that ran has counted (joined threads ran theirs).
  EXPECT_EQ(c.sum(), threads * kEach + g_in_handler.load());
  EXPECT_GT(g_in_handler.load(), 0u);
}

}  // namespace
}  // namespace usrtrace::base
