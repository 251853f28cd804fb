// The three readers: consume (trace_pipe), Iterator (trace) and read_page
// (trace_pipe_raw), alone and while writers go on.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "testing/test_util.h"

namespace usrtrace::rb {
namespace {

using testing::make_buffer;
using testing::Payload;
using testing::Pinned;

Payload payload_of(const Event& ev) {
  Payload p;
  std::memcpy(&p, ev.data, sizeof p);
  return p;
}

// `n` self-checking events from the calling thread, seq 0..n-1.
void write_seq(RingBuffer& rb, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    Payload p = Payload::make(0, i, 0);
    ASSERT_TRUE(rb.write<sizeof p>(&p));
  }
}

// Two threads, one per CPU, so both CPU streams have events.
void write_on_both_cpus(RingBuffer& rb, uint32_t per_cpu) {
  std::vector<std::thread> ts;
  for (int cpu = 0; cpu < 2; ++cpu)
    ts.emplace_back([&rb, cpu, per_cpu] {
      Pinned pin(cpu);
      for (uint32_t i = 0; i < per_cpu; ++i) {
        Payload p = Payload::make(static_cast<uint32_t>(cpu), i, 0);
        rb.write<sizeof p>(&p);
      }
    });
  for (auto& t : ts) t.join();
}

TEST(IteratorTest, MergesCpusByTimeWithoutConsuming) {
  auto rb = make_buffer(256 * 1024);
  if (rb->nr_cpus() < 2) GTEST_SKIP() << "needs two CPUs";
  write_on_both_cpus(*rb, 2000);
  uint32_t next[2] = {0, 0};
  uint64_t prev = 0;
  RingBuffer::Iterator it(*rb);
  Event ev;
  int n = 0;
  while (it.next(&ev)) {
    Payload p = payload_of(ev);
    ASSERT_TRUE(p.check());
    ASSERT_EQ(static_cast<int>(p.writer), ev.cpu);
    EXPECT_EQ(p.seq, next[p.writer]++);
    EXPECT_GE(ev.ts, prev);
    prev = ev.ts;
    ++n;
  }
  EXPECT_EQ(n, 4000);
  EXPECT_EQ(it.lost(), 0u);
  // Nothing was consumed: trace_pipe still gets everything.
  int consumed = 0;
  while (rb->consume(&ev)) ++consumed;
  EXPECT_EQ(consumed, 4000);
}

TEST(IteratorTest, StartsAtTheConsumer) {
  Pinned pin(0);
  auto rb = make_buffer();
  write_seq(*rb, 100);
  Event ev;
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(rb->consume(&ev, 0));
  RingBuffer::Iterator it(*rb);
  ASSERT_TRUE(it.next(&ev));
  EXPECT_EQ(payload_of(ev).seq, 30u);
  int n = 1;
  while (it.next(&ev)) ++n;
  EXPECT_EQ(n, 70);
}

TEST(IteratorTest, ConsistentWhileWritersWrap) {
  // A small ring wrapped many times while it is iterated: every event that
  // comes out is intact and in order; the iterator ends.
  auto rb = make_buffer(16 * 1024);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Pinned pin(1 % rb->nr_cpus());
    for (uint32_t i = 0; !stop; ++i) {
      Payload p = Payload::make(7, i, 0);
      rb->write<sizeof p>(&p);
    }
  });
  for (int round = 0; round < 200; ++round) {
    RingBuffer::Iterator it(*rb);
    Event ev;
    int64_t last = -1;
    while (it.next(&ev)) {
      Payload p = payload_of(ev);
      ASSERT_TRUE(p.check());
      ASSERT_GT(static_cast<int64_t>(p.seq), last);
      last = p.seq;
    }
  }
  stop = true;
  writer.join();
}

// ---- DumpIterator: the crash dump's Iterator (no lock, no allocation).

struct Seen {
  int cpu;
  uint64_t ts;
  uint32_t writer, seq;
  uint64_t missed;
  bool operator==(const Seen&) const = default;
};

template <class It>
std::vector<Seen> drain_iterator(It& it) {
  std::vector<Seen> out;
  Event ev;
  while (it.next(&ev)) {
    Payload p = payload_of(ev);
    EXPECT_TRUE(p.check());
    out.push_back({ev.cpu, ev.ts, p.writer, p.seq, ev.missed_before});
  }
  return out;
}

TEST(DumpIteratorTest, SameEventsAsIteratorFromTheConsumer) {
  auto rb = make_buffer(256 * 1024);
  if (rb->nr_cpus() < 2) GTEST_SKIP() << "needs two CPUs";
  write_on_both_cpus(*rb, 2000);
  Event ev;
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(rb->consume(&ev, 0));
  RingBuffer::Iterator it(*rb);
  const std::vector<Seen> want = drain_iterator(it);
  ASSERT_EQ(want.size(), 3970u);
  RingBuffer::DumpIterator dump(rb->nr_cpus(), kMaxPageSize);
  for (int round = 0; round < 2; ++round) {  // start() starts over
    dump.start(*rb, -1);
    EXPECT_EQ(drain_iterator(dump), want);
    EXPECT_EQ(dump.lost(), 0u);
    EXPECT_EQ(dump.skipped(), 0);
  }
  // Nothing was consumed by it.
  int consumed = 0;
  while (rb->consume(&ev)) ++consumed;
  EXPECT_EQ(consumed, 3970);
}

TEST(DumpIteratorTest, OneCpu) {
  auto rb = make_buffer(256 * 1024);
  if (rb->nr_cpus() < 2) GTEST_SKIP() << "needs two CPUs";
  write_on_both_cpus(*rb, 500);
  RingBuffer::DumpIterator dump(rb->nr_cpus(), kMaxPageSize);
  dump.start(*rb, 1);
  const std::vector<Seen> got = drain_iterator(dump);
  ASSERT_EQ(got.size(), 500u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].cpu, 1);
    EXPECT_EQ(got[i].seq, i);
  }
  dump.start(*rb, rb->nr_cpus());  // no such CPU: nothing
  EXPECT_TRUE(drain_iterator(dump).empty());
}

TEST(DumpIteratorTest, OverwrittenEventsAreLostBeforeTheFirst) {
  Pinned pin(0);
  auto rb = make_buffer(16 * 1024);
  write_seq(*rb, 10000);
  const uint64_t overrun = rb->stats(0).overrun;
  ASSERT_GT(overrun, 0u);
  RingBuffer::DumpIterator dump(rb->nr_cpus(), kMaxPageSize);
  dump.start(*rb, 0);
  const std::vector<Seen> got = drain_iterator(dump);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front().missed, overrun);
  EXPECT_EQ(got.front().seq, overrun);  // the oldest kept event
  EXPECT_EQ(got.back().seq, 9999u);
  EXPECT_EQ(got.size() + overrun, 10000u);
  EXPECT_EQ(dump.lost(), overrun);
}

TEST(DumpIteratorTest, CpusWithLargerPagesAreSkipped) {
  Pinned pin(0);
  auto rb = make_buffer(64 * 1024, Mode::kOverwrite, 8192);
  write_seq(*rb, 10);
  RingBuffer::DumpIterator dump(rb->nr_cpus(), 4096);
  dump.start(*rb, -1);
  EXPECT_TRUE(drain_iterator(dump).empty());
  EXPECT_EQ(dump.skipped(), rb->nr_cpus());
  RingBuffer::DumpIterator fits(1, 8192);  // fewer CPUs prepared than the buffer has
  fits.start(*rb, -1);
  EXPECT_EQ(drain_iterator(fits).size(), 10u);
  EXPECT_EQ(fits.skipped(), rb->nr_cpus() - 1);
}

TEST(DumpIteratorTest, ConsistentWhileWritersWrap) {
  auto rb = make_buffer(16 * 1024);
  RingBuffer::DumpIterator dump(rb->nr_cpus(), kMaxPageSize);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Pinned pin(1 % rb->nr_cpus());
    for (uint32_t i = 0; !stop; ++i) {
      Payload p = Payload::make(7, i, 0);
      rb->write<sizeof p>(&p);
    }
  });
  for (int round = 0; round < 200; ++round) {
    dump.start(*rb, -1);
    Event ev;
    int64_t last = -1;
    while (dump.next(&ev)) {
      Payload p = payload_of(ev);
      ASSERT_TRUE(p.check());
      ASSERT_GT(static_cast<int64_t>(p.seq), last);
      last = p.seq;
    }
  }
  stop = true;
  writer.join();
}

// Reads CPU 0's full pages one by one; every record's seq must follow
// *seq, which ends one past the last. The number of pages.
uint32_t read_full_pages(RingBuffer& rb, std::vector<uint8_t>* page, uint32_t* seq) {
  uint32_t pages = 0;
  while (rb.read_page(0, page->data(), page->size(), true) > 0) {
    for (auto& e : testing::walk_page(page->data())) {
      if (e.payload.empty()) continue;
      Payload p;
      std::memcpy(&p, e.payload.data(), sizeof p);
      EXPECT_EQ(p.seq, (*seq)++);
    }
    ++pages;
  }
  return pages;
}
TEST(ReadPageTest, FullOnlyWaitsForClosedPages) {
  Pinned pin(0);
  auto rb = make_buffer();
  std::vector<uint8_t> page(4096);
  for (uint32_t i = 0; i < 10; ++i) {
    Payload p = Payload::make(0, i, 0);
    rb->write<sizeof p>(&p);
  }
  EXPECT_EQ(rb->read_page(0, page.data(), page.size(), true), 0u);
  EXPECT_EQ(rb->read_page(0, page.data(), 100, false), 0u) << "buffer too small";
  EXPECT_EQ(rb->read_page(0, page.data(), page.size(), false), 10u * 20);
  EXPECT_EQ(rb->read_page(0, page.data(), page.size(), false), 0u) << "all handed out";
  EXPECT_EQ(rb->stats(0).read_events, 10u);
  for (uint32_t i = 10; i < 600; ++i) {
    Payload p = Payload::make(0, i, 0);
    rb->write<sizeof p>(&p);
  }
  // The rest of the first page (after the 10 handed out), then the next.
  uint32_t seq = 10;
  EXPECT_EQ(read_full_pages(*rb, &page, &seq), 2u);
  Event ev;
  ASSERT_TRUE(rb->consume(&ev, 0));
  EXPECT_EQ(payload_of(ev).seq, seq);
}

// A full_only read that found the tail page open looks at the page again
// next time: its copy said "tail" for good once taken, so while the writer
// filled that page and went on, every full_only read stayed empty (kPages
// of the control socket got nothing; found by bench/control_bench.cc).
TEST(ReadPageTest, FullOnlyRetakesThePageThatWasTheTail) {
  Pinned pin(0);
  auto rb = make_buffer();
  std::vector<uint8_t> page(4096);
  write_seq(*rb, 10);
  EXPECT_EQ(rb->read_page(0, page.data(), page.size(), true), 0u);
  for (uint32_t i = 10; i < 600; ++i) {
    Payload p = Payload::make(0, i, 0);
    ASSERT_TRUE(rb->write<sizeof p>(&p));
  }
  uint32_t seq = 0;
  EXPECT_EQ(read_full_pages(*rb, &page, &seq), 2u);
  Event ev;
  ASSERT_TRUE(rb->consume(&ev, 0));
  EXPECT_EQ(payload_of(ev).seq, seq);
}

TEST(ReadPageTest, ConsumedPrefixBecomesPaddingWithExactTimes) {
  Pinned pin(0);
  auto rb = make_buffer();
  write_seq(*rb, 50);
  // Record every event's time through the iterator, then consume 20.
  std::vector<uint64_t> ts;
  {
    RingBuffer::Iterator it(*rb);
    Event ev;
    while (it.next(&ev)) ts.push_back(ev.ts);
  }
  ASSERT_EQ(ts.size(), 50u);
  Event ev;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(rb->consume(&ev, 0));
  std::vector<uint8_t> page(4096);
  ASSERT_GT(rb->read_page(0, page.data(), page.size(), false), 0u);
  auto entries = testing::walk_page(page.data());
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries[0].type_len, kTypePadding);
  size_t i = 20;
  for (size_t k = 1; k < entries.size(); ++k) {
    ASSERT_LT(i, ts.size());
    EXPECT_EQ(entries[k].ts, ts[i]) << "event " << i;
    Payload p;
    std::memcpy(&p, entries[k].payload.data(), sizeof p);
    EXPECT_EQ(p.seq, i);
    ++i;
  }
  EXPECT_EQ(i, 50u);
  EXPECT_EQ(rb->stats(0).read_events, 50u);
}

TEST(ReadPageTest, LostPagesAreReportedOnTheNextPage) {
  Pinned pin(0);
  auto rb = make_buffer(8 * 1024);  // 3 pages
  for (uint32_t i = 0; i < 3000; ++i) {
    Payload p = Payload::make(0, i, 0);
    rb->write<sizeof p>(&p);
  }
  CpuStats before = rb->stats(0);
  ASSERT_GT(before.overrun, 0u);
  std::vector<uint8_t> page(4096);
  ASSERT_GT(rb->read_page(0, page.data(), page.size(), false), 0u);
  PageHeader h;
  std::memcpy(&h, page.data(), sizeof h);
  EXPECT_TRUE(h.commit & kMissedEvents);
  ASSERT_TRUE(h.commit & kMissedStored);
  uint64_t count;
  std::memcpy(&count, page.data() + 16 + (h.commit & kCommitLengthMask), 8);
  EXPECT_EQ(count, before.overrun);
  while (rb->read_page(0, page.data(), page.size(), false) > 0) {
    std::memcpy(&h, page.data(), sizeof h);
    EXPECT_FALSE(h.commit & kMissedEvents);
  }
  CpuStats after = rb->stats(0);
  EXPECT_EQ(after.read_events + after.overrun, 3000u);
  EXPECT_EQ(after.entries, 0u);
}

TEST(ConsumeTest, ReaderAndWriterConcurrently) {
  // A consuming reader keeps up with a writer on another CPU: every event
  // once, in order, none lost in a big enough buffer.
  auto rb = make_buffer(1024 * 1024, Mode::kDiscard);
  const uint32_t n = 200000;
  std::atomic<uint32_t> ok{0};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    Pinned pin(1 % rb->nr_cpus());
    for (uint32_t i = 0; i < n; ++i) {
      Payload p = Payload::make(1, ok.load(), 0);
      if (rb->write<sizeof p>(&p)) ok++;
    }
    done = true;
  });
  uint32_t next = 0;
  Event ev;
  while (!done) {
    if (!rb->consume(&ev)) continue;
    Payload p = payload_of(ev);
    ASSERT_TRUE(p.check());
    ASSERT_EQ(p.seq, next++);
  }
  writer.join();
  while (rb->consume(&ev)) {
    ASSERT_EQ(payload_of(ev).seq, next++);
  }
  EXPECT_EQ(next, ok.load());
  CpuStats s = rb->stats(1 % rb->nr_cpus());
  EXPECT_EQ(s.written, ok.load());
  EXPECT_EQ(s.read_events, ok.load());
  EXPECT_EQ(ok.load() + s.dropped_events, n);
}

}  // namespace
}  // namespace usrtrace::rb
