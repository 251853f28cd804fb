// Event triggers through the control files, as a user drives them:
// traceon/traceoff/snapshot/stacktrace/enable_event/disable_event with
// counts, removal, listing, soft mode, firing without the event enabled,
// from signal handlers, and the cleanup when an instance goes.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "events/registry.h"
#include "instance/instance.h"
#include "output/trace_output.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "tracefs/tracefs_test_util.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(trigtest, ping, (int32_t, n)(char[16], name), "n=%d name=%s", REC->n, REC->name)
USRTRACE_EVENT(trigtest, pong, (int32_t, n), "n=%d", REC->n)
// A dynamic field: the call site goes through the event's emit_dynamic().
USRTRACE_EVENT(trigtest, dyn, (const char*, path), "path=%s", __get_str(path))

namespace usrtrace {
namespace {

using tracefs_test::rd;
long wr(const std::string& path, std::string_view text) { return tracefs::write_file(path, text, true); }

using tracefs_test::count;

// The n values of the records of one event, oldest first.
std::vector<int32_t> values(rb::RingBuffer& rb, const char* name) {
  const auto* e = events::Registry::get().find("trigtest", name);
  std::vector<int32_t> out;
  rb::RingBuffer::Iterator it(rb);
  rb::Event ev;
  while (it.next(&ev)) {
    internal::CommonHeader h;
    std::memcpy(&h, ev.data, sizeof h);
    if (h.type != e->id) continue;
    int32_t n;
    std::memcpy(&n, ev.data + sizeof h, sizeof n);
    out.push_back(n);
  }
  return out;
}

// Every test runs on the top instance and on a new one.
class TriggerTest : public testing::InstanceTest {
 protected:
  std::string p(const std::string& f) { return path(f); }
  std::string ev(const char* name, const std::string& f) {
    return p("events/trigtest/" + std::string(name) + "/" + f);
  }
  rb::RingBuffer& buffer() { return inst()->buffer(); }
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, TriggerTest, ::testing::Values("", "trigtest"), testing::top_or_new);

TEST_P(TriggerTest, TraceoffKeepsTheEventThatFiredIt) {
  ASSERT_GT(wr(ev("ping", "enable"), "1"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff"), 0);
  EXPECT_EQ(rd(ev("ping", "trigger")), "traceoff:unlimited\n");
  for (int i = 0; i < 5; ++i) trace_trigtest_ping(i, "a");
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  EXPECT_EQ(values(buffer(), "ping"), std::vector<int32_t>{0});
}

TEST_P(TriggerTest, TraceonRecordsTheEventThatTurnedTracingOn) {
  ASSERT_GT(wr(ev("ping", "enable"), "1"), 0);
  ASSERT_GT(wr(p("tracing_on"), "0"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "traceon:1"), 0);
  trace_trigtest_ping(7, "a");
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  EXPECT_EQ(rd(ev("ping", "trigger")), "traceon:count=0\n");
  // Spent: turning tracing off again is not undone.
  ASSERT_GT(wr(p("tracing_on"), "0"), 0);
  trace_trigtest_ping(8, "a");
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  EXPECT_EQ(values(buffer(), "ping"), std::vector<int32_t>{7});
}

TEST_P(TriggerTest, CountIsSpentOnlyOnAChangeOfState) {
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff:2"), 0);
  trace_trigtest_ping(1, "a");  // on -> off: spends one
  trace_trigtest_ping(2, "a");  // already off: spends none
  EXPECT_EQ(rd(ev("ping", "trigger")), "traceoff:count=1\n");
  ASSERT_GT(wr(p("tracing_on"), "1"), 0);
  trace_trigtest_ping(3, "a");
  EXPECT_EQ(rd(ev("ping", "trigger")), "traceoff:count=0\n");
  ASSERT_GT(wr(p("tracing_on"), "1"), 0);
  trace_trigtest_ping(4, "a");
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
}

// Each line of the trigger file, written back after a '!', removes its
// trigger: the kernel does not parse a removal's count or filter, so the
// listing's "count=1", "unlimited" and "if ..." are accepted there (the
// kernel selftests' reset_trigger_file writes them). Before: EINVAL,
// "Invalid count".
TEST_P(TriggerTest, AListedLineWrittenBackAfterABangRemovesItsTrigger) {
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff:3 if n > 1"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "stacktrace"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "enable_event:trigtest:pong:2"), 0);
  std::vector<std::string> listed;
  {
    std::istringstream in(rd(ev("ping", "trigger")));
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') listed.push_back(line);
  }
  ASSERT_EQ(listed.size(), 3u) << rd(ev("ping", "trigger"));
  for (const std::string& line : listed) {
    EXPECT_GT(wr(ev("ping", "trigger"), "!" + line), 0) << line;
  }
  EXPECT_EQ(rd(ev("ping", "trigger")),
            "# Available triggers:\n"
            "# traceon traceoff snapshot stacktrace enable_event disable_event "
            "enable_hist disable_hist hist\n");
}

TEST_P(TriggerTest, FiresWhenTheEventIsNotEnabled) {
  // The kernel's soft mode: a trigger makes the event fire even where it
  // is not recorded.
  ASSERT_EQ(rd(ev("pong", "enable")), "0\n");
  ASSERT_GT(wr(ev("pong", "trigger"), "traceoff"), 0);
  trace_trigtest_pong(1);
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  EXPECT_TRUE(values(buffer(), "pong").empty());
}

TEST_P(TriggerTest, EnableAndDisableEventWithSoftMode) {
  ASSERT_GT(wr(ev("ping", "trigger"), "enable_event:trigtest:pong:1"), 0);
  EXPECT_EQ(rd(ev("pong", "enable")), "0*\n");
  trace_trigtest_pong(1);  // not yet enabled
  trace_trigtest_ping(1, "a");
  EXPECT_EQ(rd(ev("pong", "enable")), "1*\n");
  EXPECT_EQ(rd(ev("ping", "trigger")), "enable_event:trigtest:pong:count=0\n");
  trace_trigtest_pong(2);
  ASSERT_GT(wr(ev("ping", "trigger"), "disable_event:trigtest:pong"), 0);
  EXPECT_EQ(rd(ev("ping", "trigger")),
            "disable_event:trigtest:pong:unlimited\nenable_event:trigtest:pong:count=0\n");
  trace_trigtest_ping(2, "a");
  trace_trigtest_pong(3);  // disabled again
  EXPECT_EQ(values(buffer(), "pong"), std::vector<int32_t>{2});
  ASSERT_GT(wr(ev("ping", "trigger"), "!enable_event:trigtest:pong"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "!disable_event:trigtest:pong"), 0);
  EXPECT_EQ(rd(ev("pong", "enable")), "0\n");  // soft mode over; the state stays
  EXPECT_EQ(rd(ev("ping", "trigger")).rfind("# Available triggers:", 0), 0u);
}

TEST_P(TriggerTest, SnapshotTriggerAllocatesAndKeepsTheFiringEvent) {
  ASSERT_GT(wr(ev("ping", "enable"), "1"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "snapshot:1"), 0);
  EXPECT_TRUE(inst()->snapshots().allocated());
  trace_trigtest_ping(1, "first");
  trace_trigtest_ping(2, "second");
  const std::string snap = rd(p("snapshot"));
  EXPECT_NE(snap.find("n=1 name=first"), std::string::npos) << snap;
  EXPECT_EQ(snap.find("n=2"), std::string::npos) << snap;
  EXPECT_EQ(values(buffer(), "ping"), std::vector<int32_t>{2});
  EXPECT_EQ(rd(ev("ping", "trigger")), "snapshot:count=0\n");
}

}  // namespace

// Exported (the test links with -rdynamic) so that dladdr names them.
[[gnu::noinline, gnu::visibility("default")]] void trigtest_fire_ping_from_here(int n) {
  trace_trigtest_ping(n, "stack");
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
}

[[gnu::noinline, gnu::visibility("default")]] void trigtest_fire_dyn_from_here() {
  trace_trigtest_dyn("/x");
  asm volatile("" ::: "memory");
}

namespace {

// The kernel's tracefs, where it can be mounted: the oracle for what the
// ftrace system's event directories hold and what a trigger on
// ftrace/print does with trace_marker writes. An instance of its own,
// removed (with its triggers) at the end; dir() empty: not available.
class KernelInstance {
 public:
  KernelInstance() {
    const std::string k = "/sys/kernel/tracing";
    struct stat st;
    if (::stat((k + "/instances").c_str(), &st) != 0 &&
        ::mount("nodev", k.c_str(), "tracefs", 0, nullptr) != 0)
      return;
    const std::string dir = k + "/instances/usrtrace_trigger_test_" + std::to_string(getpid());
    if (::mkdir(dir.c_str(), 0750) == 0) dir_ = dir;
  }
  ~KernelInstance() {
    if (dir_.empty()) return;
    // The kernel refuses to remove an instance whose event has triggers.
    for (const std::string& t : triggers_) remove_trigger(t);
    ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }
  void added_trigger(const std::string& t) { triggers_.push_back(t); }

 private:
  void remove_trigger(const std::string& t) const;
  std::string dir_;
  std::vector<std::string> triggers_;
};
bool kwrite(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}
std::string kread(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void KernelInstance::remove_trigger(const std::string& t) const {
  kwrite(dir_ + "/events/ftrace/print/trigger", "!" + t);
}
std::vector<std::string> kernel_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// events/ftrace/: format files, id for print and function, a trigger file
// (and hist) for print, as the kernel has them.
TEST_P(TriggerTest, FtraceEventDirectoriesHoldTheKernelsFiles) {
  auto files = [&](const char* ev) {
    std::vector<std::string> out;
    EXPECT_EQ(tracefs::list(p(std::string("events/ftrace/") + ev), &out), 0) << ev;
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(files("print"), (std::vector<std::string>{"format", "hist", "id", "trigger"}));
  EXPECT_EQ(files("function"), (std::vector<std::string>{"format", "id"}));
  EXPECT_EQ(files("funcgraph_entry"), (std::vector<std::string>{"format"}));
  EXPECT_EQ(files("user_stack"), (std::vector<std::string>{"format"}));
  const KernelInstance k;
  if (k.dir().empty()) GTEST_SKIP() << "no kernel tracefs to compare with (needs root)";
  for (const char* ev : {"print", "function", "funcgraph_entry", "user_stack"}) {
    std::vector<std::string> kf = kernel_files(k.dir() + "/events/ftrace/" + ev);
    // hist: only in a kernel built with CONFIG_HIST_TRIGGERS.
    std::vector<std::string> ours = files(ev);
    if (std::find(kf.begin(), kf.end(), "hist") == kf.end()) std::erase(ours, "hist");
    EXPECT_EQ(ours, kf) << ev;
  }
}

// `traceoff if buf ~ "*ERROR*"` on ftrace/print: trace_marker writes fire
// it, the matching one is recorded and tracing stops, as the kernel does
// (checked side by side where its tracefs is there); printk does not fire
// it; a stacktrace and a hist trigger see the marker too.
TEST_P(TriggerTest, TraceMarkerWritesFireFtracePrintsTriggers) {
  const std::string trig = p("events/ftrace/print/trigger");
  ASSERT_GT(wr(trig, "traceoff if buf ~ \"*ERROR*\""), 0);
  EXPECT_EQ(rd(trig), "traceoff:unlimited if buf ~ \"*ERROR*\"\n");
  ASSERT_GT(inst()->printk("an ERROR from printk\n", 0x1), 0);
  EXPECT_EQ(rd(p("tracing_on")), "1\n") << "printk does not fire print's triggers";
  // The three writes: the first two recorded, the ERROR one stops tracing,
  // and the third is refused with EBADF as the kernel refuses a marker
  // when its buffer is off.
  ASSERT_GT(wr(p("trace_marker"), "all good\n"), 0);
  ASSERT_GT(wr(p("trace_marker"), "an ERROR here\n"), 0);
  EXPECT_EQ(wr(p("trace_marker"), "after\n"), -EBADF);
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  const std::string trace = rd(p("trace"));
  EXPECT_EQ(count(trace, "tracing_mark_write: "), 2) << trace;
  EXPECT_NE(trace.find("tracing_mark_write: an ERROR here\n"), std::string::npos) << trace;
  EXPECT_EQ(trace.find("tracing_mark_write: after"), std::string::npos) << trace;

  if (KernelInstance k; !k.dir().empty()) {
    const std::string t = "traceoff if buf ~ \"*ERROR*\"";
    ASSERT_TRUE(kwrite(k.dir() + "/events/ftrace/print/trigger", t));
    k.added_trigger(t);
    EXPECT_EQ(kread(k.dir() + "/events/ftrace/print/trigger"), rd(trig));
    ASSERT_TRUE(kwrite(k.dir() + "/trace_marker", "all good\n"));
    ASSERT_TRUE(kwrite(k.dir() + "/trace_marker", "an ERROR here\n"));
    errno = 0;
    EXPECT_FALSE(kwrite(k.dir() + "/trace_marker", "after\n"));
    EXPECT_EQ(errno, EBADF);
    EXPECT_EQ(kread(k.dir() + "/tracing_on"), "0\n");
    const std::string kt = kread(k.dir() + "/trace");
    EXPECT_EQ(count(kt, "tracing_mark_write: "), 2) << kt;
    EXPECT_NE(kt.find("tracing_mark_write: an ERROR here\n"), std::string::npos) << kt;
  }

  ASSERT_GT(wr(trig, "!traceoff if buf ~ \"*ERROR*\""), 0);
  ASSERT_GT(wr(p("tracing_on"), "1"), 0);
  ASSERT_GE(wr(p("trace"), ""), 0);
  ASSERT_GT(wr(trig, "stacktrace if buf ~ \"stack*\""), 0);
  ASSERT_GT(wr(trig, "hist:keys=buf"), 0);
  for (const char* m : {"stack me\n", "x\n", "x\n"}) ASSERT_GT(wr(p("trace_marker"), m), 0);
  const std::string t2 = rd(p("trace"));
  EXPECT_EQ(count(t2, "<user stack trace>"), 1) << t2;
  EXPECT_LT(t2.find("tracing_mark_write: stack me"), t2.find("<user stack trace>")) << t2;
  const std::string hist = rd(p("events/ftrace/print/hist"));
  EXPECT_NE(hist.find("hitcount:          2"), std::string::npos) << hist;
  EXPECT_NE(hist.find("Hits: 3"), std::string::npos) << hist;
  // Removed, they are gone: no trigger, a marker costs its write only.
  ASSERT_GT(wr(trig, "!stacktrace if buf ~ \"stack*\""), 0);
  ASSERT_GT(wr(trig, "!hist:keys=buf"), 0);
  EXPECT_EQ(rd(trig).rfind("# Available triggers:", 0), 0u) << rd(trig);
}

TEST_P(TriggerTest, StacktraceRecordsTheCallersBacktrace) {
  ASSERT_GT(wr(ev("ping", "trigger"), "stacktrace:2"), 0);
  trigtest_fire_ping_from_here(1);
  trigtest_fire_ping_from_here(2);
  trigtest_fire_ping_from_here(3);
  const std::string trace = rd(p("trace"));
  EXPECT_EQ(count(trace, "<user stack trace>"), 2u) << trace;
  // The first frame is the function that wrote the event, then its
  // caller, the test body: named from the symbol table although it is not
  // exported (dladdr, which reads only .dynsym, could not name it).
  const size_t at = trace.find("<user stack trace>\n => usrtrace::trigtest_fire_ping_from_here(int)+0x");
  ASSERT_NE(at, std::string::npos) << trace;
  const size_t second = trace.find('\n', trace.find('\n', at) + 1) + 1;
  const std::string body =
      " => usrtrace::(anonymous_namespace)::TriggerTest_StacktraceRecordsTheCallersBacktrace_Test";
  EXPECT_EQ(trace.compare(second, body.size(), body), 0) << trace;
  EXPECT_NE(trace.find(" => testing::Test::Run()+0x"), std::string::npos) << trace;
  EXPECT_EQ(rd(ev("ping", "trigger")), "stacktrace:count=0\n");
  // An event with a dynamic field: its emit_dynamic() frame is skipped too.
  ASSERT_GT(wr(ev("dyn", "trigger"), "stacktrace"), 0);
  trigtest_fire_dyn_from_here();
  EXPECT_NE(rd(p("trace")).find("<user stack trace>\n => usrtrace::trigtest_fire_dyn_from_here()+0x"),
            std::string::npos)
      << rd(p("trace"));
}

std::atomic<int> g_handled{0};
}  // namespace

[[gnu::visibility("default")]] void trigtest_on_signal(int) {
  trace_trigtest_ping(100, "handler");
  g_handled.fetch_add(1);
}

namespace {

TEST_P(TriggerTest, TriggersFireFromSignalHandlers) {
  g_handled = 0;  // the other param's run counted too
  ASSERT_GT(wr(ev("ping", "enable"), "1"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "stacktrace"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "enable_event:trigtest:pong"), 0);
  struct sigaction sa = {}, old = {};
  sa.sa_handler = &trigtest_on_signal;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old, nullptr);
  ASSERT_EQ(g_handled.load(), 1);
  const std::string trace = rd(p("trace"));
  EXPECT_NE(trace.find("n=100 name=handler"), std::string::npos) << trace;
  // The unwinder crosses the signal frame: the handler, then raise's caller.
  EXPECT_NE(trace.find("<user stack trace>\n => usrtrace::trigtest_on_signal(int)+0x"), std::string::npos)
      << trace;
  EXPECT_EQ(rd(ev("pong", "enable")), "1*\n");
}

TEST_P(TriggerTest, DuplicatesRemovalAndListingOrder) {
  const std::string t = ev("ping", "trigger");
  ASSERT_GT(wr(t, "traceoff:3"), 0);
  EXPECT_EQ(wr(t, "traceoff"), -EEXIST);
  ASSERT_GT(wr(t, "stacktrace"), 0);
  ASSERT_GT(wr(t, "enable_event:trigtest:pong:0x10"), 0);
  EXPECT_EQ(wr(t, "enable_event:trigtest:pong"), -EEXIST);
  EXPECT_EQ(rd(t), "enable_event:trigtest:pong:count=16\nstacktrace:unlimited\ntraceoff:count=3\n");
  ASSERT_GT(wr(t, "!stacktrace"), 0);
  ASSERT_GT(wr(t, "!stacktrace"), 0);  // not there: ignored, as the kernel does
  ASSERT_GT(wr(t, "!traceoff:7"), 0);  // the count does not matter
  EXPECT_EQ(rd(t), "enable_event:trigtest:pong:count=16\n");
  ASSERT_GT(wr(t, "  \n"), 0);  // nothing
}

TEST_P(TriggerTest, BadCommandsFailWithAnErrorLogLine) {
  const std::string t = ev("ping", "trigger");
  struct Case {
    const char* cmd;
    int err;
    const char* message;
    size_t caret;
  };
  const Case cases[] = {
      {"traceoffx", EINVAL, "Unknown trigger command", 0},
      {"dump", EINVAL, "Unknown trigger command", 0},  // a function command, not a trigger
      {"cpudump", EINVAL, "Unknown trigger command", 0},
      {"traceoff:", EINVAL, "Missing count after ':'", 9},
      {"traceoff:-1", EINVAL, "Invalid count", 9},
      {"traceoff:5:6", EINVAL, "Invalid count", 9},
      {"traceoff junk", EINVAL, "Expected 'if FILTER' after the trigger", 9},
      {"traceoff if", EINVAL, "Missing filter after 'if'", 11},
      {"traceoff if  ", EINVAL, "Missing filter after 'if'", 11},
      {"enable_event", EINVAL, "Expected SYS:EVENT", 12},
      {"enable_event:trigtest", EINVAL, "Expected SYS:EVENT", 13},
      {"enable_event:trigtest:nosuch", EINVAL, "Event not found", 13},
      {"enable_event:ftrace:print", EINVAL, "Event not found", 13},
      {"!enable_event:nosuch:x", EINVAL, "Event not found", 14},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.cmd);
    ASSERT_GT(wr(p("error_log"), ""), -1);
    tracefs::write_file(p("error_log"), "", false);  // O_TRUNC clears it
    EXPECT_EQ(wr(t, c.cmd), -c.err);
    const std::string log = rd(p("error_log"));
    const std::string cmd(
        std::string_view(c.cmd).substr(0, std::string_view(c.cmd).find_last_not_of(' ') + 1));
    const std::string want = std::string("event trigger: error: ") + c.message + "\n  Command: " + cmd +
                             "\n" + std::string(11 + c.caret, ' ') + "^\n";
    EXPECT_NE(log.find(want), std::string::npos) << log;
  }
  EXPECT_EQ(rd(t).rfind("# Available triggers:", 0), 0u);
}

// New instance only: the top cannot be removed.
class TriggerRemovalTest : public TriggerTest {};
INSTANTIATE_TEST_SUITE_P(New, TriggerRemovalTest, ::testing::Values("trigtest"), testing::top_or_new);

TEST_P(TriggerRemovalTest, RemovingTheInstanceDropsItsTriggers) {
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff"), 0);
  const int slot = inst()->slot();
  ASSERT_EQ(instance::Instance::destroy(name()), 0);
  int err = 0;
  instance::Instance* again = instance::Instance::create(name(), &err);
  ASSERT_NE(again, nullptr);
  ASSERT_EQ(again->slot(), slot);  // the lowest free slot again
  EXPECT_EQ(rd(ev("ping", "trigger")).rfind("# Available triggers:", 0), 0u);
  trace_trigtest_ping(1, "a");
  EXPECT_EQ(rd(p("tracing_on")), "1\n");
  // The event has nothing left anywhere: back on the plain write path.
  const auto* e = events::Registry::get().find("trigtest", "ping");
  EXPECT_EQ(e->enabled.load() >> internal::kControlBit, 0u);
}

// The other side of TriggerRemovalTest: the top refuses to be removed, and
// its triggers stay and fire.
class TriggerTopTest : public TriggerTest {};
INSTANTIATE_TEST_SUITE_P(Top, TriggerTopTest, ::testing::Values(""), testing::top_or_new);

TEST_P(TriggerTopTest, TheTopCannotBeRemovedAndKeepsItsTriggers) {
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff"), 0);
  EXPECT_EQ(instance::Instance::destroy(""), -EINVAL);
  EXPECT_EQ(instance::Instance::destroy(instance::Instance::top(), 0), -EINVAL);
  EXPECT_EQ(instance::Instance::top(), inst());
  EXPECT_EQ(rd(ev("ping", "trigger")), "traceoff:unlimited\n");
  trace_trigtest_ping(1, "a");
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
}

TEST_P(TriggerTest, TriggersAreKeptPerInstance) {
  const testing::OtherInstance other(top());
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff"), 0);
  trace_trigtest_ping(1, "a");
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
  EXPECT_EQ(rd(other.path("tracing_on")), "1\n");  // the other instance has no trigger
  EXPECT_EQ(rd(other.path("events/trigtest/ping/trigger")).rfind("# Available triggers:", 0), 0u);
}

TEST_P(TriggerTest, UnloadingAnEventDropsItsTriggersAndThoseNamingIt) {
  void* h = dlopen(USRTRACE_DSO_EVENTS, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto fire = reinterpret_cast<void (*)(int32_t)>(dlsym(h, "dsotest_fire"));
  ASSERT_NE(fire, nullptr);
  const std::string dso_trigger = p("events/dsotest/ping/trigger");
  ASSERT_GT(wr(dso_trigger, "enable_event:trigtest:pong"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "enable_event:dsotest:ping"), 0);
  ASSERT_GT(wr(ev("ping", "trigger"), "traceoff:1"), 0);
  fire(1);
  EXPECT_EQ(rd(ev("pong", "enable")), "1*\n");
  ASSERT_EQ(dlclose(h), 0);
  // What named the unloaded event is gone; the rest stays and works.
  EXPECT_EQ(rd(ev("ping", "trigger")), "traceoff:count=1\n");
  EXPECT_EQ(rd(ev("pong", "enable")), "1\n");
  trace_trigtest_ping(1, "a");
  EXPECT_EQ(rd(p("tracing_on")), "0\n");
}

std::atomic<int> g_interrupts{0};
void on_interrupt(int) {
  trace_trigtest_ping(-1, "signal");
  g_interrupts.fetch_add(1, std::memory_order_relaxed);
}

TEST_P(TriggerTest, ChangingTriggersWhileThreadsWrite) {
  // Writers on every CPU, interrupted by signal handlers that write too,
  // while the control plane adds and removes triggers, filters and a
  // histogram: no torn state (the TSan and ASan builds check the memory
  // side), and every counted firing is accounted for.
  ASSERT_GT(wr(ev("ping", "enable"), "1"), 0);
  struct sigaction sa = {}, old = {};
  sa.sa_handler = &on_interrupt;
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w)
    writers.emplace_back([&stop, w] {
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) trace_trigtest_ping(w * 1000000 + i, "w");
    });
  const std::string t = ev("ping", "trigger");
  for (int round = 0; round < 50; ++round) {
    ASSERT_GT(wr(t, "enable_event:trigtest:pong:3"), 0);
    ASSERT_GT(wr(t, "traceon"), 0);
    ASSERT_GT(wr(t, "hist:keys=name:vals=n if n >= 0"), 0);
    ASSERT_GT(wr(ev("ping", "filter"), "n > 5 && name ~ \"w*\""), 0);
    pthread_kill(writers[static_cast<size_t>(round % 3)].native_handle(), SIGUSR2);
    ASSERT_GT(wr(t, "!enable_event:trigtest:pong"), 0);
    ASSERT_GT(wr(t, "!traceon"), 0);
    ASSERT_GT(wr(t, round % 2 ? "hist:keys=name:vals=n:clear if n >= 0" : "!hist:keys=name:vals=n if n >= 0"),
              0);
    if (round % 2) {
      ASSERT_GT(wr(t, "!hist:keys=name:vals=n if n >= 0"), 0);
    }
    ASSERT_GT(wr(ev("ping", "filter"), "0"), 0);
    ASSERT_GT(wr(ev("pong", "enable"), "0"), 0);
  }
  ASSERT_GT(wr(t, "disable_event:trigtest:pong:5"), 0);
  ASSERT_GT(wr(ev("pong", "enable"), "1"), 0);
  // A writer fires it once (pong is on, so the state changes and one firing
  // is spent); while it stays off, no other firing is spent.
  while (rd(ev("pong", "enable")) != "0*\n") std::this_thread::yield();
  stop = true;
  for (auto& th : writers) th.join();
  sigaction(SIGUSR2, &old, nullptr);
  EXPECT_EQ(rd(t), "disable_event:trigtest:pong:count=4\n");
  EXPECT_GT(g_interrupts.load(), 0);
}

}  // namespace
}  // namespace usrtrace
