// The usrtrace command, run as a user runs it, against live processes:
// cli_target (a traced program driven line by line on stdin, so each test
// knows exactly what was written) and plain_target (a program without
// usrtrace, recorded through the preloaded runtime).

#include "tools/cli_harness.h"

using namespace cli_harness;

namespace {

TEST(CliList, ProcessesEventsTracersAndOptions) {
  Target t;
  Result r = run_cli({"list"});
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
  r = run_cli({"list", "-P", t.spid(), "-e"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "clitest:tick\n"), 1) << r.out;
  EXPECT_EQ(count(r.out, "clitest:rare\n"), 1) << r.out;
  r = run_cli({"list", "-P", t.spid(), "-t"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, "nop\n"), 1) << r.out;
  r = run_cli({"list", "-P", t.spid(), "-o"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("print-parent"), std::string::npos) << r.out;
  r = run_cli({"list", "-e"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("need -P"), std::string::npos) << r.err;
}

TEST(CliStart, EnableStopRestartResetAndShow) {
  Target t;
  Result r = run_cli({"start", "-P", t.spid(), "-e", "clitest:tick"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 5");
  t.cmd("rare 2");  // not enabled
  r = run_cli({"show", "-P", t.spid()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count(r.out, " tick: "), 5) << r.out;
  EXPECT_EQ(count(r.out, " rare: "), 0) << r.out;
  r = run_cli({"show", "-P", t.spid(), "--set_event", "--tracing_on"});
  EXPECT_EQ(r.out, "clitest:tick\n1\n");

  ASSERT_EQ(run_cli({"stop", "-P", t.spid()}).rc, 0);
  t.cmd("tick 7");
  r = run_cli({"show", "-P", t.spid()});
  EXPECT_EQ(count(r.out, " tick: "), 5) << "recorded while stopped: " << r.out;
  ASSERT_EQ(run_cli({"restart", "-P", t.spid()}).rc, 0);
  t.cmd("tick 3");
  r = run_cli({"show", "-P", t.spid()});
  EXPECT_EQ(count(r.out, " tick: "), 8) << r.out;

  r = run_cli({"reset", "-P", t.spid()});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_cli({"show", "-P", t.spid(), "--set_event"});
  EXPECT_EQ(r.out, "");
  r = run_cli({"show", "-P", t.spid()});
  EXPECT_EQ(count(r.out, " tick: "), 0) << "reset leaves the buffer empty: " << r.out;
  t.cmd("tick 2");
  EXPECT_EQ(count(run_cli({"show", "-P", t.spid()}).out, " tick: "), 0) << "nothing enabled after reset";
}

TEST(CliStart, InstancesFiltersBufferSizeClockAndStat) {
  Target t;
  Result r = run_cli({"start", "-P", t.spid(), "-B", "cli_few", "-e", "clitest:tick", "-f", "seq < 3", "-b",
                      "64", "-C", "global", "-B", "cli_rare", "-e", "clitest:rare"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 10");
  t.cmd("rare 4");
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_few"});
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1, 2})) << r.out;
  EXPECT_EQ(count(r.out, " rare: "), 0);
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_rare"});
  EXPECT_EQ(count(r.out, " rare: "), 4) << r.out;
  EXPECT_EQ(count(r.out, " tick: "), 0);
  EXPECT_EQ(count(run_cli({"show", "-P", t.spid()}).out, " tick: "), 0) << "the top was not enabled";
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_few", "--buffer_size", "--trace_clock"});
  // 64 KiB of event data: 17 pages of 4080 bytes, shown as the kernel
  // shows it.
  EXPECT_EQ(r.out.substr(0, 3), "67\n") << r.out;
  EXPECT_NE(r.out.find("[global]"), std::string::npos) << r.out;

  r = run_cli({"stat", "-P", t.spid()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Process: " + t.spid() + " (cli_target)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Instance: cli_few"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("filter: seq < 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Instance: cli_rare"), std::string::npos) << r.out;

  // reset -d takes the instances away.
  r = run_cli({"reset", "-P", t.spid(), "-B", "cli_few", "-B", "cli_rare", "-d"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_few"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("No such file"), std::string::npos) << r.err;
}

// -e EVENT -f FILTER: the filter is in place before the event is enabled
// (trace-cmd's order), so nothing the filter rejects is recorded, even from
// a thread writing without pause while start runs. Enabled first, the
// events written between the two writes got in unfiltered.
TEST(CliStart, AFilterHoldsFromTheEventsFirstRecord) {
  Target t;
  t.cmd("spin");  // answered once the spinning thread has written its first tick
  Result r = run_cli({"start", "-P", t.spid(), "-B", "cli_none", "-e", "clitest:tick", "-f", "tid == 0", "-B",
                      "cli_sys", "-e", "clitest", "-f", "seq > 4000000000"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("stop");
  t.cmd("tick 5");  // not let through either: the filters work
  for (const char* inst : {"cli_none", "cli_sys"}) {
    r = run_cli({"show", "-P", t.spid(), "-B", inst});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(count(r.out, " tick: "), 0) << inst << ":\n" << r.out;
  }
  // The unfiltered top, enabled the same way, did see the spinning thread.
  r = run_cli({"start", "-P", t.spid(), "-e", "clitest:tick"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 3");
  EXPECT_EQ(count(run_cli({"show", "-P", t.spid()}).out, " tick: "), 3);
}

// A user stack names every frame the process can: the program's
// functions from its .symtab; a stripped library's from its separate debug
// file, found by build-id under /usr/lib/debug as gdb finds it (libc's,
// from Debian's libc6-dbg: __libc_start_call_main is a static function,
// in no table libc.so.6 itself carries); with no debug file, the object
// and offset, as the kernel's sym-userobj prints a frame.
TEST(CliStart, StackFramesAreNamedFromSeparateDebugFiles) {
  if (Proc::start({"/usr/bin/dpkg-query", "-W", "libc6-dbg"}, false).finish().rc != 0)
    GTEST_SKIP()
        << "libc6-dbg is not installed (scripts/install-deps.sh installs it): libc has no debug file";
  const char* before = getenv("USRTRACE_DEBUG_FILE_DIRECTORY");
  const std::string saved = before ? before : "";
  for (const bool debug : {true, false}) {
    SCOPED_TRACE(debug ? "/usr/lib/debug" : "USRTRACE_DEBUG_FILE_DIRECTORY=");
    // The traced program's environment: it names its own frames.
    if (debug)
      unsetenv("USRTRACE_DEBUG_FILE_DIRECTORY");
    else
      setenv("USRTRACE_DEBUG_FILE_DIRECTORY", "", 1);
    Target t;
    Result r = run_cli({"start", "-P", t.spid(), "-e", "clitest:rare", "-T"});
    ASSERT_EQ(r.rc, 0) << r.err;
    t.cmd("rare 1");
    r = run_cli({"show", "-P", t.spid()});
    EXPECT_EQ(count(r.out, "<user stack trace>"), 1) << r.out;
    EXPECT_EQ(count(r.out, " => main+0x"), 1) << r.out;
    EXPECT_EQ(count(r.out, " => __libc_start_call_main+0x"), debug ? 1 : 0) << r.out;
    EXPECT_EQ(count(r.out, "/libc.so.6[+0x"), debug ? 0 : 1) << r.out;
    // An exported alias at the same address is the name kept, as perf
    // keeps it (not the debug file's __libc_start_main_impl), without its
    // symbol version.
    EXPECT_EQ(count(r.out, " => __libc_start_main+0x"), 1) << r.out;
    EXPECT_EQ(r.out.find("@GLIBC"), std::string::npos) << r.out;
  }
  if (before)
    setenv("USRTRACE_DEBUG_FILE_DIRECTORY", saved.c_str(), 1);
  else
    unsetenv("USRTRACE_DEBUG_FILE_DIRECTORY");
}

// trace-cmd's event flags, with its meanings: -R a trigger for the -e
// before it (in place before the event is on), -v turns the next -e into a
// disable, -T a stack trace after each event of the instance's -e's (under
// the event's filter), -M the cpumask; and every option by its long name.
TEST(CliStart, TraceCmdsTriggerNegateStacktraceAndCpumaskFlags) {
  Target t;
  Result r = run_cli({"start",
                      "-P",
                      t.spid(),
                      "-e",
                      "clitest:tick",
                      "-R",
                      "traceoff if seq == 3",  //
                      "-B",
                      "cli_st",
                      "-e",
                      "clitest:rare",
                      "-f",
                      "n > 0",
                      "-T",  //
                      "-B",
                      "cli_neg",
                      "-e",
                      "clitest",
                      "-v",
                      "-e",
                      "clitest:rare",  //
                      "--instance",
                      "cli_mask",
                      "--event",
                      "clitest:tick",
                      "--cpumask",
                      "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 10");
  t.cmd("rare 3");
  // traceoff fired at seq 3: the top has 0..3 and nothing after, rare
  // included (tracing is off), as the kernel's trigger does.
  r = run_cli({"show", "-P", t.spid()});
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1, 2, 3})) << r.out;
  EXPECT_EQ(run_cli({"show", "-P", t.spid(), "--tracing_on"}).out, "0\n");
  // -T: a user stack after each rare event the filter let through (n 1, 2).
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_st"});
  EXPECT_EQ(count(r.out, " rare: "), 2) << r.out;
  EXPECT_EQ(count(r.out, "<user stack trace>"), 2) << r.out;
  EXPECT_EQ(r.out.find("rare: n=0"), std::string::npos) << r.out;
  // Each frame named as the process can name it (the frames in libc:
  // CliStart.StackFramesAreNamedFromSeparateDebugFiles).
  EXPECT_EQ(count(r.out, " => main+0x"), 2) << r.out;
  EXPECT_EQ(count(r.out, " => __libc_start_main+0x"), 2) << r.out;
  // -v: the system on, then rare off again.
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_neg", "--set_event"});
  EXPECT_EQ(r.out, "clitest:tick\n");
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_mask", "--cpumask"});
  EXPECT_EQ(r.out, "1\n");
  r = run_cli({"stat", "-P", t.spid()});
  EXPECT_NE(r.out.find("trigger: traceoff:unlimited if seq == 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trigger: stacktrace:unlimited if n > 0"), std::string::npos) << r.out;

  // Wrong uses: each one line, and nothing of the setup stays.
  r = run_cli({"start", "-P", t.spid(), "-B", "cli_bad", "-e", "clitest:*", "-R", "traceoff"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("-R 'traceoff' needs a -e SYS:EVENT before it"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-B", "cli_bad", "-e", "clitest:tick", "-R", "frobnicate"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("trigger: Invalid argument"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-B", "cli_bad", "-v", "-e", "clitest:tick", "-f", "seq > 1"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("follows a -v -e"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-B", "cli_bad", "-e", "clitest:tick", "-v"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("-v needs a -e after it"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-B", "cli_bad", "-T", "-p", "nop"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("-T needs a -e"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-B", "cli_bad", "-M", "zz"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("tracing_cpumask: Invalid argument"), std::string::npos) << r.err;
  EXPECT_NE(run_cli({"show", "-P", t.spid(), "-B", "cli_bad"}).rc, 0) << "a failed setup leaves no instance";
}

// uftrace's spellings of the function_graph filters, checked against the
// files they stand for; a TIME that tracing_thresh cannot hold is refused.
TEST(CliStart, UftracesFilterSpellings) {
  Target t;
  Result r = run_cli({"start", "-P", t.spid(), "-B", "cli_uf", "--depth", "3", "--time-filter", "2ms"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_uf", "--max_graph_depth", "--tracing_thresh"});
  EXPECT_EQ(r.out, "3\n2000\n");
  for (const char* bad : {"500ns", "3 ms", "ms", "5h"}) {
    r = run_cli({"start", "-P", t.spid(), "-B", "cli_uf", "--time-filter", bad});
    EXPECT_EQ(r.rc, 1) << bad;
    EXPECT_NE(r.err.find("--time-filter '" + std::string(bad) + "'"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run_cli({"show", "-P", t.spid(), "-B", "cli_uf", "--tracing_thresh"}).out, "2000\n");
}

TEST(CliErrors, OneClearLineAndANonZeroStatus) {
  // A pid that does not exist: a child that has exited and been reaped.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  Result r = run_cli({"show", "-P", std::to_string(gone)});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "usrtrace show: no process " + std::to_string(gone) + "\n");
  // A live process without usrtrace: a shell.
  Proc sh = Proc::start({"/bin/sh", "-c", "read x"}, true);
  r = run_cli({"stat", "-P", std::to_string(sh.pid)});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("does not serve usrtrace's control socket"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1) << r.err;
  sh.finish();

  Target t;
  r = run_cli({"start", "-P", t.spid(), "-e", "nosuch:event"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("set_event: Invalid argument"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-b", "lots"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("buffer_size_kb: Invalid argument"), std::string::npos) << r.err;
  r = run_cli({"start", "-P", t.spid(), "-e", "clitest:tick", "-f", "seq <"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("filter: Invalid argument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error:"), std::string::npos) << "the error_log line: " << r.err;
  r = run_cli({"start", "-P", t.spid(), "-C", "sundial"});
  EXPECT_EQ(r.rc, 1);
  r = run_cli({"start", "-P", t.spid(), "-f", "seq < 3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("needs a -e"), std::string::npos) << r.err;
  r = run_cli({"show", "-P", t.spid(), "-B", "no_such_instance"});
  EXPECT_EQ(r.rc, 1);
  r = run_cli({"snapshot", "-P", t.spid(), "-s", "-f"});
  EXPECT_NE(r.rc, 0) << "-s and -f exclude each other";
  r = run_cli({"show"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--pid is required"), std::string::npos) << r.err;  // -P's long name
  r = run_cli({"show", "-P", "abc"});
  EXPECT_NE(r.rc, 0);
  r = run_cli({"frobnicate"});
  EXPECT_NE(r.rc, 0);
  r = run_cli({"record", "-o", "/tmp/x.dat"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("either -P PID or -- COMMAND"), std::string::npos) << r.err;
  r = run_cli({"record", "-o", "/nonexistent/dir/x.dat", "-P", t.spid()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("/nonexistent/dir"), std::string::npos) << r.err;
  r = run_cli({"record", "-o", "/tmp/x.dat", "--", "/nonexistent/program"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("/nonexistent/program"), std::string::npos) << r.err;
  // Nothing of the failed setups stayed.
  EXPECT_EQ(run_cli({"show", "-P", t.spid(), "--set_event"}).out, "");
}

TEST(CliErrors, HelpOnEveryVerb) {
  for (const char* verb : {"list", "start", "stop", "restart", "reset", "show", "stream", "snapshot", "stat",
                           "record", "extract", "report", "recover"}) {
    const Result r = run_cli({verb, "--help"});
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
  ASSERT_EQ(run_cli({"start", "-P", t.spid(), "-B", "cli_snap", "-e", "clitest:tick"}).rc, 0);
  t.cmd("tick 4");
  Result r = run_cli({"snapshot", "-P", t.spid(), "-B", "cli_snap", "-s"});
  ASSERT_EQ(r.rc, 0) << r.err;
  t.cmd("tick 2");
  r = run_cli({"snapshot", "-P", t.spid(), "-B", "cli_snap"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1, 2, 3})) << r.out;
  r = run_cli({"show", "-P", t.spid(), "-B", "cli_snap"});
  EXPECT_EQ(seqs(r.out, "tick"), (std::vector<unsigned>{0, 1}))
      << "after the swap, the live buffer: " << r.out;
  ASSERT_EQ(run_cli({"snapshot", "-P", t.spid(), "-B", "cli_snap", "-r"}).rc, 0);
  EXPECT_EQ(count(run_cli({"snapshot", "-P", t.spid(), "-B", "cli_snap"}).out, " tick: "), 0);
  ASSERT_EQ(run_cli({"snapshot", "-P", t.spid(), "-B", "cli_snap", "-f"}).rc, 0);
  EXPECT_NE(run_cli({"snapshot", "-P", t.spid(), "-B", "cli_snap"}).out.find("Snapshot is freed"),
            std::string::npos);
}

TEST(CliExtract, TheBuffersAsTheyAreToTraceDat) {
  Target t;
  ASSERT_EQ(run_cli({"start", "-P", t.spid(), "-e", "clitest", "-B", "cli_ex", "-e", "clitest:rare"}).rc, 0);
  t.cmd("tick 300");
  t.cmd("rare 5");
  const std::string dir = temp_dir(), file = dir + "/ex.dat";
  Result r = run_cli({"extract", "-P", t.spid(), "-a", "-o", file});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_cli({"report", "-i", file});
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
  EXPECT_EQ(run_cli({"show", "-P", t.spid(), "--set_event"}).out, "") << "stream takes its setup back";
}

TEST(CliStream, ShowPipeEndsWhenTheProcessExits) {
  Target t;
  ASSERT_EQ(run_cli({"start", "-P", t.spid(), "-e", "clitest:rare"}).rc, 0);
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
