// One timeline with the kernel: `usrtrace record -K` (the kernel's events,
// from a kernel tracefs instance of the recorder's own, in the same file as
// the process's), the two-file way (trace-cmd report -i k.dat -i u.dat),
// both read back by trace-cmd report with trace_marker writes into the
// kernel instance as reference points; and the default clock against
// CLOCK_MONOTONIC_RAW across a recording. The kernel's need root and its
// tracefs, and skip without them.
#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "base/files.h"
#include "tools/cli_harness.h"

using namespace cli_harness;

namespace {

constexpr const char* kInstances = "/sys/kernel/tracing/instances";

bool have_kernel_tracefs() {
  struct stat st;
  if (::stat(kInstances, &st) != 0) {
    ::mkdir("/sys/kernel/tracing", 0755);
    ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr);
  }
  return ::geteuid() == 0 && ::stat(kInstances, &st) == 0;
}

// The kernel instances named usrtrace-PID-N of recorder `pid`.
std::vector<std::string> instances_of(int pid) {
  std::vector<std::string> out;
  const std::string prefix = "usrtrace-" + std::to_string(pid) + "-";
  if (DIR* d = ::opendir(kInstances)) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0)
        out.push_back(std::string(kInstances) + "/" + e->d_name);
    ::closedir(d);
  }
  return out;
}

std::set<int> threads_of(int pid) {
  std::set<int> out;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.insert(std::atoi(e->d_name));
    ::closedir(d);
  }
  return out;
}

// One command records the program and the kernel's scheduling of its
// threads into one file, on the default clock and on mono: trace-cmd
// report prints them interleaved, in seconds, in the order they happened
// (the program's tick events around the trace_marker writes it makes into
// the kernel instance), with the kernel's records limited to the
// program's threads; usrtrace report prints the same.
class CliKernel : public ::testing::TestWithParam<const char*> {};

TEST_P(CliKernel, RecordDashKInterleavesTheKernelsEventsWithTheProcesssInOneFile) {
  if (!have_trace_cmd() || !have_kernel_tracefs())
    GTEST_SKIP() << "needs trace-cmd, root and the kernel's tracefs";
  const std::string clock = GetParam();
  const std::string dir = temp_dir(), file = dir + "/k.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-C", clock, "-e", "clitest:tick", "-K",
                          "sched:sched_switch", "-K", "sched_wakeup", "-o", file, "--", CLI_TARGET},
                         true);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  const std::vector<std::string> inst = instances_of(rec.pid);
  ASSERT_EQ(inst.size(), 1u) << "one kernel instance of its own";
  const size_t at = rec.wait_for("ready ");
  ASSERT_NE(at, std::string::npos);
  const int target = std::atoi(rec.out_text.c_str() + at);
  std::string script;
  for (int i = 0; i < 3; ++i)
    script += "tick 1\nwrite " + inst[0] + "/trace_marker kernel-" + std::to_string(i) + "\n";
  script += "tick 1\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_NE(rec.wait_for("ok\nok\nok\nok\nok\nok\nok\n"), std::string::npos);
  const std::set<int> tids = threads_of(target);  // its threads, usrtrace's own among them
  ASSERT_FALSE(tids.empty());
  const std::string end = "exit 0\n";
  ASSERT_EQ(::write(rec.in, end.data(), end.size()), static_cast<ssize_t>(end.size()));
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(instances_of(rec.pid).empty()) << "the kernel instance is removed";

  const Result rep = Proc::start({"/usr/bin/trace-cmd", "report", "-i", file}, false).finish();
  ASSERT_EQ(rep.rc, 0) << rep.err;
  std::vector<std::string> order;
  std::vector<double> times;
  int lines = 0, switches = 0, foreign = 0;
  std::string foreign_lines;
  std::istringstream in(rep.out);
  const std::regex stamp(R"(\s(\d+\.\d{6}):\s)");
  const std::regex sw(R"(sched_switch: +(.*):(\d+) \[\d+\] \S+ ==> (.*):(\d+) \[\d+\])");
  const std::regex wake(R"(sched_wakeup: +(.*):(\d+) \[\d+\])");
  const std::regex current(R"(^kernel: +(.*)-(\d+) +\[)");
  // A thread of the program, or a task it started after `tids` was read
  // (LeakSanitizer's tracer at exit, under ASan): event-fork follows those.
  auto is_ours = [&](const std::string& comm, const std::string& pid) {
    return tids.count(std::stoi(pid)) != 0 || comm == "cli_target";
  };
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("cpus=", 0) == 0) continue;
    ++lines;
    if (std::regex_search(line, m, stamp)) times.push_back(std::stod(m[1]));
    if (line.find(" tick: ") != std::string::npos) order.push_back("tick");
    for (int i = 0; i < 3; ++i)  // the marker's text ("usrtrace-kernel-PID" is a thread of record's)
      if (line.find(": kernel-" + std::to_string(i)) != std::string::npos) {
        order.push_back("k" + std::to_string(i));
        EXPECT_EQ(line.rfind("kernel:", 0), 0u) << "the kernel buffer's line: " << line;
      }
    // The kernel keeps a record when a thread of the program is what it
    // is about (either side of a switch, the woken) or is running.
    std::smatch cur;
    const bool by_ours = std::regex_search(line, cur, current) && is_ours(cur[1], cur[2]);
    if (std::regex_search(line, m, sw)) {
      ++switches;
      if (!by_ours && !is_ours(m[1], m[2]) && !is_ours(m[3], m[4])) {
        ++foreign;
        foreign_lines += line + "\n";
      }
    } else if (std::regex_search(line, m, wake)) {
      if (!by_ours && !is_ours(m[1], m[2])) {
        ++foreign;
        foreign_lines += line + "\n";
      }
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"tick", "k0", "tick", "k1", "tick", "k2", "tick"})) << rep.out;
  EXPECT_GT(switches, 0) << rep.out.substr(0, 3000);
  std::string tid_list;
  for (int t : tids) tid_list += " " + std::to_string(t);
  EXPECT_EQ(foreign, 0) << "kernel records about other tasks than the program's threads (" << tid_list
                        << "):\n"
                        << foreign_lines;
  EXPECT_EQ(static_cast<int>(times.size()), lines) << "every line in seconds:\n" << rep.out.substr(0, 3000);
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end())) << "one timeline";

  const Result ours = run_cli({"report", "-i", file});
  ASSERT_EQ(ours.rc, 0) << ours.err;
  EXPECT_EQ(ours.out, rep.out);

  // As Chrome JSON: the kernel's records under a process of their own,
  // "kernel" (pid 0), each on its task's thread.
  const Result json = run_cli({"report", "--format", "json", file});
  ASSERT_EQ(json.rc, 0) << json.err;
  int kernel_events = 0, on_pid0 = 0;
  std::istringstream jl(json.out);
  for (std::string l; std::getline(jl, l);)
    if (l.find("\"instance\":\"kernel\"") != std::string::npos) {
      ++kernel_events;
      on_pid0 += l.find("\"pid\":0,") != std::string::npos;
    }
  EXPECT_EQ(on_pid0, kernel_events);
  EXPECT_EQ(kernel_events, count(rep.out, "\nkernel:"));
  EXPECT_EQ(count(json.out, R"({"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"kernel"}})"),
            1);

  // As a Perfetto trace: on the default clock (MONOTONIC_RAW there) the
  // kernel's records are ftrace events, sched_switch typed, one per kernel
  // line; on mono (which Perfetto's ftrace cannot be on) track events.
  const std::string pf = dir + "/k.pftrace";
  const Result conv = run_cli({"report", "--format", "perfetto", "-o", pf, file});
  ASSERT_EQ(conv.rc, 0) << conv.err;
  std::string why;
  const std::string text = perfetto_text(pf, &why);
  ::unlink(pf.c_str());
  if (text.empty()) GTEST_SKIP() << why;
  const int kernel_lines = count(rep.out, "\nkernel:");
  if (clock == "local") {
    EXPECT_EQ(count(text, "ftrace_events {"), kernel_lines);
    EXPECT_EQ(count(text, "sched_switch {"), switches);
    EXPECT_EQ(count(text, "ftrace_clock: FTRACE_CLOCK_MONO_RAW"), kernel_lines);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(count(text, "buf: \"kernel-" + std::to_string(i)), 1) << i;
  } else {
    EXPECT_EQ(count(text, "ftrace_events {"), 0);
    EXPECT_EQ(count(text, "name: \"sched:sched_switch\""), 1) << "interned once";
    EXPECT_EQ(count(text, "process_name: \"kernel\""), 1) << "the kernel's records on a process of their own";
  }
  // Packets in time order, the kernel's among the process's.
  std::vector<uint64_t> stamps;
  const std::regex ts(R"(\btimestamp: (\d+))");
  for (std::sregex_iterator it(text.begin(), text.end(), ts), e; it != e; ++it)
    stamps.push_back(std::stoull((*it)[1]));
  EXPECT_GT(stamps.size(), static_cast<size_t>(kernel_lines));
  EXPECT_TRUE(std::is_sorted(stamps.begin(), stamps.end()));
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

INSTANTIATE_TEST_SUITE_P(Clocks, CliKernel, ::testing::Values("local", "mono"));

// A recorder killed with -K leaves its kernel instance recording into
// nobody's buffer: the next record -K removes it (its pid is gone), and
// leaves a live recorder's alone.
TEST(CliKernelErrors, AnInstanceAKilledRecorderLeftIsRemovedByTheNext) {
  if (!have_kernel_tracefs()) GTEST_SKIP() << "needs root and the kernel's tracefs";
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  // The name proves the owner: pid, its start time, its pid namespace.
  struct stat ns;
  ASSERT_EQ(::stat("/proc/self/ns/pid", &ns), 0);
  const unsigned long long self_start = usrtrace::base::process_start_time("self");
  const std::string start = std::to_string(self_start);
  const std::string in = std::string(kInstances) + "/usrtrace-", nss = std::to_string(ns.st_ino);
  const std::string left = in + std::to_string(dead) + "-" + start + "-" + nss + "-0";
  const std::string live = in + std::to_string(::getpid()) + "-" + start + "-" + nss + "-0";
  // Issue 34, defect 15: a live pid reused since (another start time) is
  // gone all the same; a name that proves nothing (another tool's, or of
  // another pid namespace) is left alone, whatever its pid.
  const std::string reused = in + std::to_string(::getpid()) + "-1-" + nss + "-0";
  const std::string foreign = in + std::to_string(dead) + "-0";
  const std::string other_ns = in + std::to_string(dead) + "-" + start + "-1-0";
  for (const std::string& d : {left, live, reused, foreign, other_ns})
    ASSERT_EQ(::mkdir(d.c_str(), 0750), 0) << d;
  const std::string dir = temp_dir(), file = dir + "/next.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-q", "-K", "sched:sched_switch", "-e", "clitest:tick",
                          "-o", file, "--", CLI_TARGET},
                         true);
  const std::string script = "tick 1\nexit 0\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  struct stat st;
  EXPECT_NE(::stat(left.c_str(), &st), 0) << "the dead recorder's instance is removed";
  EXPECT_EQ(::stat(live.c_str(), &st), 0) << "a live one's is not";
  EXPECT_NE(::stat(reused.c_str(), &st), 0) << "one whose pid was reused is removed";
  EXPECT_EQ(::stat(foreign.c_str(), &st), 0) << "another tool's is not";
  EXPECT_EQ(::stat(other_ns.c_str(), &st), 0) << "another pid namespace's is not";
  for (const std::string& d : {left, live, reused, foreign, other_ns}) ::rmdir(d.c_str());
  EXPECT_EQ(r.rc, 0) << r.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// One timeline with the kernel, the two-file way: a kernel instance on
// the clock the process is recorded with (mono), extracted by trace-cmd,
// and `trace-cmd report -i k.dat -i u.dat` interleaves them by time. The
// program writes its own event, then the kernel's trace_marker, then its
// own again: the kernel's line must come out between them, with the
// kernel's sched_switch lines in the same listing, and all in order.
TEST(CliKernelTwoFiles, AKernelRecordingOnTheSameClockMergesInTraceCmdReport) {
  const char* inst = "/sys/kernel/tracing/instances/usrtrace_two_files";
  struct stat st;
  if (::stat("/sys/kernel/tracing/instances", &st) != 0) {
    ::mkdir("/sys/kernel/tracing", 0755);
    ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr);
  }
  ::rmdir(inst);
  if (!have_trace_cmd() || ::mkdir(inst, 0755) != 0)
    GTEST_SKIP() << "needs trace-cmd and a kernel tracefs instance (root)";
  auto put = [&](const std::string& file, const std::string& text) {
    const int fd = ::open((std::string(inst) + "/" + file).c_str(), O_WRONLY | O_TRUNC);
    const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0) ::close(fd);
    return ok;
  };
  ASSERT_TRUE(put("trace_clock", "mono"));
  ASSERT_TRUE(put("events/sched/sched_switch/enable", "1"));
  const std::string dir = temp_dir(), u = dir + "/u.dat", k = dir + "/k.dat";
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "-C", "mono", "-e", "clitest:tick", "-o", u, "--", CLI_TARGET}, true);
  std::string script;
  for (int i = 0; i < 3; ++i)
    script += "tick 1\nwrite " + std::string(inst) + "/trace_marker kernel-" + std::to_string(i) + "\n";
  script += "tick 1\nexit 0\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  const Result ex =
      Proc::start({"/usr/bin/trace-cmd", "extract", "-B", "usrtrace_two_files", "-o", k}, false).finish();
  put("events/sched/sched_switch/enable", "0");
  ::rmdir(inst);
  ASSERT_EQ(ex.rc, 0) << ex.err;
  const Result rep = Proc::start({"/usr/bin/trace-cmd", "report", "-i", k, "-i", u}, false).finish();
  ASSERT_EQ(rep.rc, 0) << rep.err;
  // In the listing's order: tick seq=0, kernel-0, tick seq=0 (the next
  // "tick 1"), kernel-1, ... (each "tick 1" writes seq 0).
  std::vector<std::string> order;
  std::vector<double> times;
  std::istringstream in(rep.out);
  const std::regex stamp(R"(\s(\d+\.\d+):\s)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, stamp)) times.push_back(std::stod(m[1]));
    if (line.find(" tick: ") != std::string::npos) order.push_back("tick");
    for (int i = 0; i < 3; ++i)
      // The marker's text: the instance records every task's switches, and
      // a -K test's recorder beside this one has a thread "usrtrace-kernel-PID".
      if (line.find(": kernel-" + std::to_string(i)) != std::string::npos)
        order.push_back("k" + std::to_string(i));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"tick", "k0", "tick", "k1", "tick", "k2", "tick"})) << rep.out;
  EXPECT_GT(count(rep.out, "sched_switch:"), 0) << rep.out.substr(0, 3000);
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end())) << "one timeline, in seconds";
  for (const std::string& f : {u, k}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// The file's TSC conversion (the default clock, local) against
// CLOCK_MONOTONIC_RAW, which it is calibrated on, at the start of a
// recording and 3 s later: the program writes an event between two
// readings of MONOTONIC_RAW, and the event's time in the file falls
// between them, to within 250 ns, at both ends. The process's own
// calibration (20 ms) is typically 0.1-5 ppm off the rate, 0.3-15 us after
// 3 s; the recorder's line through a sample at its start and one at its end
// was within 10 ns here.
TEST(CliClock, TheDefaultClockMeetsMonotonicRawAcrossARecording) {
  const std::string dir = temp_dir(), file = dir + "/stamps.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest:rare", "-o", file, "--", CLI_TARGET}, true);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  const std::string first = "stamp\n";
  ASSERT_EQ(::write(rec.in, first.data(), first.size()), static_cast<ssize_t>(first.size()));
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos);
  // Not a wait for something to happen: the 3 s are what is measured over.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const std::string second = "stamp\nexit 0\n";
  ASSERT_EQ(::write(rec.in, second.data(), second.size()), static_cast<ssize_t>(second.size()));
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  const Result rep = run_cli({"report", "-t", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  struct Stamp {
    uint64_t t, a, b;
  };
  std::vector<Stamp> stamps;
  const std::regex line(R"( (\d+)\.(\d{9}): +rare: +n=(\d+) why=(stamp(-end)?))");
  std::istringstream in(rep.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_search(l, m, line)) continue;
    const uint64_t t = std::stoull(m[1]) * 1000000000ull + std::stoull(m[2]), n = std::stoull(m[3]);
    if (m[4] == "stamp")
      stamps.push_back({t, n, 0});
    else if (!stamps.empty())
      stamps.back().b = n;
  }
  ASSERT_EQ(stamps.size(), 16u) << rep.out;
  for (size_t group = 0; group < 2; ++group) {
    // The narrowest of the group's 8 brackets.
    const Stamp* best = nullptr;
    for (size_t i = group * 8; i < group * 8 + 8; ++i)
      if (stamps[i].b >= stamps[i].a && (!best || stamps[i].b - stamps[i].a < best->b - best->a))
        best = &stamps[i];
    ASSERT_NE(best, nullptr);
    const auto off = static_cast<int64_t>(best->t) - static_cast<int64_t>(best->a + (best->b - best->a) / 2);
    EXPECT_LE(std::llabs(off), static_cast<long long>((best->b - best->a) / 2 + 250))
        << "group " << group << ": the event is " << off << " ns from the middle of a " << best->b - best->a
        << " ns bracket";
  }
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// What cannot be recorded is said before the program runs far, and leaves
// no kernel instance behind: an event the kernel lacks, a clock it does
// not share, and a user who may not create instances.
TEST(CliKernelErrors, WhatCannotBeRecordedIsRefusedAndLeavesNoInstance) {
  if (!have_kernel_tracefs()) GTEST_SKIP() << "needs root and the kernel's tracefs";
  const std::string dir = temp_dir(), file = dir + "/bad.dat";
  struct Case {
    std::vector<std::string> args;
    std::string says;
    bool command_runs;  // refused before the command starts, or only once its clock is known
  };
  const std::vector<Case> cases = {
      {{"-K", "sched:no_such_event"}, "-K sched:no_such_event: no such kernel event", false},
      {{"-C", "counter", "-K", "sched:sched_switch"},
       "the file's clock, counter, is not one the kernel has",
       true},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {USRTRACE_CLI, "record", "-e", "clitest:tick", "-o", file};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"--", CLI_TARGET});
    Proc p = Proc::start(argv, false);
    const Result r = p.finish();
    EXPECT_NE(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("ready ") != std::string::npos, c.command_runs) << c.says;
    EXPECT_TRUE(instances_of(p.pid).empty()) << c.says;
    struct stat st;
    EXPECT_NE(::stat(file.c_str(), &st), 0) << "no file written";
  }
  // Not root: setpriv to nobody, in a directory nobody may write.
  if (::access("/usr/bin/setpriv", X_OK) == 0) {
    ::chmod(dir.c_str(), 0777);
    Proc p = Proc::start({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          USRTRACE_CLI, "record", "-K", "sched:sched_switch", "-o", file, "--", CLI_TARGET},
                         false);
    const Result r = p.finish();
    EXPECT_NE(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("needs root"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("ready "), std::string::npos) << "refused before the command starts";
  }
  ::rmdir(dir.c_str());
}

}  // namespace
