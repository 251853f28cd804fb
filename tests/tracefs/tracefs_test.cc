// The tree of control files: every instance-scoped behaviour runs in the top
// instance and in a new one (kselftest's "instance" flag).
#include "tracefs/tracefs.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "clock/trace_clock.h"
#include "ring_buffer/page_format.h"
#include "tracefs/tracefs_test_util.h"

namespace usrtrace::tracefs_test {
namespace {

using instance::Instance;

class TracefsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_NE(Instance::top(), nullptr);
    if (GetParam()) {
      ASSERT_EQ(tracefs::mkdir("instances/tfs"), 0);
      p_ = "instances/tfs/";
      inst_ = Instance::find("tfs");
    } else {
      inst_ = Instance::top();
    }
    ASSERT_NE(inst_, nullptr);
    inst_->buffer().reset();
    inst_->clear_error_log();
  }
  void TearDown() override {
    // Back to the defaults, through the files themselves.
    EXPECT_GE(wr(p_ + "set_event", ""), 0);
    EXPECT_GE(wr(p_ + "set_event_pid", ""), 0);
    EXPECT_GE(wr(p_ + "set_event_notrace_pid", ""), 0);
    EXPECT_GE(wr(p_ + "tracing_on", "1"), 0);
    EXPECT_GE(wr(p_ + "buffer_percent", "50"), 0);
    EXPECT_GE(wr(p_ + "buffer_size_kb", "1408"), 0);
    for (const int id : instance::listed_options()) {
      const auto& o = instance::option_info(id);
      EXPECT_GE(wr(p_ + "options/" + o.name, o.default_on ? "1" : "0"), 0);
    }
    std::string all = rd(p_ + "tracing_cpumask");
    inst_->set_cpumask({});  // every CPU
    if (inst_->buffer().clock() != clock::ClockId::kLocal) {
      EXPECT_GE(wr(p_ + "trace_clock", "local"), 0);
    }
    // A new instance must be removable: no file left a reference behind.
    if (GetParam()) {
      EXPECT_EQ(tracefs::rmdir("instances/tfs"), 0);
    }
  }
  std::string path(const std::string& f) const { return p_ + f; }
  int error_lines() { return static_cast<int>(count(rd(path("error_log")), ": error: ")); }

  std::string p_;
  Instance* inst_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Instances, TracefsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "NewInstance" : "Top";
                         });

TEST_P(TracefsTest, StatAndListShowTheKernelsTree) {
  tracefs::Stat st;
  ASSERT_EQ(tracefs::stat(path(""), &st), 0);
  EXPECT_TRUE(st.is_dir);
  EXPECT_EQ(st.mode, 0750u);
  struct {
    const char* file;
    mode_t mode;
  } const kModes[] = {
      {"trace", 0640},
      {"trace_pipe", 0440},
      {"tracing_on", 0640},
      {"trace_marker", 0220},
      {"trace_marker_raw", 0220},
      {"free_buffer", 0200},
      {"buffer_total_size_kb", 0440},
      {"available_tracers", 0440},
      {"set_event", 0640},
      {"events/header_page", 0440},
      {"events/tfstest/ping/format", 0440},
      {"events/tfstest/ping/enable", 0640},
      {"per_cpu/cpu0/trace_pipe_raw", 0440},
      {"per_cpu/cpu0/stats", 0440},
      {"options/overwrite", 0640},
  };
  for (const auto& m : kModes) {
    ASSERT_EQ(tracefs::stat(path(m.file), &st), 0) << m.file;
    EXPECT_FALSE(st.is_dir) << m.file;
    EXPECT_EQ(st.mode, m.mode) << m.file;
  }
  for (const char* d :
       {"events", "events/tfstest", "events/tfstest/ping", "options", "per_cpu", "per_cpu/cpu0"}) {
    ASSERT_EQ(tracefs::stat(path(d), &st), 0) << d;
    EXPECT_TRUE(st.is_dir);
    EXPECT_EQ(st.mode, 0750u);
  }

  std::vector<std::string> names;
  ASSERT_EQ(tracefs::list(path(""), &names), 0);
  for (const char* f : {"trace", "trace_pipe", "tracing_on", "buffer_size_kb", "set_event", "events",
                        "options", "per_cpu", "error_log", "tracing_cpumask"})
    EXPECT_NE(std::find(names.begin(), names.end(), f), names.end()) << f;
  // Top-only files, as in the kernel.
  const bool has_readme = std::find(names.begin(), names.end(), "README") != names.end();
  EXPECT_EQ(has_readme, !GetParam());
  EXPECT_EQ(tracefs::stat(path("instances"), &st), GetParam() ? -ENOENT : 0);

  ASSERT_EQ(tracefs::list(path("per_cpu"), &names), 0);
  EXPECT_EQ(names.size(), static_cast<size_t>(inst_->buffer().nr_cpus()));
  ASSERT_EQ(tracefs::list(path("events/tfstest/ping"), &names), 0);
  EXPECT_EQ(names, (std::vector<std::string>{"enable", "filter", "format", "hist", "id", "trigger"}));
  // The ftrace system: no enable files.
  ASSERT_EQ(tracefs::list(path("events/ftrace"), &names), 0);
  EXPECT_EQ(std::find(names.begin(), names.end(), "enable"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "print"), names.end());

  EXPECT_EQ(tracefs::stat(path("nosuch"), &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(path("events/nosys/enable"), &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(path("events/tfstest/nosuch"), &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(path("trace/x"), &st), -ENOTDIR);
  EXPECT_EQ(tracefs::stat(path("per_cpu/cpu99999"), &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(path(std::string(5000, 'a')), &st), -ENAMETOOLONG);
  EXPECT_EQ(tracefs::list(path("trace"), &names), -ENOTDIR);

  std::unique_ptr<tracefs::File> f;
  EXPECT_EQ(tracefs::open(path("events"), O_RDONLY, &f), -EISDIR);
  EXPECT_EQ(tracefs::open(path("trace_pipe"), O_WRONLY, &f), -EACCES);
  EXPECT_EQ(tracefs::open(path("trace_marker"), O_RDONLY, &f), -EACCES);
  EXPECT_EQ(tracefs::open(path("nosuch"), O_RDONLY, &f), -ENOENT);
}

// Each file is one entry of a spec table (src/tracefs/internal.h), and a
// family of files (options/NAME, snapshot.AGE, per_cpu/cpuN, ...) names
// itself in two functions, one to list and one to match: what a directory
// lists must resolve, and open for the access its mode gives.
TEST_P(TracefsTest, EveryListedNameResolvesAndOpensAsItsModeSays) {
  ASSERT_GE(wr(path("snapshot_ring_size"), "3"), 0);  // snapshot.1 and snapshot.2 too
  int files = 0;
  auto walk = [&](const std::string& dir, auto& self) -> void {
    std::vector<std::string> names;
    ASSERT_EQ(tracefs::list(dir, &names), 0) << dir;
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end())) << dir;
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << dir;  // one spec a name
    for (const std::string& name : names) {
      const std::string p = dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
      if (p == "instances") continue;  // the other instances are theirs
      tracefs::Stat st;
      ASSERT_EQ(tracefs::stat(p, &st), 0) << p;
      if (st.is_dir) {
        EXPECT_EQ(st.mode, 0750u) << p;
        self(p, self);
        continue;
      }
      ++files;
      std::vector<std::string> none;
      EXPECT_EQ(tracefs::list(p, &none), -ENOTDIR) << p;
      for (const int acc : {O_RDONLY, O_WRONLY}) {
        const bool allowed = st.mode & (acc == O_RDONLY ? 0400 : 0200);
        std::unique_ptr<tracefs::File> f;
        const int rc = tracefs::open(p, acc | O_NONBLOCK, &f);
        if (!allowed)
          EXPECT_EQ(rc, -EACCES) << p;
        else if (name == "snapshot_raw")
          EXPECT_EQ(rc, -ENODEV) << p;  // no spare allocated
        else
          EXPECT_EQ(rc, 0) << p << " " << acc;
      }
    }
  };
  walk(path(""), walk);
  EXPECT_GT(files, 50);
  EXPECT_GE(wr(path("snapshot_ring_size"), "1"), 0);
}

TEST_P(TracefsTest, TracingOnStopsAndRestartsRecording) {
  EXPECT_EQ(rd(path("tracing_on")), "1\n");
  ASSERT_EQ(wr(path("trace_marker"), "one"), 3);
  ASSERT_EQ(wr(path("tracing_on"), "0\n"), 2);
  EXPECT_EQ(rd(path("tracing_on")), "0\n");
  wr(path("trace_marker"), "two");
  ASSERT_EQ(wr(path("tracing_on"), "7"), 1);  // any nonzero value, as the kernel
  EXPECT_EQ(rd(path("tracing_on")), "1\n");
  wr(path("trace_marker"), "three");
  EXPECT_TRUE(has_marker(inst_, "one"));
  EXPECT_FALSE(has_marker(inst_, "two"));
  EXPECT_TRUE(has_marker(inst_, "three"));
}

TEST_P(TracefsTest, TraceOpenedWithTruncClearsIt) {
  wr(path("trace_marker"), "hello marker");
  EXPECT_NE(rd(path("trace")).find("tracing_mark_write: hello marker"), std::string::npos);
  EXPECT_NE(rd(path("trace")).find("hello marker"), std::string::npos) << "trace is not consuming";
  ASSERT_EQ(wr(path("trace"), ""), 0);  // echo > trace
  EXPECT_FALSE(has_marker(inst_, "hello marker"));
  EXPECT_EQ(rd(path("trace")).find("hello marker"), std::string::npos);
}

TEST_P(TracefsTest, BufferSizeResizeShowsInTotalAndPerCpu) {
  const int ncpu = inst_->buffer().nr_cpus();
  ASSERT_EQ(wr(path("buffer_size_kb"), "64"), 2);
  const uint64_t kb = std::stoull(rd(path("buffer_size_kb")));
  EXPECT_GE(kb, 64u);
  EXPECT_LT(kb, 64u + 8);  // rounded up to whole pages
  EXPECT_EQ(std::stoull(rd(path("buffer_total_size_kb"))), kb * static_cast<uint64_t>(ncpu));
  EXPECT_EQ(std::stoull(rd(path("per_cpu/cpu0/buffer_size_kb"))), kb);
  if (ncpu > 1) {
    ASSERT_EQ(wr(path("per_cpu/cpu1/buffer_size_kb"), "128"), 3);
    EXPECT_EQ(rd(path("buffer_size_kb")), "X\n");
    EXPECT_GE(std::stoull(rd(path("per_cpu/cpu1/buffer_size_kb"))), 128u);
    EXPECT_EQ(std::stoull(rd(path("per_cpu/cpu0/buffer_size_kb"))), kb);
    EXPECT_GT(std::stoull(rd(path("buffer_total_size_kb"))), kb * static_cast<uint64_t>(ncpu));
  }
  EXPECT_EQ(wr(path("buffer_size_kb"), "0"), -EINVAL);
}

TEST_P(TracefsTest, FreeBufferShrinksAndHonoursDisableOnFree) {
  ASSERT_EQ(wr(path("options/disable_on_free"), "1"), 1);
  {
    std::unique_ptr<tracefs::File> f;
    ASSERT_EQ(tracefs::open(path("free_buffer"), O_WRONLY, &f), 0);
    EXPECT_EQ(f->write("x", 1), 1);
    EXPECT_EQ(rd(path("tracing_on")), "1\n");  // only on close
  }
  EXPECT_EQ(rd(path("tracing_on")), "0\n");
  EXPECT_LE(std::stoull(rd(path("buffer_size_kb"))), 8u);
}

TEST_P(TracefsTest, BufferPercent) {
  EXPECT_EQ(rd(path("buffer_percent")), "50\n");
  EXPECT_EQ(wr(path("buffer_percent"), "0"), 1);
  EXPECT_EQ(rd(path("buffer_percent")), "0\n");
  EXPECT_EQ(wr(path("buffer_percent"), "100\n"), 4);
  EXPECT_EQ(rd(path("buffer_percent")), "100\n");
  EXPECT_EQ(wr(path("buffer_percent"), "101"), -EINVAL);
  EXPECT_EQ(rd(path("buffer_percent")), "100\n");
}

TEST_P(TracefsTest, TraceClockSwitchesAndResets) {
  const std::string clocks = rd(path("trace_clock"));
  EXPECT_EQ(clocks.rfind("[local] global counter uptime perf mono mono_raw boot tai x86-tsc\n", 0), 0u)
      << clocks;
  wr(path("trace_marker"), "before");
  ASSERT_EQ(wr(path("trace_clock"), "mono\n"), 5);
  EXPECT_NE(rd(path("trace_clock")).find(" [mono] "), std::string::npos);
  EXPECT_EQ(inst_->buffer().clock(), clock::ClockId::kMono);
  EXPECT_FALSE(has_marker(inst_, "before"));  // switching resets the buffer
  wr(path("trace_marker"), "after");
  EXPECT_TRUE(has_marker(inst_, "after"));
  EXPECT_EQ(wr(path("trace_clock"), "sundial"), -EINVAL);
  EXPECT_TRUE(has_marker(inst_, "after"));
  EXPECT_EQ(inst_->buffer().clock(), clock::ClockId::kMono);
}

TEST_P(TracefsTest, TraceOptionsAndOptionFiles) {
  const std::string opts = rd(path("trace_options"));
  EXPECT_NE(opts.find("\noverwrite\n"), std::string::npos);
  EXPECT_NE(opts.find("\nnolatency-format\n"), std::string::npos);
  EXPECT_EQ(count(opts, "\n"), instance::listed_options().size());
  // The tracers' own options follow the core ones, function's before latency's.
  EXPECT_NE(opts.find("\nnoevent-fork\nnofunc_stack_trace\n"), std::string::npos) << opts;
  EXPECT_NE(opts.find("\ngraph-time\nfunction-trace\n"), std::string::npos) << opts;
  ASSERT_EQ(wr(path("trace_options"), "latency-format\n"), 15);
  EXPECT_EQ(rd(path("options/latency-format")), "1\n");
  EXPECT_TRUE(inst_->option(instance::kOptLatencyFormat));
  ASSERT_EQ(wr(path("trace_options"), "nolatency-format"), 16);
  EXPECT_EQ(rd(path("options/latency-format")), "0\n");
  ASSERT_EQ(wr(path("options/overwrite"), "0"), 1);
  EXPECT_EQ(inst_->buffer().mode(), rb::Mode::kDiscard);
  EXPECT_NE(rd(path("trace_options")).find("\nnooverwrite\n"), std::string::npos);
  EXPECT_EQ(wr(path("trace_options"), "nosuchoption"), -EINVAL);
  EXPECT_EQ(wr(path("options/overwrite"), "2"), -EINVAL);
}

TEST_P(TracefsTest, CurrentTracerIsNop) {
  EXPECT_EQ(rd(path("current_tracer")), "nop\n");
  EXPECT_EQ(rd(path("available_tracers")),
            "timerlat function_graph wakeup_rt wakeup sigsoff section function nop\n");
  EXPECT_EQ(wr(path("current_tracer"), "nop\n"), 4);
  const int before = error_lines();
  EXPECT_EQ(wr(path("current_tracer"), "blk"), -EINVAL);
  EXPECT_EQ(error_lines(), before + 1);
  EXPECT_EQ(rd(path("current_tracer")), "nop\n");
}

TEST_P(TracefsTest, SetEventTruncAppendNegateGlobs) {
  ASSERT_EQ(wr(path("set_event"), "tfstest:ping"), 12);
  EXPECT_EQ(rd(path("set_event")), "tfstest:ping\n");
  // >> appends; > replaces.
  ASSERT_GT(wr(path("set_event"), "tfsother:seq", true), 0);
  EXPECT_EQ(rd(path("set_event")), "tfsother:seq\ntfstest:ping\n");
  ASSERT_GT(wr(path("set_event"), "pong"), 0);  // an event name alone
  EXPECT_EQ(rd(path("set_event")), "tfstest:pong\n");
  ASSERT_GT(wr(path("set_event"), "tfstest"), 0);  // a system name alone
  EXPECT_EQ(rd(path("set_event")), "tfstest:ping\ntfstest:pong\n");
  ASSERT_GT(wr(path("set_event"), "!tfstest:ping", true), 0);
  EXPECT_EQ(rd(path("set_event")), "tfstest:pong\n");
  ASSERT_GT(wr(path("set_event"), "tfstest:p*ng tfsother:*"), 0);
  EXPECT_EQ(rd(path("set_event")), "tfsother:seq\ntfstest:ping\ntfstest:pong\n");
  ASSERT_GT(wr(path("set_event"), "!*:*", true), 0);
  EXPECT_EQ(rd(path("set_event")), "");
  ASSERT_GT(wr(path("set_event"), "*:*"), 0);
  EXPECT_NE(rd(path("set_event")).find("tfstest:ping\n"), std::string::npos);
  EXPECT_EQ(rd(path("set_event")).find("ftrace:"), std::string::npos);  // not settable
  ASSERT_EQ(wr(path("set_event"), ""), 0);                              // echo > set_event clears
  EXPECT_EQ(rd(path("set_event")), "");
  // The effect is real: only enabled events are recorded.
  wr(path("set_event"), "tfstest:ping");
  trace_tfstest_ping(11);
  trace_tfstest_pong(12);
  EXPECT_EQ(pings(inst_), std::vector<int32_t>{11});
  EXPECT_TRUE(pings(inst_, "pong").empty());
  // available_events lists every settable event.
  const std::string avail = rd("available_events");
  EXPECT_NE(avail.find("tfstest:ping\n"), std::string::npos);
  EXPECT_NE(avail.find("tfsother:seq\n"), std::string::npos);
  EXPECT_EQ(avail.find("ftrace:"), std::string::npos);
}

TEST_P(TracefsTest, EnableFilesShowZeroOneAndMixed) {
  EXPECT_EQ(rd(path("events/tfstest/enable")), "0\n");
  ASSERT_EQ(wr(path("events/tfstest/ping/enable"), "1"), 1);
  EXPECT_EQ(rd(path("events/tfstest/ping/enable")), "1\n");
  EXPECT_EQ(rd(path("events/tfstest/pong/enable")), "0\n");
  EXPECT_EQ(rd(path("events/tfstest/enable")), "X\n");
  EXPECT_EQ(rd(path("events/enable")), "X\n");
  ASSERT_EQ(wr(path("events/tfstest/enable"), "1\n"), 2);
  EXPECT_EQ(rd(path("events/tfstest/enable")), "1\n");
  EXPECT_EQ(rd(path("events/tfstest/pong/enable")), "1\n");
  ASSERT_EQ(wr(path("events/enable"), "1"), 1);
  EXPECT_EQ(rd(path("events/enable")), "1\n");
  EXPECT_EQ(rd(path("events/tfsother/seq/enable")), "1\n");
  ASSERT_EQ(wr(path("events/enable"), "0"), 1);
  EXPECT_EQ(rd(path("events/enable")), "0\n");
  EXPECT_EQ(rd(path("set_event")), "");
  EXPECT_EQ(wr(path("events/tfstest/ping/enable"), "2"), -EINVAL);
  EXPECT_EQ(wr(path("events/tfstest/enable"), "X"), -EINVAL);
  EXPECT_EQ(rd(path("events/tfstest/enable")), "0\n");
}

TEST_P(TracefsTest, PidFiltersFilterThreads) {
  const uint16_t seq_id = event_id("tfsother", "seq");
  ASSERT_GT(wr(path("set_event"), "tfsother:seq"), 0);
  const int me = static_cast<int>(gettid());
  int other = 0;
  auto write_both = [&](int32_t round) {
    trace_tfsother_seq(0, round);
    std::thread([&] {
      other = static_cast<int>(gettid());
      trace_tfsother_seq(1, round);
    }).join();
  };
  auto writers_of = [&](int32_t round) {
    std::vector<int32_t> w;
    for (const Rec& r : records(inst_))
      if (r.type == seq_id && r.i32(4) == round) w.push_back(r.i32(0));
    return w;
  };
  write_both(1);
  EXPECT_EQ(writers_of(1), (std::vector<int32_t>{0, 1}));

  ASSERT_GT(wr(path("set_event_pid"), std::to_string(me)), 0);
  EXPECT_EQ(rd(path("set_event_pid")), std::to_string(me) + "\n");
  write_both(2);
  EXPECT_EQ(writers_of(2), std::vector<int32_t>{0});

  // >> appends a thread; here one that no longer exists, plus ours again.
  ASSERT_GT(wr(path("set_event_pid"), std::to_string(other) + " " + std::to_string(me), true), 0);
  EXPECT_EQ(count(rd(path("set_event_pid")), "\n"), 2u);
  ASSERT_EQ(wr(path("set_event_pid"), ""), 0);  // > clears
  EXPECT_EQ(rd(path("set_event_pid")), "");

  ASSERT_GT(wr(path("set_event_notrace_pid"), std::to_string(me)), 0);
  write_both(3);
  EXPECT_EQ(writers_of(3), std::vector<int32_t>{1});
  ASSERT_EQ(wr(path("set_event_notrace_pid"), ""), 0);
  write_both(4);
  EXPECT_EQ(writers_of(4), (std::vector<int32_t>{0, 1}));
}

TEST_P(TracefsTest, TracingCpumaskRestrictsCpus) {
  const int ncpu = inst_->buffer().nr_cpus();
  std::string all = ncpu % 4 ? std::string(1, "137f"[ncpu % 4 - 1]) : "";
  all += std::string(static_cast<size_t>(ncpu / 4), 'f');
  if (ncpu <= 32) {
    EXPECT_EQ(rd(path("tracing_cpumask")), all + "\n");
  }
  if (ncpu < 2) GTEST_SKIP() << "needs two CPUs";
  ASSERT_GT(wr(path("set_event"), "tfstest:ping"), 0);
  ASSERT_EQ(wr(path("tracing_cpumask"), "1\n"), 2);  // CPU 0 only
  if (ncpu <= 32) {
    EXPECT_EQ(rd(path("tracing_cpumask")), std::string(all.size() - 1, '0') + "1\n");
  }
  std::vector<std::pair<int, int32_t>> attempts;  // (cpu, n) that stayed put
  std::thread([&] {
    for (int32_t i = 0; i < 200; ++i) {
      const int cpu = i % 2;
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<size_t>(cpu), &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0) continue;
      trace_tfstest_ping(i);
      if (sched_getcpu() == cpu) attempts.push_back({cpu, i});
    }
  }).join();
  if (attempts.empty()) GTEST_SKIP() << "cannot pin threads here";
  const std::vector<int32_t> got = pings(inst_);
  for (const Rec& r : records(inst_))
    if (r.type == event_id("tfstest", "ping")) {
      EXPECT_EQ(r.cpu, 0);
    }
  int on_cpu0 = 0;
  for (auto [cpu, n] : attempts) {
    const bool recorded = std::find(got.begin(), got.end(), n) != got.end();
    if (cpu == 1) {
      EXPECT_FALSE(recorded) << n;
    }
    if (cpu == 0) on_cpu0 += recorded;
  }
  EXPECT_GT(on_cpu0, 0);
}

TEST_P(TracefsTest, PerCpuStatsCountEntries) {
  ASSERT_GT(wr(path("set_event"), "tfstest:ping"), 0);
  for (int i = 0; i < 10; ++i) trace_tfstest_ping(i);
  uint64_t entries = 0;
  for (int c = 0; c < inst_->buffer().nr_cpus(); ++c) {
    const std::string s = rd(path("per_cpu/cpu" + std::to_string(c) + "/stats"));
    // The kernel's lines, in its order.
    size_t at = 0;
    for (const char* k : {"entries: ", "overrun: ", "commit overrun: ", "bytes: ", "oldest event ts: ",
                          "now ts: ", "dropped events: ", "read events: "}) {
      ASSERT_EQ(s.compare(at, strlen(k), k), 0) << k << " in\n" << s;
      at = s.find('\n', at) + 1;
    }
    EXPECT_EQ(at, s.size());
    entries += std::stoull(s.substr(s.find("entries: ") + 9));
    // ns clocks print seconds.microseconds.
    const size_t now = s.find("now ts: ");
    ASSERT_NE(now, std::string::npos);
    EXPECT_EQ(s[s.find('\n', now) - 7], '.');
  }
  EXPECT_EQ(entries, 10u);
}

TEST_P(TracefsTest, TracePipeRawGivesWholeParsablePages) {
  ASSERT_GT(wr(path("set_event"), "tfstest:ping"), 0);
  const int cpu = [] {
    const int c = sched_getcpu();
    return c < 0 ? 0 : c;
  }();
  cpu_set_t set, old;
  sched_getaffinity(0, sizeof old, &old);
  CPU_ZERO(&set);
  CPU_SET(static_cast<size_t>(cpu), &set);
  const bool pinned = sched_setaffinity(0, sizeof set, &set) == 0;
  for (int32_t i = 0; i < 500; ++i) trace_tfstest_ping(i);
  sched_setaffinity(0, sizeof old, &old);
  if (!pinned) GTEST_SKIP() << "cannot pin the thread";

  std::unique_ptr<tracefs::File> f;
  ASSERT_EQ(
      tracefs::open(path("per_cpu/cpu" + std::to_string(cpu) + "/trace_pipe_raw"), O_RDONLY | O_NONBLOCK, &f),
      0);
  const uint32_t psz = inst_->buffer().page_size(cpu);
  std::vector<uint8_t> page(psz);
  std::vector<int32_t> seen;
  const uint16_t id = event_id("tfstest", "ping");
  for (;;) {
    const long n = f->read(reinterpret_cast<char*>(page.data()), page.size());
    if (n == -EAGAIN) break;
    ASSERT_EQ(n, static_cast<long>(psz));
    rb::PageHeader h;
    std::memcpy(&h, page.data(), sizeof h);
    const auto len = static_cast<uint32_t>(h.commit & rb::kCommitLengthMask);
    ASSERT_LE(len, psz - rb::kPageHeaderSize);
    rb::PageWalker w(page.data() + rb::kPageHeaderSize, len, h.timestamp);
    rb::Entry e;
    while (w.next_data(&e)) {
      internal::CommonHeader ch;
      std::memcpy(&ch, e.payload, sizeof ch);
      if (ch.type != id) continue;
      int32_t v;
      std::memcpy(&v, e.payload + sizeof ch, 4);
      seen.push_back(v);
    }
    EXPECT_FALSE(w.corrupt());
  }
  ASSERT_EQ(seen.size(), 500u);
  for (int32_t i = 0; i < 500; ++i) {
    EXPECT_EQ(seen[static_cast<size_t>(i)], i);
  }
  EXPECT_TRUE(pings(inst_).empty());  // consumed
}

TEST_P(TracefsTest, TracePipeBlocksUntilAWriterWrites) {
  std::unique_ptr<tracefs::File> nb;
  ASSERT_EQ(tracefs::open(path("trace_pipe"), O_RDONLY | O_NONBLOCK, &nb), 0);
  char buf[256];
  EXPECT_EQ(nb->read(buf, sizeof buf), -EAGAIN);

  std::atomic<bool> reading{false};
  std::string got;
  std::thread reader([&] {
    std::unique_ptr<tracefs::File> f;
    ASSERT_EQ(tracefs::open(path("trace_pipe"), O_RDONLY, &f), 0);
    reading.store(true);
    char b[4096];
    while (got.find("wake up\n") == std::string::npos) {
      const long n = f->read(b, sizeof b);
      ASSERT_GT(n, 0);
      got.append(b, static_cast<size_t>(n));
    }
  });
  while (!reading.load()) std::this_thread::yield();
  // The reader holds the instance: it cannot be removed under it.
  if (GetParam()) {
    EXPECT_EQ(tracefs::rmdir("instances/tfs"), -EBUSY);
  }
  ASSERT_GT(wr(path("trace_marker"), "wake up"), 0);
  reader.join();
  EXPECT_NE(got.find("tracing_mark_write: wake up"), std::string::npos) << got;
  EXPECT_FALSE(has_marker(inst_, "wake up"));  // consumed
  EXPECT_EQ(nb->read(buf, sizeof buf), -EAGAIN);
}

TEST_P(TracefsTest, TracePipeKeepsWhatDoesNotFit) {
  for (int i = 0; i < 3; ++i) wr(path("trace_marker"), "marker number " + std::to_string(i));
  std::unique_ptr<tracefs::File> f;
  ASSERT_EQ(tracefs::open(path("trace_pipe"), O_RDONLY | O_NONBLOCK, &f), 0);
  std::string all;
  char b[7];
  for (long n; (n = f->read(b, sizeof b)) > 0;) all.append(b, static_cast<size_t>(n));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(all.find("marker number " + std::to_string(i)), std::string::npos);
  }
}

TEST_P(TracefsTest, EventFilesFormatIdFilterTrigger) {
  const auto* e = events::Registry::get().find("tfstest", "ping");
  EXPECT_EQ(rd(path("events/tfstest/ping/id")), std::to_string(e->id) + "\n");
  EXPECT_EQ(rd(path("events/tfstest/ping/format")), events::format_text(*e));
  EXPECT_EQ(rd(path("events/tfstest/ping/filter")), "none\n");
  EXPECT_EQ(rd(path("events/tfstest/ping/trigger")).rfind("# Available triggers:\n# traceon traceoff", 0),
            0u);
  EXPECT_EQ(rd(path("events/ftrace/print/id")), "5\n");
  EXPECT_EQ(rd(path("events/header_page")), rb::header_page_text(inst_->buffer().page_size(0)));
  EXPECT_EQ(rd(path("events/header_event")), rb::header_event_text());
  EXPECT_EQ(wr(path("events/tfstest/ping/filter"), "0\n"), 2);  // clearing is fine
  const int before = error_lines();
  EXPECT_EQ(wr(path("events/tfstest/ping/filter"), "nosuch > 3"), -EINVAL);
  EXPECT_EQ(wr(path("events/tfstest/ping/trigger"), "traceoffx"), -EINVAL);
  const std::string log = rd(path("error_log"));
  EXPECT_EQ(error_lines(), before + 2);
  EXPECT_NE(log.find("event filter parse error: error: Field not found\n  Command: nosuch > 3\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("event trigger: error: Unknown trigger command\n  Command: traceoffx\n"),
            std::string::npos)
      << log;
  EXPECT_EQ(rd(path("events/tfstest/ping/filter")), "none\n");  // the refused filter is not in force
}

TEST_P(TracefsTest, ErrorLogHasCaretAndTruncClears) {
  ASSERT_EQ(wr(path("set_event"), "tfstest:ping bogus:event"), -EINVAL);
  const std::string log = rd(path("error_log"));
  // "[ secs.usecs] event: error: No event matches\n  Command: ...\n<caret line>"
  const size_t cmd = log.find("  Command: tfstest:ping bogus:event\n");
  ASSERT_NE(cmd, std::string::npos) << log;
  EXPECT_NE(log.find("] event: error: No event matches\n"), std::string::npos) << log;
  const std::string caret = log.substr(log.find('\n', cmd) + 1);
  EXPECT_EQ(caret, std::string(11 + 13, ' ') + "^\n");  // under "bogus"
  EXPECT_EQ(rd(path("set_event")), "tfstest:ping\n");   // the good token took effect, as the kernel
  ASSERT_EQ(wr(path("error_log"), ""), 0);
  EXPECT_EQ(rd(path("error_log")), "");
}

TEST_P(TracefsTest, MarkersAndRawMarkers) {
  EXPECT_EQ(wr(path("trace_marker"), "hi there"), 8);
  EXPECT_TRUE(has_marker(inst_, "hi there"));
  const char raw[] = {1, 0, 0, 0, 'a', 'b'};
  EXPECT_EQ(wr(path("trace_marker_raw"), std::string_view(raw, sizeof raw)), 6);
  bool found = false;
  for (const Rec& r : records(inst_))
    if (r.type == events::kRawDataId && r.i32(0) == 1) found = true;
  EXPECT_TRUE(found);
  ASSERT_EQ(wr(path("options/markers"), "0"), 1);
  EXPECT_EQ(wr(path("trace_marker"), "off"), -EINVAL);
  EXPECT_FALSE(has_marker(inst_, "off"));
}

TEST(TracefsTopTest, SavedCmdlinesTgidsReadme) {
  ASSERT_NE(Instance::top(), nullptr);
  ASSERT_GT(wr("set_event", "tfstest:ping"), 0);
  std::thread([] {
    pthread_setname_np(pthread_self(), "tfs-named");
    trace_tfstest_ping(1);
  }).join();
  wr("set_event", "");
  const std::string cmd = rd("saved_cmdlines");
  EXPECT_NE(cmd.find(" tfs-named\n"), std::string::npos) << cmd;
  const std::string tg = rd("saved_tgids");
  EXPECT_NE(tg.find(" " + std::to_string(getpid()) + "\n"), std::string::npos);
  EXPECT_EQ(count(cmd, "\n"), count(tg, "\n"));
  const std::string readme = rd("README");
  for (const char* f : {"trace_pipe", "set_event", "buffer_size_kb", "tracing_cpumask", "instances"})
    EXPECT_NE(readme.find(f), std::string::npos) << f;
}

TEST(TracefsInstancesTest, MkdirRmdirErrors) {
  ASSERT_NE(Instance::top(), nullptr);
  EXPECT_EQ(tracefs::mkdir("instances/tfs_mk"), 0);
  EXPECT_EQ(tracefs::mkdir("instances/tfs_mk"), -EEXIST);
  std::vector<std::string> names;
  ASSERT_EQ(tracefs::list("instances", &names), 0);
  EXPECT_NE(std::find(names.begin(), names.end(), "tfs_mk"), names.end());
  EXPECT_EQ(tracefs::mkdir("instances/bad name"), -EINVAL);
  EXPECT_EQ(tracefs::mkdir(std::string("instances/") + std::string(300, 'a')), -ENAMETOOLONG);
  EXPECT_EQ(tracefs::mkdir("instances/" + std::string(100, 'a')), -EINVAL);
  EXPECT_EQ(tracefs::mkdir("events/foo"), -EPERM);
  EXPECT_EQ(tracefs::mkdir("instances"), -EEXIST);
  EXPECT_EQ(tracefs::rmdir("instances/nosuch"), -ENOENT);
  EXPECT_EQ(tracefs::rmdir("events"), -EPERM);
  {
    // Any open file of the instance holds it, as the kernel's trace_array_get.
    std::unique_ptr<tracefs::File> f;
    ASSERT_EQ(tracefs::open("instances/tfs_mk/tracing_on", O_RDONLY, &f), 0);
    EXPECT_EQ(tracefs::rmdir("instances/tfs_mk"), -EBUSY);
  }
  EXPECT_EQ(tracefs::rmdir("instances/tfs_mk/"), 0);
  EXPECT_EQ(tracefs::rmdir("instances/tfs_mk"), -ENOENT);
  tracefs::Stat st;
  EXPECT_EQ(tracefs::stat("instances/tfs_mk/trace", &st), -ENOENT);
}

}  // namespace
}  // namespace usrtrace::tracefs_test
