// soak_target: the traced program of soak_test. Four threads write
// soak:seq events (thread, per-thread sequence) in bursts, and a
// SIGALRM handler (a 1 ms interval timer) writes soak:sig events from
// whichever thread it interrupts, until its input closes; then it exits 0.
// It prints "ready PID" once every thread has written its first event.
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "usrtrace/event.h"
#include "usrtrace/usrtrace.h"

USRTRACE_EVENT(soak, seq, (uint32_t, thread)(uint64_t, seq), "thread=%u seq=%llu", REC->thread, REC->seq)
USRTRACE_EVENT(soak, sig, (uint64_t, n), "n=%llu", REC->n)

namespace {

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_sig_n{0};

void on_alarm(int) {
  // A writer interrupted mid-write by its own handler: the ring buffer's
  // nesting on the same CPU buffer.
  trace_soak_sig(g_sig_n.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace

int main() {
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, nullptr);
  constexpr int kThreads = 4;
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &started] {
      // Bursts of 16 with a pause: a steady few MB/s in all, so that the
      // client's extracts and recordings stay short, yet the buffers wrap.
      for (uint64_t s = 0; !g_stop.load(std::memory_order_relaxed); ++s) {
        trace_soak_seq(t, s);
        if (s == 0) started.fetch_add(1);
        if (s % 16 == 15) usleep(200);
      }
    });
  while (started.load() < kThreads) std::this_thread::yield();
  itimerval it{{0, 1000}, {0, 1000}};
  setitimer(ITIMER_REAL, &it, nullptr);
  printf("ready %d\n", getpid());
  fflush(stdout);
  char buf[256];
  while (read(0, buf, sizeof buf) > 0) {
  }
  itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  g_stop.store(true);
  for (auto& th : threads) th.join();
  return 0;
}
