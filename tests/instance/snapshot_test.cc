// Snapshots: the control files, the API from threads and signal handlers,
// the ring of kept snapshots, and exact accounting across the swap.
#include "instance/snapshot.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "events/registry.h"
#include "instance/instance.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(snaptest, tick, (uint32_t, writer)(uint32_t, seq), "writer=%u seq=%u", REC->writer, REC->seq)

namespace usrtrace::instance {
namespace {

struct Tick {
  uint32_t writer;
  uint32_t seq;
};

// Every snaptest:tick in `rb`, in time order, without consuming.
std::vector<Tick> ticks(rb::RingBuffer& rb) {
  std::vector<Tick> out;
  rb::RingBuffer::Iterator it(rb);
  rb::Event ev;
  while (it.next(&ev)) {
    uint16_t type;
    std::memcpy(&type, ev.data, sizeof type);
    if (type != events::Registry::get().find("snaptest", "tick")->id) continue;
    Tick t;
    std::memcpy(&t, ev.data + 8, sizeof t);
    out.push_back(t);
  }
  return out;
}

uint64_t lost(rb::RingBuffer& rb) {
  uint64_t n = 0;
  for (int c = 0; c < rb.nr_cpus(); ++c) n += rb.stats(c).overrun + rb.stats(c).dropped_events;
  return n;
}

// Every test runs on the top instance and on a new one.
class SnapshotTest : public testing::InstanceTest {
 protected:
  void SetUp() override {
    InstanceTest::SetUp();
    if (HasFatalFailure()) return;
    inst_ = inst();
    inst_->set_event("snaptest", "tick", true);
  }
  std::string read(const std::string& f) {
    std::string out;
    EXPECT_GE(tracefs::read_file(path(f), &out), 0) << f;
    return out;
  }
  Instance* inst_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, SnapshotTest, ::testing::Values("", "snaptest"), testing::top_or_new);

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_P(SnapshotTest, TheFilesDoWhatTheKernelsDo) {
  EXPECT_EQ(read("snapshot_enabled"), "0\n");
  EXPECT_NE(read("snapshot").find("# * Snapshot is freed *"), std::string::npos);
  for (uint32_t i = 0; i < 5; ++i) trace_snaptest_tick(1, i);
  // echo 1: allocates and swaps.
  ASSERT_EQ(tracefs::write_file(path("snapshot"), "1\n"), 2);
  EXPECT_EQ(read("snapshot_enabled"), "1\n");
  std::string snap = read("snapshot");
  EXPECT_NE(snap.find("# snapshot: #1 (newest, ring of 1)"), std::string::npos) << snap;
  EXPECT_EQ(count(snap, "tick: "), 5u) << snap;
  EXPECT_EQ(count(snap, "writer=1 seq=4"), 1u);
  EXPECT_EQ(count(read("trace"), "tick: "), 0u);  // live goes on, empty
  trace_snaptest_tick(2, 0);
  EXPECT_EQ(count(read("trace"), "writer=2 seq=0"), 1u);
  EXPECT_EQ(count(read("snapshot"), "writer=2"), 0u);
  // Per CPU: only that CPU's events.
  std::string per_cpu_total;
  for (int c = 0; c < inst_->buffer().nr_cpus(); ++c)
    per_cpu_total += read("per_cpu/cpu" + std::to_string(c) + "/snapshot");
  EXPECT_EQ(count(per_cpu_total, "tick: "), 5u);
  // A reason after the 1 shows at the head.
  ASSERT_GT(tracefs::write_file(path("snapshot"), "1 request 42 timed out\n"), 0);
  snap = read("snapshot");
  EXPECT_NE(snap.find("# snapshot: #2"), std::string::npos);
  EXPECT_NE(snap.find("# reason: request 42 timed out"), std::string::npos) << snap;
  EXPECT_EQ(count(snap, "writer=2 seq=0"), 1u);
  EXPECT_EQ(count(snap, "writer=1"), 0u);  // snapshot #1 was given up (ring of 1)
  // echo 2: empties it, keeps the memory.
  ASSERT_GT(tracefs::write_file(path("snapshot"), "2\n"), 0);
  EXPECT_EQ(count(read("snapshot"), "tick: "), 0u);
  EXPECT_EQ(read("snapshot_enabled"), "1\n");
  // snapshot_raw: the snapshot's pages, consumed, never waiting.
  trace_snaptest_tick(3, 0);
  ASSERT_GT(tracefs::write_file(path("snapshot"), "1\n"), 0);
  size_t raw_bytes = 0;
  for (int c = 0; c < inst_->buffer().nr_cpus(); ++c) {
    std::string raw;
    ASSERT_GE(tracefs::read_file(path("per_cpu/cpu" + std::to_string(c) + "/snapshot_raw"), &raw), 0);
    EXPECT_EQ(raw.size() % 4096, 0u);
    raw_bytes += raw.size();
  }
  EXPECT_EQ(raw_bytes, 4096u);  // one page holds the one event
  // echo 0: frees.
  ASSERT_EQ(tracefs::write_file(path("snapshot"), "0\n"), 2);
  EXPECT_EQ(read("snapshot_enabled"), "0\n");
  // snapshot_enabled is the LinuxCon 2012 alias: 1 allocates, 0 frees.
  ASSERT_EQ(tracefs::write_file(path("snapshot_enabled"), "1\n"), 2);
  EXPECT_TRUE(inst_->snapshots().allocated());
  EXPECT_EQ(inst_->snapshots().taken(), 0u);  // allocating is not taking
  ASSERT_EQ(tracefs::write_file(path("snapshot_enabled"), "0\n"), 2);
  EXPECT_FALSE(inst_->snapshots().allocated());
}

TEST_P(SnapshotTest, BadWritesFailWithAnErrorLogLine) {
  tracefs::write_file(path("error_log"), "");
  EXPECT_EQ(tracefs::write_file(path("snapshot"), "x\n"), -EINVAL);
  EXPECT_EQ(tracefs::write_file(path("snapshot"), "0 why\n"), -EINVAL);
  EXPECT_EQ(tracefs::write_file(path("per_cpu/cpu0/snapshot"), "0\n"), -EINVAL);
  EXPECT_EQ(tracefs::write_file(path("snapshot_enabled"), "2\n"), -EINVAL);
  EXPECT_EQ(tracefs::write_file(path("snapshot_ring_size"), "0\n"), -EINVAL);
  EXPECT_EQ(tracefs::write_file(path("snapshot_ring_size"), "17\n"), -EINVAL);
  EXPECT_EQ(tracefs::write_file(path("snapshot_ring_size"), "99999999999999999999999\n"), -ERANGE);
  const std::string log = read("error_log");
  EXPECT_EQ(count(log, "snapshot: error: "), 7u) << log;
  EXPECT_NE(log.find("Invalid number"), std::string::npos);
  EXPECT_NE(log.find("Only the whole snapshot can be freed"), std::string::npos);
  EXPECT_NE(log.find("Snapshot ring size must be between 1 and 16"), std::string::npos);
  // Freeing while a snapshot is read: EBUSY, and it stays.
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  {
    Snapshots::Ref r = inst_->snapshots().get(0);
    ASSERT_TRUE(r);
    EXPECT_EQ(tracefs::write_file(path("snapshot"), "0\n"), -EBUSY);
    EXPECT_EQ(tracefs::write_file(path("snapshot_ring_size"), "3\n"), -EBUSY);
  }
  EXPECT_NE(read("error_log").find("Snapshot is being read"), std::string::npos);
  EXPECT_EQ(tracefs::write_file(path("snapshot"), "0\n"), 2);
  std::string out;
  EXPECT_EQ(tracefs::read_file(path("snapshot.1"), &out), -ENOENT);  // ring of 1
}

TEST_P(SnapshotTest, NotAllocatedStopsTracingAsTheKernelDoes) {
  trace_snaptest_tick(1, 0);
  EXPECT_EQ(inst_->snapshots().take("boom"), -ENOENT);
  EXPECT_FALSE(inst_->tracing_on());
  const std::string t = read("trace");
  EXPECT_NE(t.find("*** SNAPSHOT NOT ALLOCATED ***"), std::string::npos) << t;
  EXPECT_NE(t.find("*** stopping trace here!   ***"), std::string::npos);
  EXPECT_EQ(count(t, "writer=1 seq=0"), 1u);
  inst_->set_tracing_on(true);
}

TEST_P(SnapshotTest, TheRingKeepsTheLastN) {
  ASSERT_EQ(tracefs::write_file(path("snapshot_ring_size"), "3\n"), 2);
  EXPECT_EQ(read("snapshot_ring_size"), "3\n");
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  std::vector<std::string> names;
  ASSERT_EQ(tracefs::list(dir(), &names), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "snapshot.1"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "snapshot.2"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "snapshot.3"), 0);
  for (uint32_t k = 1; k <= 5; ++k) {
    for (uint32_t i = 0; i < 10; ++i) trace_snaptest_tick(k, i);
    ASSERT_EQ(inst_->snapshots().take("error " + std::to_string(k)), 0);
  }
  // snapshot is #5, snapshot.1 #4, snapshot.2 #3: each with its own events.
  const char* files[] = {"snapshot", "snapshot.1", "snapshot.2"};
  for (uint32_t age = 0; age < 3; ++age) {
    const uint32_t k = 5 - age;
    const std::string s = read(files[age]);
    EXPECT_NE(s.find("# snapshot: #" + std::to_string(k)), std::string::npos) << s;
    EXPECT_NE(s.find("# reason: error " + std::to_string(k) + "\n"), std::string::npos) << s;
    EXPECT_EQ(count(s, "tick: "), 10u) << s;
    EXPECT_EQ(count(s, "writer=" + std::to_string(k) + " "), 10u) << s;
  }
  EXPECT_EQ(count(read("trace"), "tick: "), 0u);
}

// The issue's case: a recoverable error while a hog thread keeps writing.
// The snapshot holds what led to the error, the live buffer keeps
// recording, and every event lands in exactly one of the two.
TEST_P(SnapshotTest, AHogKeepsWritingAndNoEventIsLostAroundTheSwap) {
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  std::atomic<uint32_t> hog_written{0};
  // The hog writes until 1000 events after the swap. Before it, it never
  // runs more than kAhead events ahead (it waits, still polling), so the
  // buffers (1.4 MiB per CPU) hold everything and the accounting is exact
  // whatever the scheduler does.
  constexpr uint32_t kAhead = 20000;
  std::thread hog([&] {
    uint32_t i = 0, after = 0;
    while (after < 1000) {
      const bool swapped = inst_->snapshots().taken() != 0;
      if (!swapped && i >= kAhead) {
        sched_yield();
        continue;
      }
      trace_snaptest_tick(0, i++);
      hog_written.store(i, std::memory_order_release);
      if (swapped) ++after;
    }
  });
  while (hog_written.load(std::memory_order_acquire) < 100) sched_yield();
  for (uint32_t i = 0; i < 50; ++i) trace_snaptest_tick(1, i);  // what leads to the error
  ASSERT_EQ(inst_->snapshots().take("the error"), 0);
  for (uint32_t i = 50; i < 100; ++i) trace_snaptest_tick(1, i);  // after it
  hog.join();
  const uint32_t hog_total = hog_written.load();

  Snapshots::Ref ref = inst_->snapshots().get(0);
  ASSERT_TRUE(ref);
  EXPECT_EQ(lost(ref.buffer()), 0u);
  EXPECT_EQ(lost(inst_->buffer()), 0u);
  const std::vector<Tick> snap = ticks(ref.buffer());
  const std::vector<Tick> live = ticks(inst_->buffer());
  // The erroring thread: 0..49 in the snapshot, 50..99 live, in order.
  std::vector<uint32_t> mine_snap, mine_live;
  for (const Tick& t : snap)
    if (t.writer == 1) mine_snap.push_back(t.seq);
  for (const Tick& t : live)
    if (t.writer == 1) mine_live.push_back(t.seq);
  ASSERT_EQ(mine_snap.size(), 50u);
  ASSERT_EQ(mine_live.size(), 50u);
  for (uint32_t i = 0; i < 50; ++i) {
    EXPECT_EQ(mine_snap[i], i);
    EXPECT_EQ(mine_live[i], 50 + i);
  }
  // The hog: every event exactly once in the union, none in neither.
  std::vector<int> seen(hog_total, 0);
  for (const auto* v : {&snap, &live})
    for (const Tick& t : *v)
      if (t.writer == 0) {
        ASSERT_LT(t.seq, hog_total);
        ++seen[t.seq];
      }
  for (uint32_t i = 0; i < hog_total; ++i) ASSERT_EQ(seen[i], 1) << "hog event " << i;
  // The live buffer kept recording after the swap.
  bool hog_after = false;
  for (const Tick& t : live) hog_after |= t.writer == 0;
  EXPECT_TRUE(hog_after);
}

Instance* g_signal_inst = nullptr;
void snapshot_from_handler(int) { g_signal_inst->snapshots().take("from a signal handler"); }

// SIGUSR1 takes a snapshot of `inst` while this lives.
class SnapshotOnSigusr1 {
 public:
  explicit SnapshotOnSigusr1(Instance* inst) {
    g_signal_inst = inst;
    struct sigaction sa {};
    sa.sa_handler = snapshot_from_handler;
    EXPECT_EQ(sigaction(SIGUSR1, &sa, &old_), 0);
  }
  ~SnapshotOnSigusr1() { sigaction(SIGUSR1, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

// A signal handler that interrupts the holder of the control lock cannot
// wait for it: its snapshot runs when the holder unlocks.
TEST_P(SnapshotTest, FromASignalHandlerThatInterruptedTheLockHolder) {
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  SnapshotOnSigusr1 handler(inst_);
  for (uint32_t i = 0; i < 3; ++i) trace_snaptest_tick(1, i);
  {
    rb::RingBuffer::ControlGuard g(inst_->buffer());
    raise(SIGUSR1);
    raise(SIGUSR1);  // merged into the first: one snapshot serves both
    EXPECT_EQ(inst_->snapshots().taken(), 0u);
    trace_snaptest_tick(1, 3);  // written before the swap: in the snapshot
  }
  EXPECT_EQ(inst_->snapshots().taken(), 1u);
  {
    Snapshots::Ref r = inst_->snapshots().get(0);
    ASSERT_TRUE(r);
    EXPECT_EQ(r.info().number, 1u);
    EXPECT_EQ(r.info().merged, 1u);
    EXPECT_STREQ(r.info().reason, "from a signal handler");
    const std::vector<Tick> t = ticks(r.buffer());
    ASSERT_EQ(t.size(), 4u);  // 0..2 before the signals, 3 before the unlock
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(t[i].seq, i);
  }
  raise(SIGUSR1);  // the lock is free: at once
  EXPECT_EQ(inst_->snapshots().taken(), 2u);
  // A ring of 1: #2 gave #1 up and holds what was written since #1.
  Snapshots::Ref r = inst_->snapshots().get(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r.info().number, 2u);
  EXPECT_EQ(ticks(r.buffer()).size(), 0u);  // nothing written between #1 and #2
}

TEST_P(SnapshotTest, MergedRequestsAreCountedAtTheHead) {
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  SnapshotOnSigusr1 handler(inst_);
  trace_snaptest_tick(1, 0);
  {
    rb::RingBuffer::ControlGuard g(inst_->buffer());
    raise(SIGUSR1);
    raise(SIGUSR1);
    raise(SIGUSR1);
  }
  EXPECT_EQ(inst_->snapshots().taken(), 1u);
  const std::string s = read("snapshot");
  EXPECT_NE(s.find("# requests merged into it: 2"), std::string::npos) << s;
  EXPECT_NE(s.find("# reason: from a signal handler"), std::string::npos) << s;
  EXPECT_EQ(count(s, "writer=1 seq=0"), 1u);
}

// Writers on every CPU, snapshots from another thread and from signal
// handlers on the writers, all at once: with a ring large enough to keep
// every snapshot, each event is in exactly one buffer.
TEST_P(SnapshotTest, ConcurrentSnapshotsLoseNothing) {
  ASSERT_EQ(inst_->snapshots().set_ring_size(kMaxSnapshotRing), 0);
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  SnapshotOnSigusr1 handler(inst_);
  constexpr uint32_t kWriters = 3, kPerWriter = 6000;
  std::vector<std::thread> writers;
  std::vector<pthread_t> handles(kWriters);
  std::atomic<uint32_t> ready{0};
  for (uint32_t w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      handles[w] = pthread_self();
      ready.fetch_add(1);
      for (uint32_t i = 0; i < kPerWriter; ++i) trace_snaptest_tick(w, i);
    });
  }
  while (ready.load() < kWriters) sched_yield();
  // 14 snapshots: 7 from this thread, 7 from handlers on the writers; the
  // ring of 16 keeps them all. Some may merge; none may lose events.
  for (int k = 0; k < 7; ++k) {
    inst_->snapshots().take("thread");
    pthread_kill(handles[static_cast<size_t>(k) % kWriters], SIGUSR1);
    sched_yield();
  }
  for (auto& t : writers) t.join();
  const uint64_t taken = inst_->snapshots().taken();
  EXPECT_GE(taken, 1u);
  ASSERT_LE(taken, static_cast<uint64_t>(kMaxSnapshotRing));

  std::vector<std::vector<int>> seen(kWriters, std::vector<int>(kPerWriter, 0));
  auto tally = [&](rb::RingBuffer& rb) {
    EXPECT_EQ(lost(rb), 0u);
    for (const Tick& t : ticks(rb)) {
      ASSERT_LT(t.writer, kWriters);
      ASSERT_LT(t.seq, kPerWriter);
      ++seen[t.writer][t.seq];
    }
  };
  tally(inst_->buffer());
  for (int age = 0; age < static_cast<int>(taken); ++age) {
    Snapshots::Ref r = inst_->snapshots().get(age);
    ASSERT_TRUE(r);
    tally(r.buffer());
  }
  for (uint32_t w = 0; w < kWriters; ++w)
    for (uint32_t i = 0; i < kPerWriter; ++i) ASSERT_EQ(seen[w][i], 1) << "writer " << w << " seq " << i;
}

}  // namespace
}  // namespace usrtrace::instance
