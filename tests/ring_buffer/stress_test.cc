// The kernel's test_ringbuffer hammer, in user space: more writer threads
// than CPUs (so they are preempted mid-write), signal handlers writing nested
// events into the writes they interrupt, threads moved between CPUs, a
// consuming reader, iterators, resizes and swaps, all at once. Bounded by
// counts, not time. Checked: every event read is intact (self-checksum), each
// CPU's stream is in time order, and written == read + overrun + dropped,
// exactly.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "testing/test_util.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define USRTRACE_SLOW_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define USRTRACE_SLOW_BUILD 1
#endif
#endif

namespace usrtrace::rb {
namespace {

using testing::Payload;

#ifdef USRTRACE_SLOW_BUILD
constexpr uint32_t kEventsPerWriter = 30000;
constexpr int kRounds = 60;
#else
constexpr uint32_t kEventsPerWriter = 300000;
constexpr int kRounds = 300;
#endif
// Every writer keeps writing until it has taken this many signals.
constexpr uint32_t kMinNestedPerWriter = 100;
constexpr int kWriters = 4;

std::atomic<RingBuffer*> g_rb{nullptr};
std::atomic<uint64_t> g_nested_ok{0};
std::atomic<uint64_t> g_signals{0};
thread_local uint32_t t_writer_id = 0;
thread_local uint32_t t_nested_seq = 0;
thread_local std::atomic<uint32_t> t_signals{0};

// Writes a nested event into whatever write it interrupted.
void on_signal(int) {
  RingBuffer* rb = g_rb.load(std::memory_order_relaxed);
  if (!rb || t_writer_id == 0) return;
  t_signals.fetch_add(1, std::memory_order_relaxed);
  g_signals.fetch_add(1, std::memory_order_relaxed);
  Payload p = Payload::make(t_writer_id | 0x100, t_nested_seq++, 1);
  if (rb->write<sizeof p>(&p)) g_nested_ok.fetch_add(1, std::memory_order_relaxed);
}

struct Checker {
  uint64_t events = 0;
  uint64_t bad = 0;
  std::vector<uint64_t> last_ts;
  explicit Checker(int cpus) : last_ts(static_cast<size_t>(cpus), 0) {}
  void check(const Event& ev, bool per_cpu_order) {
    ++events;
    Payload p;
    if (ev.len != sizeof p) {
      ++bad;
      return;
    }
    std::memcpy(&p, ev.data, sizeof p);
    if (!p.check()) ++bad;
    if (per_cpu_order) {
      if (ev.ts < last_ts[static_cast<size_t>(ev.cpu)]) ++bad;
      last_ts[static_cast<size_t>(ev.cpu)] = ev.ts;
    }
  }
};

struct Totals {
  uint64_t written = 0, read = 0, overrun = 0, dropped = 0, entries = 0;
  void add(RingBuffer& rb) {
    for (int c = 0; c < rb.nr_cpus(); ++c) {
      CpuStats s = rb.stats(c);
      written += s.written;
      read += s.read_events;
      overrun += s.overrun;
      dropped += s.dropped_events;
      entries += s.entries;
    }
  }
};

class StressTest : public ::testing::TestWithParam<bool> {};

TEST_P(StressTest, EverythingAtOnce) {
  const bool with_swaps = GetParam();
  auto rb = testing::make_buffer(32 * 1024);
  auto spare = testing::make_buffer(16 * 1024);
  ASSERT_NE(rb, nullptr);
  ASSERT_NE(spare, nullptr);
  const int cpus = rb->nr_cpus();
  g_rb = rb.get();
  g_nested_ok = 0;
  g_signals = 0;
  struct sigaction sa = {}, old = {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);

  std::atomic<uint64_t> written_ok{0};
  std::atomic<int> writers_left{kWriters};
  std::vector<pthread_t> handles(kWriters);
  std::atomic<int> started{0};
  std::atomic<bool> control_done{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      t_writer_id = static_cast<uint32_t>(w + 1);
      handles[static_cast<size_t>(w)] = pthread_self();
      started++;
      uint64_t ok = 0;
      // Bounded by counts: the writer's own, the signals it took, and the
      // control rounds below.
      for (uint32_t i = 0; i < kEventsPerWriter || !control_done ||
                           t_signals.load(std::memory_order_relaxed) < kMinNestedPerWriter;
           ++i) {
        Payload p = Payload::make(t_writer_id, i, 0);
        ok += rb->write<sizeof p>(&p);
        if (i % 64 == 0) {  // the variable-size path too
          Payload q = Payload::make(t_writer_id, i, 2);
          ok += rb->write(&q, sizeof q);
        }
      }
      written_ok += ok;
      t_writer_id = 0;
      writers_left--;
    });
  while (started < kWriters) std::this_thread::yield();

  // Signals into the writers, and CPU moves, until the writers are done.
  std::thread interrupter([&] {
    uint64_t n = 0;
    while (writers_left > 0) {
      size_t w = n % kWriters;
      pthread_kill(handles[w], SIGUSR1);
      if (n % 16 == 0 && cpus > 1) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(static_cast<size_t>((n / 16) % static_cast<uint64_t>(cpus)), &set);
        if (n % 48 == 0) CPU_SET(static_cast<size_t>(((n / 16) + 1) % static_cast<uint64_t>(cpus)), &set);
        pthread_setaffinity_np(handles[w], sizeof set, &set);
      }
      ++n;
      std::this_thread::yield();
    }
  });

  // The consumer: per CPU, so each stream's order can be checked (swaps put
  // another buffer's pages under a CPU, so order is checked without them).
  Checker consumed(cpus);
  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    Event ev;
    while (!stop) {
      bool any = false;
      for (int c = 0; c < cpus; ++c)
        while (rb->consume(&ev, c)) {
          consumed.check(ev, !with_swaps);
          any = true;
        }
      if (!any) std::this_thread::yield();
    }
  });

  // Iterators, resizes and (optionally) swaps, a bounded number of times.
  Checker iterated(cpus);
  int iterations = 0, resizes = 0, swaps = 0;
  while (iterations < kRounds) {
    {
      RingBuffer::Iterator it(*rb);
      Checker one(cpus);
      Event ev;
      while (it.next(&ev)) one.check(ev, true);
      iterated.bad += one.bad;
      iterated.events += one.events;
      ++iterations;
    }
    if (iterations % 3 == 0) {
      EXPECT_EQ(rb->resize(-1, (resizes % 2) ? 48 * 1024 : 16 * 1024), 0);
      ++resizes;
    }
    if (with_swaps && iterations % 2 == 0) {
      EXPECT_EQ(rb->swap_cpu(*spare, swaps % 3 == 2 ? -1 : swaps % cpus), 0);
      ++swaps;
    }
  }
  control_done = true;
  for (auto& t : writers) t.join();
  interrupter.join();
  stop = true;
  consumer.join();
  g_rb = nullptr;
  sigaction(SIGUSR1, &old, nullptr);

  // Drain both buffers.
  Event ev;
  while (rb->consume(&ev)) consumed.check(ev, false);
  Checker spare_read(cpus);
  while (spare->consume(&ev)) spare_read.check(ev, false);

  Totals t;
  t.add(*rb);
  t.add(*spare);
  const uint64_t all_ok = written_ok + g_nested_ok;
  EXPECT_EQ(consumed.bad, 0u);
  EXPECT_EQ(iterated.bad, 0u);
  EXPECT_EQ(spare_read.bad, 0u);
  // Nested writes can be refused while a resize has the buffer sealed.
  EXPECT_GE(g_signals.load(), uint64_t{kMinNestedPerWriter} * kWriters);
  EXPECT_GT(g_nested_ok.load(), 0u);
  EXPECT_GT(resizes, 0);
  EXPECT_EQ(t.written, all_ok);
  EXPECT_EQ(t.entries, 0u);
  EXPECT_EQ(t.read, consumed.events + spare_read.events);
  EXPECT_EQ(t.written, t.read + t.overrun + t.dropped);
  RecordProperty("events", static_cast<int>(all_ok));
  RecordProperty("nested", static_cast<int>(g_nested_ok.load()));
  RecordProperty("resizes", resizes);
  RecordProperty("swaps", swaps);
  RecordProperty("iterations", iterations);
}

INSTANTIATE_TEST_SUITE_P(Stress, StressTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "WithSwaps" : "WithoutSwaps");
                         });

}  // namespace
}  // namespace usrtrace::rb
