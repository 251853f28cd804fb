// The usrtrace command, run as a user runs it, against live processes:
// cli_target (a traced program driven line by line on stdin, so each test
// knows exactly what was written) and plain_target (a program without
// usrtrace, recorded through the preloaded runtime).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tracedat/journal.h"

namespace {

using Clock = std::chrono::steady_clock;

// In the ASan build, `record -- COMMAND` preloads an instrumented
// libusrtrace-preload.so ahead of the program's own ASan runtime, which
// ASan refuses unless told the order is fine. Every child inherits this.
[[maybe_unused]] const bool g_asan_order = [] {
  std::string o = getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "";
  setenv("ASAN_OPTIONS", (o + (o.empty() ? "" : ":") + "verify_asan_link_order=0").c_str(), 1);
  return true;
}();

struct Result {
  int rc = -1;  // exit status, or 128 + signal
  std::string out, err;
};

int status_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A child with pipes on its stdin (optional), stdout and stderr.
struct Proc {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string out_text, err_text;

  static Proc start(const std::vector<std::string>& argv, bool with_stdin) {
    int i[2] = {-1, -1}, o[2], e[2];
    if (with_stdin && pipe2(i, O_CLOEXEC) != 0) abort();
    if (pipe2(o, O_CLOEXEC) != 0 || pipe2(e, O_CLOEXEC) != 0) abort();
    Proc p;
    p.pid = fork();
    if (p.pid == 0) {
      setpgid(0, 0);  // its own group: a stuck test kills what it started, children too
      if (with_stdin) {
        dup2(i[0], 0);
      } else {
        const int null = ::open("/dev/null", O_RDONLY);
        dup2(null, 0);
      }
      dup2(o[1], 1);
      dup2(e[1], 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    if (with_stdin) {
      ::close(i[0]);
      p.in = i[1];
    }
    ::close(o[1]);
    ::close(e[1]);
    p.out = o[0];
    p.err = e[0];
    return p;
  }

  // Reads what is there from stdout/stderr, waiting up to `ms`; false at
  // end of both.
  bool pump(int ms) {
    pollfd f[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
    if (out < 0) f[0].fd = -1;
    if (err < 0) f[1].fd = -1;
    if (f[0].fd < 0 && f[1].fd < 0) return false;
    if (::poll(f, 2, ms) <= 0) return true;
    char buf[65536];
    for (int k = 0; k < 2; ++k) {
      if (!(f[k].revents & (POLLIN | POLLHUP))) continue;
      int& fd = k == 0 ? out : err;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fd);
        fd = -1;
      } else {
        (k == 0 ? out_text : err_text).append(buf, static_cast<size_t>(n));
      }
    }
    return true;
  }

  // Waits (bounded) until stdout holds `what` after `from`; its end, or npos.
  size_t wait_for(const std::string& what, size_t from = 0, int seconds = 60) {
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    for (;;) {
      const size_t at = out_text.find(what, from);
      if (at != std::string::npos) return at + what.size();
      if (Clock::now() > end || !pump(100)) return std::string::npos;
    }
  }

  void close_stdin() {
    if (in >= 0) ::close(in);
    in = -1;
  }

  // Closes its stdin (unless keep_stdin) and waits for its end.
  Result finish(int seconds = 120, bool keep_stdin = false) {
    if (!keep_stdin) close_stdin();
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (pump(100) && Clock::now() < end) {
    }
    Result r;
    int status = 0;
    for (;;) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      if (Clock::now() > end) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      if (!pump(20)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    while (pump(0)) {
    }
    r.rc = status_of(status);
    r.out = out_text;
    r.err = err_text;
    pid = -1;
    return r;
  }

  ~Proc() {
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (int fd : {in, out, err})
      if (fd >= 0) ::close(fd);
  }
};

// `usrtrace ARGS...`, to its end.
Result usrtrace(std::vector<std::string> args) {
  args.insert(args.begin(), USRTRACE_CLI);
  Proc p = Proc::start(args, false);
  return p.finish();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// cli_target, ready to take commands.
class Target {
 public:
  Target() : proc_(Proc::start({CLI_TARGET}, true)) {
    const size_t end = proc_.wait_for("\n");
    if (end == std::string::npos || proc_.out_text.rfind("ready ", 0) != 0) {
      ADD_FAILURE() << "cli_target did not start: " << proc_.out_text << proc_.err_text;
      return;
    }
    pid_ = std::atoi(proc_.out_text.c_str() + 6);
    seen_ = end;
  }
  int pid() const { return pid_; }
  std::string spid() const { return std::to_string(pid_); }

  // Sends a command and waits for its "ok".
  void cmd(const std::string& line) {
    const std::string l = line + "\n";
    ASSERT_EQ(::write(proc_.in, l.data(), l.size()), static_cast<ssize_t>(l.size()));
    const size_t end = proc_.wait_for("ok\n", seen_);
    ASSERT_NE(end, std::string::npos) << "no answer to '" << line << "': " << proc_.err_text;
    seen_ = end;
  }
  Result finish() { return proc_.finish(); }

 private:
  Proc proc_;
  int pid_ = 0;
  size_t seen_ = 0;
};

std::string temp_dir() {
  char tmpl[] = "/tmp/usrtrace-cli-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

// Waits (bounded) until `pid` handles SIGINT itself: a command that
// catches Ctrl-C to stop cleanly has reached that point.
bool catches_sigint(pid_t pid) {
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < end) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("SigCgt:", 0) == 0) {
        const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
        if (mask & (1ull << (SIGINT - 1))) return true;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Waits (bounded) for record's "hit Ctrl-C to stop" line on stderr.
bool recording(Proc& rec) {
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (rec.err_text.find("hit Ctrl-C to stop") == std::string::npos)
    if (Clock::now() > end || !rec.pump(100)) return false;
  return true;
}

// The events of a `usrtrace report` text, "tick: seq=N" and the like, in
// order, for the lines naming `event`.
std::vector<unsigned> seqs(const std::string& report, const std::string& event) {
  std::vector<unsigned> out;
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + event + ":") == std::string::npos) continue;
    const size_t at = line.find("seq=");
    if (at != std::string::npos) out.push_back(static_cast<unsigned>(std::strtoul(line.c_str() + at + 4, nullptr, 10)));
  }
  return out;
}

bool have_trace_cmd() { return ::access("/usr/bin/trace-cmd", X_OK) == 0; }

TEST(CliList, ProcessesEventsTracersAndOptions) {
  Target t;
  Result r = usrtrace({"list"});
  ASSERT_EQ(r.rc, 0) << r.err;
  bool found = false;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    int pid = 0;
    std::string comm;
    if (l >> pid >> comm && pid == t.pid()) found = comm == "cli_target";
  }
  EXPECT_TRUE(found) << r.out;
  r = usrtrace({"list", "-P", t.spid(), "-e"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "clitest:tick\n"), 1) << r.out;
  EXPECT_EQ(count(r.out, "clitest:rare\n"), 1) << r.out;
  r = usrtrace({"list", "-P", t.spid(), "-t"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "nop\n"), 1) << r.out;
  r = usrtrace({"list", "-P", t.spid(), "-o"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("print-parent"), std::string::npos) << r.out;
  r = usrtrace({"list", "-e"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("need -P"), std::string::npos) << r.err;
}

TEST(CliStart, EnableStopRestartResetAndShow) {
  Target t;
  Result r = usrtrace({"start", "-P", t.spid(), "-e", "clitest:tick"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 5");
  t.cmd("rare 2");  // not enabled
  r = usrtrace({"show", "-P", t.spid()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, " tick: "), 5) << r.out;
  EXPECT_EQ(count(r.out, " rare: "), 0) << r.out;
  r = usrtrace({"show", "-P", t.spid(), "--set_event", "--tracing_on"});
  EXPECT_EQ(r.out, "clitest:tick\n1\n");

  ASSERT_EQ(usrtrace({"stop", "-P", t.spid()}).rc, 0);
  t.cmd("tick 7");
  r = usrtrace({"show", "-P", t.spid()});
  EXPECT_EQ(count(r.out, " tick: "), 5) << "recorded while stopped: " << r.out;
  ASSERT_EQ(usrtrace({"restart", "-P", t.spid()}).rc, 0);
  t.cmd("tick 3");
  r = usrtrace({"show", "-P", t.spid()});
  EXPECT_EQ(count(r.out, " tick: "), 8) << r.out;

  r = usrtrace({"reset", "-P", t.spid()});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = usrtrace({"show", "-P", t.spid(), "--set_event"});
  EXPECT_EQ(r.out, "");
  r = usrtrace({"show", "-P", t.spid()});
  EXPECT_EQ(count(r.out, " tick: "), 0) << "reset leaves the buffer empty: " << r.out;
  t.cmd("tick 2");
  EXPECT_EQ(count(usrtrace({"show", "-P", t.spid()}).out, " tick: "), 0) << "nothing enabled after reset";
}

TEST(CliStart, InstancesFiltersBufferSizeClockAndStat) {
  Target t;
  Result r = usrtrace({"start", "-P", t.spid(), "-B", "cli_few", "-e", "clitest:tick", "-f", "seq < 3",
                       "-b", "64", "-C", "global", "-B", "cli_rare", "-e", "clitest:rare"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 10");
  t.cmd("rare 4");
  r = usrtrace({"show", "-P", t.spid(), "-B", "cli_few"});
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1, 2})) << r.out;
  EXPECT_EQ(count(r.out, " rare: "), 0);
  r = usrtrace({"show", "-P", t.spid(), "-B", "cli_rare"});
  EXPECT_EQ(count(r.out, " rare: "), 4) << r.out;
  EXPECT_EQ(count(r.out, " tick: "), 0);
  EXPECT_EQ(count(usrtrace({"show", "-P", t.spid()}).out, " tick: "), 0) << "the top was not enabled";
  r = usrtrace({"show", "-P", t.spid(), "-B", "cli_few", "--buffer_size", "--trace_clock"});
  // 64 KiB of event data: 17 pages of 4080 bytes, shown as the kernel
  // shows it.
  EXPECT_EQ(r.out.substr(0, 3), "67\n") << r.out;
  EXPECT_NE(r.out.find("[global]"), std::string::npos) << r.out;

  r = usrtrace({"stat", "-P", t.spid()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Process: " + t.spid() + " (cli_target)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Instance: cli_few"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("filter: seq < 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Instance: cli_rare"), std::string::npos) << r.out;

  // reset -d takes the instances away.
  r = usrtrace({"reset", "-P", t.spid(), "-B", "cli_few", "-B", "cli_rare", "-d"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = usrtrace({"show", "-P", t.spid(), "-B", "cli_few"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

TEST(CliErrors, OneClearLineAndANonZeroStatus) {
  // A pid that does not exist: a child that has exited and been reaped.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  Result r = usrtrace({"show", "-P", std::to_string(gone)});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "usrtrace show: no process " + std::to_string(gone) + "\n");
  // A live process without usrtrace: a shell.
  Proc sh = Proc::start({"/bin/sh", "-c", "read x"}, true);
  r = usrtrace({"stat", "-P", std::to_string(sh.pid)});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("does not serve usrtrace's control socket"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
  sh.finish();

  Target t;
  r = usrtrace({"start", "-P", t.spid(), "-e", "nosuch:event"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("set_event: Invalid argument"), std::string::npos) << r.err;
  r = usrtrace({"start", "-P", t.spid(), "-b", "lots"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("buffer_size_kb: Invalid argument"), std::string::npos) << r.err;
  r = usrtrace({"start", "-P", t.spid(), "-e", "clitest:tick", "-f", "seq <"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("filter: Invalid argument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error:"), std::string::npos) << "the error_log line: " << r.err;
  r = usrtrace({"start", "-P", t.spid(), "-C", "sundial"});
  EXPECT_EQ(r.rc, 1);
  r = usrtrace({"start", "-P", t.spid(), "-f", "seq < 3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("needs a -e"), std::string::npos) << r.err;
  r = usrtrace({"show", "-P", t.spid(), "-B", "no_such_instance"});
  EXPECT_EQ(r.rc, 1);
  r = usrtrace({"snapshot", "-P", t.spid(), "-s", "-f"});
  EXPECT_NE(r.rc, 0) << "-s and -f exclude each other";
  r = usrtrace({"show"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("-P"), std::string::npos) << r.err;
  r = usrtrace({"show", "-P", "abc"});
  EXPECT_NE(r.rc, 0);
  r = usrtrace({"frobnicate"});
  EXPECT_NE(r.rc, 0);
  r = usrtrace({"record", "-o", "/tmp/x.dat"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("either -P PID or -- COMMAND"), std::string::npos) << r.err;
  r = usrtrace({"record", "-o", "/nonexistent/dir/x.dat", "-P", t.spid()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent/dir"), std::string::npos) << r.err;
  r = usrtrace({"record", "-o", "/tmp/x.dat", "--", "/nonexistent/program"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("/nonexistent/program"), std::string::npos) << r.err;
  // Nothing of the failed setups stayed.
  EXPECT_EQ(usrtrace({"show", "-P", t.spid(), "--set_event"}).out, "");
}

TEST(CliErrors, HelpOnEveryVerb) {
  for (const char* verb : {"list", "start", "stop", "restart", "reset", "show", "stream", "snapshot",
                           "stat", "record", "extract", "report", "recover"}) {
    const Result r = usrtrace({verb, "--help"});
    EXPECT_EQ(r.rc, 0) << verb;
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << verb << ": " << r.out;
  }
}

// Input files that are not regular files: recover and report once waited
// forever in open() for a FIFO's writer, and recover read /dev/zero until
// its allocation failed. Each is refused at once with one line saying what
// the file is. The commands run with a deadline of 20 s (for what takes
// milliseconds): one still running then is killed, and its status
// (128 + SIGKILL) fails the test instead of hanging it.
TEST(CliErrors, InputsThatAreNotRegularFilesAreRefusedAtOnce) {
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << strerror(errno);
  auto run = [](std::vector<std::string> args) {
    args.insert(args.begin(), USRTRACE_CLI);
    Proc p = Proc::start(args, false);
    return p.finish(20);
  };
  struct Case {
    std::vector<std::string> args;
    std::string path, what;
  };
  const Case cases[] = {
      {{"recover", fifo}, fifo, "a FIFO"},
      {{"report", "-i", fifo}, fifo, "a FIFO"},
      {{"report", fifo}, fifo, "a FIFO"},
      {{"recover", "/dev/zero"}, "/dev/zero", "a character device"},
      {{"report", "-i", "/dev/zero"}, "/dev/zero", "a character device"},
      {{"recover", dir}, dir, "a directory"},
      {{"report", "-i", dir}, dir, "a directory"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.rc, 1) << c.args[0] << " " << c.args.back()
                       << (r.rc == 128 + SIGKILL ? ": still running at the deadline" : "");
    EXPECT_EQ(r.err, "usrtrace " + c.args[0] + ": " + c.path + ": " + c.what + ", not a regular file\n");
    EXPECT_EQ(r.out, "");
  }
  unlink(fifo.c_str());
  rmdir(dir.c_str());
}

TEST(CliSnapshot, TakePrintClearFree) {
  Target t;
  ASSERT_EQ(usrtrace({"start", "-P", t.spid(), "-B", "cli_snap", "-e", "clitest:tick"}).rc, 0);
  t.cmd("tick 4");
  Result r = usrtrace({"snapshot", "-P", t.spid(), "-B", "cli_snap", "-s"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 2");
  r = usrtrace({"snapshot", "-P", t.spid(), "-B", "cli_snap"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1, 2, 3})) << r.out;
  r = usrtrace({"show", "-P", t.spid(), "-B", "cli_snap"});
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1})) << "after the swap, the live buffer: " << r.out;
  ASSERT_EQ(usrtrace({"snapshot", "-P", t.spid(), "-B", "cli_snap", "-r"}).rc, 0);
  EXPECT_EQ(count(usrtrace({"snapshot", "-P", t.spid(), "-B", "cli_snap"}).out, " tick: "), 0);
  ASSERT_EQ(usrtrace({"snapshot", "-P", t.spid(), "-B", "cli_snap", "-f"}).rc, 0);
  EXPECT_NE(usrtrace({"snapshot", "-P", t.spid(), "-B", "cli_snap"}).out.find("Snapshot is freed"),
            std::string::npos);
}

TEST(CliExtract, TheBuffersAsTheyAreToTraceDat) {
  Target t;
  ASSERT_EQ(usrtrace({"start", "-P", t.spid(), "-e", "clitest", "-B", "cli_ex", "-e", "clitest:rare"}).rc, 0);
  t.cmd("tick 300");
  t.cmd("rare 5");
  const std::string dir = temp_dir(), file = dir + "/ex.dat";
  Result r = usrtrace({"extract", "-P", t.spid(), "-a", "-o", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = usrtrace({"report", "-i", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<unsigned> want(300);
  for (unsigned i = 0; i < 300; ++i) want[i] = i;
  EXPECT_EQ(seqs(r.out, "tick"), want);
  EXPECT_EQ(count(r.out, " rare: "), 10) << "5 in the top, 5 in cli_ex";
  EXPECT_EQ(count(r.out, "cli_ex: "), 5) << r.out.substr(0, 2000);
  if (have_trace_cmd()) {
    const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", file}, false).finish();
    EXPECT_EQ(tc.rc, 0) << tc.err;
    EXPECT_EQ(tc.out, r.out) << "trace-cmd report prints what usrtrace report prints";
  }
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, ARunningProcessUntilCtrlC) {
  Target t;
  const std::string dir = temp_dir(), file = dir + "/rec.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-P", t.spid(), "-e", "clitest", "-o", file}, false);
  ASSERT_TRUE(recording(rec)) << "record never got ready: " << rec.err_text;
  t.cmd("tick 2000");
  t.cmd("rare 3");
  kill(rec.pid, SIGINT);
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("0 events lost"), std::string::npos) << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  std::vector<unsigned> want(2000);
  for (unsigned i = 0; i < 2000; ++i) want[i] = i;
  EXPECT_EQ(seqs(rep.out, "tick"), want);
  EXPECT_EQ(count(rep.out, " rare: "), 3);
  // What record set up is taken back; the process goes on.
  EXPECT_EQ(usrtrace({"show", "-P", t.spid(), "--set_event"}).out, "");
  t.cmd("tick 1");
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, AProcessThatExitsLeavesACompleteFile) {
  Target t;
  const std::string dir = temp_dir(), file = dir + "/exit.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-P", t.spid(), "-B", "cli_rec", "-e", "clitest:tick",
                          "-o", file, "--compress"},
                         false);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  t.cmd("tick 5000");
  t.cmd("exit 0");
  t.finish();
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_EQ(seqs(rep.out, "tick").size(), 5000u);
  EXPECT_EQ(count(rep.out, "UNKNOWN"), 0);
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// A process killed while recorded leaves what was taken before, and record
// says the end is missing instead of claiming a complete file.
TEST(CliRecord, AKilledProcessLeavesWhatCameAndSaysTheEndIsMissing) {
  Target t;
  const std::string dir = temp_dir(), file = dir + "/killed.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-P", t.spid(), "-e", "clitest:tick", "-o", file}, false);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  t.cmd("tick 10");
  kill(t.pid(), SIGKILL);
  t.finish();
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("process " + t.spid() + " went away before its last pages were taken"), std::string::npos)
      << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  EXPECT_EQ(rep.rc, 0) << rep.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, ACommandFromItsStartToItsEnd) {
  const std::string dir = temp_dir(), file = dir + "/cmd.dat";
  // The command's stdin is record's: the script it runs.
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest", "-e", "usrtrace:thread_rename", "-o", file,
                          "--", CLI_TARGET},
                         true);
  const std::string script = "tick 1000\nname worker\nrare 2\nexit 3\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("exited with status 3"), std::string::npos) << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_EQ(seqs(rep.out, "tick").size(), 1000u);
  EXPECT_EQ(count(rep.out, " rare: "), 2);
  EXPECT_EQ(count(rep.out, "newcomm=worker"), 1) << rep.out.substr(0, 3000);
  EXPECT_EQ(count(rep.out, "UNKNOWN"), 0) << "formats of a program that unregistered its events at exit";
  if (have_trace_cmd()) {
    const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", file}, false).finish();
    EXPECT_EQ(tc.rc, 0) << tc.err;
    EXPECT_EQ(tc.out, rep.out);
  }
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, ACommandStoppedByCtrlCKeepsWhatItWrote) {
#if USRTRACE_TEST_TSAN
  // TSan's runtime runs an asynchronous signal's handler only when the
  // thread it hit next calls an intercepted function, which the spinning
  // writer never does: the deferred Ctrl-C would not be seen.
  GTEST_SKIP() << "signal delivery to a spinning thread is deferred by ThreadSanitizer";
#endif
  const std::string dir = temp_dir(), file = dir + "/spin.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET}, true);
  ASSERT_NE(rec.wait_for("ready "), std::string::npos) << rec.err_text;
  const std::string spin = "spin\n";
  ASSERT_EQ(::write(rec.in, spin.data(), spin.size()), 5);
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  kill(rec.pid, SIGINT);
  // The command's input stays open: it ends by the Ctrl-C, deferred by its
  // runtime until the recorder has taken the last pages.
  const Result r = rec.finish(60, true);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("killed by signal 2"), std::string::npos) << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  // The spinning thread's events, in order from its first; with the
  // recorder behind a spinning writer (overwrite mode), pages may have
  // been lost, and report says so.
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  ASSERT_GT(got.size(), 0u) << r.err << rep.out.substr(0, 1000);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << i;
  if (got.back() + 1 != got.size()) {
    EXPECT_NE(rep.out.find("EVENTS DROPPED]"), std::string::npos) << "a gap in the events is reported";
  }
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// At the deferred Ctrl-C the recorder's last read ends by itself while the
// spinning thread goes on writing, and the process dies as soon as the
// recorder is done: not when the runtime's wait for recorders (here a
// minute) runs out, and not by record's SIGKILL 10 s after the Ctrl-C.
TEST(CliRecord, CtrlCEndsTheCommandWhenTheRecorderIsDoneNotAtTheExitWait) {
#if USRTRACE_TEST_TSAN
  GTEST_SKIP() << "signal delivery to a spinning thread is deferred by ThreadSanitizer";
#endif
  const std::string dir = temp_dir(), file = dir + "/stop.dat";
  Proc rec = Proc::start({"/usr/bin/env", "USRTRACE_EXIT_WAIT_MS=60000", USRTRACE_CLI, "record", "-e",
                          "clitest:tick", "-o", file, "--", CLI_TARGET},
                         true);
  ASSERT_NE(rec.wait_for("ready "), std::string::npos) << rec.err_text;
  ASSERT_EQ(::write(rec.in, "spin\n", 5), 5);
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos) << rec.err_text;
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  kill(rec.pid, SIGINT);
  const Result r = rec.finish(60, true);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("killed by signal 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("still runs 10 s after Ctrl-C"), std::string::npos) << r.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// A full disk under record: it stops at once and says why, the command is
// let go (before: held at its exit for its whole exit wait, 30 s, and then
// blamed: "went away before its last pages were taken"), and the previous
// output is untouched. The exit wait is ten minutes here: a command still
// held would outlive finish()'s deadline, and the test fail.
TEST(CliRecord, AFullDiskEndsTheRecordingAndLetsTheCommandGo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const std::string dir = temp_dir(), small = dir + "/small", file = small + "/full.dat";
  ASSERT_EQ(::mkdir(small.c_str(), 0700), 0);
  if (std::system(("mount -t tmpfs -o size=256k tmpfs " + small).c_str()) != 0) GTEST_SKIP() << "cannot mount a tmpfs";
  {
    std::ofstream f(file);
    f << "the previous recording";
  }
  Proc rec = Proc::start({"/usr/bin/env", "USRTRACE_EXIT_WAIT_MS=600000", USRTRACE_CLI, "record", "-e",
                          "clitest:tick", "-o", file, "--", CLI_TARGET},
                         true);
  ASSERT_NE(rec.wait_for("ready "), std::string::npos) << rec.err_text;
  const std::string script = "tick 200000\n";  // several MB of events
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos) << rec.err_text;
  const Result r = rec.finish(120);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device after "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(the previous " + file + ", if any, is unchanged)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("went away before its last pages"), std::string::npos) << r.err;
  std::string text;
  {
    std::ifstream f(file);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  EXPECT_TRUE(text == "the previous recording") << text.size() << " bytes";
  EXPECT_EQ(std::system(("umount " + small).c_str()), 0);
  ::rmdir(small.c_str());
  ::rmdir(dir.c_str());
}

// The journals of OUTPUT in DIR (.OUTPUT.usrtrace-rec-XXXXXX).
std::vector<std::string> journals_of(const std::string& dir, const std::string& output) {
  const std::string prefix = "." + output + ".usrtrace-rec-";
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return found;
}

// The one journal of OUTPUT in DIR and the pages it holds (read as
// `usrtrace recover` reads it; a record being written counts its whole
// pages), or "".
std::pair<std::string, uint64_t> journal_of(const std::string& dir, const std::string& output) {
  const std::vector<std::string> all = journals_of(dir, output);
  if (all.size() != 1) return {"", 0};
  const int fd = ::open(all[0].c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {"", 0};
  usrtrace::tracedat::Journal j;
  std::string err;
  const bool ok = usrtrace::tracedat::read_journal(fd, &j, &err) == 0;
  ::close(fd);
  return {all[0], ok ? j.pages : 0};
}

// kill -9 of record: the pages it had taken are in its journal, which
// names the output; `usrtrace recover JOURNAL` writes that output from them
// (before: nothing was left, the pages were in unnamed temporary files).
TEST(CliRecord, AKilledRecorderLeavesAJournalThatRecoverFinishes) {
  const std::string dir = temp_dir(), file = dir + "/killed.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET}, true);
  ASSERT_NE(rec.wait_for("ready "), std::string::npos) << rec.err_text;
  const std::string script = "tick 100000\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos) << rec.err_text;
  // Until the recorder has taken 64 pages (a condition, bounded: not a sleep).
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (journal_of(dir, "killed.dat").second < 64 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto [journal, pages] = journal_of(dir, "killed.dat");
  ASSERT_GE(pages, 64u) << "the recorder took no pages: " << rec.err_text;
  ASSERT_EQ(::kill(rec.pid, SIGKILL), 0);
  struct stat st;
  ASSERT_EQ(::stat(journal.c_str(), &st), 0);
  const off_t size = st.st_size;
  const Result r = rec.finish(60);  // closes the command's input: it ends
  EXPECT_EQ(::access(file.c_str(), F_OK), -1) << "record wrote its output before it was killed";
  const Result rv = usrtrace({"recover", journal});
  ASSERT_EQ(rv.rc, 0) << rv.err;
  EXPECT_NE(rv.err.find("wrote " + file + ": "), std::string::npos) << rv.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  // At least what the journal held when record died: 64 pages of 40-byte
  // events.
  ASSERT_GT(got.size(), 64u * 4000 / 40) << rv.err << rep.err << rep.out.substr(0, 3000);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << i;
  // A journal cut short at any byte still gives its whole pages: its last
  // 12 KiB and a bit torn off, recover keeps the pages before.
  ASSERT_EQ(::truncate(journal.c_str(), size - 3 * 4096 - 123), 0);
  const std::string half = dir + "/half.dat";
  const Result rh = usrtrace({"recover", journal, "-o", half});
  ASSERT_EQ(rh.rc, 0) << rh.err;
  EXPECT_NE(rh.err.find("ends early"), std::string::npos) << rh.err;
  const std::vector<unsigned> first_half = seqs(usrtrace({"report", "-i", half}).out, "tick");
  EXPECT_GT(first_half.size(), 0u);
  EXPECT_LT(first_half.size(), got.size());
  // The next recording of that output points at the journal left behind,
  // and leaves no journal of its own.
  const Result again = usrtrace({"record", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET});
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("note: " + journal + " holds the pages of an earlier recording"), std::string::npos)
      << again.err;
  EXPECT_EQ(journals_of(dir, "killed.dat"), std::vector<std::string>{journal});
  for (const std::string& f : {file, half, journal}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, ACommandThatSurvivesCtrlCIsKilledAfterTenSeconds) {
  const std::string dir = temp_dir(), file = dir + "/stubborn.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET}, true);
  const std::string script = "ignoreint\ntick 5\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_NE(rec.wait_for("ok\nok\n"), std::string::npos) << rec.err_text;
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  kill(rec.pid, SIGINT);
  const Result r = rec.finish(120, true);  // its input stays open: it would run forever
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("still runs 10 s after Ctrl-C: killing it"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by signal 9"), std::string::npos) << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_EQ(seqs(rep.out, "tick"), (std::vector<unsigned>{0, 1, 2, 3, 4}));
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// A command that exits in a static constructor: record is held with it
// before its constructors and says plainly that it never reached main().
TEST(CliRecord, ACommandThatEndsInAConstructorIsSaidToHaveEndedBeforeMain) {
  const std::string dir = temp_dir(), file = dir + "/ctor.dat";
  const Result r = Proc::start({"/usr/bin/env", "CLI_TARGET_EXIT_IN_CONSTRUCTOR=3", USRTRACE_CLI, "record", "-e",
                                "clitest:tick", "-o", file, "--", CLI_TARGET},
                               false)
                       .finish();
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("constructor exits"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ended before main() (in a constructor): nothing was recorded"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("control socket"), std::string::npos) << r.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, AProgramWithoutUsrtraceThroughThePreloadedRuntime) {
  const std::string dir = temp_dir(), file = dir + "/plain.dat";
  const Result r = usrtrace({"record", "-e", "usrtrace:thread_rename", "-o", file, "--", PLAIN_TARGET, "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("runtime preloaded"), std::string::npos) << r.out;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(count(rep.out, "newcomm=plain-" + std::to_string(i) + "\n"), 1) << rep.out;
    EXPECT_EQ(count(rep.out, "plain marker " + std::to_string(i) + "\n"), 1) << rep.out;
  }
  // Without the runtime it runs the same, markers aside.
  const Result plain = Proc::start({PLAIN_TARGET, "3"}, false).finish();
  EXPECT_EQ(plain.rc, 0);
  EXPECT_NE(plain.out.find("runtime absent"), std::string::npos);
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, DashCFollowsTheProgramsACommandStarts) {
  const std::string dir = temp_dir(), file = dir + "/tree.dat";
  // The command starts two programs one after the other (fork and exec),
  // which write 10 and 20 ticks; each announces itself as its runtime
  // starts and is recorded into the same file, to its exit.
  // (-e nosys: with -c, an event a process lacks is skipped there.)
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "-c", "-e", "clitest", "-e", "nosys:nosuch", "-o", file, "--", CLI_TARGET}, true);
  const std::string script = "spawn 10\nspawn 20\nrare 1\nexit 0\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("followed 2 processes"), std::string::npos) << r.err;
  const Result rep = usrtrace({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  // The command's own rare in the top buffer; two buffers named after the
  // processes it started: 10 ticks in one, 20 in the other.
  std::map<std::string, std::vector<unsigned>> by_buffer;
  std::map<std::string, int> rare;
  std::istringstream in(rep.out);
  std::string line;
  while (std::getline(in, line)) {
    // The buffer names are right-aligned to the longest: with pids of
    // different widths (after a wrap) the shorter name has spaces before it.
    line.erase(0, line.find_first_not_of(' '));
    const size_t colon = line.find(": ");
    // A buffer's line starts with its name and ": "; the top buffer's with
    // the task ("cli_target-PID [CPU] TIME: ...").
    if (line.rfind("cli_target-", 0) != 0 || colon == std::string::npos ||
        line.find(' ') < colon)
      continue;
    const std::string buf = line.substr(0, colon);
    for (unsigned s : seqs(line, "tick")) by_buffer[buf].push_back(s);
    rare[buf] += count(line, " rare: ");
  }
  ASSERT_EQ(by_buffer.size(), 2u) << rep.out;
  std::vector<size_t> sizes;
  for (const auto& [buf, s] : by_buffer) sizes.push_back(s.size());
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<size_t>{10, 20})) << rep.out;
  int rares = 0;
  for (const auto& [buf, n] : rare) rares += n;
  EXPECT_EQ(rares, 0);
  EXPECT_EQ(count(rep.out, " rare: "), 1) << "the command's own";
  if (have_trace_cmd()) {
    const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", file}, false).finish();
    EXPECT_EQ(tc.rc, 0) << tc.err;
    EXPECT_EQ(count(tc.out, " tick: "), 30) << tc.out;
    EXPECT_EQ(count(tc.out, "UNKNOWN"), 0);
  }
  // -c without a command is refused.
  const Result bad = usrtrace({"record", "-c", "-P", "1", "-o", file});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("-c follows"), std::string::npos) << bad.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliStream, EventsAsTheyComeUntilCtrlC) {
  Target t;
  Proc s = Proc::start({USRTRACE_CLI, "stream", "-P", t.spid(), "-e", "clitest:rare"}, false);
  ASSERT_TRUE(catches_sigint(s.pid));
  t.cmd("rare 3");
  ASSERT_NE(s.wait_for("n=2 why=because\n"), std::string::npos) << s.out_text << s.err_text;
  kill(s.pid, SIGINT);
  const Result r = s.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, " rare: "), 3) << r.out;
  EXPECT_EQ(usrtrace({"show", "-P", t.spid(), "--set_event"}).out, "") << "stream takes its setup back";
}

TEST(CliStream, ShowPipeEndsWhenTheProcessExits) {
  Target t;
  ASSERT_EQ(usrtrace({"start", "-P", t.spid(), "-e", "clitest:rare"}).rc, 0);
  Proc s = Proc::start({USRTRACE_CLI, "show", "-P", t.spid(), "--pipe"}, false);
  ASSERT_TRUE(catches_sigint(s.pid));
  t.cmd("rare 2");
  ASSERT_NE(s.wait_for("n=1 why=because\n"), std::string::npos) << s.out_text << s.err_text;
  t.cmd("exit 0");
  t.finish();
  const Result r = s.finish(30);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, " rare: "), 2) << r.out;
}

}  // namespace
