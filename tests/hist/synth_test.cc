// Synthetic events (src/hist/synth.h) through the control files:
// synthetic_events and dynamic_events definitions, listings and removals,
// the kernel's error texts and carets in error_log, EBUSY while in use, the
// format files, records written by synth::trace() as `trace` prints them,
// libtraceevent, `usrtrace report` and trace-cmd reading the same records,
// and a filter on a synthetic event's field.
#include "hist/synth.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "events/registry.h"
#include "instance/instance.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "tracefs/tracefs_test_util.h"
#include "usrtrace/event.h"
#include "usrtrace/tracedat.h"

#ifdef USRTRACE_HAVE_TRACEEVENT
extern "C" {
#include <event-parse.h>
#include <trace-seq.h>
}
#endif

// An ordinary event, for the triggers that name a synthetic event.
USRTRACE_EVENT(synthtest, tick, (int32_t, n), "n=%d", REC->n)

namespace usrtrace {
namespace {

namespace synth = hist::synth;
using tracefs_test::rd;

long put(const std::string& path, std::string_view text) { return tracefs::write_file(path, text); }
long add(const std::string& path, std::string_view text) { return tracefs::write_file(path, text, true); }

constexpr const char* kWakeup = "wakeup_latency u64 lat; pid_t pid; int prio";
// Every kind of field: a static string, a dynamic one, a stack, and the
// narrow numbers whose printing has a quirk.
constexpr const char* kStrings = "strev char comm[16]; char[] name; unsigned long[] stack; s8 small; bool ok";

std::string sfile(const std::string& event, const char* file) {
  return "events/synthetic/" + event + "/" + file;
}

bool exists(const std::string& path) {
  tracefs::Stat st;
  return tracefs::stat(path, &st) == 0;
}

// The last error_log entry, without its time stamp.
std::string last_error(const std::string& dir = "") {
  const std::string log = rd(dir + "error_log");
  // An entry starts a line with "[  secs.usecs] ".
  size_t start = log.rfind("\n[");
  start = start == std::string::npos ? 0 : start + 1;
  if (log.empty() || log[start] != '[') return "";
  const size_t head = log.find("] ", start);
  return head == std::string::npos ? "" : log.substr(head + 2);
}

// An error_log entry as the kernel writes it (a long command cut to the
// log's 256 bytes).
std::string entry(const std::string& text, const std::string& cmd, size_t caret) {
  return "synthetic_events: error: " + text + "\n  Command: " + cmd.substr(0, 256) + "\n" +
         std::string(11 + caret, ' ') + "^\n";
}

// The text after "EVENT: " on each line of `text` that has it (trace-cmd
// pads the name with blanks: they go too).
std::vector<std::string> event_texts(const std::string& text, const std::string& event) {
  std::vector<std::string> out;
  const std::string tag = " " + event + ": ";
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(at, nl - at);
    if (size_t p = line.find(tag); p != std::string::npos) {
      p += tag.size();
      while (p < line.size() && line[p] == ' ') ++p;
      out.push_back(line.substr(p));
    }
    at = nl + 1;
  }
  return out;
}

uint64_t u(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Every test leaves no synthetic event and an empty error_log.
class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(put("synthetic_events", ""), 0);
    ASSERT_EQ(put("error_log", ""), 0);
  }
  void TearDown() override {
    EXPECT_EQ(put("synthetic_events", ""), 0);
    EXPECT_EQ(synth::count(), 0u);
    EXPECT_EQ(put("error_log", ""), 0);
  }
};

TEST_F(SynthTest, DefineListAndRemove) {
  EXPECT_EQ(rd("synthetic_events"), "");
  ASSERT_EQ(add("synthetic_events", kWakeup), static_cast<long>(std::strlen(kWakeup)));
  EXPECT_EQ(rd("synthetic_events"), "wakeup_latency\tu64 lat; pid_t pid; int prio\n");
  for (const char* f : {"enable", "filter", "format", "id", "trigger", "hist"})
    EXPECT_TRUE(exists(sfile("wakeup_latency", f))) << f;
  EXPECT_EQ(rd(sfile("wakeup_latency", "enable")), "0\n");
  const auto* d = events::Registry::get().find("synthetic", "wakeup_latency");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(rd(sfile("wakeup_latency", "id")), std::to_string(d->id) + "\n");
  // The interface the hist engine uses.
  auto ev = synth::find("wakeup_latency");
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(synth::name(*ev), "wakeup_latency");
  EXPECT_EQ(&synth::desc(*ev), d);
  const auto& f = synth::fields(*ev);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].name, "lat");
  EXPECT_EQ(f[0].type, "u64");
  EXPECT_EQ(f[0].size, 8);
  EXPECT_FALSE(f[0].is_signed);
  EXPECT_EQ(f[1].type, "pid_t");
  EXPECT_EQ(f[1].size, 4);
  EXPECT_TRUE(f[1].is_signed);
  EXPECT_EQ(f[2].name, "prio");
  EXPECT_FALSE(f[2].is_string || f[2].is_stack);
  EXPECT_TRUE(synth::defined(*ev));
  EXPECT_EQ(synth::find("nosuch"), nullptr);

  ASSERT_GT(add("synthetic_events", "!wakeup_latency"), 0);
  EXPECT_EQ(rd("synthetic_events"), "");
  EXPECT_FALSE(exists(sfile("wakeup_latency", "format")));
  EXPECT_EQ(events::Registry::get().find("synthetic", "wakeup_latency"), nullptr);
  EXPECT_FALSE(synth::defined(*ev));  // ev still holds it
  EXPECT_EQ(synth::find("wakeup_latency"), nullptr);
  // Gone: no such event, and the kernel logs nothing.
  EXPECT_EQ(add("synthetic_events", "!wakeup_latency"), -ENOENT);
  EXPECT_EQ(rd("error_log"), "");
}

TEST_F(SynthTest, SyntaxAsTheKernelTakesIt) {
  // Blanks free-form, a trailing ';', empty pieces, comments and blank
  // lines, several commands in one write; "char s[N]" is "char[N] s";
  // the old syntax without ';' between the fields.
  const std::string text =
      "# a comment\n"
      "\n"
      "   a\tu64  x ;s32 y;;  \n"
      "b unsigned int u; char c[8]; char[] d; long[] st;  # the rest is a comment\n"
      "c u8 p u16 q\n"
      "d char[020] e; unsigned long[] f; unsigned char g; bool h; long i; unsigned long j; char k\n";
  ASSERT_EQ(add("synthetic_events", text), static_cast<long>(text.size())) << rd("error_log");
  EXPECT_EQ(rd("synthetic_events"),
            "a\tu64 x; s32 y\n"
            "b\tunsigned int u; char[8] c; char[] d; long[] st\n"
            "c\tu8 p; u16 q\n"
            "d\tchar[16] e; unsigned long[] f; unsigned char g; bool h; long i; unsigned long j; char k\n");
  auto b = synth::find("b");
  ASSERT_NE(b, nullptr);
  const auto& f = synth::fields(*b);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[1].size, 8);
  EXPECT_TRUE(f[1].is_string);
  EXPECT_EQ(f[2].size, 0);
  EXPECT_TRUE(f[2].is_string);
  EXPECT_TRUE(f[3].is_stack);
  EXPECT_FALSE(f[3].is_string);
  // Removal with the fields: they must be the event's.
  EXPECT_EQ(add("synthetic_events", "!a u64 x; s64 y"), -ENOENT);
  EXPECT_EQ(add("synthetic_events", "!a u64 x"), -ENOENT);
  EXPECT_NE(synth::find("a"), nullptr);
  EXPECT_GT(add("synthetic_events", "!a u64 x;s32   y"), 0);
  EXPECT_EQ(synth::find("a"), nullptr);
  EXPECT_EQ(rd("error_log"), "");
  // 32 fields are fine.
  std::string many = "many";
  for (int i = 0; i < 32; ++i) many += " u64 f" + std::to_string(i) + ";";
  EXPECT_GT(add("synthetic_events", many), 0);
  ASSERT_NE(synth::find("many"), nullptr);
  EXPECT_EQ(synth::fields(*synth::find("many")).size(), 32u);
  // `>` removes them all.
  EXPECT_EQ(put("synthetic_events", ""), 0);
  EXPECT_EQ(rd("synthetic_events"), "");
  EXPECT_EQ(synth::count(), 0u);
}

struct BadCase {
  const char* cmd;
  int err;
  const char* text;
  size_t caret;
};

TEST_F(SynthTest, EveryErrorWithItsTextAndCaret) {
  std::string too_many = "tm";
  for (int i = 0; i < 33; ++i) too_many += " u64 f" + std::to_string(i) + ";";
  std::string too_big = "tb";
  for (int i = 0; i < 9; ++i) too_big += " char s" + std::to_string(i) + "[256];";
  const std::string cmd_form = "Command must be of the form: <name> field[;field] ...";
  const BadCase cases[] = {
      {"1abc u64 x", EINVAL, "Illegal name", 0},
      {"foo-bar u64 x", EINVAL, "Illegal name", 0},
      {"foo u64", EINVAL, cmd_form.c_str(), 0},
      {"foo", EINVAL, cmd_form.c_str(), 0},
      {"foo; u64 a", EINVAL, cmd_form.c_str(), 0},
      {"foo u64 a; unsigned", EINVAL, "Incomplete type", 11},
      {"foo u64 a; unsigned int", EINVAL, "Incomplete type", 11},
      {"foo u64 a; u32", EINVAL, "Invalid field", 11},
      {"foo u64 a; u64 1b", EINVAL, "Illegal name", 15},
      {"foo u64 a-b", EINVAL, "Illegal name", 8},
      {"foo u64 a; float b", EINVAL, "Invalid type", 11},
      {"foo u64 a; unsigned u64 b", EINVAL, "Invalid type", 20},
      {"foo u64 a; int b[4]", EINVAL, "Invalid type", 11},
      {"foo u64 a; char[x] b", EINVAL, "Invalid type", 11},
      {"foo u64 a; char b[300]", EINVAL, "Invalid array specification", 16},
      {"foo u64 a; char b[12]x", EINVAL, "Invalid array specification", 16},
      {"foo u64 a; char b[1234]", EINVAL, "Invalid array specification", 16},
      {"foo u64 a; unsigned long s[3]", EINVAL, "Invalid array specification", 25},
      {too_many.c_str(), EINVAL, "Too many fields", 0},
      {too_big.c_str(), EINVAL, "Too many fields", 0},
  };
  for (const BadCase& c : cases) {
    ASSERT_EQ(put("error_log", ""), 0);
    // Leading blanks are not part of the command the caret is in.
    EXPECT_EQ(add("synthetic_events", std::string("  ") + c.cmd + "\n"), -c.err) << c.cmd;
    EXPECT_EQ(last_error(), entry(c.text, c.cmd, c.caret)) << c.cmd;
    EXPECT_EQ(synth::count(), 0u) << c.cmd;
  }
  // Defined twice: EEXIST, the caret under the name.
  ASSERT_GT(add("synthetic_events", "foo u64 a"), 0);
  EXPECT_EQ(add("synthetic_events", "foo u32 b"), -EEXIST);
  EXPECT_EQ(last_error(), entry("Event already exists", "foo u32 b", 0));
  // A write stops at its first bad line; the lines before it stay.
  ASSERT_EQ(put("error_log", ""), 0);
  EXPECT_EQ(add("synthetic_events", "a u64 x\nb float y\nc u64 z\n"), -EINVAL);
  EXPECT_EQ(last_error(), entry("Invalid type", "b float y", 2));
  EXPECT_NE(synth::find("a"), nullptr);
  EXPECT_EQ(synth::find("b"), nullptr);
  EXPECT_EQ(synth::find("c"), nullptr);
  // The interface's own error: the text, the caret and the line.
  synth::Error e;
  size_t at = 99;
  EXPECT_EQ(synth::write_text("x u64 y\n  z u64 1q # c\n", &e, &at), -EINVAL);
  EXPECT_EQ(e.text, "Illegal name");
  EXPECT_EQ(e.pos, 6u);
  EXPECT_EQ(e.command, "z u64 1q ");
  EXPECT_EQ(at, 10u);
}

TEST_F(SynthTest, BusyWhileEnabledHeldOrNamedByATrigger) {
  (void)&usrtrace_event_synthtest_tick::registrar;
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  // Enabled in an instance.
  ASSERT_GT(put(sfile("wakeup_latency", "enable"), "1"), 0);
  EXPECT_EQ(add("synthetic_events", "!wakeup_latency"), -EBUSY);
  EXPECT_EQ(put("synthetic_events", ""), -EBUSY);  // `>`: none goes
  EXPECT_EQ(add("dynamic_events", "-:synthetic/wakeup_latency"), -EBUSY);
  EXPECT_EQ(put("dynamic_events", ""), -EBUSY);
  EXPECT_EQ(rd("error_log"), "") << "EBUSY is not logged";
  EXPECT_EQ(rd("synthetic_events"), "wakeup_latency\tu64 lat; pid_t pid; int prio\n");
  ASSERT_GT(put(sfile("wakeup_latency", "enable"), "0"), 0);
  // Enabled in another instance only.
  ASSERT_EQ(tracefs::mkdir("instances/synth_busy"), 0);
  ASSERT_GT(put("instances/synth_busy/" + sfile("wakeup_latency", "enable"), "1"), 0);
  EXPECT_EQ(add("synthetic_events", "!wakeup_latency"), -EBUSY);
  ASSERT_EQ(tracefs::rmdir("instances/synth_busy"), 0);
  // Held by a hist trigger (hold()).
  auto ev = synth::find_and_hold("wakeup_latency");
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(add("synthetic_events", "!wakeup_latency"), -EBUSY);
  synth::hold(*ev, +1);
  synth::hold(*ev, -1);
  EXPECT_EQ(add("synthetic_events", "!wakeup_latency"), -EBUSY);
  synth::hold(*ev, -1);
  // Named by an enable_event trigger of another event (soft mode).
  const std::string trig = "events/synthtest/tick/trigger";
  ASSERT_GT(add(trig, "enable_event:synthetic:wakeup_latency"), 0) << rd("error_log");
  EXPECT_EQ(add("synthetic_events", "!wakeup_latency"), -EBUSY);
  ASSERT_GT(add(trig, "!enable_event:synthetic:wakeup_latency"), 0);
  // Free: it goes.
  EXPECT_GT(add("synthetic_events", "!wakeup_latency"), 0);
  EXPECT_EQ(rd("error_log"), "");
}

TEST_F(SynthTest, FormatFiles) {
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  ASSERT_GT(add("synthetic_events", kStrings), 0);
  const std::string common =
      "format:\n"
      "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
      "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
      "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
      "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";
  const auto* w = events::Registry::get().find("synthetic", "wakeup_latency");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(rd(sfile("wakeup_latency", "format")),
            "name: wakeup_latency\nID: " + std::to_string(w->id) + "\n" + common +
                "\tfield:u64 lat;\toffset:8;\tsize:8;\tsigned:0;\n"
                "\tfield:pid_t pid;\toffset:16;\tsize:4;\tsigned:1;\n"
                "\tfield:int prio;\toffset:24;\tsize:4;\tsigned:1;\n"
                "\nprint fmt: \"lat=%llu pid=%d prio=%d\", REC->lat, REC->pid, REC->prio\n");
  EXPECT_EQ(w->fixed_size, 32);
  const auto* s = events::Registry::get().find("synthetic", "strev");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(
      rd(sfile("strev", "format")),
      "name: strev\nID: " + std::to_string(s->id) + "\n" + common +
          "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n"
          "\tfield:__data_loc char[] name;\toffset:24;\tsize:8;\tsigned:1;\n"
          "\tfield:__data_loc unsigned long[] stack;\toffset:32;\tsize:8;\tsigned:1;\n"
          "\tfield:s8 small;\toffset:40;\tsize:1;\tsigned:1;\n"
          "\tfield:bool ok;\toffset:48;\tsize:1;\tsigned:1;\n"
          "\nprint fmt: \"comm=%s name=%s stack=%s small=%d ok=%u\", REC->comm, __get_str(name), "
          "__print_array(__get_dynamic_array(stack), __get_dynamic_array_len(stack) / 8, 8), REC->small, "
          "REC->ok\n");
  EXPECT_EQ(s->fixed_size, 56);
  // A char[N] takes N bytes rounded up to 8.
  ASSERT_GT(add("synthetic_events", "odd char a[5]; u16 b; char c[9]; u8 d"), 0);
  const auto* o = events::Registry::get().find("synthetic", "odd");
  ASSERT_NE(o, nullptr);
  ASSERT_EQ(o->nfields, 4);
  EXPECT_EQ(o->fields[0].offset, 8);
  EXPECT_EQ(o->fields[1].offset, 16);
  EXPECT_EQ(o->fields[2].offset, 24);
  EXPECT_EQ(o->fields[2].size, 9);
  EXPECT_EQ(o->fields[3].offset, 40);
  EXPECT_EQ(o->fixed_size, 48);
}

TEST_F(SynthTest, DynamicEventsLines) {
  ASSERT_GT(add("dynamic_events", "s:synthetic/dyn_a u64 lat; pid_t pid"), 0) << rd("error_log");
  ASSERT_GT(add("dynamic_events", "  s:dyn_b\tchar[] s;"), 0) << rd("error_log");
  ASSERT_GT(add("synthetic_events", "dyn_c int x"), 0);
  EXPECT_EQ(rd("dynamic_events"),
            "s:synthetic/dyn_a\tu64 lat; pid_t pid\n"
            "s:synthetic/dyn_b\tchar[] s\n"
            "s:synthetic/dyn_c\tint x\n");
  EXPECT_EQ(rd("synthetic_events"), "dyn_a\tu64 lat; pid_t pid\ndyn_b\tchar[] s\ndyn_c\tint x\n");
  EXPECT_TRUE(exists(sfile("dyn_a", "format")));
  EXPECT_EQ(rd("uprobe_events"), "") << "not a probe";
  // Errors, logged under synthetic_events with the whole line.
  const BadCase cases[] = {
      {"s:other/x u64 a", EINVAL, "Command must be of the form: s or -:[synthetic/]<name> field[;field] ...",
       0},
      {"s:x", EINVAL, "Command must be of the form: <name> field[;field] ...", 0},
      {"s:x u64", EINVAL, "Command must be of the form: <name> field[;field] ...", 0},
      {"s:synthetic/1x u64 a", EINVAL, "Illegal name", 12},
      {"s:y u64 a; float b", EINVAL, "Invalid type", 11},
      {"s:dyn_a u64 a", EEXIST, "Event already exists", 2},
  };
  for (const BadCase& c : cases) {
    ASSERT_EQ(put("error_log", ""), 0);
    EXPECT_EQ(add("dynamic_events", c.cmd), -c.err) << c.cmd;
    EXPECT_EQ(last_error(), entry(c.text, c.cmd, c.caret)) << c.cmd;
  }
  ASSERT_EQ(put("error_log", ""), 0);
  // Removals: with the group, without it, with the fields.
  EXPECT_GT(add("dynamic_events", "-:synthetic/dyn_a"), 0);
  EXPECT_EQ(add("dynamic_events", "-:dyn_b int s"), -ENOENT);
  EXPECT_GT(add("dynamic_events", "-:dyn_b char[] s"), 0);
  EXPECT_GT(add("dynamic_events", "-:dyn_c"), 0);
  EXPECT_EQ(add("dynamic_events", "-:synthetic/dyn_c"), -ENOENT);
  EXPECT_EQ(rd("dynamic_events"), "");
  EXPECT_EQ(rd("error_log"), "");
  // `>` on dynamic_events removes them too.
  ASSERT_GT(add("dynamic_events", "s:dyn_d u64 a"), 0);
  EXPECT_EQ(put("dynamic_events", ""), 0);
  EXPECT_EQ(synth::count(), 0u);
}

// Records: synth::trace() to the instance that enabled the event, on the
// top instance and on a new one.
class SynthTraceTest : public testing::InstanceTest {
 protected:
  void SetUp() override {
    testing::InstanceTest::SetUp();
    ASSERT_EQ(put("synthetic_events", ""), 0);
  }
  void TearDown() override {
    testing::InstanceTest::TearDown();
    EXPECT_EQ(put("synthetic_events", ""), 0);
  }
  std::string ev(const std::string& event, const char* file) { return path(sfile(event, file)); }
  void trace_wakeup(uint64_t lat, uint64_t pid, uint64_t prio) {
    auto e = synth::find("wakeup_latency");
    ASSERT_NE(e, nullptr);
    const uint64_t vals[] = {lat, pid, prio};
    synth::trace(*e, vals, 3);
  }
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, SynthTraceTest, ::testing::Values("", "synth_trace"),
                         testing::top_or_new);

TEST_P(SynthTraceTest, TraceWritesWhatTheTraceFilePrints) {
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  trace_wakeup(1, 2, 3);  // not enabled: nothing
  EXPECT_TRUE(event_texts(rd(path("trace")), "wakeup_latency").empty());
  ASSERT_GT(put(ev("wakeup_latency", "enable"), "1"), 0);
  trace_wakeup(5, 123, 7);
  // Truncated to the fields' sizes; an int prints signed.
  trace_wakeup(~uint64_t{0}, 0x100000000ull + 77, static_cast<uint64_t>(-3));
  // The wrong number of values writes nothing (the kernel's -EINVAL).
  auto e = synth::find("wakeup_latency");
  const uint64_t two[] = {1, 2};
  synth::trace(*e, two, 2);
  EXPECT_EQ(event_texts(rd(path("trace")), "wakeup_latency"),
            (std::vector<std::string>{"lat=5 pid=123 prio=7", "lat=18446744073709551615 pid=77 prio=-3"}));
}

TEST_P(SynthTraceTest, StringsAndStacks) {
  ASSERT_GT(add("synthetic_events", kStrings), 0);
  ASSERT_GT(put(ev("strev", "enable"), "1"), 0);
  auto e = synth::find("strev");
  ASSERT_NE(e, nullptr);
  const uint64_t stack[] = {3, 0x401000, 0x402000, 0x7fff0000};
  const uint64_t v1[] = {u("a-very-long-command-name"), u("hello"), u(stack), static_cast<uint64_t>(-5), 1};
  synth::trace(*e, v1, 5);
  // Null strings are the kernel's "(fault)", a null stack has no frames; a
  // dynamic string is cut at 255 bytes, a stack at 64 frames.
  const std::string long_name(400, 'x');
  uint64_t deep[1 + 80];
  deep[0] = 80;
  for (uint64_t i = 1; i <= 80; ++i) deep[i] = i;
  const uint64_t v2[] = {0, 0, 0, 200, 0};
  synth::trace(*e, v2, 5);
  const uint64_t v3[] = {u(""), u(long_name.c_str()), u(deep), 127, 0};
  synth::trace(*e, v3, 5);
  std::string frames;
  for (int i = 1; i <= 64; ++i) frames += (i > 1 ? " " : "") + std::to_string(i);
  EXPECT_EQ(event_texts(rd(path("trace")), "strev"),
            (std::vector<std::string>{
                "comm=a-very-long-com name=hello stack=4198400 4202496 2147418112 small=251 ok=1",
                "comm=(fault) name=(fault) stack= small=200 ok=0",
                "comm= name=" + std::string(255, 'x') + " stack=" + frames + " small=127 ok=0",
            }));
}

TEST_P(SynthTraceTest, AFilterOnAFieldDropsRecords) {
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  ASSERT_GT(put(ev("wakeup_latency", "enable"), "1"), 0);
  ASSERT_GT(put(ev("wakeup_latency", "filter"), "pid == 123 && lat > 10"), 0) << rd(path("error_log"));
  EXPECT_EQ(rd(ev("wakeup_latency", "filter")), "pid == 123 && lat > 10\n");
  trace_wakeup(20, 123, 1);
  trace_wakeup(20, 124, 2);
  trace_wakeup(5, 123, 3);
  trace_wakeup(30, 123, 4);
  EXPECT_EQ(event_texts(rd(path("trace")), "wakeup_latency"),
            (std::vector<std::string>{"lat=20 pid=123 prio=1", "lat=30 pid=123 prio=4"}));
  // A string field too.
  ASSERT_GT(add("synthetic_events", "named char[] who; char what[8]"), 0);
  ASSERT_GT(put(ev("named", "enable"), "1"), 0);
  ASSERT_GT(put(ev("named", "filter"), "who ~ \"w*\" && what != \"skip\""), 0) << rd(path("error_log"));
  auto n = synth::find("named");
  for (const char* who : {"web", "db", "worker"})
    for (const char* what : {"keep", "skip"}) {
      const uint64_t v[] = {u(who), u(what)};
      synth::trace(*n, v, 2);
    }
  EXPECT_EQ(event_texts(rd(path("trace")), "named"),
            (std::vector<std::string>{"who=web what=keep", "who=worker what=keep"}));
  ASSERT_GT(put(ev("named", "filter"), "0"), 0);
  ASSERT_GT(put(ev("wakeup_latency", "filter"), "0"), 0);
}

TEST_P(SynthTraceTest, AHistTriggerOnASyntheticEvent) {
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  ASSERT_GT(add(ev("wakeup_latency", "trigger"), "hist:keys=pid:vals=lat"), 0) << rd(path("error_log"));
  for (int i = 0; i < 3; ++i) trace_wakeup(10, 42, 0);
  const std::string h = rd(ev("wakeup_latency", "hist"));
  EXPECT_NE(h.find("{ pid:         42 } hitcount:          3  lat:         30\n"), std::string::npos) << h;
  ASSERT_GT(add(ev("wakeup_latency", "trigger"), "!hist:keys=pid:vals=lat"), 0);
}

#ifdef USRTRACE_HAVE_TRACEEVENT
// libtraceevent (trace-cmd's, KernelShark's) parses the formats and prints
// the records as our printer does.
TEST_F(SynthTest, LibtraceeventParsesTheFormatsAndPrintsTheSame) {
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  ASSERT_GT(add("synthetic_events", kStrings), 0);
  ASSERT_GT(add("synthetic_events",
                "nums u64 a; s64 b; u32 c; s32 d; u16 e; s16 f; u8 g; s8 h; int i; "
                "unsigned int j; long k; unsigned long l; pid_t m; bool n; char o; "
                "unsigned char p"),
            0);
  tep_handle* tep = tep_alloc();
  tep_set_long_size(tep, 8);
  tep_set_file_bigendian(tep, TEP_LITTLE_ENDIAN);
  tep_set_local_bigendian(tep, TEP_LITTLE_ENDIAN);
  for (const char* name : {"wakeup_latency", "strev", "nums"}) {
    const std::string text = rd(sfile(name, "format"));
    const enum tep_errno err = tep_parse_event(tep, text.data(), text.size(), "synthetic");
    char why[256];
    tep_strerror(tep, err, why, sizeof why);
    ASSERT_EQ(err, 0) << why << "\n" << text;
    const auto* d = events::Registry::get().find("synthetic", name);
    tep_event* te = tep_find_event(tep, d->id);
    ASSERT_NE(te, nullptr);
    EXPECT_EQ(te->format.nr_fields, d->nfields) << name;
    EXPECT_EQ(static_cast<unsigned>(te->flags) & TEP_EVENT_FL_FAILED, 0u) << name;
  }
  int err = 0;
  auto* inst = instance::Instance::create("synth_tep", &err);
  ASSERT_NE(inst, nullptr) << err;
  EXPECT_EQ(inst->set_event("synthetic", "*", true), 3);
  const uint64_t stack[] = {2, 0xffffffff81000000ull, 0x55d0c0de0000ull};
  const uint64_t wv[] = {5, 123, 7};
  const uint64_t sv[] = {u("comm-name"), u("a dynamic string"), u(stack), static_cast<uint64_t>(-5), 1};
  const uint64_t nv[] = {~0ull,
                         static_cast<uint64_t>(-2),
                         4000000000u,
                         static_cast<uint64_t>(-3),
                         65000,
                         static_cast<uint64_t>(-4),
                         250,
                         static_cast<uint64_t>(-6),
                         static_cast<uint64_t>(-7),
                         4000000001u,
                         static_cast<uint64_t>(-8),
                         1ull << 63,
                         4242,
                         1,
                         static_cast<uint64_t>(-9),
                         200};
  synth::trace(*synth::find("wakeup_latency"), wv, 3);
  synth::trace(*synth::find("strev"), sv, 5);
  synth::trace(*synth::find("nums"), nv, 16);
  int n = 0;
  rb::Event re;
  while (inst->buffer().consume(&re)) {
    internal::CommonHeader h;
    std::memcpy(&h, re.data, sizeof h);
    const auto* d = events::Registry::get().by_id(h.type);
    ASSERT_NE(d, nullptr);
    char buf[2048];
    const int len = d->print(re.data, re.len, buf, sizeof buf);
    ASSERT_GT(len, 0);
    tep_record rec{};
    rec.data = const_cast<uint8_t*>(re.data);
    rec.size = static_cast<int>(re.len);
    trace_seq s;
    trace_seq_init(&s);
    tep_print_event(tep, &s, &rec, "%s", TEP_PRINT_INFO);
    trace_seq_terminate(&s);
    EXPECT_EQ(std::string(s.buffer, s.len), std::string(buf, static_cast<size_t>(len))) << d->name;
    trace_seq_destroy(&s);
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(instance::Instance::destroy("synth_tep"), 0);
  tep_free(tep);
}
#endif

struct CmdResult {
  int rc = -1;
  std::string out;
};

CmdResult run(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// trace.dat: `usrtrace report` and trace-cmd report print the records as
// the trace file does.
TEST_F(SynthTest, ReportAndTraceCmdPrintWhatTheTraceFilePrints) {
  ASSERT_GT(add("synthetic_events", kWakeup), 0);
  ASSERT_GT(add("synthetic_events", kStrings), 0);
  ASSERT_EQ(tracefs::mkdir("instances/synth_dat"), 0);
  ASSERT_GT(put("instances/synth_dat/events/synthetic/enable", "1"), 0);
  const uint64_t stack[] = {2, 0x401000, 0x7f0000001234ull};
  const uint64_t wv[] = {5, 123, 7};
  const uint64_t sv[] = {u("comm"), u("dynamic"), u(stack), static_cast<uint64_t>(-5), 1};
  synth::trace(*synth::find("wakeup_latency"), wv, 3);
  synth::trace(*synth::find("strev"), sv, 5);
  const std::string ours = rd("instances/synth_dat/trace");
  const auto want_w = event_texts(ours, "wakeup_latency"), want_s = event_texts(ours, "strev");
  ASSERT_EQ(want_w, std::vector<std::string>{"lat=5 pid=123 prio=7"});
  ASSERT_EQ(want_s, std::vector<std::string>{"comm=comm name=dynamic stack=4198400 " +
                                             std::to_string(stack[2]) + " small=251 ok=1"});

  char dir[] = "/tmp/usrtrace-synth-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/synth.dat";
  RecordOptions o;
  o.output = file;
  o.instances = {"synth_dat"};
  std::string err;
  ASSERT_EQ(extract_trace(o, &err), 0) << err;
  EXPECT_EQ(tracefs::rmdir("instances/synth_dat"), 0);
  int readers = 0;
#ifdef USRTRACE_CLI
  {
    const CmdResult r = run(std::string(USRTRACE_CLI) + " report -i " + file);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(event_texts(r.out, "wakeup_latency"), want_w) << r.out;
    EXPECT_EQ(event_texts(r.out, "strev"), want_s) << r.out;
    ++readers;
  }
#endif
  if (access("/usr/bin/trace-cmd", X_OK) == 0) {
    const CmdResult r = run("/usr/bin/trace-cmd report " + file);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(event_texts(r.out, "wakeup_latency"), want_w) << r.out;
    EXPECT_EQ(event_texts(r.out, "strev"), want_s) << r.out;
    ++readers;
  }
  unlink(file.c_str());
  rmdir(dir);
  if (readers == 0) GTEST_SKIP() << "neither usrtrace report nor trace-cmd here";
}

}  // namespace
}  // namespace usrtrace
