// Dump on crash: a child (crash_child) turns the dump on, writes known
// events and crashes; its stderr (or the dump file) must hold the oops
// header, a backtrace naming the crashing function and exactly those
// events, and it must still die by its signal. The control files and the
// C API are checked in this process.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "crash/crash.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"
#include "usrtrace/usrtrace.h"

USRTRACE_EVENT(crashtest_self, mark, (int32_t, n), "n=%d", REC->n)

#if defined(__SANITIZE_THREAD__)
#define CRASH_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CRASH_TEST_TSAN 1
#endif
#endif

namespace {

// TSan runs every handler from its own wrapper, which handles a fault that
// happens inside a handler itself and does not keep our alternate stack:
// the two checks that depend on those are meaningless there.
#ifdef CRASH_TEST_TSAN
#define SKIP_UNDER_TSAN() \
  GTEST_SKIP() << "TSan's signal wrapper handles faults inside handlers and the alternate stack itself"
#else
#define SKIP_UNDER_TSAN() (void)0
#endif

struct ChildResult {
  std::string err;  // stderr
  int status = 0;
};

// Runs crash_child with `args` and extra environment entries; collects its
// stderr until it closes (the child dies) and its wait status.
ChildResult run_child(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
  // Sanitizers install handlers for these signals by default; the child
  // must die by its signal, so they keep out (their reports of other bugs
  // still come out).
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("ASAN_OPTIONS=", 0) == 0 || s.rfind("TSAN_OPTIONS=", 0) == 0 ||
        s.rfind("USRTRACE_DUMP_ON_CRASH=", 0) == 0)
      continue;
    envs.push_back(s);
  }
  const char* asan = getenv("ASAN_OPTIONS");
  const char* tsan = getenv("TSAN_OPTIONS");
  const std::string no_handlers =
      "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_abort=0:handle_sigill=0";
  envs.push_back("ASAN_OPTIONS=" + std::string(asan ? asan : "") + (asan ? ":" : "") + no_handlers);
  envs.push_back("TSAN_OPTIONS=" + std::string(tsan ? tsan : "") + (tsan ? ":" : "") + no_handlers);
  for (const auto& e : env) envs.push_back(e);
  std::vector<char*> argv{const_cast<char*>(USRTRACE_CRASH_CHILD)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], STDERR_FILENO);
    execve(USRTRACE_CRASH_CHILD, argv.data(), envp.data());
    _exit(127);
  }
  close(p[1]);
  ChildResult r;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(p[0], buf, sizeof buf);
    if (n > 0)
      r.err.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  close(p[0]);
  EXPECT_EQ(waitpid(pid, &r.status, 0), pid);
  return r;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The dump of one instance: the event lines between the two rules after
// `title` (the kernel's ftrace_dump_one() layout), checked line by line.
// Returns the texts after "step: ".
std::vector<std::string> dumped_steps(const std::string& text, const std::string& title,
                                      std::vector<int>* cpus = nullptr) {
  std::vector<std::string> steps;
  const std::string rule = "---------------------------------\n";
  const size_t at = text.find(title + "\n" + rule);
  EXPECT_NE(at, std::string::npos) << "no '" << title << "' in:\n" << text;
  if (at == std::string::npos) return steps;
  size_t pos = at + title.size() + 1 + rule.size();
  const size_t end = text.find(rule, pos);
  EXPECT_NE(end, std::string::npos) << "no closing rule in:\n" << text;
  if (end == std::string::npos) return steps;
  // Latency format: "%8.8s-%-7d %3d" flags " %4lluus%c: " name ": " text
  static const std::regex kLine(R"(^(.{8})-(\d+) +(\d+)[.a-zA-Z0-9]{5} +\d+us.: step: (.*)$)");
  std::istringstream lines(text.substr(pos, end - pos));
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    EXPECT_TRUE(std::regex_match(l, m, kLine)) << "line: '" << l << "'";
    if (m.empty()) continue;
    steps.push_back(m[4]);
    if (cpus) cpus->push_back(std::stoi(m[3]));
  }
  return steps;
}

const std::vector<std::string> kSteps = {"n=1", "n=2", "n=3", "n=4", "n=5"};

void expect_killed_by(const ChildResult& r, int sig) {
  ASSERT_TRUE(WIFSIGNALED(r.status)) << "status " << r.status << ", stderr:\n" << r.err;
  EXPECT_EQ(WTERMSIG(r.status), sig) << r.err;
}

// The first line of the backtrace, after "Call Trace:".
std::string first_frame(const std::string& err) {
  const size_t at = err.find("Call Trace:\n");
  if (at == std::string::npos) return "";
  const size_t b = at + 12;
  return err.substr(b, err.find('\n', b) - b);
}

TEST(CrashDump, SegvDumpsEventsAndBacktraceThenDiesBySegv) {
  ChildResult r = run_child({"segv", "--api=1"});
  expect_killed_by(r, SIGSEGV);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(usrtrace: SIGSEGV at 0x0000000000000000 in thread \d+ \(crash_child\)\n)")))
      << r.err;
  EXPECT_NE(first_frame(r.err).find("crash_segv"), std::string::npos) << r.err;
  EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:"), kSteps);
  EXPECT_EQ(count_of(r.err, "Dumping ftrace"), 1u) << r.err;
  EXPECT_EQ(r.err.find("still alive"), std::string::npos);
}

TEST(CrashDump, AbortDumpsThenDiesByAbort) {
  ChildResult r = run_child({"abort", "--api=1"});
  expect_killed_by(r, SIGABRT);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(usrtrace: SIGABRT from pid \d+ in thread \d+)")))
      << r.err;
  // The signal comes from inside abort(): the crashing function is a caller.
  EXPECT_NE(r.err.find("(crash_abort+"), std::string::npos) << r.err;
  EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:"), kSteps);
}

TEST(CrashDump, FpeDumpsThenDiesByFpe) {
  ChildResult r = run_child({"fpe", "--tracefs=1"});
  expect_killed_by(r, SIGFPE);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(usrtrace: SIGFPE at 0x[0-9a-f]{16} in thread)")))
      << r.err;
  EXPECT_NE(first_frame(r.err).find("crash_fpe"), std::string::npos) << r.err;
  EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:"), kSteps);
}

// The handler that was installed before is called after the dump (the
// child's reports the allocations counted while the dump ran), and the
// process still dies by the signal. The count must be 0.
TEST(CrashDump, NoAllocationInTheHandlerAndPreviousHandlerChained) {
  for (const char* scenario : {"segv", "abort", "fpe"}) {
    SCOPED_TRACE(scenario);
    ChildResult r = run_child({scenario, "--api=all", "--chain", "--instance=side"});
    expect_killed_by(r, std::string(scenario) == "segv"    ? SIGSEGV
                        : std::string(scenario) == "abort" ? SIGABRT
                                                           : SIGFPE);
    // The counter works: it saw the check's allocation.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(allocations seen by the counter check: (\d+))")))
        << r.err;
    EXPECT_GE(std::stoi(m[1]), 1);
    EXPECT_NE(r.err.find("crash_child: allocations during the dump: 0\n"), std::string::npos) << r.err;
    // The chained handler ran after the dump.
    EXPECT_LT(r.err.find("Dumping ftrace instance side buffer:"), r.err.find("allocations during the dump"));
    EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:"), kSteps);
    EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace instance side buffer:"), kSteps);
  }
}

TEST(CrashDump, EnvironmentAllToFile) {
  char dir[] = "/tmp/usrtrace-crash-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/dump.txt";
  ChildResult r = run_child({"segv", "--instance=side"}, {"USRTRACE_DUMP_ON_CRASH=all:" + path});
  expect_killed_by(r, SIGSEGV);
  const std::string dump = read_all(path);
  EXPECT_EQ(r.err.find("Dumping"), std::string::npos) << "the dump went to stderr:\n" << r.err;
  EXPECT_NE(dump.find("usrtrace: SIGSEGV at 0x0000000000000000"), std::string::npos) << dump;
  EXPECT_NE(first_frame(dump).find("crash_segv"), std::string::npos) << dump;
  EXPECT_EQ(dumped_steps(dump, "Dumping ftrace buffer:"), kSteps);
  EXPECT_EQ(dumped_steps(dump, "Dumping ftrace instance side buffer:"), kSteps);
  unlink(path.c_str());
  rmdir(dir);
}

TEST(CrashDump, EnvironmentBadValueIsReportedAndIgnored) {
  ChildResult r = run_child({"segv"}, {"USRTRACE_DUMP_ON_CRASH=yes"});
  expect_killed_by(r, SIGSEGV);
  EXPECT_NE(r.err.find("usrtrace: USRTRACE_DUMP_ON_CRASH=yes: Invalid argument"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Dumping"), std::string::npos) << r.err;
}

// "2": only the CPU the signal arrived on (the kernel's DUMP_ORIG).
TEST(CrashDump, OrigCpuModeDumpsOnlyTheCrashingCpu) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(static_cast<size_t>(c), &set)) allowed.push_back(c);
  if (allowed.size() < 2) GTEST_SKIP() << "needs two CPUs to tell them apart";
  const int crash_cpu = allowed[1], other_cpu = allowed[0];
  ChildResult r =
      run_child({"segv", "--api=2", "--pin=" + std::to_string(crash_cpu) + "," + std::to_string(other_cpu)});
  expect_killed_by(r, SIGSEGV);
  std::vector<int> cpus;
  EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:", &cpus), kSteps);
  for (int c : cpus) EXPECT_EQ(c, crash_cpu);

  // The same run with "1" shows the other CPU's events first.
  ChildResult all =
      run_child({"segv", "--api=1", "--pin=" + std::to_string(crash_cpu) + "," + std::to_string(other_cpu)});
  expect_killed_by(all, SIGSEGV);
  std::vector<std::string> expect{"n=101", "n=102", "n=103"};
  expect.insert(expect.end(), kSteps.begin(), kSteps.end());
  EXPECT_EQ(dumped_steps(all.err, "Dumping ftrace buffer:"), expect);
}

// A fault inside the dump (an event's printer reads a bad address): the
// dump is given up and the process dies by the signal it crashed with.
TEST(CrashDump, FaultInsideTheDumpStillDiesByTheFirstSignal) {
  SKIP_UNDER_TSAN();
  ChildResult r = run_child({"poison", "--api=1"});
  expect_killed_by(r, SIGABRT);
  EXPECT_NE(r.err.find("usrtrace: SIGABRT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Dumping ftrace buffer:"), std::string::npos) << r.err;
}

// The thread that turned the dump on has an alternate signal stack: its
// stack overflow still dumps.
TEST(CrashDump, StackOverflowDumpsOnTheAlternateStack) {
  SKIP_UNDER_TSAN();
  ChildResult r = run_child({"overflow", "--api=1"});
  expect_killed_by(r, SIGSEGV);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(usrtrace: SIGSEGV at 0x[0-9a-f]{16} in thread)")))
      << r.err;
  EXPECT_NE(first_frame(r.err).find("crash_overflow"), std::string::npos) << r.err;
  EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:"), kSteps);
}

// Two threads crash at once: one dumps, once.
TEST(CrashDump, TwoThreadsCrashingDumpOnce) {
  ChildResult r = run_child({"threads", "--api=1"});
  expect_killed_by(r, SIGSEGV);
  EXPECT_EQ(count_of(r.err, "usrtrace: SIGSEGV"), 1u) << r.err;
  EXPECT_EQ(count_of(r.err, "Dumping ftrace buffer:"), 1u) << r.err;
  EXPECT_EQ(dumped_steps(r.err, "Dumping ftrace buffer:"), kSteps);
}

// ---- In this process: control files, C API, on-demand dump.

std::string read_file(const char* path) {
  char buf[8192];
  const long n = usrtrace_tracefs_read(path, buf, sizeof buf);
  EXPECT_GE(n, 0) << path;
  return n >= 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

long write_file(const char* path, const std::string& text) {
  return usrtrace_tracefs_write(path, text.data(), text.size());
}

constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

// The handler address of each fatal signal (a sanitizer may have its own
// there before us).
std::vector<void*> actions() {
  std::vector<void*> out;
  for (int sig : kFatal) {
    struct sigaction sa {};
    sigaction(sig, nullptr, &sa);
    out.push_back(reinterpret_cast<void*>(sa.sa_sigaction));
  }
  return out;
}

TEST(CrashControl, ModeFileReadsAndWrites) {
  EXPECT_EQ(read_file("ftrace_dump_on_oops"), "0\n");
  const std::vector<void*> before = actions();
  for (const char* v : {"1", "2\n", "all", "1\n"}) {
    ASSERT_EQ(write_file("ftrace_dump_on_oops", v), static_cast<long>(strlen(v)));
    std::string want = v;
    if (want.back() != '\n') want += '\n';
    EXPECT_EQ(read_file("ftrace_dump_on_oops"), want);
  }
  const std::vector<void*> on = actions();
  for (size_t i = 0; i < on.size(); ++i) EXPECT_NE(on[i], before[i]) << kFatal[i];
  for (size_t i = 1; i < on.size(); ++i) EXPECT_EQ(on[i], on[0]) << "one handler for all";
  ASSERT_EQ(write_file("ftrace_dump_on_oops", "0"), 1);
  EXPECT_EQ(read_file("ftrace_dump_on_oops"), "0\n");
  EXPECT_EQ(actions(), before) << "the previous actions are back";
}

// Top-level only, as the kernel's sysctl is one per system; 0640.
TEST(CrashControl, FilesAreInTheRootOnly) {
  usrtrace::tracefs::Stat st;
  for (const char* f : {"ftrace_dump_on_oops", "ftrace_dump_on_oops_file"}) {
    ASSERT_EQ(usrtrace::tracefs::stat(f, &st), 0) << f;
    EXPECT_EQ(st.mode, 0640u);
    EXPECT_FALSE(st.is_dir);
  }
  ASSERT_EQ(usrtrace_tracefs_mkdir("instances/crash_ctl"), 0);
  EXPECT_EQ(usrtrace::tracefs::stat("instances/crash_ctl/ftrace_dump_on_oops", &st), -ENOENT);
  EXPECT_EQ(write_file("instances/crash_ctl/ftrace_dump_on_oops", "1"), -ENOENT);
  EXPECT_EQ(usrtrace_tracefs_rmdir("instances/crash_ctl"), 0);
  EXPECT_NE(read_file("README").find("ftrace_dump_on_oops"), std::string::npos);
}

TEST(CrashControlMalformed, BadModesAreEinvalWithErrorLog) {
  ASSERT_EQ(write_file("error_log", ""), 0);
  ASSERT_EQ(write_file("ftrace_dump_on_oops", "2"), 1);
  struct Case {
    std::string value;
    size_t caret;
  };
  for (const Case& c : std::vector<Case>{{"3", 0},
                                         {"al", 2},
                                         {"alll", 3},
                                         {"", 0},
                                         {"-1", 0},
                                         {"1 2", 1},
                                         {std::string("1\0", 2), 1},
                                         {"ALL", 0}}) {
    SCOPED_TRACE(c.value);
    ASSERT_EQ(write_file("error_log", ""), 0);
    EXPECT_EQ(write_file("ftrace_dump_on_oops", c.value), -EINVAL);
    EXPECT_EQ(read_file("ftrace_dump_on_oops"), "2\n");  // unchanged
    const std::string log = read_file("error_log");
    EXPECT_NE(log.find("Value must be 0, 1, 2 or all"), std::string::npos) << log;
    // The caret line: spaces up to the bad byte of the command.
    const size_t cmd = log.find("Command: ");
    ASSERT_NE(cmd, std::string::npos) << log;
    const size_t caret_line = log.find('\n', cmd) + 1;
    EXPECT_EQ(log.substr(caret_line).find('^'), 11 + c.caret) << log;  // under "  Command: " + caret
  }
  ASSERT_EQ(write_file("ftrace_dump_on_oops", "0"), 1);
}

TEST(CrashControl, DumpFileOpenedWhenSet) {
  char dir[] = "/tmp/usrtrace-crash-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/dump.txt";
  EXPECT_EQ(read_file("ftrace_dump_on_oops_file"), "\n");
  ASSERT_EQ(write_file("ftrace_dump_on_oops_file", path + "\n"), static_cast<long>(path.size() + 1));
  EXPECT_EQ(access(path.c_str(), F_OK), 0) << "created when set";
  EXPECT_EQ(read_file("ftrace_dump_on_oops_file"), path + "\n");

  ASSERT_EQ(write_file("error_log", ""), 0);
  EXPECT_EQ(write_file("ftrace_dump_on_oops_file", std::string(dir) + "/no/such/dir/x"), -ENOENT);
  EXPECT_NE(read_file("error_log").find("Cannot open the dump file"), std::string::npos);
  EXPECT_EQ(read_file("ftrace_dump_on_oops_file"), path + "\n");  // unchanged
  EXPECT_EQ(write_file("ftrace_dump_on_oops_file", dir), -EISDIR);
  EXPECT_EQ(write_file("ftrace_dump_on_oops_file", std::string(PATH_MAX + 1, 'a')), -EINVAL);

  ASSERT_EQ(write_file("ftrace_dump_on_oops_file", ""), 0);  // back to stderr
  EXPECT_EQ(read_file("ftrace_dump_on_oops_file"), "\n");
  unlink(path.c_str());
  rmdir(dir);
}

// Before: a FIFO as the dump file blocked the control thread in open() until
// a reader came (every client then timed out, and exit() hung joining it).
// The write runs on a thread of its own here; if it has not returned by a
// generous deadline, the test opens a reader to release it, and fails.
TEST(CrashControl, AFifoIsRefusedWithoutWaitingForAReader) {
  char dir[] = "/tmp/usrtrace-crash-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(write_file("error_log", ""), 0);
  std::promise<long> result;
  auto done = result.get_future();
  std::thread writer([&] { result.set_value(write_file("ftrace_dump_on_oops_file", fifo + "\n")); });
  if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "the write of a FIFO's path blocked";
    const int r = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // releases the writer
    writer.join();
    close(r);
  } else {
    writer.join();
    EXPECT_EQ(done.get(), -EINVAL);
    const std::string log = read_file("error_log");
    EXPECT_NE(log.find("Cannot open the dump file: " + fifo + ": a FIFO, not a regular file"),
              std::string::npos)
        << log;
  }
  EXPECT_EQ(read_file("ftrace_dump_on_oops_file"), "\n");
  // A terminal or /dev/null is a fine destination.
  EXPECT_EQ(write_file("ftrace_dump_on_oops_file", "/dev/null\n"), 10);
  ASSERT_EQ(write_file("ftrace_dump_on_oops_file", ""), 0);
  unlink(fifo.c_str());
  rmdir(dir);
}

// Before: every write of the file opened a descriptor and kept the old one
// (200 writes, 200 descriptors). Now one descriptor serves them all.
TEST(CrashControl, SettingTheDumpFileAgainAndAgainHoldsOneDescriptor) {
  char dir[] = "/tmp/usrtrace-crash-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string a = std::string(dir) + "/a", b = std::string(dir) + "/b";
  auto open_fds = [] {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d)) ++n;
      closedir(d);
    }
    return n;
  };
  ASSERT_EQ(write_file("ftrace_dump_on_oops_file", a), static_cast<long>(a.size()));
  const int before = open_fds();
  for (int i = 0; i < 200; ++i) {
    const std::string& p = i % 2 ? a : b;
    ASSERT_EQ(write_file("ftrace_dump_on_oops_file", p), static_cast<long>(p.size()));
    if (i % 50 == 0) {
      ASSERT_EQ(write_file("ftrace_dump_on_oops_file", ""), 0);
    }
  }
  EXPECT_EQ(open_fds(), before);
  // The last file set is the one a dump goes to.
  EXPECT_EQ(read_file("ftrace_dump_on_oops_file"), a + "\n");
  ASSERT_EQ(write_file("ftrace_dump_on_oops_file", ""), 0);
  unlink(a.c_str());
  unlink(b.c_str());
  rmdir(dir);
}

TEST(CrashApi, BadArguments) {
  EXPECT_EQ(usrtrace_dump_on_crash(nullptr, nullptr), -EINVAL);
  EXPECT_EQ(usrtrace_dump_on_crash("on", nullptr), -EINVAL);
  EXPECT_EQ(usrtrace_dump_on_crash("1", "/nonexistent-usrtrace-dir/dump"), -ENOENT);
  EXPECT_EQ(read_file("ftrace_dump_on_oops"), "0\n");
}

// usrtrace_dump(): the same dump on demand; tracing goes on.
TEST(CrashApi, DumpOnDemand) {
  struct usrtrace_array* top = usrtrace_array_get_by_name(nullptr);
  ASSERT_NE(top, nullptr);
  ASSERT_EQ(write_file("trace", ""), 0);  // O_TRUNC: cleared
  ASSERT_GE(usrtrace_array_set_clr_event(top, "crashtest_self", "mark", true), 0);
  for (int n = 1; n <= 3; ++n) trace_crashtest_self_mark(n);
  char tmpl[] = "/tmp/usrtrace-dump-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(usrtrace_dump(fd), 0);
  close(fd);
  const std::string dump = read_all(tmpl);
  unlink(tmpl);
  const std::string rule = "---------------------------------\n";
  EXPECT_EQ(dump.find("Dumping ftrace buffer:\n" + rule), 0u) << dump;
  EXPECT_EQ(count_of(dump, ": mark: n="), 3u) << dump;
  EXPECT_LT(dump.find("mark: n=1\n"), dump.find("mark: n=2\n"));
  EXPECT_LT(dump.find("mark: n=2\n"), dump.find("mark: n=3\n"));
  EXPECT_EQ(dump.substr(dump.size() - rule.size()), rule);
  EXPECT_TRUE(usrtrace_tracing_is_on(top));
  // An empty buffer, as the kernel says it.
  ASSERT_EQ(write_file("trace", ""), 0);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  EXPECT_EQ(usrtrace_dump(p[1]), 0);
  close(p[1]);
  char buf[256];
  const ssize_t n = read(p[0], buf, sizeof buf);
  close(p[0]);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))),
            "Dumping ftrace buffer:\n   (ftrace buffer empty)\n");
  EXPECT_EQ(usrtrace_dump(-1), -EBADF);
  usrtrace_array_set_clr_event(top, "crashtest_self", "mark", false);
  usrtrace_array_put(top);
}

}  // namespace
