// Hist triggers through the control files: the trigger and hist files,
// pause/cont/clear commands on an existing histogram, '!' removal, named
// histograms shared by two events, enable_hist/disable_hist, a trigger
// filter, and aggregation from several threads.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>

#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "instance/instance.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "tracefs/tracefs_test_util.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(histtest, req, (int32_t, id)(uint64_t, bytes)(const char*, path), "id=%d bytes=%llu path=%s",
               REC->id, REC->bytes, __get_str(path))
USRTRACE_EVENT(histtest, resp, (int32_t, id)(uint64_t, bytes), "id=%d bytes=%llu", REC->id, REC->bytes)

namespace usrtrace {
namespace {

using tracefs_test::rd;
long add(const std::string& path, std::string_view text) { return tracefs::write_file(path, text, true); }

using tracefs_test::count;

// Every test runs on the top instance and on a new one.
class HistFilesTest : public testing::InstanceTest {
 protected:
  std::string ev(const char* name, const char* file) {
    return path(std::string("events/histtest/") + name + "/" + file);
  }
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, HistFilesTest, ::testing::Values("", "histtest"), testing::top_or_new);

TEST_P(HistFilesTest, KeysValuesTotalsWithoutTheEventEnabled) {
  ASSERT_GT(add(ev("req", "trigger"), "hist:keys=id:vals=bytes"), 0);
  const std::string trig = rd(ev("req", "trigger"));
  EXPECT_EQ(trig.rfind("hist:keys=id:vals=hitcount,bytes:sort=hitcount:size=2048 [active]", 0), 0u) << trig;
  for (int i = 0; i < 10; ++i) trace_histtest_req(i % 3, 100, "/a");
  const std::string h = rd(ev("req", "hist"));
  EXPECT_EQ(h.rfind("# event histogram\n#\n# trigger info: hist:keys=id:vals=hitcount,bytes", 0), 0u) << h;
  EXPECT_NE(h.find("{ id:          0 } hitcount:          4  bytes:        400\n"), std::string::npos) << h;
  EXPECT_NE(h.find("{ id:          1 } hitcount:          3  bytes:        300\n"), std::string::npos) << h;
  EXPECT_NE(h.find("{ id:          2 } hitcount:          3  bytes:        300\n"), std::string::npos) << h;
  EXPECT_NE(h.find("Totals:\n    Hits: 10\n    Entries: 3\n    Dropped: 0\n"), std::string::npos) << h;
  // The event was never recorded: the trigger alone armed it.
  EXPECT_EQ(rd(path("trace")).find("req: "), std::string::npos);
}

TEST_P(HistFilesTest, PauseContinueClearAndRemove) {
  const std::string t = ev("req", "trigger");
  ASSERT_GT(add(t, "hist:keys=id"), 0);
  EXPECT_EQ(add(t, "hist:keys=id"), -EEXIST);
  trace_histtest_req(1, 1, "");
  ASSERT_GT(add(t, "hist:keys=id:pause"), 0);
  EXPECT_NE(rd(t).find("[paused]"), std::string::npos) << rd(t);
  trace_histtest_req(1, 1, "");
  EXPECT_NE(rd(ev("req", "hist")).find("Hits: 1\n"), std::string::npos);
  ASSERT_GT(add(t, "hist:keys=id:cont"), 0);
  trace_histtest_req(1, 1, "");
  EXPECT_NE(rd(ev("req", "hist")).find("Hits: 2\n"), std::string::npos);
  ASSERT_GT(add(t, "hist:keys=id:clear"), 0);
  EXPECT_NE(rd(ev("req", "hist")).find("Hits: 0\n"), std::string::npos);
  ASSERT_GT(add(t, "!hist:keys=id"), 0);
  EXPECT_EQ(rd(t).rfind("# Available triggers:", 0), 0u);
  EXPECT_EQ(rd(ev("req", "hist")), "");
  EXPECT_EQ(add(t, "hist:keys=id:cont"), -ENOENT);
  EXPECT_EQ(add(t, "hist:keys=nosuch"), -EINVAL);
  const std::string log = rd(path("error_log"));
  EXPECT_NE(log.find("hist:histtest:req: error: "), std::string::npos) << log;
}

TEST_P(HistFilesTest, TriggerFilterAndStringKeys) {
  ASSERT_GT(add(ev("req", "trigger"), "hist:keys=path:vals=bytes:sort=bytes.descending if id > 1"), 0);
  EXPECT_NE(rd(ev("req", "trigger")).find(" if id > 1 [active]"), std::string::npos)
      << rd(ev("req", "trigger"));
  trace_histtest_req(1, 1000, "/skipped");
  trace_histtest_req(2, 10, "/small");
  trace_histtest_req(3, 500, "/big");
  trace_histtest_req(4, 600, "/big");
  const std::string h = rd(ev("req", "hist"));
  EXPECT_EQ(h.find("/skipped"), std::string::npos) << h;
  const size_t big = h.find("/big"), small = h.find("/small");
  ASSERT_NE(big, std::string::npos) << h;
  ASSERT_NE(small, std::string::npos) << h;
  EXPECT_LT(big, small) << h;  // sorted by bytes, descending
  EXPECT_NE(h.find("Hits: 3\n"), std::string::npos) << h;
}

TEST_P(HistFilesTest, NamedHistogramSharedByTwoEvents) {
  ASSERT_GT(add(ev("req", "trigger"), "hist:name=io:keys=id:vals=bytes"), 0);
  ASSERT_GT(add(ev("resp", "trigger"), "hist:name=io:keys=id:vals=bytes"), 0);
  trace_histtest_req(1, 10, "");
  trace_histtest_resp(1, 5);
  const std::string a = rd(ev("req", "hist")), b = rd(ev("resp", "hist"));
  EXPECT_NE(a.find("hitcount:          2  bytes:         15"), std::string::npos) << a;
  EXPECT_NE(b.find("hitcount:          2  bytes:         15"), std::string::npos) << b;
}

TEST_P(HistFilesTest, EnableAndDisableHist) {
  ASSERT_GT(add(ev("resp", "trigger"), "hist:keys=id"), 0);
  ASSERT_GT(add(ev("req", "trigger"), "disable_hist:histtest:resp:1"), 0);
  trace_histtest_resp(1, 0);
  trace_histtest_req(0, 0, "");  // pauses resp's histogram
  trace_histtest_resp(1, 0);
  EXPECT_NE(rd(ev("resp", "trigger")).find("[paused]"), std::string::npos);
  EXPECT_NE(rd(ev("resp", "hist")).find("Hits: 1\n"), std::string::npos);
  EXPECT_EQ(rd(ev("req", "trigger")), "disable_hist:histtest:resp:count=0\n");
}

TEST_P(HistFilesTest, ExecnameIsTheNameAtTheFirstRecord) {
  // As the kernel: the entry keeps the thread's name when it was made,
  // even after the thread renames itself.
  ASSERT_GT(add(ev("req", "trigger"), "hist:keys=common_pid.execname"), 0);
  int tid = 0;
  std::thread([&tid] {
    pthread_setname_np(pthread_self(), "hist-first");
    tid = static_cast<int>(gettid());
    trace_histtest_req(1, 1, "");
    pthread_setname_np(pthread_self(), "hist-second");
    trace_histtest_req(1, 1, "");
  }).join();
  char want[128];
  snprintf(want, sizeof want, "{ common_pid: %-16s[%10d] } hitcount:          2\n", "hist-first", tid);
  EXPECT_NE(rd(ev("req", "hist")).find(want), std::string::npos) << rd(ev("req", "hist"));
}

TEST_P(HistFilesTest, ThreadsAggregateExactly) {
  EXPECT_EQ(add(ev("req", "trigger"), "hist:keys=id:vals=bytes:size=64"),
            -EINVAL);                                                           // the kernel's minimum is 128
  ASSERT_GT(add(ev("req", "trigger"), "hist:keys=id:vals=bytes:size=100"), 0);  // rounded up to 128
  EXPECT_NE(rd(ev("req", "trigger")).find(":size=128 [active]"), std::string::npos);
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([] {
      for (int i = 0; i < kEach; ++i) trace_histtest_req(i % 16, 3, "");
    });
  for (auto& th : ts) th.join();
  const std::string h = rd(ev("req", "hist"));
  EXPECT_NE(h.find("Hits: " + std::to_string(kThreads * kEach) + "\n    Entries: 16\n    Dropped: 0\n"),
            std::string::npos)
      << h;
  EXPECT_EQ(count(h, "hitcount:       5000  bytes:      15000\n"), 16u) << h;
}

}  // namespace
}  // namespace usrtrace
