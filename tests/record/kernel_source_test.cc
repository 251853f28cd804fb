// record -K's page rewrite: the kernel's event ids in a page as
// trace_pipe_raw hands it out, turned into the file's, and nothing else of
// the page touched.
#include "record/kernel_source.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/files.h"
#include "record/journal.h"
#include "ring_buffer/page_format.h"

namespace usrtrace::tracedat {
namespace {

class Page {
 public:
  explicit Page(uint32_t size = 4096) : bytes_(size, 0) {
    const uint64_t ts = 1000;
    std::memcpy(bytes_.data(), &ts, 8);
  }
  // A data entry of `payload` bytes (a multiple of 4) whose common_type is
  // `id`; the rest of its payload 0xAB. Returns the offset of its type.
  size_t data(uint16_t id, uint32_t payload) {
    const bool long_form = payload > rb::kMaxShortPayload;
    word(rb::encode_header(long_form ? 0 : payload / 4, 7));
    if (long_form) word(payload + 4);
    const size_t at = rb::kPageHeaderSize + len_;
    for (uint32_t i = 0; i < payload; ++i) bytes_[at + i] = 0xAB;
    std::memcpy(&bytes_[at], &id, 2);
    len_ += payload;
    commit();
    return at;
  }
  void extend() {
    word(rb::encode_header(rb::kTypeTimeExtend, 5));
    word(3);
  }
  // A discarded entry: its bytes look like a record of `id`, and are not one.
  void padding(uint16_t id) {
    word(rb::encode_header(rb::kTypePadding, 1));
    word(12);  // 4 + 12 bytes in all
    word(id);
    word(0);
  }
  void word(uint32_t w) {
    std::memcpy(&bytes_[rb::kPageHeaderSize + len_], &w, 4);
    len_ += 4;
    commit();
  }
  void commit() {
    const uint64_t c = len_;
    std::memcpy(&bytes_[8], &c, 8);
  }
  uint16_t type_at(size_t at) const {
    uint16_t id;
    std::memcpy(&id, &bytes_[at], 2);
    return id;
  }
  std::vector<uint8_t> bytes_;
  uint32_t len_ = 0;
};

std::vector<uint16_t> table() {
  std::vector<uint16_t> ids(65536, kKernelIdUnknown);
  ids[372] = kKernelIdFirst;
  ids[373] = kKernelIdFirst + 1;
  ids[5] = 5;
  return ids;
}

TEST(KernelSource, RemapRewritesEachRecordsTypeAndNothingElse) {
  Page p;
  const size_t a = p.data(372, 8);
  p.extend();
  const size_t b = p.data(373, 120);  // the long form
  p.padding(372);
  const size_t c = p.data(5, 16);
  const size_t d = p.data(400, 4);  // not one we enabled
  std::vector<uint8_t> before = p.bytes_;
  ASSERT_TRUE(remap_page_ids(p.bytes_.data(), 4096, table()));
  EXPECT_EQ(p.type_at(a), kKernelIdFirst);
  EXPECT_EQ(p.type_at(b), kKernelIdFirst + 1);
  EXPECT_EQ(p.type_at(c), 5);
  EXPECT_EQ(p.type_at(d), kKernelIdUnknown);
  for (size_t at : {a, b, c, d}) std::memcpy(&before[at], &p.bytes_[at], 2);
  EXPECT_EQ(before, p.bytes_) << "only the four types changed (not the padding's bytes)";
}

TEST(KernelSource, APageThatDoesNotWalkIsRefusedFromTheBadEntryOn) {
  Page p;
  const size_t a = p.data(372, 8);
  p.word(rb::encode_header(0, 1));
  p.word(5000);  // a long entry longer than the page
  EXPECT_FALSE(remap_page_ids(p.bytes_.data(), 4096, table()));
  EXPECT_EQ(p.type_at(a), kKernelIdFirst) << "what came before it is rewritten";

  Page q;
  const uint64_t too_long = 5000;
  std::memcpy(&q.bytes_[8], &too_long, 8);
  EXPECT_FALSE(remap_page_ids(q.bytes_.data(), 4096, table()));
  EXPECT_FALSE(remap_page_ids(q.bytes_.data(), 8, table()));
}

TEST(KernelSource, TheKernelClockIsTheOneWhoseValuesAreOurs) {
  for (const char* tsc : {"local", "global", "perf", "x86-tsc"}) EXPECT_EQ(kernel_clock_for(tsc), "x86-tsc");
  for (const char* same : {"mono", "mono_raw", "boot", "tai"}) EXPECT_EQ(kernel_clock_for(same), same);
  EXPECT_EQ(kernel_clock_for("counter"), "");
  EXPECT_EQ(kernel_clock_for("uptime"), "");
}

// Issue 34, defect 15: a name -K would take that is already there does
// not fail it (mkdir's EEXIST), and is not removed: an instance named
// after this process's pid by an older usrtrace or another tool
// (usrtrace-PID-0, which proves no owner), and one with the very name this
// process takes first (usrtrace-PID-START-NS-0, whose owner, this process,
// lives). The first made the next -K fail once its pid was reused. (Its
// name counts up per process; this is the binary's first open.)
TEST(KernelSourceInstances, ANameAlreadyTakenIsPassedOverAndLeftAlone) {
  const std::string instances = "/sys/kernel/tracing/instances";
  struct stat st;
  if (::stat(instances.c_str(), &st) != 0) ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr);
  if (::geteuid() != 0 || ::stat(instances.c_str(), &st) != 0)
    GTEST_SKIP() << "needs root and the kernel's tracefs";
  struct stat ns;
  ASSERT_EQ(::stat("/proc/self/ns/pid", &ns), 0);
  const unsigned long long self_start = base::process_start_time("self");
  const std::string in = instances + "/usrtrace-" + std::to_string(::getpid());
  const std::string foreign = in + "-0";
  const std::string ours = in + "-" + std::to_string(self_start) + "-" + std::to_string(ns.st_ino) + "-0";
  ASSERT_EQ(::mkdir(foreign.c_str(), 0750), 0) << foreign;
  ASSERT_EQ(::mkdir(ours.c_str(), 0750), 0) << ours;
  char tmpl[] = "/tmp/usrtrace-ks-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  RecordOptions opts;
  opts.output = std::string(tmpl) + "/out.dat";
  JournalWriter journal;
  std::string err;
  ASSERT_EQ(journal.create(opts, &err), 0) << err;
  {
    KernelSource ks;
    EXPECT_EQ(ks.open({"sched:sched_switch"}, "mono", {::getpid()}, &journal, &err), 0) << err;
    EXPECT_EQ(ks.take_rest(&err), 0) << err;
  }
  EXPECT_EQ(::stat(foreign.c_str(), &st), 0) << "a name that proves no owner is left alone";
  EXPECT_EQ(::stat(ours.c_str(), &st), 0) << "a live owner's is left alone";
  ::rmdir(foreign.c_str());
  ::rmdir(ours.c_str());
  journal.remove();
  ::rmdir(tmpl);
}

// A recorder in a pid namespace of its own whose /proc is still its
// parent's (`unshare --pid --fork` without --mount-proc): /proc/PID there
// is another process than its PID, so a start time read there proves
// nothing, and a live recorder's instance must not be taken for one whose
// pid was reused. Here the recorder is pid 1 of a new namespace, and the
// instance usrtrace-1-START-NS-7 is its own (a second recording's, say);
// /proc/1 is the machine's init.
TEST(KernelSourceInstances, ALiveOwnersInstanceIsKeptWhenProcIsAnotherNamespaces) {
  const std::string instances = "/sys/kernel/tracing/instances";
  struct stat st;
  if (::stat(instances.c_str(), &st) != 0) ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr);
  if (::geteuid() != 0 || ::stat(instances.c_str(), &st) != 0)
    GTEST_SKIP() << "needs root and the kernel's tracefs";
  const pid_t child = ::fork();
  if (child == 0) {
    if (::unshare(CLONE_NEWPID) != 0) _exit(20);  // for the children it starts
    const pid_t recorder = ::fork();
    if (recorder == 0) {
      if (::getpid() != 1) _exit(21);
      struct stat ns;
      if (::stat("/proc/self/ns/pid", &ns) != 0) _exit(22);
      const unsigned long long self_start = base::process_start_time("self");
      const std::string own =
          instances + "/usrtrace-1-" + std::to_string(self_start) + "-" + std::to_string(ns.st_ino) + "-7";
      if (::mkdir(own.c_str(), 0750) != 0) _exit(23);
      char tmpl[] = "/tmp/usrtrace-ks-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) _exit(24);
      RecordOptions opts;
      opts.output = std::string(tmpl) + "/out.dat";
      int rc = 0;
      {
        JournalWriter journal;
        std::string err;
        KernelSource ks;
        if (journal.create(opts, &err) != 0 ||
            ks.open({"sched:sched_switch"}, "mono", {}, &journal, &err) != 0 || ks.take_rest(&err) != 0)
          rc = 25;
        journal.remove();
      }
      ::rmdir(tmpl);
      if (rc == 0 && ::stat(own.c_str(), &st) != 0) rc = 3;  // taken for a dead recorder's
      ::rmdir(own.c_str());
      _exit(rc);
    }
    int status = 0;
    if (recorder < 0 || ::waitpid(recorder, &status, 0) != recorder || !WIFEXITED(status)) _exit(26);
    _exit(WEXITSTATUS(status));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: the live recorder's instance was removed; 20-26: the setup failed";
}

}  // namespace
}  // namespace usrtrace::tracedat
