// Event filters through the control files, end to end: what a filter lets
// into the buffer (exactly the records the kernel's would), the examples of
// events.rst section 5 rewritten against test events, subsystem filters,
// per-instance filters, trigger filters, errors and the error_log caret.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/rseq.h"
#include "events/registry.h"
#include "instance/instance.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "tracefs/tracefs_test_util.h"
#include "usrtrace/event.h"

// The kernel's signal:signal_generate, as events.rst's examples use it.
USRTRACE_EVENT(sigtest, signal_generate,
               (int32_t, sig)(int32_t, code)(char[16], comm)(int32_t, pid)(int32_t, group)(int32_t, result),
               "sig=%d code=%d comm=%s pid=%d grp=%d res=%d", REC->sig, REC->code, REC->comm, REC->pid,
               REC->group, REC->result)
// Two events of one system, one with prev_pid, for subsystem filters.
USRTRACE_EVENT(schedtest, sched_switch, (char[16], prev_comm)(int32_t, prev_pid)(int32_t, next_pid),
               "prev_comm=%s prev_pid=%d next_pid=%d", REC->prev_comm, REC->prev_pid, REC->next_pid)
USRTRACE_EVENT(schedtest, sched_wakeup, (char[16], comm)(int32_t, pid)(int32_t, target_cpu),
               "comm=%s pid=%d target_cpu=%d", REC->comm, REC->pid, REC->target_cpu)
USRTRACE_EVENT(filtest, req, (uint64_t, id)(int64_t, delta)(uint32_t, flags)(const char*, path),
               "id=%llu delta=%lld flags=%u path=%s", REC->id, REC->delta, REC->flags, __get_str(path))

namespace usrtrace {
namespace {

using tracefs_test::rd;
long wr(const std::string& path, std::string_view text) { return tracefs::write_file(path, text, false); }

// Every test runs on the top instance and on a new one.
class FilterFilesTest : public testing::InstanceTest {
 protected:
  void SetUp() override {
    InstanceTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_GT(wr(p("events/enable"), "1"), 0);
  }
  std::string p(const std::string& f) { return path(f); }
  // The records' text lines (after "name: "), oldest first.
  std::vector<std::string> lines(const char* name) {
    std::vector<std::string> out;
    const std::string trace = rd(p("trace"));
    const std::string tag = std::string(name) + ": ";
    for (size_t at = trace.find(tag); at != std::string::npos; at = trace.find(tag, at + 1)) {
      const size_t end = trace.find('\n', at);
      out.push_back(trace.substr(at + tag.size(), end - at - tag.size()));
    }
    return out;
  }
  std::string last_error() {
    const std::string log = rd(p("error_log"));
    const size_t at = log.rfind("event filter parse error");
    return at == std::string::npos ? log : log.substr(at);
  }
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, FilterFilesTest, ::testing::Values("", "filtest"), testing::top_or_new);

TEST_P(FilterFilesTest, EventsRstSignalExample) {
  const std::string f = p("events/sigtest/signal_generate/filter");
  // events.rst writes `comm != bash`; current kernels want string values
  // quoted (unquoted: "Invalid value (did you forget quotes)?"), so do we.
  EXPECT_EQ(wr(f, "sig == 17 && comm != bash"), -EINVAL);
  EXPECT_NE(last_error().find("Invalid value (did you forget quotes)?"), std::string::npos) << last_error();
  const char* expr = "((sig >= 10 && sig < 15) || sig == 17) && comm != \"bash\"";
  ASSERT_EQ(wr(f, std::string(expr) + "\n"), static_cast<long>(std::strlen(expr) + 1));
  EXPECT_EQ(rd(f), std::string(expr) + "\n");
  for (int sig : {9, 10, 14, 15, 16, 17, 18})
    for (const char* comm : {"bash", "zsh"}) trace_sigtest_signal_generate(sig, 0, comm, 1, 0, 0);
  EXPECT_EQ(lines("signal_generate"), (std::vector<std::string>{"sig=10 code=0 comm=zsh pid=1 grp=0 res=0",
                                                                "sig=14 code=0 comm=zsh pid=1 grp=0 res=0",
                                                                "sig=17 code=0 comm=zsh pid=1 grp=0 res=0"}));
}

TEST_P(FilterFilesTest, UnknownFieldIsRefusedWithACaretAndTheOldFilterStays) {
  const std::string f = p("events/sigtest/signal_generate/filter");
  ASSERT_GT(wr(f, "sig == 9"), 0);
  const std::string bad = "((sig >= 10 && sig < 15) || dsig == 17) && comm != \"bash\"";
  EXPECT_EQ(wr(f, bad), -EINVAL);
  EXPECT_EQ(rd(f), "sig == 9\n");
  const std::string err = last_error();
  EXPECT_EQ(err.rfind("event filter parse error: error: Field not found\n  Command: " + bad + "\n", 0), 0u)
      << err;
  // The caret sits under the unknown field's operator, as the kernel puts it.
  const size_t caret_line = err.find('\n', err.find("Command:")) + 1;
  const size_t caret = err.find('^', caret_line) - caret_line;
  EXPECT_EQ(caret, std::string("  Command: ").size() + bad.find("dsig") + 5) << err;
  trace_sigtest_signal_generate(9, 0, "a", 1, 0, 0);
  trace_sigtest_signal_generate(10, 0, "a", 1, 0, 0);
  EXPECT_EQ(lines("signal_generate").size(), 1u);
}

TEST_P(FilterFilesTest, ZeroClearsAndNoneIsShown) {
  const std::string f = p("events/sigtest/signal_generate/filter");
  EXPECT_EQ(rd(f), "none\n");
  ASSERT_GT(wr(f, "sig == 1"), 0);
  trace_sigtest_signal_generate(2, 0, "a", 1, 0, 0);
  ASSERT_GT(wr(f, "0"), 0);
  EXPECT_EQ(rd(f), "none\n");
  trace_sigtest_signal_generate(3, 0, "a", 1, 0, 0);
  EXPECT_EQ(lines("signal_generate"), (std::vector<std::string>{"sig=3 code=0 comm=a pid=1 grp=0 res=0"}));
}

TEST_P(FilterFilesTest, GlobsOnCharArraysAndDynamicStrings) {
  const std::string sw = p("events/schedtest/sched_switch/filter");
  struct Case {
    const char* filter;
    std::vector<std::string> kept;
  };
  const char* comms[] = {"bash", "sh", "shell", "zsh-5", "ba-x-sh"};
  const Case cases[] = {
      {"prev_comm ~ \"*sh\"", {"bash", "sh", "ba-x-sh"}},
      {"prev_comm ~ \"sh*\"", {"sh", "shell"}},
      {"prev_comm ~ \"*sh*\"", {"bash", "sh", "shell", "zsh-5", "ba-x-sh"}},
      {"prev_comm ~ \"ba*sh\"", {"bash", "ba-x-sh"}},
      {"prev_comm ~ \"?sh*\"", {"zsh-5"}},
      {"prev_comm ~ \"[bz]*\"", {"bash", "zsh-5", "ba-x-sh"}},
      {"prev_comm == \"sh\" || prev_comm == 'shell'", {"sh", "shell"}},
      {"prev_comm != \"sh\" && !(prev_comm ~ \"*sh*\")", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.filter);
    ASSERT_GT(wr(p("trace"), ""), -1);
    ASSERT_GT(wr(sw, c.filter), 0);
    for (const char* comm : comms) trace_schedtest_sched_switch(comm, 1, 2);
    std::vector<std::string> got;
    for (const std::string& l : lines("sched_switch")) got.push_back(l.substr(10, l.find(' ') - 10));
    EXPECT_EQ(got, c.kept);
  }
  const std::string req = p("events/filtest/req/filter");
  ASSERT_GT(wr(req, "path ~ \"/api/*\" && flags & 0x4 && delta < -5"), 0);
  trace_filtest_req(1, -10, 4, "/api/users");
  trace_filtest_req(2, -10, 3, "/api/users");  // no bit 2
  trace_filtest_req(3, -1, 4, "/api/users");   // delta too big
  trace_filtest_req(4, -10, 6, "/static/x");   // path
  trace_filtest_req(5, -100, 0xff, "/api/");
  std::vector<std::string> got = lines("req");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].rfind("id=1 ", 0), 0u);
  EXPECT_EQ(got[1].rfind("id=5 ", 0), 0u);
  ASSERT_GT(wr(req, "id == 0xffffffffffffffff || id < 3"), 0);
  trace_filtest_req(~0ull, 0, 0, "");
  trace_filtest_req(2, 0, 0, "");
  trace_filtest_req(3, 0, 0, "");
  EXPECT_EQ(lines("req").size(), 4u);
}

TEST_P(FilterFilesTest, FilteredOutRecordsNeverReachTheBuffer) {
  ASSERT_GT(wr(p("events/filtest/req/filter"), "id == 7"), 0);
  const uint64_t before = inst()->entries_written();
  for (uint64_t i = 0; i < 1000; ++i) trace_filtest_req(i, 0, 0, "/x");
  EXPECT_EQ(inst()->entries_written() - before, 1u);
  const std::string stats = rd(p("per_cpu/cpu0/stats")) + rd(p("trace"));
  EXPECT_NE(stats.find("id=7 "), std::string::npos);
}

TEST_P(FilterFilesTest, SubsystemFilterSetsTheEventsThatHaveTheField) {
  const std::string sys = p("events/schedtest/filter");
  const std::string head = "### global filter ###\n";
  EXPECT_EQ(rd(sys).rfind(head, 0), 0u);
  ASSERT_GT(wr(sys, "prev_pid == 0"), 0);
  EXPECT_EQ(rd(p("events/schedtest/sched_switch/filter")), "prev_pid == 0\n");
  EXPECT_EQ(rd(p("events/schedtest/sched_wakeup/filter")), "none\n");
  const std::string text = rd(sys);
  EXPECT_NE(text.find("\nprev_pid == 0\n"), std::string::npos) << text;
  ASSERT_GT(wr(sys, "common_pid != 0"), 0);
  EXPECT_EQ(rd(p("events/schedtest/sched_wakeup/filter")), "common_pid != 0\n");
  EXPECT_EQ(rd(p("events/schedtest/sched_switch/filter")), "common_pid != 0\n");
  // A field no event has: refused, nothing changed.
  EXPECT_EQ(wr(sys, "nosuch == 1"), -EINVAL);
  EXPECT_NE(last_error().find("Couldn't find or set field in one of a subsystem's events"),
            std::string::npos);
  EXPECT_EQ(rd(p("events/schedtest/sched_switch/filter")), "common_pid != 0\n");
  // A syntax error: its own message.
  EXPECT_EQ(wr(sys, "(prev_pid == 1"), -EINVAL);
  EXPECT_NE(last_error().find("Too many '('"), std::string::npos) << last_error();
  ASSERT_GT(wr(sys, "0"), 0);
  EXPECT_EQ(rd(p("events/schedtest/sched_switch/filter")), "none\n");
  EXPECT_EQ(rd(p("events/schedtest/sched_wakeup/filter")), "none\n");
  EXPECT_EQ(rd(sys).find("common_pid"), std::string::npos);
}

TEST_P(FilterFilesTest, CommonPidCommAndCpu) {
  const std::string f = p("events/filtest/req/filter");
  const int tid = base::gettid_cached();
  ASSERT_GT(wr(f, "common_pid == " + std::to_string(tid)), 0);
  trace_filtest_req(1, 0, 0, "");
  std::thread([] { trace_filtest_req(2, 0, 0, ""); }).join();
  // comm: the writing thread's name.
  ASSERT_GT(wr(f, "comm ~ \"filt-*\""), 0);
  std::thread([] {
    pthread_setname_np(pthread_self(), "filt-worker");
    trace_filtest_req(3, 0, 0, "");
  }).join();
  std::thread([] {
    pthread_setname_np(pthread_self(), "other");
    trace_filtest_req(4, 0, 0, "");
  }).join();
  // CPU: the CPU the record is written on.
  cpu_set_t old, one;
  sched_getaffinity(0, sizeof old, &old);
  size_t cpu = 0;
  while (!CPU_ISSET(cpu, &old)) ++cpu;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  ASSERT_GT(wr(f, "CPU == " + std::to_string(cpu)), 0);
  trace_filtest_req(5, 0, 0, "");
  ASSERT_GT(wr(f, "cpu != " + std::to_string(cpu)), 0);
  trace_filtest_req(6, 0, 0, "");
  sched_setaffinity(0, sizeof old, &old);
  std::vector<std::string> ids;
  for (const std::string& l : lines("req")) ids.push_back(l.substr(0, l.find(' ')));
  EXPECT_EQ(ids, (std::vector<std::string>{"id=1", "id=3", "id=5"}));
}

TEST_P(FilterFilesTest, FiltersArePerInstance) {
  const testing::OtherInstance other(top());
  ASSERT_GT(wr(p("events/filtest/req/filter"), "id == 1"), 0);
  ASSERT_GT(wr(other.path("events/filtest/req/enable"), "1"), 0);
  ASSERT_GT(wr(other.path("trace"), ""), -1);
  EXPECT_EQ(rd(other.path("events/filtest/req/filter")), "none\n");
  trace_filtest_req(1, 0, 0, "");
  trace_filtest_req(2, 0, 0, "");
  EXPECT_EQ(lines("req").size(), 1u);
  const std::string theirs = rd(other.path("trace"));
  EXPECT_NE(theirs.find("req: id=1 "), std::string::npos);
  EXPECT_NE(theirs.find("req: id=2 "), std::string::npos);
  ASSERT_GT(wr(other.path("events/filtest/req/enable"), "0"), 0);
}

TEST_P(FilterFilesTest, TriggerFilters) {
  const std::string t = p("events/filtest/req/trigger");
  ASSERT_GT(wr(t, "traceoff if id > 5 && path ~ \"*.html\""), 0);
  EXPECT_EQ(rd(t), "traceoff:unlimited if id > 5 && path ~ \"*.html\"\n");
  trace_filtest_req(9, 0, 0, "/a.css");
  trace_filtest_req(3, 0, 0, "/a.html");
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  trace_filtest_req(6, 0, 0, "/a.html");
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  // A bad trigger filter: the filter's error, caret into the whole command.
  const std::string cmd = "stacktrace if nosuch == 1";
  EXPECT_EQ(tracefs::write_file(t, cmd, true), -EINVAL);
  const std::string err = last_error();
  EXPECT_EQ(err.rfind("event filter parse error: error: Field not found\n  Command: " + cmd + "\n", 0), 0u)
      << err;
}

}  // namespace
}  // namespace usrtrace
