// The function and function_graph tracers through their control files,
// driving the -finstrument-functions fixture (instrumented.cc), whose
// functions count their own calls.
#include <cpuid.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "function/control_internal.h"
#include "function/core.h"
#include "function/instrumented.h"
#include "instance/instance.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "tracefs/tracefs_test_util.h"
#include "usrtrace/latency.h"

namespace usrtrace {
namespace {

using tracefs_test::rd;
using tracefs_test::Rec;
using tracefs_test::records;
using tracefs_test::wr;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') out.push_back(l);
  return out;
}

// A graph line's duration unit and its calls column, without the padding
// between them, which a duration mark (+ ! # ...) takes from:
// " 1) + 12.345 us   |    f();" -> " us |    f();".
std::string calls_of(const std::string& line) {
  const size_t us = line.find(" us "), bar = line.find('|');
  if (us == std::string::npos || bar == std::string::npos || bar < us) return "no duration: " + line;
  return " us " + line.substr(bar);
}

// Every test runs on the top instance and on a new one: each instance has
// its own tracer, lists and options (function and function_graph are
// allowed in instances, as in the kernel).
class FunctionTest : public testing::InstanceTest {
 protected:
  void SetUp() override {
    InstanceTest::SetUp();
    if (HasFatalFailure()) return;
    inst_ = inst();
  }
  void TearDown() override {
    wr(p("current_tracer"), "nop");
    InstanceTest::TearDown();
  }
  std::string p(const std::string& f) const { return path(f); }
  // Entries (funcgraph_entry) and exits (funcgraph_exit) of `fn` recorded.
  std::pair<int, int> graph_counts(uint64_t fn) {
    int in = 0, out = 0;
    for (const Rec& r : records(inst_)) {
      uint64_t f = 0;
      if (r.payload.size() >= 8) std::memcpy(&f, r.payload.data(), 8);
      if (f != fn) continue;
      in += r.type == function::kGraphEntryId;
      out += r.type == function::kGraphExitId;
    }
    return {in, out};
  }
  // The graph's records in order: entry or exit, function, depth.
  struct GraphRec {
    bool entry;
    uint64_t func;
    uint32_t depth;
  };
  std::vector<GraphRec> graph_records() {
    std::vector<GraphRec> out;
    for (const Rec& r : records(inst_)) {
      if ((r.type != function::kGraphEntryId && r.type != function::kGraphExitId) || r.payload.size() < 12)
        continue;
      GraphRec g{r.type == function::kGraphEntryId, 0, 0};
      std::memcpy(&g.func, r.payload.data(), 8);
      std::memcpy(&g.depth, r.payload.data() + 8, 4);
      out.push_back(g);
    }
    return out;
  }
  int function_records(uint64_t fn) {
    int n = 0;
    for (const Rec& r : records(inst_)) {
      uint64_t f = 0;
      if (r.payload.size() >= 8) std::memcpy(&f, r.payload.data(), 8);
      n += r.type == function::kFunctionId && f == fn;
    }
    return n;
  }
  instance::Instance* inst_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, FunctionTest, ::testing::Values("", "fn_new"), testing::top_or_new);

uint64_t addr(int (*f)(int)) { return reinterpret_cast<uint64_t>(f); }

TEST_P(FunctionTest, TracersAndFilesAreListed) {
  // A section kind is the process's and is never removed: the one
  // ALatencyTracersMaxTraceHoldsTheSectionsFunctions makes is listed from
  // then on, so it is made here too, for the list to be the same in any
  // order and on every --gtest_repeat.
  ASSERT_NE(usrtrace_section_kind_get("fn_section"), nullptr);
  EXPECT_EQ(rd(p("available_tracers")),
            "timerlat function_graph wakeup_rt wakeup sigsoff section section_fn_section function nop\n");
  EXPECT_EQ(rd(p("current_tracer")), "nop\n");
  const std::string avail = rd("available_filter_functions");
  for (const char* f : {"fxt_leaf\n", "fxt_outer\n", "fxt_recurse\n", "fxt_catcher\n"})
    EXPECT_EQ(count(avail, f), 1) << f;
  // The library's own functions and gtest's (not instrumented) are not there.
  EXPECT_EQ(count(avail, "usrtrace::"), 0);
  EXPECT_EQ(count(avail, "testing::"), 0);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "#### all functions enabled ####\n");
  EXPECT_EQ(rd(p("set_graph_function")), "#### all functions enabled ####\n");
  EXPECT_EQ(rd(p("set_ftrace_notrace")), "#### no functions disabled ####\n");
  EXPECT_EQ(rd(p("set_graph_notrace")), "#### no functions disabled ####\n");
  EXPECT_EQ(wr(p("current_tracer"), "function"), 8);
  EXPECT_EQ(rd(p("current_tracer")), "function\n");
  EXPECT_EQ(wr(p("current_tracer"), "blk"), -EINVAL);
  EXPECT_NE(rd(p("error_log")).find("Unknown tracer"), std::string::npos);
}

TEST_P(FunctionTest, FunctionTracerRecordsEachCallWithItsParent) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf"), 8);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_leaf\n");
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  fxt_calls_leaf = 0;
  fxt_outer(3);
  fxt_other(5);
  const std::string t = rd(p("trace"));
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  fxt_outer(3);  // not traced any more
  EXPECT_EQ(function_records(addr(fxt_leaf)), 4);
  EXPECT_EQ(function_records(addr(fxt_outer)), 0);
  EXPECT_EQ(t.rfind("# tracer: function\n", 0), 0u) << t;
  EXPECT_EQ(count(t, ": fxt_leaf <-fxt_outer\n"), 3) << t;
  EXPECT_EQ(count(t, " fxt_leaf <-fxt_other\n"), 1) << t;
}

// irqsoff's function-trace: a latency tracer traces the functions of its
// instance as `function` does, and the max trace holds those of the section.
TEST_P(FunctionTest, ALatencyTracersMaxTraceHoldsTheSectionsFunctions) {
  usrtrace_section_kind* k = usrtrace_section_kind_get("fn_section");
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf"), 8);
  ASSERT_GT(wr(p("current_tracer"), "section_fn_section"), 0);
  fxt_other(1);  // before the section: not in its trace
  const uint64_t s = usrtrace_section_begin(k);
  fxt_outer(3);
  usrtrace_section_end(k, s);
  fxt_other(1);  // after it
  const std::string t = rd(p("trace"));
  EXPECT_EQ(t.rfind("# tracer: section_fn_section\n", 0), 0u) << t;
  EXPECT_EQ(count(t, ": fxt_leaf <-fxt_outer\n"), 3) << t;
  EXPECT_EQ(count(t, "fxt_leaf <-fxt_other"), 0) << t;
  EXPECT_NE(t.find("# latency: "), std::string::npos) << t;
  // The live buffer goes on from the swap: the call after the section.
  EXPECT_EQ(function_records(addr(fxt_leaf)), 1);
}

TEST_P(FunctionTest, GraphNestsCallsAndFoldsLeaves) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_outer fxt_leaf"), 18);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  fxt_outer(2);
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(1, 1));
  EXPECT_EQ(graph_counts(addr(fxt_leaf)), std::make_pair(2, 2));
  // The graph layout needs the tracer: set it again to read.
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  const std::string t = rd(p("trace"));
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  const std::vector<std::string> l = lines(t);
  ASSERT_EQ(l.size(), 4u) << t;
  EXPECT_NE(t.find("# tracer: function_graph\n"), std::string::npos);
  EXPECT_NE(t.find("# CPU  DURATION                  FUNCTION CALLS\n"), std::string::npos) << t;
  // " 0)               |  fxt_outer() {"
  EXPECT_EQ(l[0].substr(l[0].find(')')), ")               |  fxt_outer() {") << t;
  EXPECT_EQ(calls_of(l[1]), " us |    fxt_leaf();") << t;
  EXPECT_EQ(calls_of(l[2]), " us |    fxt_leaf();") << t;
  EXPECT_NE(l[3].find(" us "), std::string::npos) << t;
  EXPECT_EQ(l[3].substr(l[3].size() - 4), "|  }") << t;
  EXPECT_EQ(l[3].find("/*"), std::string::npos) << t;
}

TEST_P(FunctionTest, SeveralInstancesEachWithItsTracerAndFilter) {
  int err = 0;
  instance::Instance* b = instance::Instance::create("fn_mux_b", &err);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf"), 8);
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  ASSERT_EQ(wr("instances/fn_mux_b/set_ftrace_filter", "fxt_outer"), 9);
  ASSERT_EQ(wr("instances/fn_mux_b/current_tracer", "function_graph"), 14);
  fxt_outer(4);
  EXPECT_EQ(function_records(addr(fxt_leaf)), 4);
  EXPECT_EQ(function_records(addr(fxt_outer)), 0);
  int outer_in = 0, leaf_any = 0;
  for (const Rec& r : records(b)) {
    uint64_t f = 0;
    std::memcpy(&f, r.payload.data(), 8);
    outer_in += r.type == function::kGraphEntryId && f == addr(fxt_outer);
    leaf_any += f == addr(fxt_leaf);
  }
  EXPECT_EQ(outer_in, 1);
  EXPECT_EQ(leaf_any, 0);
  EXPECT_EQ(rd("enabled_functions"), "fxt_leaf (1)\nfxt_outer (1)\n");
  ASSERT_EQ(wr("instances/fn_mux_b/current_tracer", "nop"), 3);
  EXPECT_EQ(instance::Instance::destroy("fn_mux_b"), 0);
}

TEST_P(FunctionTest, FilterGlobsRemovalNotraceAndErrors) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_*"), 5);
  EXPECT_NE(rd(p("set_ftrace_filter")).find("fxt_outer\n"), std::string::npos);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_o*", true), 7);
  std::string f = rd(p("set_ftrace_filter"));
  EXPECT_EQ(count(f, "fxt_outer\n") + count(f, "fxt_other\n"), 0) << f;
  EXPECT_EQ(count(f, "fxt_leaf\n"), 1) << f;
  ASSERT_EQ(wr(p("set_ftrace_filter"), "*recurse", true), 8);
  EXPECT_EQ(count(rd(p("set_ftrace_filter")), "fxt_recurse\n"), 1);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "*cur*"), 5);  // '>' replaces
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_recurse\n");
  // :mod: the test program's own file name.
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  const std::string prog = std::string(exe, static_cast<size_t>(n))
                               .substr(std::string(exe, static_cast<size_t>(n)).rfind('/') + 1);
  ASSERT_GT(wr(p("set_ftrace_filter"), "fxt_leaf:mod:" + prog), 0);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_leaf\n");
  EXPECT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf:mod:libnothere"), -EINVAL);
  // Nothing matches: EINVAL and an error_log line; the list is unchanged.
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf"), 8);
  EXPECT_EQ(wr(p("set_ftrace_filter"), "no_such_function_anywhere", true), -EINVAL);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_leaf\n");
  EXPECT_NE(rd(p("error_log")).find("No traceable function matches"), std::string::npos);
  // set_ftrace_notrace wins over the filter.
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf fxt_outer"), 18);
  ASSERT_EQ(wr(p("set_ftrace_notrace"), "fxt_leaf"), 8);
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  fxt_outer(2);
  EXPECT_EQ(function_records(addr(fxt_outer)), 1);
  EXPECT_EQ(function_records(addr(fxt_leaf)), 0);
  // Emptying the filter traces everything (but the notrace list).
  ASSERT_EQ(wr(p("set_ftrace_filter"), ""), 0);
  fxt_other(1);
  EXPECT_EQ(function_records(addr(fxt_other)), 1);
  EXPECT_EQ(function_records(addr(fxt_leaf)), 0);
}

TEST_P(FunctionTest, GraphFunctionNotraceAndMaxDepth) {
  // set_graph_function: only calls inside fxt_outer are graphed.
  ASSERT_EQ(wr(p("set_graph_function"), "fxt_outer"), 9);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  fxt_other(1);  // calls fxt_leaf, outside fxt_outer
  fxt_outer(3);
  EXPECT_EQ(graph_counts(addr(fxt_other)), std::make_pair(0, 0));
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(1, 1));
  EXPECT_EQ(graph_counts(addr(fxt_leaf)), std::make_pair(3, 3));
  ASSERT_EQ(wr(p("trace"), ""), 0);
  // set_graph_notrace: fxt_outer and what it calls are left out.
  ASSERT_EQ(wr(p("set_graph_function"), ""), 0);
  ASSERT_EQ(wr(p("set_graph_notrace"), "fxt_outer"), 9);
  fxt_outer(3);
  fxt_other(1);
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(0, 0));
  EXPECT_EQ(graph_counts(addr(fxt_leaf)), std::make_pair(1, 1));
  EXPECT_EQ(graph_counts(addr(fxt_other)), std::make_pair(1, 1));
  ASSERT_EQ(wr(p("trace"), ""), 0);
  // max_graph_depth 1: only the outermost traced call.
  ASSERT_EQ(wr(p("set_graph_notrace"), ""), 0);
  ASSERT_EQ(wr(p("max_graph_depth"), "1"), 1);
  EXPECT_EQ(rd(p("max_graph_depth")), "1\n");
  fxt_outer(3);
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(1, 1));
  EXPECT_EQ(graph_counts(addr(fxt_leaf)), std::make_pair(0, 0));
  EXPECT_EQ(wr(p("max_graph_depth"), "x"), -EINVAL);
}

// -finstrument-functions calls the exit hook of every call, recorded or
// not: a recursive call left out (past max_graph_depth, under
// set_graph_notrace) must not take its recorded caller's frame at its exit.
// The patched path's case: CliRecord.MaxGraphDepthOfARecursiveProgramIsUftracesDepth.
TEST_P(FunctionTest, UnrecordedRecursiveCallsKeepTheirCallersDepth) {
  // The graph's records of fxt_fib and fxt_leaf, in order: "> fib 0" is an
  // entry at depth 0, "< leaf 1" an exit at depth 1.
  auto graph = [&] {
    std::vector<std::string> out;
    for (const GraphRec& g : graph_records()) {
      const char* name = g.func == addr(fxt_fib) ? "fib" : g.func == addr(fxt_leaf) ? "leaf" : "other";
      out.push_back(std::string(g.entry ? "> " : "< ") + name + " " + std::to_string(g.depth));
    }
    return out;
  };
  // max_graph_depth 2: fib(6) and what it calls itself (fib(5), fib(4),
  // fxt_leaf), as the kernel and uftrace -D 2 record them; nothing below.
  ASSERT_EQ(wr(p("max_graph_depth"), "2"), 1);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  fxt_calls_fib = 0;
  EXPECT_EQ(fxt_fib(6), 8);
  EXPECT_EQ(fxt_calls_fib, 25);
  EXPECT_EQ(graph(), (std::vector<std::string>{"> fib 0", "> fib 1", "< fib 1", "> fib 1", "< fib 1",
                                               "> leaf 1", "< leaf 1", "< fib 0"}));
  // set_graph_notrace fxt_fib: neither it nor anything below it, its
  // fxt_leaf calls after its recursive ones included.
  ASSERT_EQ(wr(p("trace"), ""), 0);
  ASSERT_EQ(wr(p("max_graph_depth"), "0"), 1);
  ASSERT_EQ(wr(p("set_graph_notrace"), "fxt_fib"), 7);
  EXPECT_EQ(fxt_fib(6), 8);
  fxt_leaf(1);
  EXPECT_EQ(graph(), (std::vector<std::string>{"> leaf 0", "< leaf 0"}));
}

TEST_P(FunctionTest, TracingThreshRecordsOnlyLongCalls) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_outer fxt_leaf"), 18);
  ASSERT_EQ(wr(p("tracing_thresh"), "1000000"), 7);  // 1 s: nothing here is that long
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  fxt_outer(3);
  EXPECT_TRUE(records(inst_).empty());
  // 0 us records everything; with a threshold the entries are never written.
  ASSERT_EQ(wr(p("tracing_thresh"), "0"), 1);
  fxt_outer(1);
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(1, 1));
}

TEST_P(FunctionTest, RecursionTenThousandDeepPairsUp) {
  ASSERT_EQ(wr(p("buffer_size_kb"), "4096"), 4);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_recurse"), 11);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  fxt_calls_recurse = 0;
  fxt_recurse(10000);
  EXPECT_EQ(fxt_calls_recurse, 10000);
  EXPECT_EQ(graph_counts(addr(fxt_recurse)), std::make_pair(10000, 10000));
  // Depths: entries 0..9999, each exit at its entry's.
  std::map<uint32_t, int> open;
  for (const Rec& r : records(inst_)) {
    uint32_t d = 0;
    std::memcpy(&d, r.payload.data() + 8, 4);
    open[d] += r.type == function::kGraphEntryId ? 1 : -1;
  }
  EXPECT_EQ(open.size(), 10000u);
  for (const auto& [d, n] : open) EXPECT_EQ(n, 0) << d;
}

TEST_P(FunctionTest, ExceptionsThroughTracedFramesKeepTheGraph) {
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  EXPECT_EQ(fxt_catcher(5), 4);
  fxt_outer(1);  // after the catch, calls still pair
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  int depth = 0, min_depth = 0;
  for (const Rec& r : records(inst_)) {
    if (r.type == function::kGraphEntryId) ++depth;
    if (r.type == function::kGraphExitId) --depth;
    min_depth = std::min(min_depth, depth);
  }
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(min_depth, 0);
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(1, 1));
  EXPECT_EQ(graph_counts(addr(fxt_catcher)), std::make_pair(1, 1));
}

TEST_P(FunctionTest, ThreadsAndPidFilter) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_outer"), 9);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([] {
      for (int k = 0; k < 100; ++k) fxt_outer(1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(400, 400));
  ASSERT_EQ(wr(p("trace"), ""), 0);
  // set_ftrace_pid: only this thread.
  const std::string me = std::to_string(gettid());
  ASSERT_EQ(wr(p("set_ftrace_pid"), me), static_cast<long>(me.size()));
  EXPECT_EQ(rd(p("set_ftrace_pid")), me + "\n");
  std::thread([] { fxt_outer(1); }).join();
  fxt_outer(1);
  EXPECT_EQ(graph_counts(addr(fxt_outer)), std::make_pair(1, 1));
  for (const Rec& r : records(inst_)) EXPECT_EQ(r.pid, gettid());
  EXPECT_EQ(wr(p("set_ftrace_pid"), "x"), -EINVAL);
}

// One function_graph instance and nothing else takes the hooks' fast path;
// a setting that needs the general path turns it off. A call that enters by
// one path and returns by the other pairs up all the same.
TEST_P(FunctionTest, FastAndGeneralPathsPopEachOthersFrames) {
  static std::string depth_file;
  depth_file = p("max_graph_depth");
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  EXPECT_EQ(function::g_fast.load(), static_cast<uint32_t>(inst_->slot()) + 1);
  fxt_around([] { ASSERT_EQ(wr(depth_file, "100"), 3); });  // in by the fast path, out by the general
  EXPECT_EQ(function::g_fast.load(), 0u);
  fxt_around([] { ASSERT_EQ(wr(depth_file, "0"), 1); });  // in by the general path, out by the fast
  EXPECT_NE(function::g_fast.load(), 0u);
  fxt_around([] {});
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  EXPECT_EQ(graph_counts(reinterpret_cast<uint64_t>(&fxt_around)), std::make_pair(3, 3));
  EXPECT_EQ(graph_counts(addr(fxt_leaf)), std::make_pair(3, 3));
  // Depths: fxt_around at 0, its fxt_leaf at 1, entries and exits alike.
  for (const GraphRec& g : graph_records())
    EXPECT_EQ(g.depth, g.func == addr(fxt_leaf) ? 1u : 0u) << std::hex << g.func;
  // Two instances, a function tracer, a profiler, a command or a pid filter:
  // the general path.
  const testing::OtherInstance other(top(), "fn_other");
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf:traceon"), 16);
  EXPECT_EQ(function::g_fast.load(), 0u);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_leaf:traceon"), 17);
  EXPECT_NE(function::g_fast.load(), 0u);
  const std::string me = std::to_string(gettid());
  ASSERT_EQ(wr(p("set_ftrace_pid"), me), static_cast<long>(me.size()));
  EXPECT_EQ(function::g_fast.load(), 0u);
  ASSERT_EQ(wr(p("set_ftrace_pid"), ""), 0);
  EXPECT_NE(function::g_fast.load(), 0u);
  ASSERT_EQ(wr(other.path("current_tracer"), "function"), 8);
  EXPECT_EQ(function::g_fast.load(), 0u);
  ASSERT_EQ(wr(other.path("current_tracer"), "nop"), 3);
  EXPECT_NE(function::g_fast.load(), 0u);
}

// A shared object built with no tracing flag (function/plain/regs_fixture.c)
// is traced through the patch engine. Its caller keeps values in every
// call-clobbered register across a call of a traced function, as gcc's
// -fipa-ra lets a caller do: function_graph's return hook (the full one)
// must give every one of them back, the vector state whole. Then the
// object is unloaded and loaded again while traced: the old sites are
// forgotten (their code is gone) and the new copy is armed.
TEST_P(FunctionTest, APlainFunctionsCallerKeepsEveryRegisterAcrossTheReturn) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX: the fixture loads ymm registers";
  for (int load = 0; load < 2; ++load) {
    void* h = dlopen(USRTRACE_PLAIN_MODULE, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    auto* callee = reinterpret_cast<long (*)(long)>(dlsym(h, "plain_regs_callee"));
    auto* call = reinterpret_cast<void (*)(const uint64_t*, uint64_t*)>(
        dlsym(h, avx512 ? "plain_regs_call_zmm" : "plain_regs_call_ymm"));
    ASSERT_NE(callee, nullptr);
    ASSERT_NE(call, nullptr);
    if (load == 0) {
      ASSERT_GT(wr(p("set_ftrace_filter"), "plain_regs_callee"), 0);
      ASSERT_GT(wr(p("current_tracer"), "function_graph"), 0);
    }
    EXPECT_NE(rd("enabled_functions").find("plain_regs_callee (1)\tpatch:detour\n"), std::string::npos)
        << rd("enabled_functions");
    std::vector<uint64_t> in(2632 / 8), out(2632 / 8, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = 0x0101010101010101ull * (i % 200 + 1) + i;
    const size_t vec = avx512 ? 32 * 64 + 8 * 8 : 16 * 32;
    const auto before = graph_counts(reinterpret_cast<uint64_t>(callee));
    call(in.data(), out.data());
    for (size_t r = 0; r < 8; ++r)
      EXPECT_EQ(out[r], in[r]) << "general register " << r << " changed across the call";
    EXPECT_EQ(std::memcmp(in.data() + 8, out.data() + 8, vec), 0)
        << "a vector register changed across the call";
    EXPECT_EQ(out[2624 / 8], in[7] + 1) << "the callee's return value";
    EXPECT_EQ(graph_counts(reinterpret_cast<uint64_t>(callee)),
              std::make_pair(before.first + 1, before.second + 1))
        << "load " << load;
    ASSERT_EQ(dlclose(h), 0);  // unloaded while traced
  }
  ASSERT_GT(wr(p("current_tracer"), "nop"), 0);
  wr(p("set_ftrace_filter"), "");
}

// An empty filter ("all functions") takes the functions with a compiler
// hook and the main program's plain ones, not a shared object's plain
// functions: those are taken when a filter names them, here by ":mod:".
TEST_P(FunctionTest, AnEmptyFilterLeavesALibrarysPlainFunctionsOut) {
  void* h = dlopen(USRTRACE_PLAIN_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto* callee = reinterpret_cast<long (*)(long)>(dlsym(h, "plain_regs_callee"));
  ASSERT_NE(callee, nullptr);
  EXPECT_NE(rd("available_filter_functions").find("plain_regs_callee [libplain_regs_module.so]"),
            std::string::npos);
  ASSERT_GT(wr(p("current_tracer"), "function"), 0);
  EXPECT_EQ(callee(1), 2);
  EXPECT_EQ(function_records(reinterpret_cast<uint64_t>(callee)), 0);
  EXPECT_EQ(rd("enabled_functions").find("plain_regs_callee"), std::string::npos);
  ASSERT_GT(wr(p("set_ftrace_filter"), "*:mod:libplain_regs_module"), 0);
  EXPECT_EQ(callee(1), 2);
  EXPECT_EQ(function_records(reinterpret_cast<uint64_t>(callee)), 1);
  ASSERT_GT(wr(p("current_tracer"), "nop"), 0);
  wr(p("set_ftrace_filter"), "");
  ASSERT_EQ(dlclose(h), 0);
}

TEST_P(FunctionTest, NoTracerNoRecordAndNoShadowStack) {
  fxt_outer(3);
  EXPECT_TRUE(records(inst_).empty());
  EXPECT_EQ(function::g_tracing.load(), 0u);
}

// A library loaded while nothing traces costs no read of the symbol tables
// (libtraceevent alone dlopens 20 plugins into `usrtrace report`); its
// functions are listed and traced once asked for. With a tracer set, a load
// patches the library's sites at once, per the filter.
TEST_P(FunctionTest, ALibraryLoadedWhileNothingTracesIsReadWhenAskedFor) {
  rd("available_filter_functions");
  const uint64_t reads = function::function_table_reads();
  void* h = dlopen(USRTRACE_PATCHABLE_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_EQ(function::function_table_reads(), reads);
  EXPECT_NE(rd("available_filter_functions").find("fixture_add ["), std::string::npos);
  EXPECT_EQ(function::function_table_reads(), reads + 1);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fixture_add"), 11);
  ASSERT_GT(wr(p("current_tracer"), "function"), 0);
  auto add = reinterpret_cast<int (*)(int, int)>(dlsym(h, "fixture_add"));
  EXPECT_EQ(add(20, 22), 42);
  EXPECT_EQ(function_records(reinterpret_cast<uint64_t>(add)), 1);
  ASSERT_GT(wr(p("current_tracer"), "nop"), 0);
  ASSERT_EQ(dlclose(h), 0);
  EXPECT_EQ(rd("available_filter_functions").find("fixture_add ["), std::string::npos);

  // Loaded again under the function tracer: traced with no file written.
  ASSERT_GT(wr(p("current_tracer"), "function"), 0);
  const uint64_t before = function::function_table_reads();
  h = dlopen(USRTRACE_PATCHABLE_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_EQ(function::function_table_reads(), before + 1);
  add = reinterpret_cast<int (*)(int, int)>(dlsym(h, "fixture_add"));
  const int was = function_records(reinterpret_cast<uint64_t>(add));
  EXPECT_EQ(add(1, 2), 3);
  EXPECT_EQ(function_records(reinterpret_cast<uint64_t>(add)), was + 1);
  ASSERT_GT(wr(p("current_tracer"), "nop"), 0);
  ASSERT_EQ(dlclose(h), 0);
}

// ---- Function commands of set_ftrace_filter.

TEST_P(FunctionTest, TraceoffCommandStopsTracingWithOrWithoutATracer) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf"), 8);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_other:traceoff", true), 18);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_leaf\nfxt_other:traceoff:unlimited\n");
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  fxt_outer(2);  // two leaves recorded
  fxt_other(1);  // off at fxt_other's entry: its leaf is not recorded
  fxt_outer(2);
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  EXPECT_EQ(function_records(addr(fxt_leaf)), 2);
  // A command is not part of the filter: '>' keeps it, '!' removes it.
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf fxt_outer"), 18);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_leaf\nfxt_outer\nfxt_other:traceoff:unlimited\n");
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_other:traceoff", true), 19);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "fxt_leaf\nfxt_outer\n");
  ASSERT_EQ(wr(p("tracing_on"), "1"), 1);
  fxt_other(1);
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  // With no tracer at all, the command still acts.
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_recurse:traceoff"), 20);
  EXPECT_EQ(rd(p("set_ftrace_filter")), "#### all functions enabled ####\nfxt_recurse:traceoff:unlimited\n");
  EXPECT_NE(function::g_tracing.load(), 0u);
  fxt_outer(1);
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  fxt_recurse(3);
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_recurse:traceoff"), 21);
  EXPECT_EQ(function::g_tracing.load(), 0u);
}

TEST_P(FunctionTest, CountedTraceonAndTraceoffSpendCountsOnlyOnChanges) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_outer:traceon:1 fxt_other:traceoff:2"), 40);
  EXPECT_EQ(rd(p("set_ftrace_filter")),
            "#### all functions enabled ####\nfxt_outer:traceon:count=1\nfxt_other:traceoff:count=2\n");
  fxt_outer(1);  // already on: no change, the count stays
  EXPECT_EQ(rd(p("set_ftrace_filter")).find("fxt_outer:traceon:count=1\n") != std::string::npos, true);
  fxt_other(1);  // off (count 2 -> 1)
  fxt_other(1);  // already off: stays 1
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  fxt_outer(1);  // on (1 -> 0)
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  fxt_other(1);  // off (1 -> 0)
  fxt_outer(1);  // traceon spent
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  EXPECT_EQ(rd(p("set_ftrace_filter")),
            "#### all functions enabled ####\nfxt_outer:traceon:count=0\nfxt_other:traceoff:count=0\n");
  // Written again: the new count.
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_outer:traceon:0x10", true), 22);
  EXPECT_NE(rd(p("set_ftrace_filter")).find("fxt_outer:traceon:count=16\n"), std::string::npos);
  // The traceon that turns tracing on is recorded by the function tracer.
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  fxt_outer(1);
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  EXPECT_EQ(function_records(addr(fxt_outer)), 1);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_o*:traceon !fxt_other:traceoff"), 35);
}

TEST_P(FunctionTest, CommandErrorsAreLogged) {
  struct Case {
    const char* file;
    const char* text;
    const char* message;
  } cases[] = {
      {"set_ftrace_filter", "fxt_leaf:bogus", "Unknown function command"},
      {"set_ftrace_filter", "fxt_leaf:hist", "Unknown function command"},  // a trigger, not a command
      {"set_ftrace_filter", "fxt_leaf:enable_hist:fxt:ev", "Unknown function command"},
      {"set_ftrace_filter", "fxt_leaf:traceoff:abc", "Invalid count"},
      {"set_ftrace_filter", "fxt_leaf:traceoff:-1", "Invalid count"},
      {"set_ftrace_filter", "fxt_leaf:traceoff:1:2", "Invalid count"},
      {"set_ftrace_filter", "fxt_leaf:enable_event:nosys:noev", "No event matches"},
      {"set_ftrace_filter", "fxt_leaf:enable_event:tfstest", "No event matches"},
      {"set_ftrace_filter", "no_such_fn:traceoff", "No traceable function matches"},
      {"set_ftrace_notrace", "fxt_leaf:traceoff", "only work in set_ftrace_filter"},
      {"set_graph_function", "fxt_leaf:stacktrace", "only work in set_ftrace_filter"},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(wr(p(c.file), c.text, true), -EINVAL) << c.text;
    const std::string log = rd(p("error_log"));
    EXPECT_NE(log.find(c.message), std::string::npos) << c.text << "\n" << log;
    EXPECT_NE(log.find(c.text), std::string::npos) << log;
  }
  EXPECT_EQ(rd(p("set_ftrace_filter")), "#### all functions enabled ####\n");
  EXPECT_EQ(function::g_tracing.load(), 0u);
}

TEST_P(FunctionTest, EnableEventAndDisableEventCommands) {
  const std::string ev = p("events/tfstest/ping/");
  ASSERT_EQ(wr(p("set_ftrace_filter"),
               "fxt_outer:enable_event:tfstest:ping:1 fxt_other:disable_event:tfstest:ping"),
            74);
  EXPECT_EQ(rd(ev + "enable"), "0*\n");  // soft mode, as the kernel shows it
  EXPECT_EQ(rd(p("set_ftrace_filter")),
            "#### all functions enabled ####\nfxt_outer:enable_event:tfstest:ping:count=1\n"
            "fxt_other:disable_event:tfstest:ping:unlimited\n");
  trace_tfstest_ping(1);  // not enabled yet
  fxt_outer(1);
  EXPECT_EQ(rd(ev + "enable"), "1*\n");
  trace_tfstest_ping(2);
  fxt_other(1);
  trace_tfstest_ping(3);
  fxt_outer(1);  // count spent
  trace_tfstest_ping(4);
  std::vector<int> seen;
  for (const Rec& r : records(inst_))
    if (r.type == tracefs_test::event_id("tfstest", "ping")) seen.push_back(r.i32(0));
  EXPECT_EQ(seen, std::vector<int>{2});
  ASSERT_EQ(wr(p("set_ftrace_filter"),
               "!fxt_outer:enable_event:tfstest:ping !fxt_other:disable_event:tfstest:ping"),
            74);
  EXPECT_EQ(rd(ev + "enable"), "0\n");
}

TEST_P(FunctionTest, StacktraceCommandAndFuncStackTraceNameTheCallers) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf:stacktrace:2"), 21);
  fxt_outer(3);  // two stacks, from fxt_outer
  EXPECT_EQ(rd(p("set_ftrace_filter")), "#### all functions enabled ####\nfxt_leaf:stacktrace:count=0\n");
  std::string t = rd(p("trace"));
  EXPECT_EQ(count(t, "<user stack trace>"), 2) << t;
  EXPECT_EQ(count(t, " => fxt_outer+0x"), 2) << t;
  // The first frame is the traced function's caller.
  EXPECT_NE(t.find("<user stack trace>\n => fxt_outer+0x"), std::string::npos) << t;
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_leaf:stacktrace"), 20);
  ASSERT_EQ(wr(p("trace"), ""), 0);

  // func_stack_trace: every function record is followed by its stack.
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf"), 8);
  ASSERT_EQ(wr(p("options/func_stack_trace"), "1"), 1);
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  fxt_other(1);
  fxt_outer(2);
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  t = rd(p("trace"));
  EXPECT_EQ(count(t, "<user stack trace>"), 3) << t;
  EXPECT_NE(t.find("fxt_leaf <-fxt_other\n"), std::string::npos) << t;
  EXPECT_EQ(count(t, "<user stack trace>\n => fxt_other+0x"), 1) << t;
  EXPECT_EQ(count(t, "<user stack trace>\n => fxt_outer+0x"), 2) << t;
  ASSERT_EQ(wr(p("options/func_stack_trace"), "0"), 1);
}

TEST_P(FunctionTest, SnapshotCommandKeepsTheBufferAtTheCall) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_leaf fxt_other:snapshot:1"), 29);
  EXPECT_NE(rd(p("set_ftrace_filter")).find("fxt_other:snapshot:count=1\n"), std::string::npos);
  ASSERT_EQ(wr(p("current_tracer"), "function"), 8);
  fxt_outer(2);
  fxt_other(1);  // snapshot: the two leaves of fxt_outer, not fxt_other's
  fxt_outer(3);
  ASSERT_EQ(wr(p("current_tracer"), "nop"), 3);
  const std::string snap = rd(p("snapshot"));
  EXPECT_EQ(count(snap, "fxt_leaf <-fxt_outer"), 2) << snap;
  EXPECT_EQ(count(snap, "fxt_leaf <-fxt_other"), 0) << snap;
  EXPECT_EQ(count(rd(p("trace")), "fxt_leaf <-"), 4);
}

TEST_P(FunctionTest, DumpCommandWritesTheTopBufferOnce) {
  char path[] = "/tmp/usrtrace_fn_dump_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_GT(wr("ftrace_dump_on_oops_file", path), 0);
  // Where to dump is the top's setting only (the kernel's is a sysctl); an
  // instance's dump command follows it.
  if (!top()) {
    std::string out;
    EXPECT_EQ(tracefs::read_file(p("ftrace_dump_on_oops_file"), &out), -ENOENT);
  }
  ASSERT_GT(instance::Instance::top()->write_marker("before the dump"), 0);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_other:dump"), 14);
  EXPECT_NE(rd(p("set_ftrace_filter")).find("fxt_other:dump:count=1\n"), std::string::npos);
  fxt_other(1);
  fxt_other(1);  // once only
  ASSERT_EQ(wr("ftrace_dump_on_oops_file", ""), 0);
  std::string dumped;
  {
    FILE* f = fopen(path, "r");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) dumped.append(buf, n);
    fclose(f);
  }
  unlink(path);
  EXPECT_EQ(count(dumped, "before the dump"), 1) << dumped;
  EXPECT_EQ(count(dumped, "Dumping ftrace buffer"), 1) << dumped;
  EXPECT_NE(rd(p("set_ftrace_filter")).find("fxt_other:dump:count=0\n"), std::string::npos);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "!fxt_other:dump"), 15);
}

// A signal handler's calls: marked with 'h', framed in the graph as the
// kernel frames interrupts, left out with funcgraph-irqs off.
TEST_P(FunctionTest, SignalHandlersAreMarkedAndFuncgraphIrqsLeavesThemOut) {
#if USRTRACE_TEST_TSAN
  GTEST_SKIP() << "ThreadSanitizer calls handlers from its own wrapper: they are not recognised";
#endif
  struct sigaction sa {
  }, old{};
  sa.sa_handler = fxt_sig_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_raiser fxt_sig_handler fxt_leaf"), 35);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  fxt_raiser(SIGUSR1);
  const std::string t = rd(p("trace"));
  const std::vector<std::string> l = lines(t);
  ASSERT_EQ(l.size(), 7u) << t;
  EXPECT_EQ(l[0].substr(l[0].find(')')), ")               |  fxt_raiser() {") << t;
  EXPECT_EQ(l[1].substr(l[1].find(')')), ")   ==========> |") << t;
  EXPECT_EQ(l[2].substr(l[2].find(')')), ")               |    fxt_sig_handler() {") << t;
  EXPECT_EQ(calls_of(l[3]), " us |      fxt_leaf();") << t;
  EXPECT_EQ(calls_of(l[4]), " us |    }") << t;
  EXPECT_EQ(l[5].substr(l[5].find(')')), ")   <========== |") << t;
  EXPECT_EQ(l[6].substr(l[6].size() - 4), "|  }") << t;  // a duration mark may move the column
  ASSERT_EQ(wr(p("trace"), ""), 0);
  ASSERT_EQ(wr(p("options/funcgraph-irqs"), "0"), 1);
  fxt_raiser(SIGUSR1);
  EXPECT_EQ(graph_counts(reinterpret_cast<uint64_t>(&fxt_raiser)), std::make_pair(1, 1));
  EXPECT_EQ(graph_counts(reinterpret_cast<uint64_t>(&fxt_sig_handler)), std::make_pair(0, 0));
  EXPECT_EQ(graph_counts(addr(fxt_leaf)), std::make_pair(0, 0));
  ASSERT_EQ(wr(p("options/funcgraph-irqs"), "1"), 1);
  ASSERT_EQ(sigaction(SIGUSR1, &old, nullptr), 0);
}

// sleep-time off: a call's duration is the time its thread ran.
TEST_P(FunctionTest, SleepTimeOffLeavesTheSleepOutOfTheDuration) {
  ASSERT_EQ(wr(p("set_ftrace_filter"), "fxt_sleep_ms"), 12);
  ASSERT_EQ(wr(p("current_tracer"), "function_graph"), 14);
  auto duration_ns = [&] {
    uint64_t d = 0;
    for (const Rec& r : records(inst_)) {
      if (r.type != function::kGraphExitId) continue;
      uint64_t calltime = 0, rettime = 0;
      std::memcpy(&calltime, r.payload.data() + 16, 8);
      std::memcpy(&rettime, r.payload.data() + 24, 8);
      d = rettime - calltime;
    }
    return d;
  };
  fxt_sleep_ms(30);
  EXPECT_GE(duration_ns(), 30000000u);
  ASSERT_EQ(wr(p("options/sleep-time"), "0"), 1);
  EXPECT_EQ(function::g_fast.load(), 0u);
  ASSERT_EQ(wr(p("trace"), ""), 0);
  fxt_sleep_ms(30);
  EXPECT_LT(duration_ns(), 15000000u);  // a sleep uses next to no CPU
  ASSERT_EQ(wr(p("options/sleep-time"), "1"), 1);
  EXPECT_NE(function::g_fast.load(), 0u);
}

// Top only: the function profiler and the program-wide function lists are
// the top instance's files, as in the kernel (function_profile_enabled,
// trace_stat/, available_filter_functions and enabled_functions are made
// once, at the root). An instance has none of them.
TEST(FunctionProfile, AnInstanceHasNoProfilerFiles) {
  ASSERT_EQ(tracefs::mkdir("instances/fn_noprof"), 0);
  std::string out;
  for (const char* f : {"function_profile_enabled", "trace_stat", "trace_stat/function0",
                        "available_filter_functions", "enabled_functions"}) {
    EXPECT_EQ(tracefs::read_file(std::string("instances/fn_noprof/") + f, &out), -ENOENT) << f;
  }
  EXPECT_EQ(wr("instances/fn_noprof/function_profile_enabled", "1"), -ENOENT);
  EXPECT_EQ(rd("function_profile_enabled"), "0\n");
  EXPECT_EQ(tracefs::rmdir("instances/fn_noprof"), 0);
}

// The function profiler: hits and time per function per CPU, for the
// functions the top instance's filter selects.
// top only: the profiler's files are the top's (see above).
TEST(FunctionProfile, CountsEachFunctionsHitsAndTime) {
  ASSERT_EQ(wr("set_ftrace_filter", "fxt_outer fxt_leaf"), 18);
  EXPECT_EQ(rd("function_profile_enabled"), "0\n");
  ASSERT_EQ(wr("function_profile_enabled", "1"), 1);
  EXPECT_EQ(function::g_tracing.load() != 0, true);
  fxt_outer(3);  // fxt_outer once, fxt_leaf three times
  fxt_leaf(1);
  fxt_other(1);  // not in the filter; its fxt_leaf is
  ASSERT_EQ(wr("function_profile_enabled", "0"), 1);
  fxt_outer(3);  // not counted
  std::vector<std::string> files;
  ASSERT_EQ(tracefs::list("trace_stat", &files), 0);
  ASSERT_EQ(files.size(), static_cast<size_t>(instance::Instance::top()->buffer().nr_cpus()));
  std::map<std::string, uint64_t> hits, time_ns;
  for (const std::string& f : files) {
    const std::string t = rd("trace_stat/" + f);
    EXPECT_EQ(
        t.rfind("  Function                               Hit    Time            Avg             s^2\n", 0),
        0u)
        << t;
    std::istringstream in(t);
    std::string line;
    std::getline(in, line);
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string name, us;
      uint64_t n = 0;
      double time_us = 0;
      ls >> name >> n >> time_us >> us;
      EXPECT_EQ(us, "us") << line;
      hits[name] += n;
      time_ns[name] += static_cast<uint64_t>(time_us * 1000);
    }
  }
  EXPECT_EQ(hits["fxt_outer"], 1u);
  EXPECT_EQ(hits["fxt_leaf"], 5u);
  EXPECT_EQ(hits.count("fxt_other"), 0u);
  EXPECT_EQ(hits.size(), 2u);
  // fxt_outer's time includes its three calls of fxt_leaf (graph-time).
  EXPECT_GT(time_ns["fxt_outer"], 0u);
  // Enabling again starts from zero.
  ASSERT_EQ(wr("function_profile_enabled", "1"), 1);
  ASSERT_EQ(wr("function_profile_enabled", "0"), 1);
  for (const std::string& f : files) EXPECT_EQ(lines(rd("trace_stat/" + f)).size(), 2u);
  EXPECT_EQ(wr("function_profile_enabled", "2"), -EINVAL);
  EXPECT_EQ(wr("set_ftrace_filter", ""), 0);
  std::string out;
  EXPECT_EQ(tracefs::read_file("instances/none/trace_stat/function0", &out), -ENOENT);
}

// The profiler's time of a function and its callee, with graph-time (the
// callee's time included, the default) and without; sleep-time off makes
// both CPU times, so that a busy machine cannot move them.
// top only: the profiler's files are the top's (see above).
TEST(FunctionProfile, GraphTimeOffCountsOnlyTheFunctionsOwnTime) {
  ASSERT_EQ(wr("set_ftrace_filter", "fxt_spin_caller fxt_spin_cpu"), 28);
  ASSERT_EQ(wr("options/sleep-time", "0"), 1);
  auto times = [] {
    std::map<std::string, double> us;
    std::vector<std::string> files;
    EXPECT_EQ(tracefs::list("trace_stat", &files), 0);
    for (const std::string& f : files) {
      std::istringstream in(rd("trace_stat/" + f));
      std::string line;
      std::getline(in, line);
      std::getline(in, line);
      while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string name;
        uint64_t hits = 0;
        double t = 0;
        ls >> name >> hits >> t;
        us[name] += t;
      }
    }
    return us;
  };
  constexpr long kSpinNs = 5000000;
  ASSERT_EQ(wr("function_profile_enabled", "1"), 1);
  fxt_spin_caller(kSpinNs);
  ASSERT_EQ(wr("function_profile_enabled", "0"), 1);
  std::map<std::string, double> with = times();
  EXPECT_GE(with["fxt_spin_cpu"], kSpinNs / 1000.0);
  EXPECT_GE(with["fxt_spin_caller"], with["fxt_spin_cpu"]);
  ASSERT_EQ(wr("options/graph-time", "0"), 1);
  ASSERT_EQ(wr("function_profile_enabled", "1"), 1);
  fxt_spin_caller(kSpinNs);
  ASSERT_EQ(wr("function_profile_enabled", "0"), 1);
  std::map<std::string, double> without = times();
  EXPECT_GE(without["fxt_spin_cpu"], kSpinNs / 1000.0);
  EXPECT_LT(without["fxt_spin_caller"], kSpinNs / 1000.0 / 5);  // its own few instructions
  ASSERT_EQ(wr("options/graph-time", "1"), 1);
  ASSERT_EQ(wr("options/sleep-time", "1"), 1);
  ASSERT_EQ(wr("set_ftrace_filter", ""), 0);
}

}  // namespace
}  // namespace usrtrace
