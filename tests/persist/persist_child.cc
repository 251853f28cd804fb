// The traced program of persist_sigkill_test: the top instance is
// file-backed through USRTRACE_BUFFER_DIR; N threads write persist:seq
// events (thread id, per-thread sequence number) until killed.
//
// Usage: persist_child overwrite|discard BUFFER_KB MAX_PER_THREAD(0 = no limit)
// Prints "ready" once every thread has committed its first event.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "instance/instance.h"
#include "testing/test_util.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(persist, seq, (int32_t, tid)(uint64_t, seq), "tid=%d seq=%llu", REC->tid, REC->seq)

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const bool overwrite = std::strcmp(argv[1], "overwrite") == 0;
  const uint64_t kb = std::strtoull(argv[2], nullptr, 10);
  const uint64_t max = std::strtoull(argv[3], nullptr, 10);
  using usrtrace::instance::Instance;
  Instance* top = Instance::top();
  if (!top || top->buffer_file().empty()) return 3;
  top->set_option(usrtrace::instance::kOptOverwrite, overwrite);
  if (top->buffer().resize(-1, kb * 1024) != 0) return 4;  // a resize of a file-backed buffer
  top->set_event("persist", "seq", true);
  constexpr int kThreads = 4;
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      // Overwrite mode loses the oldest pages of each CPU: a pinned thread's
      // surviving events are then a contiguous run.
      if (overwrite) usrtrace::testing::pin_to_cpu(static_cast<int>(i % ncpu));
      const auto tid = static_cast<int32_t>(gettid());
      for (uint64_t s = 0; max == 0 || s < max; ++s) {
        trace_persist_seq(tid, s);
        if (s == 0) ready.fetch_add(1);
      }
      for (;;) pause();
    });
  }
  while (ready.load() < kThreads) std::this_thread::yield();
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}
