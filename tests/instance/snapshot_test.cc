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

// SIGUSR1 takes a snapshot of `inst` while this lives (`handler`, which
// finds it in g_signal_inst).
class SnapshotOnSigusr1 {
 public:
  explicit SnapshotOnSigusr1(Instance* inst, void (*handler)(int) = snapshot_from_handler) {
    g_signal_inst = inst;
    struct sigaction sa {};
    sa.sa_handler = handler;
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

// The scores of the kept snapshots, by age (0: the most recently taken).
std::vector<uint64_t> kept_scores(Snapshots& snaps) {
  std::vector<uint64_t> out;
  for (int age = 0; age < snaps.ring_size(); ++age) {
    Snapshots::Ref r = snaps.get(age);
    if (r && r.info().number != 0) out.push_back(r.info().score);
  }
  return out;
}

// The issue's case: a latency trigger keeps the worst cases, not the newest.
TEST_P(SnapshotTest, ScoredTakesKeepTheWorstN) {
  ASSERT_EQ(inst_->snapshots().set_ring_size(3), 0);
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  // Each case writes a marker (writer = its score) before its snapshot.
  for (uint32_t score : {5u, 9u, 2u, 7u, 1u, 8u}) {
    trace_snaptest_tick(score, 0);
    ASSERT_EQ(inst_->snapshots().take_scored("slow " + std::to_string(score), score), 0);
  }
  // 5, 9, 2 fill the ring; 7 gives up 2; 1 ranks below 5, 9 and 7 and is
  // dropped, its events staying live; 8 gives up 5 and takes 1's events
  // with its own.
  EXPECT_EQ(inst_->snapshots().taken(), 5u);
  struct Want {
    uint64_t score, number;
    std::vector<uint32_t> markers;
  };
  const Want want[] = {{8, 5, {1, 8}}, {7, 4, {7}}, {9, 2, {9}}};  // by age: in the order taken
  for (int age = 0; age < 3; ++age) {
    Snapshots::Ref r = inst_->snapshots().get(age);
    ASSERT_TRUE(r);
    const Want& w = want[age];
    EXPECT_TRUE(r.info().scored) << age;
    EXPECT_EQ(r.info().score, w.score) << age;
    EXPECT_EQ(r.info().number, w.number) << age;
    EXPECT_EQ(std::string(r.info().reason), "slow " + std::to_string(w.score));
    std::vector<uint32_t> markers;
    for (const Tick& t : ticks(r.buffer())) markers.push_back(t.writer);
    EXPECT_EQ(markers, w.markers) << "age " << age;
  }
  EXPECT_EQ(count(read("trace"), "tick: "), 0u);
  // The head says the score.
  const std::string s = read("snapshot");
  EXPECT_NE(s.find("# snapshot: #5 (newest, ring of 3)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("# score: 8\n"), std::string::npos) << s;
  EXPECT_NE(read("snapshot.2").find("# score: 9\n"), std::string::npos);
  // A plain take does not say one.
  ASSERT_EQ(inst_->snapshots().take("plain"), 0);
  EXPECT_EQ(read("snapshot").find("# score:"), std::string::npos);
}

// Mixing: a plain take gives up the oldest whatever its score; a scored
// take gives up unscored snapshots first, then the lowest score, the
// oldest of equals, and a tie with the lowest replaces it.
TEST_P(SnapshotTest, PlainAndScoredTakesEachKeepTheirRule) {
  ASSERT_EQ(inst_->snapshots().set_ring_size(3), 0);
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  Snapshots& snaps = inst_->snapshots();
  auto numbers = [&] {
    std::vector<uint64_t> out;
    for (int age = 0; age < 3; ++age)
      if (Snapshots::Ref r = snaps.get(age); r && r.info().number != 0) out.push_back(r.info().number);
    return out;
  };
  using V = std::vector<uint64_t>;
  ASSERT_EQ(snaps.take_scored("a", 9), 0);  // #1
  ASSERT_EQ(snaps.take_scored("b", 5), 0);  // #2
  ASSERT_EQ(snaps.take_scored("c", 5), 0);  // #3
  EXPECT_EQ(kept_scores(snaps), (V{5, 5, 9}));
  ASSERT_EQ(snaps.take_scored("d", 6), 0);  // #4 gives up #2, the older 5
  EXPECT_EQ(numbers(), (V{4, 3, 1}));
  ASSERT_EQ(snaps.take_scored("e", 5), 0);  // #5: ties with #3's 5, replaces it
  EXPECT_EQ(numbers(), (V{5, 4, 1}));
  EXPECT_EQ(kept_scores(snaps), (V{5, 6, 9}));
  ASSERT_EQ(snaps.take_scored("f", 4), 0);  // ranks below them all: dropped
  EXPECT_EQ(snaps.taken(), 5u);
  ASSERT_EQ(snaps.take("plain"), 0);  // #6 gives up the oldest, #1 (score 9)
  EXPECT_EQ(numbers(), (V{6, 5, 4}));
  {
    Snapshots::Ref r = snaps.get(0);
    ASSERT_TRUE(r);
    EXPECT_FALSE(r.info().scored);
  }
  ASSERT_EQ(snaps.take_scored("g", 1), 0);  // #7 gives up #6, unscored, though newest
  EXPECT_EQ(numbers(), (V{7, 5, 4}));
  EXPECT_EQ(kept_scores(snaps), (V{1, 5, 6}));
  // echo 2 > snapshot forgets them: the next ones fill empty spares first.
  ASSERT_GT(tracefs::write_file(path("snapshot"), "2\n"), 0);
  EXPECT_EQ(numbers(), V{});
  ASSERT_EQ(snaps.take_scored("h", 0), 0);  // #8
  ASSERT_EQ(snaps.take("i"), 0);            // #9
  EXPECT_EQ(numbers(), (V{9, 8}));
}

// SIGUSR1 takes a snapshot scored g_signal_score (< 0: a plain one),
// with the reason "plain" or "scored".
std::atomic<int64_t> g_signal_score{-1};
void scored_snapshot_from_handler(int) {
  const int64_t s = g_signal_score.load();
  if (s < 0)
    g_signal_inst->snapshots().take("plain");
  else
    g_signal_inst->snapshots().take_scored("scored", static_cast<uint64_t>(s));
}

// Requests merged into a pending one raise its score, and a scored merge
// makes an unscored request scored, ranked as such.
TEST_P(SnapshotTest, ScoredMergesRaiseThePendingScore) {
  ASSERT_EQ(inst_->snapshots().allocate(), 0);  // a ring of 1
  SnapshotOnSigusr1 handler(inst_, scored_snapshot_from_handler);
  Snapshots& snaps = inst_->snapshots();
  auto raise_with = [](int64_t score) {
    g_signal_score.store(score);
    raise(SIGUSR1);
  };
  {
    rb::RingBuffer::ControlGuard g(inst_->buffer());
    raise_with(3);   // pending, scored 3
    raise_with(8);   // merged: 8
    raise_with(-1);  // merged, plain: no change
    raise_with(5);   // merged: still 8
    EXPECT_EQ(snaps.taken(), 0u);
  }
  ASSERT_EQ(snaps.taken(), 1u);
  {
    Snapshots::Ref r = snaps.get(0);
    ASSERT_TRUE(r);
    EXPECT_TRUE(r.info().scored);
    EXPECT_EQ(r.info().score, 8u);
    EXPECT_EQ(r.info().merged, 3u);
    EXPECT_STREQ(r.info().reason, "scored");  // the first request's
  }
  const std::string s = read("snapshot");
  EXPECT_NE(s.find("# requests merged into it: 3\n# score: 8\n"), std::string::npos) << s;
  // A plain request with a scored one merged: scored, so ranked: 4 is
  // below the kept 8, and the request is dropped.
  {
    rb::RingBuffer::ControlGuard g(inst_->buffer());
    raise_with(-1);
    raise_with(4);
  }
  EXPECT_EQ(snaps.taken(), 1u);
  // With 9 merged it ranks above 8 and replaces it.
  {
    rb::RingBuffer::ControlGuard g(inst_->buffer());
    raise_with(-1);
    raise_with(9);
  }
  ASSERT_EQ(snaps.taken(), 2u);
  Snapshots::Ref r = snaps.get(0);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r.info().scored);
  EXPECT_EQ(r.info().score, 9u);
  EXPECT_STREQ(r.info().reason, "plain");
}

// Scores for the concurrent test: distinct (an odd multiplier permutes
// 32-bit numbers), in no order, from one counter shared by threads and
// handlers; g_scores[c] records the c-th.
constexpr uint32_t kScoreSlots = 1 << 16;
std::atomic<uint32_t> g_next_score{0};
std::atomic<uint64_t> g_scores[kScoreSlots];
uint64_t next_score() {
  const uint32_t c = g_next_score.fetch_add(1);
  const uint64_t s = 1 + static_cast<uint64_t>(c * 0x9E3779B1u);
  if (c < kScoreSlots) g_scores[c].store(s);
  return s;
}
std::atomic<uint32_t> g_handled{0};
void next_scored_from_handler(int) {
  g_signal_inst->snapshots().take_scored("handler", next_score());
  g_handled.fetch_add(1);
}

// Scored takes from several threads and from signal handlers on them, all
// at once: the kept ones are the worst cases, every request's score being
// counted in its own snapshot or in the one it merged into.
TEST_P(SnapshotTest, ConcurrentScoredTakesKeepTheWorst) {
  constexpr int kRing = 3;
  ASSERT_EQ(inst_->snapshots().set_ring_size(kRing), 0);
  ASSERT_EQ(inst_->snapshots().allocate(), 0);
  Snapshots& snaps = inst_->snapshots();
  // The worst of all comes first: only the ranking keeps it.
  constexpr uint64_t kWorst = uint64_t{1} << 40;
  ASSERT_EQ(snaps.take_scored("worst", kWorst), 0);
  g_next_score.store(0);
  g_handled.store(0);
  for (auto& s : g_scores) s.store(0);
  SnapshotOnSigusr1 handler(inst_, next_scored_from_handler);
  // The threads take until the signals are sent (and while scores last).
  constexpr uint32_t kThreads = 3, kSignals = 200;
  constexpr uint32_t kThreadScores = kScoreSlots - kSignals - kThreads;
  std::vector<std::thread> threads;
  std::vector<pthread_t> handles(kThreads);
  std::atomic<uint32_t> ready{0};
  std::atomic<bool> stop{false};
  for (uint32_t w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      handles[w] = pthread_self();
      ready.fetch_add(1);
      for (uint32_t i = 0; !stop.load() && g_next_score.load() < kThreadScores; ++i) {
        trace_snaptest_tick(w, i);
        snaps.take_scored("thread", next_score());
        if (i % 16 == 0) sched_yield();  // let the signaller run (2 CPUs may be all there is)
      }
    });
  }
  while (ready.load() < kThreads) sched_yield();
  for (uint32_t k = 0; k < kSignals; ++k) {
    const uint32_t before = g_handled.load();
    pthread_kill(handles[k % kThreads], SIGUSR1);
    for (int spin = 0; spin < 1000 && g_handled.load() == before; ++spin) sched_yield();
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  // A merge that lost the race with the request it met is folded into the
  // next request: this one, if none came after it.
  ASSERT_EQ(snaps.take_scored("flush", 0), 0);
  const uint32_t issued = g_next_score.load();
  ASSERT_LE(issued, kScoreSlots);
  std::vector<uint64_t> all{kWorst};
  for (uint32_t c = 0; c < issued; ++c) all.push_back(g_scores[c].load());
  std::sort(all.rbegin(), all.rend());
  ASSERT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());  // distinct

  struct Kept {
    uint64_t score, merged;
  };
  std::vector<Kept> kept;
  for (int age = 0; age < kRing; ++age) {
    Snapshots::Ref r = snaps.get(age);
    ASSERT_TRUE(r);
    ASSERT_NE(r.info().number, 0u);
    EXPECT_TRUE(r.info().scored);
    kept.push_back({r.info().score, r.info().merged});
  }
  // Each kept score was asked for; the worst is kept; each of the kRing
  // worst is kept or was merged into a kept snapshot that scores higher.
  for (const Kept& k : kept) EXPECT_TRUE(std::binary_search(all.rbegin(), all.rend(), k.score)) << k.score;
  for (int j = 0; j < kRing; ++j) {
    const uint64_t t = all[static_cast<size_t>(j)];
    const bool held = std::any_of(kept.begin(), kept.end(), [&](const Kept& k) {
      return k.score == t || (k.score > t && k.merged > 0);
    });
    EXPECT_TRUE(held) << "the " << j << "-th worst score, " << t << ", is neither kept nor merged";
  }
  // Better cases than all kept are dropped, and change nothing.
  const uint64_t taken = snaps.taken();
  const std::vector<uint64_t> before = kept_scores(snaps);
  for (int k = 0; k < kRing; ++k) ASSERT_EQ(snaps.take_scored("fine", 0), 0);
  EXPECT_EQ(snaps.taken(), taken);
  EXPECT_EQ(kept_scores(snaps), before);
}

}  // namespace
}  // namespace usrtrace::instance
