// The {top, new} fixture's reset of the top instance (instance_fixture.h):
// whatever a test may change on the top is undone, and what cannot be
// undone is reported rather than left for the next test.
#include "testing/instance_fixture.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "function/instrumented.h"
#include "instance/instance.h"
#include "instance/snapshot.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(fixtest, ping, (int32_t, n), "n=%d", REC->n)
USRTRACE_EVENT(fixtest, pong, (int32_t, n), "n=%d", REC->n)

namespace usrtrace::testing {
namespace {

std::string rd(const std::string& path) {
  std::string out;
  EXPECT_GE(tracefs::read_file(path, &out), 0) << path;
  return out;
}
long wr(const std::string& path, std::string_view text, bool append = false) {
  return tracefs::write_file(path, text, append);
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

TEST(InstanceFixtureTest, ResetTopUndoesWhatATestChanges) {
  ASSERT_EQ(joined(reset_top()), "");
  const std::vector<std::string> before = {rd("trace_options"), rd("trace_clock"), rd("buffer_size_kb")};
  // Triggers of every kind, with counts and filters (whose '!' forms the
  // reset has to build from the listing), filters, enabled events.
  const std::string t = "events/fixtest/ping/trigger";
  ASSERT_GT(wr(t, "traceoff:5 if n > 3", true), 0);
  ASSERT_GT(wr(t, "enable_event:fixtest:pong:0x10", true), 0);
  ASSERT_GT(wr(t, "stacktrace", true), 0);
  ASSERT_GT(wr(t, "hist:keys=n:vals=hitcount:sort=n if n < 100", true), 0);
  ASSERT_GT(wr("events/fixtest/pong/trigger", "hist:name=fixnamed:keys=n", true), 0);
  ASSERT_GT(wr("events/fixtest/pong/trigger", "disable_hist:fixtest:pong:2", true), 0);
  ASSERT_GT(wr("events/fixtest/ping/filter", "n != 7"), 0);
  ASSERT_GT(wr("events/fixtest/filter", "n > 1"), 0);
  ASSERT_GT(wr("events/fixtest/pong/enable", "1"), 0);
  ASSERT_GT(wr("set_event_pid", "1"), 0);
  // Function lists and commands, and a tracer.
  ASSERT_GT(wr("set_ftrace_filter", "fxt_leaf fxt_other:traceoff:3 fxt_outer:enable_event:fixtest:ping:1"),
            0);
  ASSERT_GT(wr("set_ftrace_filter", "fxt_recurse:snapshot", true), 0);
  ASSERT_GT(wr("set_ftrace_notrace", "fxt_recurse"), 0);
  ASSERT_GT(wr("set_graph_function", "fxt_outer"), 0);
  ASSERT_GT(wr("set_graph_notrace", "fxt_other"), 0);
  ASSERT_GT(wr("set_ftrace_pid", "1"), 0);
  ASSERT_GT(wr("max_graph_depth", "3"), 0);
  ASSERT_GT(wr("tracing_thresh", "100"), 0);
  ASSERT_GT(wr("current_tracer", "function_graph"), 0);
  // Settings, options, a snapshot ring, records and an error.
  ASSERT_GT(wr("options/func_stack_trace", "1"), 0);
  ASSERT_GT(wr("options/print-parent", "0"), 0);
  ASSERT_GT(wr("trace_clock", "global"), 0);
  ASSERT_GT(wr("buffer_size_kb", "64"), 0);
  ASSERT_GT(wr("buffer_percent", "10"), 0);
  ASSERT_GT(wr("snapshot_ring_size", "3"), 0);
  ASSERT_GT(wr("tracing_max_latency", "1234"), 0);
  fxt_outer(2);
  trace_fixtest_ping(1);
  ASSERT_GT(wr("snapshot", "1"), 0);
  ASSERT_EQ(wr("current_tracer", "no_such_tracer"), -EINVAL);
  ASSERT_GT(wr("tracing_on", "0"), 0);

  EXPECT_EQ(joined(reset_top()), "");
  EXPECT_EQ(rd("current_tracer"), "nop\n");
  EXPECT_EQ(rd(t).rfind("# Available triggers:", 0), 0u) << rd(t);
  EXPECT_EQ(rd("events/fixtest/pong/trigger").rfind("# Available triggers:", 0), 0u);
  EXPECT_EQ(rd("events/fixtest/ping/filter"), "none\n");
  EXPECT_EQ(rd("events/fixtest/pong/enable"), "0\n");
  EXPECT_EQ(rd("set_ftrace_filter"), "#### all functions enabled ####\n");
  EXPECT_EQ(rd("set_ftrace_notrace"), "#### no functions disabled ####\n");
  EXPECT_EQ(rd("snapshot_enabled"), "0\n");
  EXPECT_EQ(rd("snapshot_ring_size"), "1\n");
  EXPECT_EQ(rd("tracing_on"), "1\n");
  EXPECT_EQ(rd("tracing_max_latency"), "0\n");
  EXPECT_EQ(rd("error_log"), "");
  EXPECT_EQ((std::vector<std::string>{rd("trace_options"), rd("trace_clock"), rd("buffer_size_kb")}), before);
  // Nothing records any more.
  fxt_outer(1);
  trace_fixtest_ping(2);
  trace_fixtest_pong(2);
  rb::RingBuffer::Iterator it(instance::Instance::top()->buffer());
  rb::Event e;
  EXPECT_FALSE(it.next(&e));
}

TEST(InstanceFixtureTest, TheCheckReadsEveryFileItCompares) {
  // A file that could not be read would compare equal on both sides.
  for (const std::string& f : reset_detail::compared_files()) {
    std::string out;
    EXPECT_GE(tracefs::read_file(f, &out), 0) << f;
  }
  EXPECT_GT(reset_detail::event_files("").size(), 5u);
}

TEST(InstanceFixtureTest, WhatCannotBeUndoneIsReported) {
  ASSERT_GT(wr("snapshot", "1"), 0);
  {
    // A reader of the snapshot: freeing it fails with EBUSY.
    instance::Snapshots::Ref r = instance::Instance::top()->snapshots().get(0);
    ASSERT_TRUE(r);
    const std::string problems = joined(reset_top());
    EXPECT_NE(problems.find("write '0' > snapshot: -16"), std::string::npos) << problems;
    EXPECT_NE(problems.find("snapshot_enabled: '1\n', a new instance: '0\n'"), std::string::npos) << problems;
  }
  EXPECT_EQ(joined(reset_top()), "");
}

}  // namespace
}  // namespace usrtrace::testing
