#include "ring_buffer/ring_buffer.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/rseq.h"
#include "testing/test_util.h"

namespace usrtrace::rb {
namespace {

using testing::make_buffer;
using testing::Payload;
using testing::Pinned;

// Invariant every test ends with: written == read + overrun + dropped +
// entries left, on every CPU.
void expect_accounting(RingBuffer& rb, uint64_t attempted_ok) {
  uint64_t written = 0;
  for (int c = 0; c < rb.nr_cpus(); ++c) {
    CpuStats s = rb.stats(c);
    EXPECT_EQ(s.written, s.read_events + s.overrun + s.entries) << "cpu " << c;
    written += s.written;
  }
  EXPECT_EQ(written, attempted_ok);
}

TEST(RingBufferCreateTest, RejectsBadOptions) {
  Options o;
  int err = 0;
  o.page_size = 3000;
  EXPECT_EQ(RingBuffer::create(o, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  o.page_size = 2048;
  EXPECT_EQ(RingBuffer::create(o, &err), nullptr);
  o.page_size = 131072;
  EXPECT_EQ(RingBuffer::create(o, &err), nullptr);
  o.page_size = 4096;
  o.size_per_cpu = 0;
  EXPECT_EQ(RingBuffer::create(o, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

TEST(RingBufferCreateTest, DefaultSizeIsTheKernels) {
  auto rb = RingBuffer::create(Options{});
  ASSERT_NE(rb, nullptr);
  // 1441792 bytes in pages of 4080 data bytes: 354 pages, 1410 KiB, as the
  // kernel's buffer_size_kb shows by default.
  EXPECT_EQ(rb->nr_pages(0), 354u);
  EXPECT_EQ(rb->size_bytes(0) / 1024, 1410u);
}

TEST(RingBufferTest, WriteThenConsumeInOrder) {
  Pinned pin(0);
  ASSERT_TRUE(pin.ok);
  auto rb = make_buffer();
  for (uint32_t i = 0; i < 1000; ++i) {
    Payload p = Payload::make(1, i, 0);
    ASSERT_TRUE(rb->write<sizeof p>(&p));
  }
  Event ev;
  uint64_t prev_ts = 0;
  for (uint32_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(rb->consume(&ev)) << i;
    EXPECT_EQ(ev.cpu, 0);
    ASSERT_EQ(ev.len, sizeof(Payload));
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    EXPECT_TRUE(p.check());
    EXPECT_EQ(p.seq, i);
    EXPECT_GE(ev.ts, prev_ts);
    EXPECT_FALSE(ev.lost_before);
    prev_ts = ev.ts;
  }
  EXPECT_FALSE(rb->consume(&ev));
  expect_accounting(*rb, 1000);
  EXPECT_EQ(rb->stats(0).read_events, 1000u);
}

// write_at: the event carries the caller's stamp, inline and out of line,
// and a stamp older than the CPU's last one is raised to it (never back).
TEST(RingBufferTest, WriteAtUsesTheCallersStampAndNeverGoesBack) {
  Pinned pin(0);
  ASSERT_TRUE(pin.ok);
  auto rb = make_buffer();
  const uint64_t t0 = clock::rdtsc();
  Payload a = Payload::make(1, 0, 0), b = Payload::make(1, 1, 0), c = Payload::make(1, 2, 0);
  ASSERT_TRUE(rb->write_at<sizeof a>(&a, t0 + 1000));
  ASSERT_TRUE(rb->write_at(&b, sizeof b, t0 + 5000));  // out of line
  ASSERT_TRUE(rb->write_at<sizeof c>(&c, t0 + 2000));  // older than the last: raised
  Event ev;
  ASSERT_TRUE(rb->consume(&ev));
  EXPECT_EQ(ev.ts, t0 + 1000);
  ASSERT_TRUE(rb->consume(&ev));
  EXPECT_EQ(ev.ts, t0 + 5000);
  ASSERT_TRUE(rb->consume(&ev));
  EXPECT_EQ(ev.ts, t0 + 5000);
  Payload p;
  std::memcpy(&p, ev.data, sizeof p);
  EXPECT_EQ(p.seq, 2u);
  EXPECT_FALSE(rb->consume(&ev));
}

TEST(RingBufferTest, EverySizeRoundTrips) {
  Pinned pin(0);
  auto rb = make_buffer(256 * 1024);
  std::vector<uint8_t> src(3000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  uint32_t n = 0;
  for (uint32_t len = 0; len <= 300; ++len, ++n) ASSERT_TRUE(rb->write(src.data(), len));
  ASSERT_TRUE(rb->write(src.data(), 3000));
  // The fixed-size fast path with lengths that are not multiples of 4.
  ASSERT_TRUE(rb->write<13>(src.data()));
  ASSERT_TRUE(rb->write<250>(src.data()));
  Event ev;
  for (uint32_t len = 0; len <= 300; ++len) {
    ASSERT_TRUE(rb->consume(&ev));
    EXPECT_EQ(ev.len, round_up4(len == 0 ? 1 : len));
    EXPECT_EQ(std::memcmp(ev.data, src.data(), len), 0) << len;
    for (uint32_t j = len; j < ev.len; ++j) EXPECT_EQ(ev.data[j], 0) << "stale tail byte, len " << len;
  }
  for (uint32_t len : {3000u, 13u, 250u}) {
    ASSERT_TRUE(rb->consume(&ev));
    EXPECT_EQ(ev.len, round_up4(len));
    EXPECT_EQ(std::memcmp(ev.data, src.data(), len), 0) << len;
    for (uint32_t j = len; j < ev.len; ++j) EXPECT_EQ(ev.data[j], 0);
  }
}

TEST(RingBufferTest, TooLargeIsRefused) {
  auto rb = make_buffer();
  std::vector<uint8_t> big(4096);
  EXPECT_FALSE(rb->write(big.data(), 4096));
  EXPECT_FALSE(rb->write(big.data(), 4096 - 16 - 8));
  EXPECT_TRUE(rb->write(big.data(), 4096 - 36));
}

TEST(RingBufferTest, RecordOffRefusesWrites) {
  auto rb = make_buffer();
  Payload p = Payload::make(1, 1, 0);
  rb->record_off();
  EXPECT_FALSE(rb->record_is_on());
  EXPECT_FALSE(rb->write<sizeof p>(&p));
  EXPECT_FALSE(rb->write(&p, sizeof p));
  rb->record_on();
  EXPECT_TRUE(rb->write<sizeof p>(&p));
  expect_accounting(*rb, 1);
}

TEST(RingBufferTest, OverwriteKeepsTheNewest) {
  Pinned pin(0);
  auto rb = make_buffer(8 * 1024);  // 3 pages: 765 events of 16 bytes at most
  const uint32_t n = 5000;
  for (uint32_t i = 0; i < n; ++i) {
    Payload p = Payload::make(1, i, 0);
    ASSERT_TRUE(rb->write<sizeof p>(&p));
  }
  CpuStats s = rb->stats(0);
  EXPECT_EQ(s.written, n);
  EXPECT_GT(s.overrun, 0u);
  EXPECT_EQ(s.entries + s.overrun, n);
  EXPECT_GT(s.bytes, 0u);
  EXPECT_NE(s.oldest_event_ts, 0u);
  Event ev;
  uint32_t expect = n - static_cast<uint32_t>(s.entries);
  bool first = true;
  while (rb->consume(&ev)) {
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    EXPECT_EQ(p.seq, expect++);
    if (first) {
      EXPECT_TRUE(ev.lost_before);
      EXPECT_EQ(ev.missed_before, s.overrun);
      first = false;
    }
  }
  EXPECT_EQ(expect, n);
  expect_accounting(*rb, n);
}

TEST(RingBufferTest, DiscardDropsTheNewestUntilRead) {
  Pinned pin(0);
  auto rb = make_buffer(8 * 1024, Mode::kDiscard);
  uint32_t ok = 0, refused = 0;
  for (uint32_t i = 0; i < 2000; ++i) {
    Payload p = Payload::make(1, i, 0);
    if (rb->write<sizeof p>(&p))
      ++ok;
    else
      ++refused;
  }
  EXPECT_GT(refused, 0u);
  CpuStats s = rb->stats(0);
  EXPECT_EQ(s.dropped_events, refused);
  EXPECT_EQ(s.overrun, 0u);
  // The oldest events are all there, in order.
  Event ev;
  for (uint32_t i = 0; i < ok; ++i) {
    ASSERT_TRUE(rb->consume(&ev));
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    EXPECT_EQ(p.seq, i);
  }
  // Once read, the space is usable again.
  Payload p = Payload::make(1, 9999, 0);
  for (int i = 0; i < 600; ++i) ASSERT_TRUE(rb->write<sizeof p>(&p)) << i;
  expect_accounting(*rb, ok + 600);
}

TEST(RingBufferTest, ModeSwitchesAtRunTime) {
  Pinned pin(0);
  auto rb = make_buffer(8 * 1024, Mode::kDiscard);
  Payload p = Payload::make(1, 0, 0);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) refused += !rb->write<sizeof p>(&p);
  EXPECT_GT(refused, 0);
  rb->set_mode(Mode::kOverwrite);
  for (int i = 0; i < 2000; ++i) EXPECT_TRUE(rb->write<sizeof p>(&p));
}

TEST(RingBufferTest, ResetEmptiesAndZeroes) {
  Pinned pin(0);
  auto rb = make_buffer();
  Payload p = Payload::make(1, 0, 0);
  for (int i = 0; i < 100; ++i) rb->write<sizeof p>(&p);
  rb->reset();
  CpuStats s = rb->stats(0);
  EXPECT_EQ(s.written, 0u);
  EXPECT_EQ(s.entries, 0u);
  Event ev;
  EXPECT_FALSE(rb->consume(&ev));
  EXPECT_TRUE(rb->write<sizeof p>(&p));
  EXPECT_TRUE(rb->consume(&ev));
}

TEST(RingBufferTest, ResizeKeepsTheNewestAndCountsTheRest) {
  Pinned pin(0);
  auto rb = make_buffer(64 * 1024);
  const uint32_t n = 3000;
  for (uint32_t i = 0; i < n; ++i) {
    Payload p = Payload::make(1, i, 0);
    rb->write<sizeof p>(&p);
  }
  ASSERT_EQ(rb->resize(0, 8 * 1024), 0);  // shrink to 3 pages
  EXPECT_EQ(rb->nr_pages(0), 3u);
  CpuStats s = rb->stats(0);
  EXPECT_EQ(s.written, n);
  EXPECT_LE(s.entries, 3u * 255);
  EXPECT_EQ(s.entries + s.overrun, n);
  ASSERT_EQ(rb->resize(0, 128 * 1024), 0);  // grow: nothing lost
  EXPECT_EQ(rb->stats(0).entries, s.entries);
  for (uint32_t i = n; i < n + 3000; ++i) {
    Payload p = Payload::make(1, i, 0);
    ASSERT_TRUE(rb->write<sizeof p>(&p));
  }
  Event ev;
  uint32_t expect = n - static_cast<uint32_t>(s.entries);
  while (rb->consume(&ev, 0)) {
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    ASSERT_EQ(p.seq, expect++);
  }
  EXPECT_EQ(expect, n + 3000);
  expect_accounting(*rb, n + 3000);
  EXPECT_EQ(rb->resize(0, 0), -EINVAL);
  EXPECT_EQ(rb->resize(rb->nr_cpus(), 4096), -EINVAL);
}

TEST(RingBufferTest, SwapExchangesPagesInConstantTime) {
  Pinned pin(0);
  auto live = make_buffer(1024 * 1024);
  auto spare = make_buffer(16 * 1024);
  for (uint32_t i = 0; i < 100; ++i) {
    Payload p = Payload::make(1, i, 0);
    live->write<sizeof p>(&p);
  }
  uint32_t live_pages = live->nr_pages(0), spare_pages = spare->nr_pages(0);
  ASSERT_EQ(live->swap_cpu(*spare, -1), 0);
  // The page arrays moved: sizes travel with them, nothing was copied.
  EXPECT_EQ(live->nr_pages(0), spare_pages);
  EXPECT_EQ(spare->nr_pages(0), live_pages);
  Event ev;
  EXPECT_FALSE(live->consume(&ev));
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(spare->consume(&ev));
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    EXPECT_EQ(p.seq, i);
  }
  Payload p = Payload::make(1, 100, 0);
  EXPECT_TRUE(live->write<sizeof p>(&p));  // tracing goes on in the new pages
  EXPECT_TRUE(live->consume(&ev));
  auto other_clock = make_buffer();
  other_clock->set_clock(clock::ClockId::kMono);
  EXPECT_EQ(live->swap_cpu(*other_clock, 0), -EINVAL);
}

// The snapshot swap: a detached spare is emptied in O(1), swapped in under
// the control lock, and the events written before stay with the old pages.
TEST(RingBufferTest, ClearDetachedHidesEverythingAndCountsFromZero) {
  Pinned pin(0);
  auto live = make_buffer(64 * 1024);
  auto spare = make_buffer(64 * 1024);
  uint64_t carried = 0;  // events written into live before the round
  for (Mode mode : {Mode::kOverwrite, Mode::kDiscard}) {
    live->set_mode(mode);
    spare->set_mode(mode);
    for (int round = 0; round < 3; ++round) {
      // Fill far past one ring, so both buffers hold overwritten or dropped
      // history that the clear must hide.
      uint64_t ok = 0;
      for (uint32_t i = 0; i < 5000; ++i) {
        Payload p = Payload::make(1, i, 0);
        ok += live->write<sizeof p>(&p) ? 1u : 0u;
      }
      spare->clear_detached();
      Event ev;
      EXPECT_FALSE(spare->peek(&ev));
      EXPECT_EQ(spare->stats(0).written, 0u);
      EXPECT_EQ(spare->stats(0).entries, 0u);
      EXPECT_EQ(spare->stats(0).dropped_events, 0u);
      {
        RingBuffer::ControlGuard g(*live);
        ASSERT_EQ(live->swap_locked(g, *spare, -1), 0);
      }
      // What was live is the spare now, whole; the new live is empty and
      // takes writes from a fresh page, counted from zero.
      EXPECT_EQ(spare->stats(0).written, ok + carried);
      expect_accounting(*spare, ok + carried);
      EXPECT_FALSE(live->peek(&ev));
      for (uint32_t i = 0; i < 10; ++i) {
        Payload p = Payload::make(2, i, 0);
        ASSERT_TRUE(live->write<sizeof p>(&p));
      }
      EXPECT_EQ(live->stats(0).written, 10u);
      RingBuffer::Iterator it(*live);
      for (uint32_t i = 0; i < 10; ++i) {
        ASSERT_TRUE(it.next(&ev));
        Payload p;
        std::memcpy(&p, ev.data, sizeof p);
        EXPECT_EQ(p.writer, 2u);
        EXPECT_EQ(p.seq, i);
      }
      EXPECT_FALSE(it.next(&ev));
      EXPECT_EQ(it.lost(), 0u);
      for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(live->consume(&ev));
      EXPECT_FALSE(live->consume(&ev));
      expect_accounting(*live, 10);
      carried = 10;  // the next round's spare is this round's old live
    }
  }
}

TEST(RingBufferTest, ResizeOfAClearedBufferKeepsWhatCameAfter) {
  Pinned pin(0);
  auto rb = make_buffer(64 * 1024);
  for (uint32_t i = 0; i < 3000; ++i) {
    Payload p = Payload::make(1, i, 0);
    rb->write<sizeof p>(&p);
  }
  rb->clear_detached();
  ASSERT_EQ(rb->resize(0, 32 * 1024), 0);
  Event ev;
  EXPECT_FALSE(rb->peek(&ev));
  for (uint32_t i = 0; i < 5; ++i) {
    Payload p = Payload::make(3, i, 0);
    ASSERT_TRUE(rb->write<sizeof p>(&p));
  }
  rb->clear_detached();
  for (uint32_t i = 0; i < 5; ++i) {
    Payload p = Payload::make(4, i, 0);
    ASSERT_TRUE(rb->write<sizeof p>(&p));
  }
  ASSERT_EQ(rb->resize(0, 128 * 1024), 0);
  for (uint32_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(rb->consume(&ev));
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    EXPECT_EQ(p.writer, 4u);
    EXPECT_EQ(p.seq, i);
  }
  EXPECT_FALSE(rb->consume(&ev));
  expect_accounting(*rb, 5);
}

struct DeferredCount {
  RingBuffer* rb;
  int runs = 0;
};

TEST(RingBufferTest, DeferredWorkRunsNowOrWhenTheHolderUnlocks) {
  auto rb = make_buffer();
  DeferredCount d{rb.get()};
  rb->set_deferred(
      [](void* arg, const RingBuffer::Locked&) {
        auto* dc = static_cast<DeferredCount*>(arg);
        ++dc->runs;
      },
      &d);
  rb->run_deferred();
  EXPECT_EQ(d.runs, 1);  // the lock was free: ran at once
  {
    RingBuffer::ControlGuard g(*rb);
    rb->run_deferred();  // as a signal handler interrupting the holder would
    rb->run_deferred();  // merged with the first
    EXPECT_EQ(d.runs, 1);
  }
  EXPECT_EQ(d.runs, 2);  // ran once, by the holder, at unlock
}

TEST(RingBufferTest, OtherClocks) {
  Pinned pin(0);
  auto rb = make_buffer();
  rb->set_clock(clock::ClockId::kMono);
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  Payload p = Payload::make(1, 0, 0);
  ASSERT_TRUE(rb->write<sizeof p>(&p));
  ASSERT_TRUE(rb->write(&p, sizeof p));
  clock_gettime(CLOCK_MONOTONIC, &b);
  auto ns = [](timespec t) { return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec); };
  Event ev;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(rb->consume(&ev));
    EXPECT_GE(ev.ts, ns(a));
    EXPECT_LE(ev.ts, ns(b));
  }
  rb->set_clock(clock::ClockId::kCounter);
  ASSERT_TRUE(rb->write<sizeof p>(&p));
  ASSERT_TRUE(rb->write<sizeof p>(&p));
  Event e1, e2;
  ASSERT_TRUE(rb->consume(&e1));
  ASSERT_TRUE(rb->consume(&e2));
  EXPECT_EQ(e2.ts, e1.ts + 1);
}

TEST(RingBufferTest, LargerPages) {
  Pinned pin(0);
  for (uint32_t ps : {8192u, 65536u}) {
    auto rb = make_buffer(256 * 1024, Mode::kOverwrite, ps);
    ASSERT_NE(rb, nullptr);
    std::vector<uint8_t> big(ps - 100, 0x5a);
    ASSERT_TRUE(rb->write(big.data(), static_cast<uint32_t>(big.size())));
    for (uint32_t i = 0; i < 20000; ++i) {
      Payload p = Payload::make(1, i, 0);
      ASSERT_TRUE(rb->write<sizeof p>(&p));
    }
    std::vector<uint8_t> page(ps);
    uint32_t total = 0;
    while (uint32_t n = rb->read_page(0, page.data(), page.size(), false)) {
      bool corrupt = false;
      for (auto& e : testing::walk_page(page.data(), &corrupt)) total += !e.payload.empty();
      EXPECT_FALSE(corrupt);
      EXPECT_LE(n, ps - 16);
    }
    CpuStats s = rb->stats(0);
    EXPECT_EQ(total + s.overrun, 20001u) << ps;
  }
}

TEST(RingBufferTest, WaitWakesOnAnyEvent) {
  auto rb = make_buffer();
  std::atomic<int> tid{0};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    tid = static_cast<int>(gettid());
    EXPECT_TRUE(rb->wait(-1, 0));
    done = true;
  });
  // Wait until the reader is asleep in the kernel (state S), by reading its
  // state: a condition, not a timed sleep.
  for (;;) {
    if (tid != 0) {
      std::ifstream st("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
      std::string s((std::istreambuf_iterator<char>(st)), {});
      auto r = s.rfind(')');
      if (r != std::string::npos && r + 2 < s.size() && s[r + 2] == 'S') break;
    }
    sched_yield();
  }
  EXPECT_FALSE(done);
  Payload p = Payload::make(1, 0, 0);
  ASSERT_TRUE(rb->write<sizeof p>(&p));
  reader.join();
  EXPECT_TRUE(done);
  // Writing after the waiter left still works and both events are there.
  ASSERT_TRUE(rb->write<sizeof p>(&p));
  Event ev;
  EXPECT_TRUE(rb->consume(&ev));
  EXPECT_TRUE(rb->consume(&ev));
}

TEST(RingBufferTest, WaitForWatermark) {
  Pinned pin(0);
  auto rb = make_buffer(40 * 1024);  // 11 pages
  const uint32_t pages = rb->nr_pages(0);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    EXPECT_TRUE(rb->wait(0, 50));
    done = true;
  });
  Payload p = Payload::make(1, 0, 0);
  // 255 events of 16 bytes fill a page. Below half the pages: no wake-up.
  uint32_t per_page = (4096 - 16) / 16;
  for (uint32_t i = 0; i < per_page * (pages / 2 - 2); ++i) rb->write<sizeof p>(&p);
  EXPECT_FALSE(done);
  for (uint32_t i = 0; i < per_page * 4; ++i) rb->write<sizeof p>(&p);
  reader.join();
  EXPECT_TRUE(done);
}

TEST(RingBufferTest, WakeWaitersReleasesAReaderWithoutData) {
  auto rb = make_buffer();
  std::atomic<int> result{-1};
  std::thread reader([&] { result = rb->wait(-1, 100) ? 1 : 0; });
  while (result == -1) {
    rb->wake_waiters();
    sched_yield();
  }
  reader.join();
  EXPECT_EQ(result, 0);
}

// With glibc's rseq registration turned off (GLIBC_TUNABLES), threads reach
// the trap slots, and the slow path registers them (rseq_child.cc).
TEST(RseqDisabledTest, ThreadsRegisterThemselves) {
  std::string cmd = std::string("GLIBC_TUNABLES=glibc.pthread.rseq=0 ") + USRTRACE_RSEQ_CHILD;
  EXPECT_EQ(system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace usrtrace::rb
