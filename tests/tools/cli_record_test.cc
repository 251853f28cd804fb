// `usrtrace record`, run as a user runs it: a running process until
// Ctrl-C, a command from its start to its end (and the programs it starts),
// and the faults a recording must survive: a killed process, a command that
// ignores Ctrl-C. A full disk, a killed recorder and a size limit (the
// journal) are cli_journal_test.cc.

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "tools/cli_harness.h"
#include "usrtrace/tracedat.h"

using namespace cli_harness;

namespace {

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
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  std::vector<unsigned> want(2000);
  for (unsigned i = 0; i < 2000; ++i) want[i] = i;
  EXPECT_EQ(seqs(rep.out, "tick"), want);
  EXPECT_EQ(count(rep.out, " rare: "), 3);
  // What record set up is taken back; the process goes on.
  EXPECT_EQ(run_cli({"show", "-P", t.spid(), "--set_event"}).out, "");
  t.cmd("tick 1");
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// Events the buffers lost before they were taken are said where (CPU and
// instance, with the buffer size) and which flag keeps more: here a
// buffer of two pages that a burst went round many times before record
// came.
TEST(CliRecord, LostEventsAreSaidWhereWithTheFlagThatHelps) {
  Target t;
  const std::string dir = temp_dir(), file = dir + "/lost.dat";
  const Result st = run_cli({"start", "-P", t.spid(), "-b", "8", "-e", "clitest:tick"});
  ASSERT_EQ(st.rc, 0) << st.err;
  t.cmd("tick 20000");
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-P", t.spid(), "-o", file}, false);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  kill(rec.pid, SIGINT);
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("; 0 events lost"), std::string::npos) << r.err;
  const size_t at = r.err.find("usrtrace record: events lost: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  EXPECT_NE(line.find(" on CPU "), std::string::npos) << line;
  EXPECT_NE(line.find(" of the top instance ("), std::string::npos) << line;
  EXPECT_NE(line.find("-b KB makes each CPU's buffer larger"), std::string::npos) << line;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// Lossless by construction (ring_buffer/grow.cc): the recorder stopped
// (SIGSTOP) for as long as the command writes events that fill its rings
// 50 times over takes nothing meanwhile, and still loses nothing: each
// CPU's buffer took fresh pages instead of overwriting. With a cap smaller
// than what was written, every event is in the file or counted lost.
TEST(CliRecord, AStoppedRecorderLosesNothingBelowTheBufferCap) {
  constexpr unsigned kTicks = 200000;  // about 7 MB of events, rings of 128 KiB
  for (const char* cap : {"", "1024"}) {
    SCOPED_TRACE(*cap ? "--buffer-cap 1024" : "default cap");
    const std::string dir = temp_dir(), file = dir + "/stopped.dat";
    std::vector<std::string> argv = {USRTRACE_CLI, "record", "-b", "128", "-e", "clitest:tick", "-o", file};
    if (*cap) argv.insert(argv.end(), {"--buffer-cap", cap});
    argv.insert(argv.end(), {"--", CLI_TARGET});
    Proc rec = Proc::start(argv, true);
    ASSERT_TRUE(recording(rec)) << rec.err_text;
    ASSERT_EQ(::kill(rec.pid, SIGSTOP), 0);
    const std::string ticks = "tick " + std::to_string(kTicks) + "\n";
    ASSERT_EQ(::write(rec.in, ticks.data(), ticks.size()), static_cast<ssize_t>(ticks.size()));
    // Every tick is written while the recorder is stopped.
    const bool written = rec.wait_for("ok\n") != std::string::npos;
    ::kill(rec.pid, SIGCONT);
    ASSERT_TRUE(written) << rec.out_text;
    ASSERT_EQ(::write(rec.in, "exit 0\n", 7), 7);
    const Result r = rec.finish();
    ASSERT_EQ(r.rc, 0) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex("; ([0-9]+) events lost"))) << r.err;
    const unsigned long lost = std::stoul(m[1].str());
    const Result rep = run_cli({"report", "-i", file});
    ASSERT_EQ(rep.rc, 0) << rep.err;
    const std::vector<unsigned> got = seqs(rep.out, "tick");
    for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << "out of order or twice";
    if (!*cap) {
      EXPECT_EQ(lost, 0u) << r.err;
      ASSERT_EQ(got.size(), kTicks);
      EXPECT_EQ(got.back(), kTicks - 1);
    } else {
      EXPECT_GT(lost, 0u) << "1 MiB of spares cannot hold 7 MB";
      EXPECT_EQ(got.size() + lost, kTicks) << r.err;
      EXPECT_GT(got.size(), 1024u * 1024 / 40) << "the spares' events are kept";
      EXPECT_NE(r.err.find("--buffer-cap KB"), std::string::npos) << r.err;
    }
    ::unlink(file.c_str());
    ::rmdir(dir.c_str());
  }
}

// Discard mode: every event is either in the file or counted on the last
// line, the drops after the last page a CPU opened too (they are in the
// CPU's stats only).
TEST(CliRecord, DiscardModeCountsEveryDrop) {
  const std::string dir = temp_dir(), file = dir + "/drop.dat";
  // Fixed rings (--buffer-cap 0): growing, they would drop nothing.
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-b", "8", "--buffer-cap", "0", "-O", "nooverwrite", "-e",
                          "clitest:tick", "-o", file, "--", CLI_TARGET},
                         true);
  const std::string script = "tick 20000\nexit 0\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("; ([0-9]+) events lost"))) << r.err;
  const unsigned long lost = std::stoul(m[1].str());
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  EXPECT_GT(lost, 0u) << "a 8 KiB buffer cannot hold 20000 events";
  EXPECT_EQ(got.size() + lost, 20000u) << r.err;
  for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]);
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, AProcessThatExitsLeavesACompleteFile) {
  Target t;
  const std::string dir = temp_dir(), file = dir + "/exit.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-P", t.spid(), "-B", "cli_rec", "-e", "clitest:tick", "-o",
                          file, "--compress"},
                         false);
  ASSERT_TRUE(recording(rec)) << rec.err_text;
  t.cmd("tick 5000");
  t.cmd("exit 0");
  t.finish();
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  const Result rep = run_cli({"report", "-i", file});
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
  EXPECT_NE(r.err.find("process " + t.spid() + " went away before its last pages were taken"),
            std::string::npos)
      << r.err;
  const Result rep = run_cli({"report", "-i", file});
  EXPECT_EQ(rep.rc, 0) << rep.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, ACommandFromItsStartToItsEnd) {
  const std::string dir = temp_dir(), file = dir + "/cmd.dat";
  // The command's stdin is record's: the script it runs.
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "-e", "clitest", "-e", "usrtrace:thread_rename", "-o", file, "--", CLI_TARGET},
      true);
  const std::string script = "tick 1000\nname worker\nrare 2\nexit 3\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("exited with status 3"), std::string::npos) << r.err;
  const Result rep = run_cli({"report", "-i", file});
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

// A command SIGKILLed while recorded loses nothing it wrote: its buffers
// are in shared memory that the recorder maps (src/record/shared_buffers.h),
// and the mapping outlives the process. Through the socket, what the
// recorder had not asked for yet went with the process.
TEST(CliRecord, ACommandKilledLosesNothingItWrote) {
  const std::string dir = temp_dir(), file = dir + "/killed.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest", "-o", file, "--", CLI_TARGET}, true);
  const std::string script = "tick 20000\nkillself\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("was killed by signal 9"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("went away before its last pages were taken"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; 0 events lost"), std::string::npos) << r.err;
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  ASSERT_EQ(got.size(), 20000u) << r.err;
  for (unsigned i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i);
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// trace-cmd's --compression: zstd or any compress a version 7 file's data,
// none (the default here) and a version 6 file do not; a compressed version
// 6 and contradicting flags are refused before anything starts.
TEST(CliRecord, CompressionAsTraceCmdsFlagSaysIt) {
  const std::string dir = temp_dir(), file = dir + "/c.dat";
  struct Case {
    std::vector<std::string> args;
    int version;
    const char* compression;
  };
  for (const Case& k : {Case{{}, 7, "none"}, Case{{"--compression", "zstd"}, 7, "zstd"},
                        Case{{"--compression", "none"}, 7, "none"}, Case{{"--file-version", "6"}, 6, "none"},
                        Case{{"--compression", "any"}, 7, "zstd"}, Case{{"--compress"}, 7, "zstd"}}) {
    std::vector<std::string> argv = {USRTRACE_CLI, "record", "-e", "clitest", "-o", file};
    argv.insert(argv.end(), k.args.begin(), k.args.end());
    argv.insert(argv.end(), {"--", CLI_TARGET});
    std::string given;
    for (const std::string& a : k.args) given += " " + a;
    SCOPED_TRACE("record" + given);
    Proc rec = Proc::start(argv, true);
    const std::string script = "tick 300\nexit 0\n";
    ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
    const Result r = rec.finish();
    ASSERT_EQ(r.rc, 0) << r.err;
    std::string err;
    auto f = usrtrace::TraceFile::open(file, &err);
    ASSERT_TRUE(f) << err;
    EXPECT_EQ(f->version(), k.version);
    EXPECT_EQ(f->compression(), k.compression);
    const Result rep = run_cli({"report", "-i", file});
    ASSERT_EQ(rep.rc, 0) << rep.err;
    EXPECT_EQ(seqs(rep.out, "tick").size(), 300u);
    if (have_trace_cmd()) {
      const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", file}, false).finish();
      EXPECT_EQ(tc.rc, 0) << tc.err;
      EXPECT_EQ(tc.out, rep.out);
    }
    ::unlink(file.c_str());
  }
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--file-version", "6", "--compress"}, "compression needs file version 7"},
           {{"--file-version", "6", "--compression", "zstd"}, "compression needs file version 7"},
           {{"--compress", "--compression", "none"}, "disagree"},
           {{"--compression", "lz4"}, "lz4"}}) {
    std::vector<std::string> argv = {USRTRACE_CLI, "record", "-o", file};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--", "/bin/true"});
    const Result r = Proc::start(argv, false).finish();
    EXPECT_NE(r.rc, 0) << args.back();
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_NE(::access(file.c_str(), F_OK), 0) << "no file for a refused command line";
  }
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
  const Result rep = run_cli({"report", "-i", file});
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
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_EQ(seqs(rep.out, "tick"), (std::vector<unsigned>{0, 1, 2, 3, 4}));
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// A command that exits in a static constructor: record is held with it
// before its constructors and says plainly that it never reached main().
TEST(CliRecord, ACommandThatEndsInAConstructorIsSaidToHaveEndedBeforeMain) {
  const std::string dir = temp_dir(), file = dir + "/ctor.dat";
  const Result r = Proc::start({"/usr/bin/env", "CLI_TARGET_EXIT_IN_CONSTRUCTOR=3", USRTRACE_CLI, "record",
                                "-e", "clitest:tick", "-o", file, "--", CLI_TARGET},
                               false)
                       .finish();
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("constructor exits"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ended before main() (in a constructor): nothing was recorded"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("control socket"), std::string::npos) << r.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

TEST(CliRecord, AProgramWithoutUsrtraceThroughThePreloadedRuntime) {
  const std::string dir = temp_dir(), file = dir + "/plain.dat";
  const Result r = run_cli({"record", "-e", "usrtrace:thread_rename", "-o", file, "--", PLAIN_TARGET, "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("runtime preloaded"), std::string::npos) << r.out;
  const Result rep = run_cli({"report", "-i", file});
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

// uftrace's filters by their long names on a recorded command (graph.c:
// main calls pkg_middle 25 times, each calls pkg_leaf 4 times), and -q.
TEST(CliRecord, UftracesFiltersOnACommandAndQuiet) {
  const std::string dir = temp_dir(), file = dir + "/graph.dat";
  auto calls = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {"record", "-p", "function_graph", "-o", file};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", GRAPH_TARGET});
    const Result r = run_cli(argv);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "4150\n");
    const std::string rep = run_cli({"report", "-i", file}).out;
    return std::vector<int>{count(rep, "--> main "), count(rep, "--> pkg_middle "),
                            count(rep, "--> pkg_leaf ")};
  };
  EXPECT_EQ(calls({}), (std::vector<int>{1, 25, 100}));
  EXPECT_EQ(calls({"--filter", "pkg_middle"}), (std::vector<int>{0, 25, 100}));
  EXPECT_EQ(calls({"--filter", "pkg_middle", "--notrace", "pkg_leaf"}), (std::vector<int>{0, 25, 0}));
  EXPECT_EQ(calls({"--depth", "2"}), (std::vector<int>{1, 25, 0}));
  // A threshold no call reaches: no call is kept (the kernel keeps only
  // the exits of the calls over tracing_thresh).
  EXPECT_EQ(calls({"--time-filter", "10s"}), (std::vector<int>{0, 0, 0}));
  const Result q = run_cli({"record", "-q", "-p", "function_graph", "-o", file, "--", GRAPH_TARGET});
  EXPECT_EQ(q.rc, 0);
  EXPECT_EQ(q.err.find("usrtrace record: recording"), std::string::npos) << q.err;
  EXPECT_EQ(q.err.find("events lost"), std::string::npos) << q.err;
  // trace-cmd's --func-stack: a stack after each call of the -l functions.
  Result fs = run_cli(
      {"record", "-q", "-p", "function", "-l", "pkg_middle", "--func-stack", "-o", file, "--", GRAPH_TARGET});
  ASSERT_EQ(fs.rc, 0) << fs.err;
  const std::string fs_rep = run_cli({"report", "-i", file}).out;
  EXPECT_EQ(count(fs_rep, " function: "), 25) << fs_rep.substr(0, 2000);
  EXPECT_EQ(count(fs_rep, " user_stack: "), 25) << fs_rep.substr(0, 2000);
  EXPECT_EQ(count(fs_rep, "=> main\n"), 25) << "each stack starts at pkg_middle's caller";
  fs = run_cli({"record", "-p", "function", "--func-stack", "-o", file, "--", GRAPH_TARGET});
  EXPECT_EQ(fs.rc, 1);
  EXPECT_NE(fs.err.find("--func-stack needs -l FUNC"), std::string::npos) << fs.err;
  // trace-cmd's -s: said to be not taken, not silently ignored (its -m
  // is taken: MaxSizeKeepsTheNewestPagesOfEachCpu).
  const Result s = run_cli({"record", "-s", "100", "-o", file, "--", GRAPH_TARGET});
  EXPECT_NE(s.rc, 0);
  EXPECT_NE(s.err.find("-s: "), std::string::npos) << s.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

// --max-graph-depth N (and uftrace's spelling --depth N) against uftrace
// -D N, on fib(8) built with -finstrument-functions and with patchable
// entries: a call at depth >= N is left out, and so are its callees, as the
// kernel does. -finstrument-functions calls the exit hook of every call,
// recorded or not: fib's calls past the limit must not end their recorded
// caller (which recorded all 67 calls at depth 1).
TEST(CliRecord, MaxGraphDepthOfARecursiveProgramIsUftracesDepth) {
  const std::string dir = temp_dir(), file = dir + "/fib.dat";
  // The calls in order, each as its depth and name ("1 fib").
  auto ours = [&](const std::string& prog, const std::string& flag, int n) {
    const Result r =
        run_cli({"record", "-q", "-p", "function_graph", flag, std::to_string(n), "-o", file, "--", prog});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "21\n");
    std::vector<std::string> calls;
    static const std::regex entry(R"(--> (\w+) \((\d+)\))");
    const std::string rep = run_cli({"report", "-i", file}).out;
    // Not the sanitizer's module constructor and destructor, which gcc adds
    // to the program (patchable like its own functions) in the ASan build.
    for (std::sregex_iterator it(rep.begin(), rep.end(), entry), end; it != end; ++it)
      if ((*it)[1].str().rfind("_sub_", 0) != 0) calls.push_back((*it)[2].str() + " " + (*it)[1].str());
    return calls;
  };
  // uftrace's, from `uftrace replay -f none`: two spaces a level.
  auto uftrace = [&](const std::string& prog, bool patchable, int n) {
    std::vector<std::string> argv = {"/usr/bin/uftrace", "record", "--no-libcall",       "-D",
                                     std::to_string(n),  "-d",     dir + "/uftrace.data"};
    if (patchable) argv.insert(argv.begin() + 2, {"-P", "."});
    argv.push_back(prog);
    const Result r = Proc::start(argv, false).finish();
    EXPECT_EQ(r.rc, 0) << r.err;
    const Result rep =
        Proc::start({"/usr/bin/uftrace", "replay", "-f", "none", "--no-pager", "-d", dir + "/uftrace.data"},
                    false)
            .finish();
    EXPECT_EQ(rep.rc, 0) << rep.err;
    std::vector<std::string> calls;
    std::istringstream in(rep.out);
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find_first_not_of(' '), paren = line.find("()");
      if (at == std::string::npos || line[at] == '}' || paren == std::string::npos) continue;
      calls.push_back(std::to_string(at / 2) + " " + line.substr(at, paren - at));
    }
    return calls;
  };
  // fib(8)'s calls to depth n (main at 0).
  std::function<void(int, int, int, std::vector<std::string>&)> tree = [&](int fn, int depth, int n,
                                                                           std::vector<std::string>& out) {
    if (depth >= n) return;
    out.push_back(std::to_string(depth) + " fib");
    if (fn >= 2) {
      tree(fn - 1, depth + 1, n, out);
      tree(fn - 2, depth + 1, n, out);
    }
  };
  // uftrace's runtime preloaded into a sanitized program is no subject of
  // this test: the oracle runs in the unsanitized builds.
#if USRTRACE_TEST_TSAN || defined(__SANITIZE_ADDRESS__)
  const bool have_uftrace = false;
#else
  const bool have_uftrace = ::access("/usr/bin/uftrace", X_OK) == 0;
#endif
  for (const auto& [prog, patchable] : {std::pair<std::string, bool>{FIB_TARGET_INSTRUMENT, false},
                                        std::pair<std::string, bool>{FIB_TARGET_PATCHABLE, true}}) {
    for (int n : {1, 2, 3, 5}) {
      std::vector<std::string> want = {"0 main"};
      tree(8, 1, n, want);
      const std::string what = prog + " at depth " + std::to_string(n);
      EXPECT_EQ(ours(prog, "--max-graph-depth", n), want) << what;
      EXPECT_EQ(ours(prog, "--depth", n), want) << what;
      if (have_uftrace) {
        EXPECT_EQ(uftrace(prog, patchable, n), want) << what << " (uftrace)";
      }
    }
  }
  if (!have_uftrace) std::cout << "note: uftrace not run: the depths are checked against fib's own tree\n";
  std::filesystem::remove_all(dir);
}

TEST(CliRecord, DashCFollowsTheProgramsACommandStarts) {
  const std::string dir = temp_dir(), file = dir + "/tree.dat";
  // The command starts two programs one after the other (fork and exec),
  // which write 10 and 20 ticks; each announces itself as its runtime
  // starts and is recorded into the same file, to its exit.
  // (-e nosys: with -c, an event a process lacks is skipped there.)
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "-c", "-e", "clitest", "-e", "nosys:nosuch", "-o", file, "--", CLI_TARGET},
      true);
  const std::string script = "spawn 10\nspawn 20\nrare 1\nexit 0\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  const Result r = rec.finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("followed 2 processes"), std::string::npos) << r.err;
  const Result rep = run_cli({"report", "-i", file});
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
    if (line.rfind("cli_target-", 0) != 0 || colon == std::string::npos || line.find(' ') < colon) continue;
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
  // The JSON export puts each process's events under its own pid (the
  // file's PROCMAPS options, one per process), each named: three
  // processes, the ticks 10 and 20 in the two children, the rare in the
  // command.
  const Result json = run_cli({"report", "--format", "json", file});
  ASSERT_EQ(json.rc, 0) << json.err;
  std::map<std::string, int> ticks_by_pid, rare_by_pid;
  std::set<std::string> named;
  const std::regex ev(R"re("name":"(tick|rare|process_name)"[^\n]*?"pid":(\d+))re");
  for (std::sregex_iterator it(json.out.begin(), json.out.end(), ev), end; it != end; ++it) {
    const std::string what = (*it)[1], pid = (*it)[2];
    if (what == "tick") ++ticks_by_pid[pid];
    if (what == "rare") ++rare_by_pid[pid];
    if (what == "process_name") named.insert(pid);
  }
  std::vector<int> tick_counts;
  for (const auto& [pid, n] : ticks_by_pid) tick_counts.push_back(n);
  std::sort(tick_counts.begin(), tick_counts.end());
  EXPECT_EQ(tick_counts, (std::vector<int>{10, 20})) << json.out.substr(0, 2000);
  ASSERT_EQ(rare_by_pid.size(), 1u);
  EXPECT_EQ(ticks_by_pid.count(rare_by_pid.begin()->first), 0u) << "the command is a process of its own";
  EXPECT_EQ(named.size(), 3u) << "a process_name for each";
  // -c without a command is refused.
  const Result bad = run_cli({"record", "-c", "-P", "1", "-o", file});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("-c follows"), std::string::npos) << bad.err;
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

namespace {

// Issue 34, defect 2, with -c: `record -c -- bash SCRIPT` follows the
// programs the script starts, and each keeps its own descriptors. bash
// took the runtime's unsetenv("USRTRACE_GATE_FD") for its own (before its
// main() it has no table of variables, and then copied the environment
// with the variable in it), so every child took its own descriptor of
// that number for the start gate: it wrote "E" and "R" into it and closed
// it, and it waited on that gate instead of announcing itself, so none was
// followed.
TEST(CliRecord, DashCFollowsAScriptsChildrenWhichKeepTheirDescriptors) {
  SKIP_FOR_AN_UNINSTRUMENTED_COMMAND();
  const std::string dir = temp_dir(), file = dir + "/script.dat", script = dir + "/script.sh";
  // The gate's number in the command is whatever record's child had free:
  // every low one is a file of the children's own.
  std::string redirs;
  for (int fd = 3; fd <= 9; ++fd) {
    const std::string data = dir + "/data" + std::to_string(fd);
    std::ofstream(data) << "hello world";
    redirs += " " + std::to_string(fd) + "<>" + data;
  }
  std::ofstream(script) << "printf 'tick 10\\nexit 0\\n' | " << CLI_TARGET << redirs << " >/dev/null\n"
                        << "printf 'tick 20\\nexit 0\\n' | " << CLI_TARGET << redirs << " >/dev/null\n"
                        << "exit 0\n";
  const Result r =
      Proc::start({USRTRACE_CLI, "record", "-c", "-e", "clitest:tick", "-o", file, "--", "/bin/bash", script},
                  false)
          .finish();
  ASSERT_EQ(r.rc, 0) << r.err;
  for (int fd = 3; fd <= 9; ++fd) {
    std::ifstream in(dir + "/data" + std::to_string(fd));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "hello world") << "the children's fd " << fd;
  }
  EXPECT_NE(r.err.find("followed 2 processes"), std::string::npos) << r.err;
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_EQ(count(rep.out, " tick: "), 30) << rep.out.substr(0, 2000);
  for (int fd = 3; fd <= 9; ++fd) ::unlink((dir + "/data" + std::to_string(fd)).c_str());
  ::unlink(script.c_str());
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
