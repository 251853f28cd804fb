// A recorder reading a buffer in shared memory (record/shared_buffers.h),
// here from the same process through /proc/self/fd, as `usrtrace record`
// reads another's: every event once and in order, across a resize and a
// snapshot swap; discard mode waits for this reader; and files it must not
// map are refused.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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
