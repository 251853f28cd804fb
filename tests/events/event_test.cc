// Typed events: layout, format text, printer, enabling per instance.
#include "usrtrace/event.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "events/registry.h"
#include "instance/instance.h"
#include "writers/writers.h"

#include <pthread.h>

enum class Mode : uint8_t { kIdle = 0, kBusy = 2 };

USRTRACE_EVENT(evtest, request, (uint64_t, id)(uint32_t, bytes)(char[16], name)(Mode, mode)(bool, ok),
               "id=%llu bytes=%u name=%s mode=%u ok=%d", REC->id, REC->bytes, REC->name, REC->mode, REC->ok)
USRTRACE_EVENT(evtest, message, (const char*, text)(int32_t, level), "level=%d text=%s", REC->level,
               __get_str(text))

namespace usrtrace {
namespace {

using instance::Instance;

std::vector<std::string> drain(Instance* inst, uint16_t want_id) {
  std::vector<std::string> out;
  rb::Event ev;
  while (inst->buffer().consume(&ev)) {
    internal::CommonHeader h;
    std::memcpy(&h, ev.data, sizeof h);
    if (h.type != want_id) continue;
    const auto* desc = events::Registry::get().by_id(h.type);
    char buf[512];
    desc->print(ev.data, ev.len, buf, sizeof buf);
    out.emplace_back(buf);
  }
  return out;
}

TEST(EventTest, RegisteredWithLayoutAndFormat) {
  auto* ev = events::Registry::get().find("evtest", "request");
  ASSERT_NE(ev, nullptr);
  EXPECT_GE(ev->id, events::kFirstDynamicId);
  EXPECT_EQ(events::Registry::get().by_id(ev->id), ev);
  std::string f = events::format_text(*ev);
  EXPECT_NE(f.find("name: request\nID: " + std::to_string(ev->id) + "\nformat:\n"), std::string::npos);
  EXPECT_NE(f.find("\tfield:u64 id;\toffset:8;\tsize:8;\tsigned:0;\n"), std::string::npos) << f;
  EXPECT_NE(f.find("\tfield:char name[16];\toffset:20;\tsize:16;\tsigned:1;\n"), std::string::npos) << f;
  EXPECT_NE(f.find("print fmt: \"id=%llu bytes=%u name=%s mode=%u ok=%d\", REC->id"), std::string::npos);
  auto* msg = events::Registry::get().find("evtest", "message");
  ASSERT_NE(msg, nullptr);
  EXPECT_NE(
      events::format_text(*msg).find("\tfield:__data_loc char[] text;\toffset:8;\tsize:4;\tsigned:1;\n"),
      std::string::npos);
}

TEST(EventTest, DisabledWritesNothingEnabledWritesOnlyItsInstances) {
  Instance* top = Instance::top();
  ASSERT_NE(top, nullptr);
  int err = 0;
  Instance* other = Instance::create("evtest_other", &err);
  ASSERT_NE(other, nullptr) << err;
  top->buffer().reset();
  const uint16_t id = events::Registry::get().find("evtest", "request")->id;

  trace_evtest_request(1, 2, "disabled", Mode::kIdle, false);
  EXPECT_TRUE(drain(top, id).empty());

  ASSERT_EQ(other->set_event("evtest", "request", true), 1);
  trace_evtest_request(42, 512, "a-rather-long-name-cut", Mode::kBusy, true);
  EXPECT_TRUE(drain(top, id).empty());
  auto got = drain(other, id);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "id=42 bytes=512 name=a-rather-long-n mode=2 ok=1");

  ASSERT_EQ(top->set_event("*", "request", true), 1);
  trace_evtest_request(7, 8, "both", Mode::kIdle, false);
  EXPECT_EQ(drain(top, id), std::vector<std::string>{"id=7 bytes=8 name=both mode=0 ok=0"});
  EXPECT_EQ(drain(other, id), std::vector<std::string>{"id=7 bytes=8 name=both mode=0 ok=0"});
  top->clear_events();
  EXPECT_EQ(Instance::destroy("evtest_other"), 0);
  trace_evtest_request(9, 9, "gone", Mode::kIdle, false);  // nothing left enabled
  EXPECT_TRUE(drain(top, id).empty());
}

TEST(EventTest, DynamicStringAndCommonFields) {
  Instance* top = Instance::top();
  top->buffer().reset();
  const auto* desc = events::Registry::get().find("evtest", "message");
  top->set_event("evtest", "message", true);
  std::string long_text(5000, 'x');
  std::thread([&] {
    trace_evtest_message("hello world", -3);
    trace_evtest_message(long_text, 1);
  }).join();
  top->set_event("evtest", "message", false);
  rb::Event ev;
  std::vector<std::string> texts;
  while (top->buffer().consume(&ev)) {
    internal::CommonHeader h;
    std::memcpy(&h, ev.data, sizeof h);
    ASSERT_EQ(h.type, desc->id);
    EXPECT_GT(h.pid, 0);
    EXPECT_EQ(h.preempt_count, 0);
    char buf[4096];
    desc->print(ev.data, ev.len, buf, sizeof buf);
    texts.emplace_back(buf);
  }
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_EQ(texts[0], "level=-3 text=hello world");
  // Truncated to the record limit, still NUL-terminated.
  EXPECT_EQ(texts[1].rfind("level=1 text=xxxx", 0), 0u);
  EXPECT_LT(texts[1].size(), internal::kMaxRecord);
}

TEST(EventTest, MarkerIsAPrintEventOfItsInstance) {
  Instance* top = Instance::top();
  top->buffer().reset();
  EXPECT_EQ(top->write_marker("hello marker"), 12);
  rb::Event ev;
  ASSERT_TRUE(top->buffer().consume(&ev));
  const auto* desc = events::Registry::get().by_id(events::kPrintId);
  ASSERT_NE(desc, nullptr);
  char buf[256];
  desc->print(ev.data, ev.len, buf, sizeof buf);
  EXPECT_STREQ(buf, "tracing_mark_write: hello marker\n");
  internal::CommonHeader h;
  std::memcpy(&h, ev.data, sizeof h);
  EXPECT_EQ(h.preempt_count, 1);
  top->set_option(instance::kOptMarkers, false);
  EXPECT_EQ(top->write_marker("refused"), -EINVAL);
  top->set_option(instance::kOptMarkers, true);
}

TEST(EventTest, GlobMatch) {
  EXPECT_TRUE(events::glob_match("*", "anything"));
  EXPECT_TRUE(events::glob_match("sched_*", "sched_switch"));
  EXPECT_TRUE(events::glob_match("s?hed", "sched"));
  EXPECT_TRUE(events::glob_match("[a-c]x", "bx"));
  EXPECT_FALSE(events::glob_match("[!a-c]x", "bx"));
  EXPECT_FALSE(events::glob_match("sched_*", "irq_handler"));
  EXPECT_TRUE(events::glob_match("*_entry", "softirq_entry"));
  EXPECT_FALSE(events::glob_match("", "x"));
}

}  // namespace
}  // namespace usrtrace

namespace usrtrace {
namespace {

TEST(ThreadEventsTest, RenameAndExitAreRecorded) {
  instance::Instance* top = instance::Instance::top();
  top->buffer().reset();
  ASSERT_EQ(top->set_event("usrtrace", "thread_*", true), 2);
  top->set_event("evtest", "message", true);
  int tid = 0;
  std::thread([&] {
    pthread_setname_np(pthread_self(), "before");
    trace_evtest_message("registers the thread", 0);
    tid = writers::self().tid;
    pthread_setname_np(pthread_self(), "worker-7");
  }).join();
  top->set_event("usrtrace", "thread_*", false);
  top->set_event("evtest", "message", false);
  std::vector<std::string> lines;
  rb::Event ev;
  while (top->buffer().consume(&ev)) {
    internal::CommonHeader h;
    std::memcpy(&h, ev.data, sizeof h);
    const auto* d = events::Registry::get().by_id(h.type);
    char buf[256];
    d->print(ev.data, ev.len, buf, sizeof buf);
    lines.push_back(std::string(d->name) + ": " + buf);
  }
  const std::string p = std::to_string(tid);
  ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "thread_rename: pid=" + p + " oldcomm=event_test newcomm=before");
  EXPECT_EQ(lines[1], "message: level=0 text=registers the thread");
  EXPECT_EQ(lines[2], "thread_rename: pid=" + p + " oldcomm=before newcomm=worker-7");
  EXPECT_EQ(lines[3], "thread_exit: comm=worker-7 pid=" + p);
  EXPECT_EQ(writers::comm_of(tid), "worker-7");
}

}  // namespace
}  // namespace usrtrace
