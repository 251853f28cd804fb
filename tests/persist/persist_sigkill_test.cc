// A child (persist_child) writes events from several threads into a
// file-backed top instance (USRTRACE_BUFFER_DIR) and is SIGKILLed at random
// points; every recovered trace must be prefix-consistent: per thread the
// sequence numbers form one contiguous run (starting at 0 in discard mode,
// where nothing is overwritten), each event intact, nothing else.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "usrtrace/recover.h"

namespace usrtrace {
namespace {

std::string make_dir() {
  char tmpl[] = "/tmp/usrtrace-persist-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "";
}

// Starts the child with its stdout on a pipe and waits for "ready".
pid_t start_child(const std::string& dir, const char* mode, const char* kb, const char* max) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    setenv("USRTRACE_BUFFER_DIR", dir.c_str(), 1);
    execl(USRTRACE_PERSIST_CHILD, "persist_child", mode, kb, max, nullptr);
    _exit(127);
  }
  close(fds[1]);
  char buf[16] = {};
  size_t got = 0;
  while (got < 6) {
    ssize_t n = read(fds[0], buf + got, sizeof buf - 1 - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  if (std::strncmp(buf, "ready\n", 6) != 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

// Offset of `field` in a format text ("field:TYPE NAME;\toffset:N;").
int field_offset(const std::string& fmt, const std::string& name) {
  const std::string key = " " + name + ";\toffset:";
  size_t p = fmt.find(key);
  return p == std::string::npos ? -1 : std::atoi(fmt.c_str() + p + key.size());
}

struct Check {
  size_t events = 0;
};

// The prefix-consistency check of one recovered file.
void check_file(const std::string& path, bool from_zero, Check* out) {
  std::string err;
  auto rec = Recovery::open(path, &err);
  ASSERT_TRUE(rec) << err;
  for (const auto& w : rec->warnings()) ADD_FAILURE() << "warning: " << w;
  int id = -1, tid_off = -1, seq_off = -1;
  for (const auto& f : rec->formats()) {
    if (f.system == "persist" && f.text.find("name: seq\n") == 0) {
      id = f.id;
      tid_off = field_offset(f.text, "tid");
      seq_off = field_offset(f.text, "seq");
    }
  }
  ASSERT_GE(id, 0) << "persist:seq's format is not in the file";
  ASSERT_GE(tid_off, 8);
  ASSERT_GE(seq_off, 8);
  std::map<int32_t, uint64_t> next;  // tid -> next expected seq
  uint64_t last_ts_per_cpu[1024] = {};
  for (const auto& ev : rec->events(0)) {
    ASSERT_GE(ev.len, static_cast<uint32_t>(seq_off + 8));
    uint16_t type;
    int32_t pid, tid;
    uint64_t seq;
    std::memcpy(&type, ev.data, 2);
    std::memcpy(&pid, ev.data + 4, 4);
    std::memcpy(&tid, ev.data + tid_off, 4);
    std::memcpy(&seq, ev.data + seq_off, 8);
    ASSERT_EQ(type, id) << "garbage entry";
    ASSERT_EQ(pid, tid) << "torn event";
    auto it = next.find(tid);
    if (it == next.end()) {
      if (from_zero) {
        ASSERT_EQ(seq, 0u) << "thread " << tid << " does not start at 0";
      }
      next[tid] = seq + 1;
    } else {
      ASSERT_EQ(seq, it->second) << "thread " << tid << ": gap or duplicate";
      ++it->second;
    }
    if (ev.cpu >= 0 && ev.cpu < 1024) {
      ASSERT_GE(ev.ts_raw, last_ts_per_cpu[ev.cpu]) << "time went back on cpu " << ev.cpu;
      last_ts_per_cpu[ev.cpu] = ev.ts_raw;
    }
    ++out->events;
  }
  EXPECT_FALSE(next.empty()) << "no event recovered";
}

TEST(PersistSigkill, RecoveredTraceIsPrefixConsistent) {
  const std::string dir = make_dir();
  ASSERT_FALSE(dir.empty());
  std::mt19937 rng(12345);
  constexpr int kIterations = 50;
  size_t total = 0;
  for (int i = 0; i < kIterations; ++i) {
    const bool overwrite = i % 2 == 0;
    // Discard mode: a buffer that holds every event the threads write, so
    // nothing is dropped and each thread's run starts at 0.
    const pid_t pid =
        overwrite ? start_child(dir, "overwrite", "64", "0") : start_child(dir, "discard", "4096", "20000");
    ASSERT_GT(pid, 0) << "child did not start";
    std::uniform_int_distribution<int> delay(0, 3000);
    usleep(static_cast<useconds_t>(delay(rng)));  // a random point of the child's run
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    const std::string path = dir + "/usrtrace-" + std::to_string(pid) + "-top.buf";
    Check c;
    check_file(path, !overwrite, &c);
    total += c.events;
    unlink(path.c_str());
    if (HasFatalFailure() || HasFailure()) break;
  }
  rmdir(dir.c_str());
  RecordProperty("events_checked", static_cast<int>(total));
}

TEST(PersistSigkill, EnvVarNamesTheFileAndCliPrintsIt) {
  const std::string dir = make_dir();
  ASSERT_FALSE(dir.empty());
  const pid_t pid = start_child(dir, "discard", "4096", "100");
  ASSERT_GT(pid, 0);
  // The child has committed its events once every thread wrote its first;
  // wait for all 100 per thread through the file itself.
  const std::string path = dir + "/usrtrace-" + std::to_string(pid) + "-top.buf";
  ASSERT_EQ(access(path.c_str(), F_OK), 0) << "USRTRACE_BUFFER_DIR did not make " << path;
  for (int tries = 0; tries < 2000; ++tries) {
    std::string err;
    auto rec = Recovery::open(path, &err);
    ASSERT_TRUE(rec) << err;
    if (rec->events(0).size() >= 400) break;
    usleep(1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::string cmd = std::string(USRTRACE_CLI) + " recover " + path;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("# tracer: nop"), std::string::npos) << out;
  EXPECT_NE(out.find("entries-in-buffer/entries-written: 400/400"), std::string::npos) << out.substr(0, 500);
  EXPECT_NE(out.find("seq: tid="), std::string::npos) << out.substr(0, 2000);
  EXPECT_NE(out.find(" seq=99\n"), std::string::npos);
  EXPECT_NE(out.find("persist_child-"), std::string::npos) << "thread names: " << out.substr(0, 2000);
  // The same as a trace.dat: trace-cmd report and usrtrace report print
  // the 400 events (v6, and v7 with zstd), every one with its format.
  for (const char* args : {" --file-version 6", " --compress"}) {
    SCOPED_TRACE(args);
    const std::string dat = dir + "/recovered.dat";
    ASSERT_EQ(system((std::string(USRTRACE_CLI) + " recover " + path + " -o " + dat + args).c_str()), 0);
    auto read = [&](const std::string& c) {
      std::string o;
      FILE* q = popen((c + " 2>&1").c_str(), "r");
      while (q && (n = fread(buf, 1, sizeof buf, q)) > 0) o.append(buf, n);
      if (q) pclose(q);
      return o;
    };
    const std::string mine = read(std::string(USRTRACE_CLI) + " report " + dat);
    size_t seqs = 0;
    for (size_t at = mine.find(" seq: "); at != std::string::npos; at = mine.find(" seq: ", at + 1)) ++seqs;
    EXPECT_EQ(seqs, 400u) << mine.substr(0, 2000);
    EXPECT_NE(mine.find("persist_child-"), std::string::npos) << mine.substr(0, 2000);
    if (access("/usr/bin/trace-cmd", X_OK) == 0) {
      const std::string theirs = read("trace-cmd report " + dat);
      EXPECT_EQ(theirs, mine);
      EXPECT_EQ(theirs.find("UNKNOWN"), std::string::npos);
    }
    unlink(dat.c_str());
  }
  // A file that is not one: a clear error, exit status 1.
  std::string bad = std::string(USRTRACE_CLI) + " recover /etc/hostname 2>&1";
  p = popen(bad.c_str(), "r");
  ASSERT_TRUE(p);
  out.clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_NE(pclose(p), 0);
  EXPECT_NE(out.find("not a usrtrace buffer file"), std::string::npos) << out;
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace usrtrace
