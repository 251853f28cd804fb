// The recorder's side of what a traced process answers (issue 34,
// docs/security.md): the answer deadline, the departed metadata, the
// journal's streams and its size under a limit.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "control/connection.h"
#include "record/journal.h"
#include "record/recorder.h"

namespace usrtrace::tracedat {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/usrtrace-hostile-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

// hostile_peer MODE, started and serving: its pid (killed by the destructor).
struct Peer {
  pid_t pid = -1;
  explicit Peer(const char* mode) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) return;
    const pid_t child = fork();
    if (child == 0) {
      dup2(out[1], 1);
      dup2(in[0], 0);
      execl(HOSTILE_PEER, "hostile_peer", mode, static_cast<char*>(nullptr));
      _exit(127);
    }
    ::close(out[1]);
    ::close(in[0]);
    stdin_ = in[1];
    char buf[64] = {};
    size_t got = 0;
    while (got < sizeof buf - 1 && !std::strchr(buf, '\n')) {
      const ssize_t n = ::read(out[0], buf + got, sizeof buf - 1 - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ::close(out[0]);
    if (std::strncmp(buf, "ready ", 6) == 0) pid = child;
  }
  ~Peer() {
    if (stdin_ >= 0) ::close(stdin_);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  int stdin_ = -1;
};

// Defect 5: the answer timeout was per recv, so a process that sends a byte
// every 100 ms (under the timeout each time) held a call, and record -P
// after Ctrl-C, for as long as it liked. One deadline for the exchange.
TEST(HostileAnswers, AByteNowAndThenDoesNotHoldACallPastItsDeadline) {
  Peer peer("dribble");
  ASSERT_GT(peer.pid, 0) << "hostile_peer did not start";
  std::string err;
  auto conn = control::Connection::open(peer.pid, &err);
  ASSERT_TRUE(conn) << err;
  conn->set_answer_ms(500);  // the peer's bytes come every 100 ms: under 500 each
  auto call = std::async(std::launch::async, [&] {
    control::Request r;
    r.op = control::Op::kStat;
    std::string payload;
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = conn->call(r, &payload);
    return std::make_pair(rc, std::chrono::steady_clock::now() - t0);
  });
  // Before the fix the call never ends while the peer dribbles: 30 s of
  // it is proof enough, and then the peer is killed so the test ends.
  if (call.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    kill(peer.pid, SIGKILL);
    call.wait();
    FAIL() << "the call outlived its 500 ms deadline by 30 s while the peer sent a byte every 100 ms";
  }
  const auto [rc, took] = call.get();
  EXPECT_EQ(rc, -ETIMEDOUT);
  EXPECT_LT(took, std::chrono::seconds(10));
  // The connection is closed: the next call fails at once.
  control::Request r;
  r.op = control::Op::kStat;
  std::string payload;
  EXPECT_EQ(conn->call(r, &payload), -EPIPE);
}

// Defect 7 at the client: pages of 48 bytes are no buffer's.
TEST(HostileAnswers, PagesOfASizeNoBufferHasAreRefused) {
  Peer peer("page48");
  ASSERT_GT(peer.pid, 0);
  std::string err;
  auto conn = control::Connection::open(peer.pid, &err);
  ASSERT_TRUE(conn) << err;
  control::Connection::Pages p;
  EXPECT_EQ(conn->pages("", 1 << 20, 0, false, &p), -EPROTO);
}

std::string cmdlines(int first, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += std::to_string(first + i) + " thread" + std::to_string(first + i) + "\n";
  return s;
}

// Defect 6: keep_departed searched the new text for each old line
// (150k lines per answer kept a root recorder busy 40 s after Ctrl-C), and
// what departed piled up answer after answer. In a child under alarm(60):
// the quadratic one takes many minutes on this input, the linear well
// under a second (ASan included).
TEST(HostileAnswers, DepartedThreadNamesAreKeptInLinearWorkAndBounded) {
  const pid_t child = fork();
  if (child == 0) {
    alarm(60);
    Metadata before, now;
    before.cmdlines = cmdlines(1, 200000);
    now.cmdlines = cmdlines(200001, 200000);
    keep_departed(before, &now);
    // All 200000 of now, and departed ones up to the bound.
    size_t lines = 0;
    for (char c : now.cmdlines) lines += c == '\n';
    if (lines != 200000) _exit(2);
    if (now.cmdlines.find("\n1 thread1\n") != std::string::npos) _exit(3);  // past the bound
    // Within the bound, the departed are kept (the newest first) and not twice.
    Metadata a, b;
    a.cmdlines = cmdlines(1, 10) + "3 thread3\n";
    b.cmdlines = cmdlines(5, 10);
    keep_departed(a, &b);
    size_t n = 0;
    for (char c : b.cmdlines) n += c == '\n';
    if (n != 14) _exit(4);  // 5..14, then 1..4
    if (b.cmdlines.find("1 thread1\n") == std::string::npos) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status)
                                    << " (SIGALRM: keep_departed is not linear)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "check " << WEXITSTATUS(status) << " failed";
}

TEST(HostileAnswers, DepartedFormatsAreKeptOnce) {
  Metadata before, now;
  before.systems = {{"app", {"name: a\nID: 1\n", "name: b\nID: 2\n"}}, {"gone", {"name: c\nID: 3\n"}}};
  now.systems = {{"app", {"name: a\nID: 1\n"}}};
  keep_departed(before, &now);
  keep_departed(before, &now);
  ASSERT_EQ(now.systems.size(), 2u);
  EXPECT_EQ(now.systems[0].second.size(), 2u);
  EXPECT_EQ(now.systems[1].first, "gone");
}

RecordOptions journal_options(const std::string& dir, uint64_t max_cpu_bytes = 0) {
  RecordOptions o;
  o.output = dir + "/out.dat";
  o.max_cpu_bytes = max_cpu_bytes;
  return o;
}

control::RemoteMeta some_meta(size_t kallsyms_bytes, char fill) {
  control::RemoteMeta m;
  m.meta.nr_cpus = 1;
  m.meta.trace_clock = "[local]";
  m.meta.kallsyms.assign(kallsyms_bytes, fill);
  control::InstanceMeta im;
  im.name = "";
  im.page_size = 4096;
  im.nr_cpus = 1;
  im.stats = {""};
  m.instances.push_back(im);
  return m;
}

std::string page_of(uint32_t n) {
  std::string p(4096, '\0');
  const uint64_t commit = 8;
  std::memcpy(p.data() + 8, &commit, 8);
  std::memcpy(p.data() + 16, &n, 4);
  return p;
}

// Defect 7 at the journal: a stream its reader would refuse was written,
// and the reader ended the journal there, losing every later page of every
// process. The writer refuses it; the others go on, whole.
TEST(HostileAnswers, AStreamTheReaderWouldRefuseIsRefusedAloneByTheWriter) {
  const std::string dir = temp_dir();
  JournalWriter w;
  std::string err;
  ASSERT_EQ(w.create(journal_options(dir), &err), 0) << err;
  uint32_t p0, p1, s0, s1;
  ASSERT_EQ(w.add_process(1, "", &p0, &err), 0);
  ASSERT_EQ(w.add_stream(p0, "", 4096, 1, &s0, &err), 0);
  ASSERT_EQ(w.add_process(2, "bad-2", &p1, &err), 0);
  EXPECT_EQ(w.add_stream(p1, "", 48, 1, &s1, &err), -EPROTO);
  EXPECT_NE(err.find("pages of 48 bytes"), std::string::npos) << err;
  EXPECT_EQ(w.add_stream(p1, "", 4096, 5000, &s1, &err), -EPROTO);
  for (uint32_t i = 0; i < 10; ++i) {
    const std::string page = page_of(i);
    ASSERT_EQ(w.put_pages(s0, 0, page.data(), page.size(), &err), 0) << err;
  }
  ASSERT_EQ(w.put_meta(p0, some_meta(10, 'x'), &err), 0);
  Journal j;
  ASSERT_EQ(read_journal(w.fd(), &j, &err, w.path()), 0) << err;
  EXPECT_EQ(j.damage, "");
  EXPECT_EQ(j.pages, 10u);
  w.remove();
}

// A journal that reads back only in part (damaged under the recorder)
// fails the recording, and keeps the journal, rather than writing a file
// that silently stops where the journal did.
TEST(HostileAnswers, AJournalThatReadsBackInPartFailsTheRecordingLoudly) {
  const std::string dir = temp_dir();
  auto w = std::make_unique<JournalWriter>();
  std::string err;
  ASSERT_EQ(w->create(journal_options(dir), &err), 0) << err;
  uint32_t p0, s0;
  ASSERT_EQ(w->add_process(1, "", &p0, &err), 0);
  ASSERT_EQ(w->add_stream(p0, "", 4096, 1, &s0, &err), 0);
  const std::string page = page_of(1);
  ASSERT_EQ(w->put_pages(s0, 0, page.data(), page.size(), &err), 0) << err;
  ASSERT_EQ(w->put_meta(p0, some_meta(10, 'x'), &err), 0);
  // A record no writer makes (kind 99), appended behind the writer's back.
  struct stat st;
  ASSERT_EQ(fstat(w->fd(), &st), 0);
  char bogus[16] = {99};
  ASSERT_EQ(pwrite(w->fd(), bogus, sizeof bogus, st.st_size), static_cast<ssize_t>(sizeof bogus));
  const std::string journal = w->path();
  EXPECT_LT(finish_journal(*w, {}, &err), 0);
  EXPECT_NE(err.find("reads back only in part"), std::string::npos) << err;
  w.reset();
  EXPECT_EQ(::access(journal.c_str(), F_OK), 0) << "the journal is kept for recover";
  EXPECT_NE(::access((dir + "/out.dat").c_str(), F_OK), 0) << "no truncated output";
}

uint64_t disk_bytes(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

// Defect 14: under -m each metadata change was journaled whole, for ever
// (13 MB after 6 s with -m 64). The same metadata is journaled once, and
// the journal is compacted: 200 changes of 1 MiB each, and 20000 ring
// pages, leave it a few MiB, reading back as the last metadata and the
// ring's newest pages.
TEST(HostileAnswers, UnderASizeLimitTheJournalStaysBounded) {
  const std::string dir = temp_dir();
  JournalWriter w;
  std::string err;
  ASSERT_EQ(w.create(journal_options(dir, 64 * 1024), &err), 0) << err;
  uint32_t p0, s0;
  ASSERT_EQ(w.add_process(1, "", &p0, &err), 0);
  ASSERT_EQ(w.add_stream(p0, "", 4096, 2, &s0, &err), 0);
  const uint64_t empty = disk_bytes(w.path());
  for (int i = 0; i < 50; ++i) ASSERT_EQ(w.put_meta(p0, some_meta(1 << 20, 'a'), &err), 0) << err;
  EXPECT_LT(disk_bytes(w.path()) - empty, 2u << 20) << "the same metadata journaled again";
  uint32_t n = 0;
  for (int round = 0; round < 200; ++round) {
    ASSERT_EQ(w.put_meta(p0, some_meta(1 << 20, static_cast<char>('b' + round % 20)), &err), 0) << err;
    for (int k = 0; k < 100; ++k, ++n) {
      const std::string page = page_of(n);
      ASSERT_EQ(w.put_pages(s0, static_cast<uint32_t>(n % 2), page.data(), page.size(), &err), 0) << err;
    }
  }
  EXPECT_LT(disk_bytes(w.path()), 12u << 20) << "the journal grew with the changes";
  Journal j;
  ASSERT_EQ(read_journal(w.fd(), &j, &err, w.path()), 0) << err;
  EXPECT_EQ(j.damage, "");
  ASSERT_TRUE(j.processes[0].have_meta);
  EXPECT_EQ(j.processes[0].meta.meta.kallsyms, std::string(1 << 20, static_cast<char>('b' + 199 % 20)));
  // 64 KiB per CPU: 16 pages each, the newest, oldest first.
  ASSERT_EQ(j.streams.size(), 1u);
  EXPECT_EQ(j.pages, 32u);
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    std::vector<uint32_t> seen;
    for (const Extent& e : j.streams[0].cpus[cpu].extents)
      for (uint64_t off = 0; off < e.size; off += 4096) {
        uint32_t v = 0;
        ASSERT_EQ(pread(j.streams[0].cpus[cpu].fd, &v, 4, static_cast<off_t>(e.offset + off + 16)), 4);
        seen.push_back(v);
      }
    ASSERT_EQ(seen.size(), 16u);
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], n - 32 + cpu + 2 * i) << "cpu " << cpu;
  }
  w.remove();
}

// A stream closed when its process ended (record -c) holds no descriptor,
// and its page file is found again for the output.
TEST(HostileAnswers, AClosedStreamHoldsNoDescriptorAndIsReopenedForTheOutput) {
  const std::string dir = temp_dir();
  JournalWriter w;
  std::string err;
  ASSERT_EQ(w.create(journal_options(dir), &err), 0) << err;
  uint32_t p0, s0;
  ASSERT_EQ(w.add_process(1, "", &p0, &err), 0);
  ASSERT_EQ(w.add_stream(p0, "", 4096, 1, &s0, &err), 0);
  const std::string page = page_of(7);
  ASSERT_EQ(w.put_pages(s0, 0, page.data(), page.size(), &err), 0) << err;
  ASSERT_EQ(w.put_meta(p0, some_meta(10, 'x'), &err), 0);
  const int fd = w.page_file_fd(s0, 0);
  ASSERT_GE(fd, 0);
  w.close_stream(s0);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1) << "its descriptor is still open";
  EXPECT_EQ(w.put_pages(s0, 0, page.data(), page.size(), &err), -EBADF);
  EXPECT_GE(w.page_file_fd(s0, 0), 0);
}

}  // namespace
}  // namespace usrtrace::tracedat
