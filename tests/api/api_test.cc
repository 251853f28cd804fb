// The public API, C and C++, as a program sees it; every instance-scoped
// test runs on the top instance and on a new one. What got recorded is read
// back from the instance's buffer through the event printers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "c_api_test.h"
#include "events/registry.h"
#include "instance/instance.h"
#include "usrtrace/usrtrace.hpp"

USRTRACE_EVENT(apitest, alpha, (int32_t, n), "n=%d", REC->n)
USRTRACE_EVENT(apitest, beta, (int32_t, n), "n=%d", REC->n)
USRTRACE_EVENT(apitest, gamma_x, (int32_t, n), "n=%d", REC->n)
USRTRACE_EVENT(apiother, delta, (int32_t, n), "n=%d", REC->n)

// Callers whose names the print event shows (the test is linked with
// -rdynamic, so dladdr finds them). The empty asm keeps the call from being
// a tail call, which would show the caller's caller.
extern "C" [[gnu::noinline]] int cxx_printk_caller(usrtrace::Instance& inst, int v) {
  int r = inst.printk("cxx printk %d", v);
  asm volatile("" ::: "memory");
  return r;
}
extern "C" [[gnu::noinline]] int cxx_print_caller(usrtrace::Instance& inst, int v) {
  return inst.print("cxx print {} {:>4}|{}", v, "ab", std::string("str"));
}

// A user type whose formatter throws: print() reports it, nothing escapes.
struct Throws {};
template <>
struct fmt::formatter<Throws> : fmt::formatter<int> {
  auto format(Throws, fmt::format_context&) const -> fmt::format_context::iterator {
    throw std::runtime_error("formatter failed");
  }
};

namespace usrtrace {
namespace {

struct Line {
  std::string system, name, text;
};

// Consumes everything in instance NAME's buffer, printed.
std::vector<Line> drain(std::string_view name) {
  std::vector<Line> out;
  instance::Instance* inst = instance::Instance::find(name);
  if (!inst) return out;
  rb::Event ev;
  while (inst->buffer().consume(&ev)) {
    internal::CommonHeader h;
    std::memcpy(&h, ev.data, sizeof h);
    const auto* desc = events::Registry::get().by_id(h.type);
    if (!desc) continue;
    char buf[4096];
    desc->print(ev.data, ev.len, buf, sizeof buf);
    out.push_back({desc->system, desc->name, buf});
  }
  return out;
}

std::vector<std::string> texts(const std::vector<Line>& lines, std::string_view system = "") {
  std::vector<std::string> out;
  for (const auto& l : lines)
    if (system.empty() || l.system == system) out.push_back(l.system + ":" + l.name + " " + l.text);
  return out;
}

class ApiInstanceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    name_ = GetParam();
    auto r = Instance::get_by_name(name_);
    ASSERT_TRUE(r.ok()) << r.message();
    inst_ = std::move(*r);
    ASSERT_TRUE(inst_.valid());
    EXPECT_EQ(inst_.name(), name_);
    EXPECT_EQ(inst_.is_top(), name_.empty());
    impl_ = instance::Instance::find(name_);
    ASSERT_NE(impl_, nullptr);
    impl_->clear_events();
    impl_->buffer().reset();
  }
  void TearDown() override {
    if (!impl_) return;
    impl_->clear_events();
    impl_->set_tracing_on(true);
    if (!name_.empty()) {
      EXPECT_EQ(inst_.destroy(), 0);
    }
  }

  std::string name_;
  Instance inst_;
  instance::Instance* impl_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, ApiInstanceTest, ::testing::Values("", "api_new"),
                         [](const auto& p) { return *p.param ? "New" : "Top"; });

TEST_P(ApiInstanceTest, PrintkRecordsTextWithTheCaller) {
  EXPECT_EQ(cxx_printk_caller(inst_, 7), static_cast<int>(strlen("cxx printk 7")));
  EXPECT_EQ(cxx_print_caller(inst_, 8), static_cast<int>(strlen("cxx print 8   ab|str")));
  EXPECT_EQ(c_printk(inst_.c_array(), 9), static_cast<int>(strlen("c value=9 done\n")));
  EXPECT_EQ(c_vprintk(inst_.c_array(), "c vprintk %u", 10u), static_cast<int>(strlen("c vprintk 10")));
  EXPECT_EQ(inst_.puts("plain text\n"), 11);
  auto got = drain(name_);
  ASSERT_EQ(got.size(), 5u);
  for (const auto& l : got) EXPECT_EQ(l.system + ":" + l.name, "ftrace:print");
  EXPECT_EQ(got[0].text, "cxx_printk_caller: cxx printk 7\n");
  EXPECT_EQ(got[1].text, "cxx_print_caller: cxx print 8   ab|str\n");
  EXPECT_EQ(got[2].text, "c_printk: c value=9 done\n");
  EXPECT_EQ(got[3].text, "c_vprintk: c vprintk 10\n");
  // puts from the test body: a mangled TestBody, or an address.
  EXPECT_NE(got[4].text.find(": plain text\n"), std::string::npos) << got[4].text;
}

TEST_P(ApiInstanceTest, PrintkGoesOnlyToItsInstance) {
  auto other = Instance::create("api_other");
  ASSERT_TRUE(other.ok()) << other.message();
  instance::Instance::find("api_other")->buffer().reset();
  if (!name_.empty()) Instance::top().printk("to the top");
  other->printk("to the other");
  inst_.printk("to mine");
  auto mine = drain(name_);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_NE(mine[0].text.find(": to mine\n"), std::string::npos);
  auto theirs = drain("api_other");
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_NE(theirs[0].text.find(": to the other\n"), std::string::npos);
  EXPECT_EQ(other->destroy(), 0);
  EXPECT_FALSE(other->valid());
}

TEST_P(ApiInstanceTest, LongPrintIsCut) {
  std::string big(5000, 'y');
  EXPECT_EQ(inst_.print("{}", big), static_cast<int>(Instance::kMaxPrint));
  EXPECT_EQ(inst_.printk("%s", big.c_str()), static_cast<int>(Instance::kMaxPrint));
  auto got = drain(name_);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& l : got) {
    size_t colon = l.text.find(": ");
    ASSERT_NE(colon, std::string::npos);
    EXPECT_EQ(l.text.substr(colon + 2), std::string(Instance::kMaxPrint, 'y') + "\n");
  }
}

TEST_P(ApiInstanceTest, PrintWithAFailingFormatter) {
  EXPECT_EQ(inst_.print("before {} after", Throws{}), -EINVAL);
  EXPECT_TRUE(drain(name_).empty());
}

TEST_P(ApiInstanceTest, PrintkRespectsTheTracePrintkOption) {
  impl_->set_option(instance::kOptTracePrintk, false);
  EXPECT_EQ(inst_.printk("hidden"), 0);
  EXPECT_EQ(c_printk(inst_.c_array(), 1), 0);
  impl_->set_option(instance::kOptTracePrintk, true);
  EXPECT_TRUE(drain(name_).empty());
}

TEST_P(ApiInstanceTest, SetEventWithGlobs) {
  EXPECT_EQ(inst_.set_event("apitest", "*", true), 3);
  trace_apitest_alpha(1);
  trace_apitest_beta(2);
  trace_apitest_gamma_x(3);
  trace_apiother_delta(4);
  EXPECT_EQ(texts(drain(name_)),
            (std::vector<std::string>{"apitest:alpha n=1", "apitest:beta n=2", "apitest:gamma_x n=3"}));
  EXPECT_EQ(inst_.set_event("api*", "*a", false), 3);  // alpha, beta and (not enabled) delta
  trace_apitest_alpha(5);
  trace_apitest_beta(6);
  trace_apitest_gamma_x(7);
  EXPECT_EQ(texts(drain(name_)), std::vector<std::string>{"apitest:gamma_x n=7"});
  EXPECT_EQ(inst_.set_event("", "delta", true), 1);  // "" is any system
  EXPECT_EQ(inst_.set_event("nosuch", "*", true), -EINVAL);
  EXPECT_EQ(inst_.set_event("apitest", "nosuch", true), -EINVAL);
  trace_apiother_delta(8);
  EXPECT_EQ(texts(drain(name_)), std::vector<std::string>{"apiother:delta n=8"});
  EXPECT_GE(inst_.set_event("*", "*", false), 4);
  trace_apiother_delta(9);
  trace_apitest_gamma_x(9);
  EXPECT_TRUE(drain(name_).empty());
}

TEST_P(ApiInstanceTest, SetClrEventFromC) {
  EXPECT_EQ(c_set_clr_event(inst_.c_array(), "apitest", "[ab]*", true), 0);
  trace_apitest_alpha(1);
  trace_apitest_beta(2);
  trace_apitest_gamma_x(3);
  EXPECT_EQ(texts(drain(name_)), (std::vector<std::string>{"apitest:alpha n=1", "apitest:beta n=2"}));
  EXPECT_EQ(c_set_clr_event(inst_.c_array(), NULL, "gamma_?", true), 0);
  EXPECT_EQ(c_set_clr_event(inst_.c_array(), "apitest", NULL, false), 0);
  EXPECT_EQ(c_set_clr_event(inst_.c_array(), "apiother", "", true), 0);
  EXPECT_EQ(c_set_clr_event(inst_.c_array(), "nosuch", NULL, true), -EINVAL);
  trace_apitest_alpha(4);
  trace_apitest_gamma_x(5);
  trace_apiother_delta(6);
  EXPECT_EQ(texts(drain(name_)), std::vector<std::string>{"apiother:delta n=6"});
}

TEST_P(ApiInstanceTest, EventsGoOnlyToTheInstancesThatEnableThem) {
  auto other = Instance::create("api_other");
  ASSERT_TRUE(other.ok());
  instance::Instance::find("api_other")->buffer().reset();
  ASSERT_EQ(other->set_event("apitest", "alpha", true), 1);
  trace_apitest_alpha(1);
  EXPECT_TRUE(drain(name_).empty());
  EXPECT_EQ(texts(drain("api_other")), std::vector<std::string>{"apitest:alpha n=1"});
  ASSERT_EQ(inst_.set_event("apitest", "alpha", true), 1);
  trace_apitest_alpha(2);
  EXPECT_EQ(texts(drain(name_)), std::vector<std::string>{"apitest:alpha n=2"});
  EXPECT_EQ(texts(drain("api_other")), std::vector<std::string>{"apitest:alpha n=2"});
  EXPECT_EQ(other->destroy(), 0);
}

TEST_P(ApiInstanceTest, TracingOnOff) {
  ASSERT_EQ(inst_.set_event("apitest", "alpha", true), 1);
  EXPECT_TRUE(inst_.is_tracing_on());
  inst_.tracing_off();
  EXPECT_FALSE(inst_.is_tracing_on());
  EXPECT_FALSE(usrtrace_tracing_is_on(inst_.c_array()));
  trace_apitest_alpha(1);
  inst_.printk("while off");
  EXPECT_TRUE(drain(name_).empty());
  inst_.tracing_on();
  EXPECT_TRUE(inst_.is_tracing_on());
  trace_apitest_alpha(2);
  EXPECT_EQ(texts(drain(name_)), std::vector<std::string>{"apitest:alpha n=2"});

  EXPECT_EQ(c_tracing_on_off(inst_.c_array()), nullptr);
  // Only this instance was switched.
  if (!name_.empty()) {
    inst_.tracing_off();
    EXPECT_TRUE(Instance::top().is_tracing_on());
    EXPECT_TRUE(usrtrace_tracing_is_on(nullptr));  // NULL: the top
    inst_.tracing_on();
  }
}

TEST_P(ApiInstanceTest, ReadTraceThroughTheControlFiles) {
  ASSERT_EQ(inst_.set_event("apitest", "alpha", true), 1);
  trace_apitest_alpha(77);
  ASSERT_GT(cxx_printk_caller(inst_, 78), 0);
  auto trace = inst_.read("trace");
  ASSERT_TRUE(trace.ok()) << trace.message();
  EXPECT_NE(trace->find(" alpha: n=77\n"), std::string::npos) << *trace;
  EXPECT_NE(trace->find(" cxx_printk_caller: cxx printk 78\n"), std::string::npos) << *trace;
  EXPECT_EQ(inst_.dir(), name_.empty() ? "" : "instances/" + name_ + "/");
  // The same bytes through the C call on the root-relative path.
  std::string buf(trace->size() + 100, '\0');
  long n = usrtrace_tracefs_read((inst_.dir() + "trace").c_str(), buf.data(), buf.size());
  ASSERT_GE(n, 0);
  EXPECT_EQ(buf.substr(0, static_cast<size_t>(n)), *trace);
  // enabled from code, visible in the instance's own files
  EXPECT_EQ(inst_.read("events/apitest/alpha/enable").value(), "1\n");
  EXPECT_NE(inst_.read("set_event").value().find("apitest:alpha\n"), std::string::npos);
}

TEST_P(ApiInstanceTest, TracePipeReadConsumes) {
  for (int i = 0; i < 20; ++i) ASSERT_GT(inst_.printk("line %02d", i), 0);
  std::string buf(1 << 16, '\0');
  const std::string path = inst_.dir() + "trace_pipe";
  long n = usrtrace_tracefs_read(path.c_str(), buf.data(), buf.size());
  ASSERT_GT(n, 0);
  buf.resize(static_cast<size_t>(n));
  for (int i = 0; i < 20; ++i) {
    char want[32];
    snprintf(want, sizeof want, ": line %02d\n", i);
    size_t at = buf.find(want);
    EXPECT_NE(at, std::string::npos) << want << " in\n" << buf;
    EXPECT_EQ(buf.find(want, at + 1), std::string::npos) << want << " twice";
  }
  // Consumed: nothing the second time, and nothing left in the buffer;
  // no waiting either (trace_pipe is opened O_NONBLOCK).
  char more[64];
  EXPECT_EQ(usrtrace_tracefs_read(path.c_str(), more, sizeof more), 0);
  EXPECT_TRUE(drain(name_).empty());
}

TEST_P(ApiInstanceTest, WriteAndAppendControlFiles) {
  EXPECT_EQ(inst_.write("set_event", "apitest:alpha"), 13);
  EXPECT_EQ(inst_.append("set_event", "apitest:beta"), 12);
  EXPECT_EQ(inst_.read("set_event").value(), "apitest:alpha\napitest:beta\n");
  trace_apitest_beta(1);
  EXPECT_EQ(texts(drain(name_)), std::vector<std::string>{"apitest:beta n=1"});
  EXPECT_EQ(inst_.write("set_event", "apitest:gamma_x"), 15);  // > replaces
  EXPECT_EQ(inst_.read("set_event").value(), "apitest:gamma_x\n");
  EXPECT_EQ(inst_.write("tracing_on", "0"), 1);
  EXPECT_FALSE(inst_.is_tracing_on());
  EXPECT_EQ(inst_.write("tracing_on", "1"), 1);
  EXPECT_EQ(inst_.read("no_such_file").error(), ENOENT);
  EXPECT_EQ(inst_.write("no_such_file", "1"), -ENOENT);
}

TEST_P(ApiInstanceTest, RefusedWriteLogsAnError) {
  ASSERT_EQ(inst_.write("error_log", ""), 0);  // > clears it
  EXPECT_EQ(inst_.write("trace_clock", "nosuchclock"), -EINVAL);
  EXPECT_EQ(inst_.write("set_event", "nosuch:event"), -EINVAL);
  std::string log = inst_.read("error_log").value();
  EXPECT_NE(log.find("Command: nosuchclock\n"), std::string::npos) << log;
  EXPECT_NE(log.find("Command: nosuch:event\n"), std::string::npos) << log;
  // Only this instance's log has them.
  auto other = Instance::create("api_other");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->read("error_log").value(), "");
  EXPECT_EQ(other->destroy(), 0);
}

TEST_P(ApiInstanceTest, HandlesAreReferences) {
  if (name_.empty()) {
    EXPECT_EQ(inst_.destroy(), -EINVAL);  // the top stays
    EXPECT_TRUE(inst_.valid());
    return;
  }
  Instance copy = inst_;
  EXPECT_EQ(copy.c_array(), inst_.c_array());
  EXPECT_EQ(instance::Instance::destroy(name_), -EBUSY);  // rmdir
  EXPECT_EQ(inst_.destroy(), -EBUSY);                     // the copy holds it
  EXPECT_TRUE(inst_.valid());
  Instance moved = std::move(copy);
  EXPECT_FALSE(copy.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(inst_.destroy(), -EBUSY);
  moved = Instance();  // drops the reference
  auto again = Instance::lookup(name_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->c_array(), inst_.c_array());
  again = Result<Instance>::error(ENOENT);  // drops it too
  EXPECT_EQ(again.error(), ENOENT);
  EXPECT_EQ(inst_.destroy(), 0);
  EXPECT_FALSE(inst_.valid());
  EXPECT_EQ(inst_.destroy(), -EINVAL);
  EXPECT_EQ(Instance::lookup(name_).error(), ENOENT);
  impl_ = nullptr;  // gone
}

TEST(ApiCTest, Lifecycle) {
  const char* r = c_lifecycle("api_c_life");
  EXPECT_EQ(r, nullptr) << r;
}

TEST(ApiCTest, Tracefs) {
  const char* r = c_tracefs("api_c_fs");
  EXPECT_EQ(r, nullptr) << r;
}

TEST(ApiCTest, Errors) {
  const char* r = c_errors();
  EXPECT_EQ(r, nullptr) << r;
}

TEST(ApiCxxTest, Errors) {
  EXPECT_EQ(Instance::create("a/b").error(), EINVAL);
  EXPECT_EQ(Instance::get_by_name("..").error(), EINVAL);
  EXPECT_EQ(Instance::lookup(std::string(65, 'x')).error(), EINVAL);
  EXPECT_EQ(Instance::lookup("api_missing").error(), ENOENT);
  EXPECT_STREQ(Instance::lookup("api_missing").message(), strerror(ENOENT));
  EXPECT_EQ(Instance::create("").error(), EEXIST);
  auto a = Instance::create("api_dup");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Instance::create("api_dup").error(), EEXIST);
  EXPECT_EQ(a->destroy(), 0);

  Instance empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.printk("x"), -ENOENT);
  EXPECT_EQ(empty.print("x"), -ENOENT);
  EXPECT_EQ(empty.set_event("*", "*", true), -ENOENT);
  EXPECT_EQ(empty.destroy(), -EINVAL);
  EXPECT_FALSE(empty.is_tracing_on());
  empty.tracing_on();  // nothing to do
  EXPECT_EQ(empty.name(), "");
}

TEST(ApiCxxTest, GetByNameCreatesOnceUnderRaces) {
  constexpr int kThreads = 8;
  std::vector<Instance> got(kThreads);
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&, i] { got[static_cast<size_t>(i)] = Instance::get_by_name("api_race").value(); });
  for (auto& t : ts) t.join();
  for (const auto& g : got) EXPECT_EQ(g.c_array(), got[0].c_array());
  auto names = instance::Instance::names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "api_race"), 1);
  Instance last = got[0];
  got.clear();
  EXPECT_EQ(last.destroy(), 0);
}

TEST(ResultTest, ValueAndError) {
  Result<std::string> ok = std::string("v");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.error(), 0);
  EXPECT_EQ(*ok, "v");
  EXPECT_EQ(ok->size(), 1u);
  Result<std::string> bad = Result<std::string>::error(-ENOENT);  // either sign
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error(), ENOENT);
  EXPECT_EQ(Result<int>::error(0).error(), EINVAL);
  bad = ok;
  EXPECT_EQ(bad.value(), "v");
  EXPECT_DEATH((void)Result<int>::error(EIO).value(), "");
}

}  // namespace
}  // namespace usrtrace
