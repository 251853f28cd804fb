// A recorder reading a buffer in shared memory (record/shared_buffers.h),
// here from the same process through /proc/self/fd, as `usrtrace record`
// reads another's: every event once and in order, across a resize and a
// snapshot swap; discard mode waits for this reader; and files it must not
// map are refused.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/sys.h"
#include "persist/file_store.h"
#include "record/shared_buffers.h"
#include "ring_buffer/page_format.h"
#include "ring_buffer/ring_buffer.h"
#include "testing/test_util.h"

namespace usrtrace::tracedat {
namespace {

struct Payload {
  uint64_t n;
  uint64_t check;
};

std::shared_ptr<persist::FileStore> shared_store(const char* instance = "t") {
  int err = 0;
  std::string why;
  auto fs = persist::FileStore::create(persist::kSharedMemory, 4096, base::nr_possible_cpus(), instance, &err,
                                       &why);
  EXPECT_TRUE(fs) << why;
  return fs;
}

std::unique_ptr<rb::RingBuffer> buffer_in(const std::shared_ptr<persist::FileStore>& fs, uint64_t size,
                                          rb::Mode mode = rb::Mode::kOverwrite, uint32_t tag = 0) {
  rb::Options o;
  o.size_per_cpu = size;
  o.mode = mode;
  o.tag = tag;
  o.store = fs;
  int err = 0;
  auto rb = rb::RingBuffer::create(o, &err);
  EXPECT_TRUE(rb) << err;
  return rb;
}

// Writes payloads [from, from + count) on cpu 0; the number written.
uint64_t write_n(rb::RingBuffer& rb, uint64_t from, uint64_t count) {
  testing::Pinned pin(0);
  uint64_t done = 0;
  for (uint64_t i = from; i < from + count; ++i) {
    Payload p{i, ~i};
    if (rb.write<sizeof p>(&p)) ++done;
  }
  return done;
}

// Everything the shared buffer has for cpu 0 now, decoded; *lost gets the
// pages' missed-events counts.
std::vector<uint64_t> drain(SharedBuffer& sb, bool full_only = false, uint64_t* lost = nullptr) {
  std::vector<uint64_t> out;
  std::vector<uint8_t> page(sb.page_size());
  uint64_t missed = 0;
  while (uint32_t len = sb.read_page(0, page.data(), full_only, &missed)) {
    if (lost) *lost += missed;
    rb::PageHeader h;
    std::memcpy(&h, page.data(), sizeof h);
    rb::PageWalker w(page.data() + rb::kPageHeaderSize, len, h.timestamp);
    rb::Entry e;
    while (w.next_data(&e)) {
      EXPECT_EQ(e.payload_len, sizeof(Payload));
      Payload p;
      std::memcpy(&p, e.payload, sizeof p);
      EXPECT_EQ(p.check, ~p.n) << "torn payload";
      out.push_back(p.n);
    }
    EXPECT_FALSE(w.corrupt());
  }
  return out;
}

std::vector<uint64_t> iota(uint64_t from, uint64_t to) {
  std::vector<uint64_t> v;
  for (uint64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// A buffer of `size` bytes per CPU in shared memory, and a recorder's view
// of it.
struct Shared {
  std::shared_ptr<persist::FileStore> fs = shared_store();
  std::unique_ptr<rb::RingBuffer> rb;
  SharedBuffer sb;
  bool ok = false;

  explicit Shared(uint64_t size, rb::Mode mode = rb::Mode::kOverwrite) {
    if (!fs) return;
    rb = buffer_in(fs, size, mode);
    std::string err;
    ok = rb && sb.open(getpid(), fs->shared_fd(), "t", &err) == 0;
    EXPECT_TRUE(ok) << err;
  }
};

TEST(SharedBuffer, ReadsEveryEventOnceInOrder) {
  Shared s(64 * 1024);
  ASSERT_TRUE(s.ok);
  auto& rb = s.rb;
  auto& sb = s.sb;
  EXPECT_EQ(sb.page_size(), 4096u);
  EXPECT_EQ(sb.nr_cpus(), rb->nr_cpus());
  ASSERT_EQ(write_n(*rb, 0, 1000), 1000u);
  // Whole pages only while the writer may go on; the open page at the end.
  std::vector<uint64_t> got = drain(sb, true);
  ASSERT_FALSE(got.empty());
  EXPECT_LT(got.size(), 1000u);
  const std::vector<uint64_t> rest = drain(sb);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, iota(0, 1000));
  // What comes after an open page was taken continues it.
  ASSERT_EQ(write_n(*rb, 1000, 10), 10u);
  EXPECT_EQ(drain(sb), iota(1000, 1010));
  EXPECT_TRUE(drain(sb).empty());
}

TEST(SharedBuffer, OverwrittenPagesAreCountedAsLost) {
  Shared s(16 * 1024);
  ASSERT_TRUE(s.ok);
  auto& rb = s.rb;
  auto& sb = s.sb;
  ASSERT_EQ(write_n(*rb, 0, 20000), 20000u);
  uint64_t lost = 0;
  const std::vector<uint64_t> got = drain(sb, false, &lost);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), 19999u);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_EQ(got[i], got[i - 1] + 1);
  EXPECT_EQ(lost, got.front()) << "every event before the first one read is counted";
}

// Discard mode keeps a page until this reader, in another process as far as
// the ring knows, has read it: the writer drops the newest instead.
TEST(SharedBuffer, DiscardModeWaitsForTheRecorder) {
  Shared s(16 * 1024, rb::Mode::kDiscard);
  ASSERT_TRUE(s.ok);
  auto& rb = s.rb;
  auto& sb = s.sb;
  const uint64_t first = write_n(*rb, 0, 5000);
  ASSERT_LT(first, 5000u) << "a 16 KiB buffer cannot hold 5000 events";
  EXPECT_EQ(drain(sb), iota(0, first));
  // Read: room again, and the next ones follow after the drop.
  const uint64_t second = write_n(*rb, 100000, 100);
  EXPECT_EQ(second, 100u);
  uint64_t lost = 0;
  EXPECT_EQ(drain(sb, false, &lost), iota(100000, 100100));
  EXPECT_EQ(lost, 5000 - first) << "the dropped ones are reported before the next page";
}

TEST(SharedBuffer, FollowsAResizeAndASnapshotSwap) {
  Shared s(64 * 1024);
  ASSERT_TRUE(s.ok);
  auto& rb = s.rb;
  auto& sb = s.sb;
  auto spare = buffer_in(s.fs, 64 * 1024, rb::Mode::kOverwrite, 1);  // a snapshot's tag
  ASSERT_TRUE(spare);
  ASSERT_EQ(write_n(*rb, 0, 500), 500u);
  std::vector<uint64_t> got = drain(sb, true);
  // Bigger: the pages move to a new region, the unread ones with them.
  ASSERT_EQ(rb->resize(-1, 256 * 1024), 0);
  ASSERT_EQ(write_n(*rb, 500, 500), 500u);
  std::vector<uint64_t> more = drain(sb);
  got.insert(got.end(), more.begin(), more.end());
  EXPECT_EQ(got, iota(0, 1000));
  // Again and again: new pages take table entries that earlier resizes
  // freed (of this CPU or another), at other offsets in the file, which
  // the recorder must map afresh.
  uint64_t next = 1000;
  for (const uint64_t size : {128u << 10, 96u << 10, 192u << 10, 64u << 10}) {
    ASSERT_EQ(rb->resize(-1, size), 0);
    ASSERT_EQ(write_n(*rb, next, 300), 300u);
    EXPECT_EQ(drain(sb), iota(next, next + 300)) << "after a resize to " << size;
    next += 300;
  }
  // A swap: what the live buffer holds now is the spare's (empty), and
  // what is written next is read from it.
  ASSERT_EQ(write_n(*rb, next, 10), 10u);
  ASSERT_EQ(rb->swap_cpu(*spare, -1), 0);
  ASSERT_EQ(write_n(*spare, 5000, 5), 5u) << "the former live buffer, now the spare";
  ASSERT_EQ(write_n(*rb, 2000, 20), 20u);
  EXPECT_EQ(drain(sb), iota(2000, 2020));
}

// A writer at full speed on one CPU while the recorder drains beside it:
// every event it wrote is read once, intact and in order, or counted as
// lost (overwrite mode); in discard mode, every event not dropped is read,
// and the drops are counted.
TEST(SharedBuffer, DrainsAWriterAtFullSpeedExactly) {
  for (const rb::Mode mode : {rb::Mode::kOverwrite, rb::Mode::kDiscard}) {
    Shared s(64 * 1024, mode);
    ASSERT_TRUE(s.ok);
    constexpr uint64_t kEvents = 300000;
    std::atomic<bool> done{false};
    uint64_t written = 0;
    std::thread writer([&] {
      written = write_n(*s.rb, 0, kEvents);
      done.store(true, std::memory_order_release);
    });
    std::vector<uint64_t> got;
    uint64_t lost = 0;
    while (!done.load(std::memory_order_acquire)) {
      const std::vector<uint64_t> part = drain(s.sb, true, &lost);
      got.insert(got.end(), part.begin(), part.end());
    }
    writer.join();
    const std::vector<uint64_t> rest = drain(s.sb, false, &lost);
    got.insert(got.end(), rest.begin(), rest.end());
    for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << "out of order or twice";
    if (mode == rb::Mode::kOverwrite) {
      EXPECT_EQ(written, kEvents);
      EXPECT_EQ(got.size() + lost, kEvents) << "every event read or counted lost";
    } else {
      EXPECT_EQ(got.size(), written) << "discard mode: every event that was not dropped";
      // Drops are reported in the page after them; those after the last
      // page the writer opened only in the CPU's stats, as in the kernel.
      EXPECT_LE(lost, kEvents - written);
      EXPECT_EQ(s.rb->stats(0).dropped_events, kEvents - written);
    }
    ASSERT_FALSE(got.empty());
    if (mode == rb::Mode::kOverwrite) {
      EXPECT_EQ(got.back(), kEvents - 1);
    }
  }
}

// Growth (ring_buffer/grow.cc): a buffer of 4 pages per CPU with `spares`
// more CpuBuffers of 4 pages; the recorder's view of it.
struct Growing {
  std::shared_ptr<persist::FileStore> fs;
  std::unique_ptr<rb::RingBuffer> rb;
  SharedBuffer sb;
  bool ok = false;

  Growing(uint32_t spares, uint32_t pages_each, rb::Mode mode = rb::Mode::kOverwrite) {
    int err = 0;
    std::string why;
    fs = persist::FileStore::create(persist::kSharedMemory, 4096, base::nr_possible_cpus(), "t", &err, &why,
                                    spares);
    EXPECT_TRUE(fs) << why;
    if (!fs) return;
    rb = buffer_in(fs, 4 * (4096 - rb::kPageHeaderSize), mode);
    if (!rb) return;
    EXPECT_EQ(rb->enable_growth(spares, pages_each), 0);
    std::string e;
    ok = rb->grows() && sb.open(getpid(), fs->shared_fd(), "t", &e) == 0;
    EXPECT_TRUE(ok) << e;
  }
};

// The mechanism, not a size: a recorder that takes nothing while a writer
// fills the ring many times over loses nothing as long as spares remain,
// and once they are gone loses exactly what it counts. A drained spare is
// used again.
TEST(SharedBuffer, AGrowingBufferLosesNothingUntilItsSparesAreFull) {
  for (const rb::Mode mode : {rb::Mode::kOverwrite, rb::Mode::kDiscard}) {
    SCOPED_TRACE(mode == rb::Mode::kOverwrite ? "overwrite" : "discard");
    Growing g(8, 4, mode);
    ASSERT_TRUE(g.ok);
    // 16-byte payloads: 203 to a page, 812 to a CpuBuffer, 9 CpuBuffers.
    constexpr uint64_t kFits = 5000;
    ASSERT_EQ(write_n(*g.rb, 0, kFits), kFits);
    EXPECT_GE(g.rb->grow_stats().grown, 5u) << "the ring of 812 events was full 6 times over";
    uint64_t lost = 0;
    EXPECT_EQ(drain(g.sb, false, &lost), iota(0, kFits));
    EXPECT_EQ(lost, 0u);
    // Every spare is drained now: the same again, in the same CpuBuffers.
    ASSERT_EQ(write_n(*g.rb, kFits, kFits), kFits);
    EXPECT_GT(g.rb->grow_stats().grown, 8u) << "drained spares are used again";
    EXPECT_EQ(drain(g.sb, false, &lost), iota(kFits, 2 * kFits));
    EXPECT_EQ(lost, 0u);
    // Past the cap: ten times what the pool holds, with nobody reading.
    constexpr uint64_t kMany = 80000;
    const uint64_t written = write_n(*g.rb, 2 * kFits, kMany);
    EXPECT_GT(g.rb->grow_stats().no_spare, 0u);
    const std::vector<uint64_t> got = drain(g.sb, false, &lost);
    for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << "out of order or twice";
    ASSERT_FALSE(got.empty());
    EXPECT_GE(got.size(), 7 * 812u) << "the spares hold their events";
    if (mode == rb::Mode::kOverwrite) {
      EXPECT_EQ(written, kMany);
      EXPECT_EQ(got.size() + lost, kMany) << "every event read or counted lost";
      EXPECT_EQ(got.back(), 2 * kFits + kMany - 1) << "the newest kept";
    } else {
      EXPECT_EQ(got.size(), written) << "discard mode: every event that was not dropped";
      EXPECT_EQ(got.front(), 2 * kFits) << "the oldest kept";
    }
  }
}

// With its recorder gone (the control server pauses growth), a buffer
// overwrites as a fixed ring does instead of growing for nobody.
TEST(SharedBuffer, APausedBufferDoesNotGrow) {
  Growing g(8, 4);
  ASSERT_TRUE(g.ok);
  rb::RingBuffer::pause_growth(true);
  const uint64_t written = write_n(*g.rb, 0, 5000);
  rb::RingBuffer::pause_growth(false);
  EXPECT_EQ(written, 5000u);
  EXPECT_EQ(g.rb->grow_stats().grown, 0u);
  uint64_t lost = 0;
  const std::vector<uint64_t> got = drain(g.sb, false, &lost);
  EXPECT_LE(got.size(), 4 * 203u) << "one ring of 4 pages";
  EXPECT_EQ(got.size() + lost, 5000u);
  // Resumed: it grows again.
  ASSERT_EQ(write_n(*g.rb, 5000, 2000), 2000u);
  EXPECT_GT(g.rb->grow_stats().grown, 0u);
  EXPECT_EQ(drain(g.sb, false, &lost), iota(5000, 7000));
}

// Threads racing the growth: writers on every CPU at full speed (migrating
// as the scheduler likes), a recorder draining beside them that is slower
// at times, and as many spinning threads as CPUs, so that a writer is often
// preempted in the middle of growing while another writer of its CPU
// reaches a switch (with a lock there, the other one overwrote). Every
// event is read exactly once: none lands in a CpuBuffer after it was
// retired, none is lost at a switch, none read twice.
TEST(SharedBuffer, WritersRacingGrowthLoseNothing) {
  Growing g(512, 16);
  ASSERT_TRUE(g.ok);
  constexpr int kThreads = 4;
  constexpr uint64_t kEach = 150000;
  std::atomic<int> running{kThreads};
  std::vector<std::jthread> spinners;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
    spinners.emplace_back([&] {
      while (running.load(std::memory_order_relaxed) > 0) {
      }
    });
  std::vector<std::thread> writers;
  std::atomic<uint64_t> refused{0};
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&, t] {
      for (uint64_t i = 0; i < kEach; ++i) {
        const uint64_t n = uint64_t(t) << 32 | i;
        Payload p{n, ~n};
        if (!g.rb->write<sizeof p>(&p)) refused.fetch_add(1);
      }
      running.fetch_sub(1);
    });
  std::vector<std::vector<uint64_t>> seen(kThreads);
  uint64_t lost = 0;
  std::vector<uint8_t> page(g.sb.page_size());
  auto take = [&](bool full_only) {
    for (int cpu = 0; cpu < g.sb.nr_cpus(); ++cpu) {
      uint64_t missed = 0;
      while (uint32_t len = g.sb.read_page(cpu, page.data(), full_only, &missed)) {
        lost += missed;
        rb::PageHeader h;
        std::memcpy(&h, page.data(), sizeof h);
        rb::PageWalker w(page.data() + rb::kPageHeaderSize, len, h.timestamp);
        rb::Entry e;
        while (w.next_data(&e)) {
          Payload p;
          std::memcpy(&p, e.payload, sizeof p);
          ASSERT_EQ(p.check, ~p.n) << "torn payload";
          ASSERT_LT(p.n >> 32, uint64_t{kThreads});
          seen[p.n >> 32].push_back(p.n & 0xffffffffu);
        }
      }
    }
  };
  for (int round = 0; running.load() > 0; ++round) {
    take(true);
    if (round % 8 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow recorder
  }
  for (auto& w : writers) w.join();
  take(false);
  EXPECT_EQ(refused.load(), 0u);
  EXPECT_EQ(lost, 0u) << "grown " << g.rb->grow_stats().grown << ", control busy " << g.rb->grow_stats().busy;
  EXPECT_GT(g.rb->grow_stats().grown, 0u);
  EXPECT_EQ(g.rb->grow_stats().no_spare, 0u) << "the pool was large enough";
  for (int t = 0; t < kThreads; ++t) {
    std::vector<uint64_t>& v = seen[static_cast<size_t>(t)];
    std::sort(v.begin(), v.end());
    ASSERT_EQ(v.size(), kEach) << "thread " << t;
    for (uint64_t i = 0; i < kEach; ++i) ASSERT_EQ(v[i], i) << "thread " << t << ": lost or twice";
  }
}

TEST(SharedBuffer, RefusesWhatItMustNotMap) {
  std::string err;
  {
    SharedBuffer sb;
    auto fs = shared_store("mine");
    ASSERT_TRUE(fs);
    auto rb = buffer_in(fs, 16 * 1024);
    EXPECT_EQ(sb.open(getpid(), fs->shared_fd(), "other", &err), -EPROTO);
    EXPECT_NE(err.find("not the buffer of instance 'other'"), std::string::npos) << err;
  }
  {
    // A file on disk: no seal, so a truncate could end a mapping of it in
    // a SIGBUS here.
    const std::string path = "/tmp/usrtrace-shared-test-" + std::to_string(getpid());
    int e = 0;
    auto fs = persist::FileStore::create(path, 4096, base::nr_possible_cpus(), "t", &e);
    ASSERT_TRUE(fs);
    EXPECT_EQ(fs->shared_fd(), -1) << "only memory is offered";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    SharedBuffer sb;
    EXPECT_EQ(sb.open(getpid(), fd, "t", &err), -EPERM);
    EXPECT_NE(err.find("not sealed"), std::string::npos) << err;
    ::close(fd);
    ::unlink(path.c_str());
  }
  {
    SharedBuffer sb;
    EXPECT_EQ(sb.open(getpid(), 987654, "t", &err), -ENOENT) << err;
  }
}

}  // namespace
}  // namespace usrtrace::tracedat

namespace usrtrace::tracedat {
namespace {

// Issue 34, defect 3: the descriptor a process names was opened O_RDWR
// without O_NOCTTY: a pty named there became the controlling terminal of a
// recorder that had none (setsid, cron, a service), whose ^\ then killed it.
// Here the recorder is a session leader without a terminal that is told to
// map a pty.
TEST(SharedBuffer, APtyNamedAsTheBufferIsNotOpenedAsATerminal) {
  const pid_t child = fork();
  if (child == 0) {
    if (setsid() < 0) _exit(10);
    const int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) _exit(11);
    const int slave = ::open(ptsname(master), O_RDWR | O_NOCTTY);
    if (slave < 0) _exit(12);
    SharedBuffer sb;
    std::string err;
    if (sb.open(getpid(), slave, "", &err) == 0) _exit(13);  // a pty is no buffer
    // Still no controlling terminal.
    const int tty = ::open("/dev/tty", O_RDWR | O_NOCTTY);
    _exit(tty < 0 && errno == ENXIO ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "14: the pty became the recorder's terminal; 13: it was taken as a buffer";
}

}  // namespace
}  // namespace usrtrace::tracedat
