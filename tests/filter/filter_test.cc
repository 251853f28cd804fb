// The filter compiler alone: every field type and operator on hand-built
// records, the kernel's precedence and short-circuit, values out of a
// field's range, records that lie about their dynamic strings, and the
// Malformed suite: every error the kernel names, with the caret where this
// machine's kernel puts it (measured on events/sched/sched_switch/filter of
// Linux 6.18; the expressions below use the same shapes on a test event).
#include "filter/filter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "usrtrace/event.h"

enum class Color : uint8_t { kRed = 1, kBlue = 7 };

USRTRACE_EVENT(flt, all,
               (uint8_t, u8)(int8_t, s8)(uint16_t, u16)(int16_t, s16)(uint32_t, u32)(int32_t, s32)(
                   uint64_t, u64)(int64_t, s64)(bool, flag)(Color, color)(void*, ptr)(char[16], name)(
                   const char*, path)(uint8_t[4], raw)(usrtrace::Bytes, blob),
               "u8=%u", REC->u8)
// The shapes of sched_switch, to compare errors with the kernel's.
USRTRACE_EVENT(flt, sched_switch,
               (char[16], prev_comm)(int32_t, prev_pid)(int64_t, prev_state)(char[16], next_comm)(int32_t,
                                                                                                  next_pid),
               "prev_comm=%s", REC->prev_comm)

namespace usrtrace::filter {
namespace {

using Rec = usrtrace_record_flt_all;

const internal::EventDesc& all_desc() { return usrtrace_event_flt_all::desc; }
const internal::EventDesc& sw_desc() { return usrtrace_event_flt_sched_switch::desc; }

struct Built {
  alignas(8) char buf[internal::kMaxRecord];
  uint32_t len = sizeof(Rec);
  Rec* r() { return reinterpret_cast<Rec*>(buf); }
};

Built record(const std::string& name = "worker-1", std::string_view path = "/api/users") {
  Built b;
  std::memset(b.buf, 0, sizeof b.buf);
  Rec* r = b.r();
  r->common.pid = 42;
  r->common.type = 1234;
  r->u8 = 200;
  r->s8 = -5;
  r->u16 = 60000;
  r->s16 = -300;
  r->u32 = 4000000000u;
  r->s32 = -70000;
  r->u64 = 0xffffffffffffffffull;
  r->s64 = -5000000000ll;
  r->flag = true;
  r->color = 7;
  r->ptr = 0x1000;
  std::strncpy(r->name, name.c_str(), sizeof r->name - 1);
  r->path = internal::append_dynamic(b.buf, b.len, path.data(), path.size(), true);
  return b;
}

bool eval(const internal::EventDesc& ev, const std::string& expr, Built& b, Context ctx = {}) {
  Error err;
  auto p = Program::compile(ev, expr, &err);
  EXPECT_NE(p, nullptr) << expr << ": " << message(err.code) << " at " << err.pos;
  return p && p->match(b.buf, b.len, ctx);
}

TEST(FilterTest, IntegersOfEveryWidthAndSign) {
  Built b = record();
  struct Case {
    const char* expr;
    bool want;
  };
  const Case cases[] = {
      {"u8 == 200", true},
      {"u8 > 100", true},
      {"u8 == 456", true},  // 456 & 0xff == 200
      {"s8 == -5", true},
      {"s8 < 0", true},
      {"s8 >= -5", true},
      {"s8 > -5", false},
      {"u16 == 60000", true},
      {"u16 > 0x7fff", true},
      {"s16 == -300", true},
      {"s16 <= -301", false},
      {"u32 == 4000000000", true},
      {"u32 > 2147483647", true},
      {"s32 == -70000", true},
      {"u64 == 0xffffffffffffffff", true},
      {"u64 > 0", true},
      {"u64 == 18446744073709551615", true},
      {"s64 == -5000000000", true},
      {"s64 < -4999999999", true},
      {"s64 != -5000000000", false},
      {"flag == 1", true},
      {"flag == 0", false},
      {"color == 7", true},
      {"color & 2", true},
      {"color & 8", false},
      {"ptr == 0x1000", true},
      {"ptr & 0x1000", true},
      {"common_pid == 42", true},
      {"common_type == 1234", true},
      {"common_flags == 0", true},
      {"common_preempt_count != 0", false},
      {"u32 == 037", false},
      {"u8 == 0310", true},  // octal
  };
  for (const Case& c : cases) EXPECT_EQ(eval(all_desc(), c.expr, b), c.want) << c.expr;
}

TEST(FilterTest, PrecedenceShortCircuitAndNot) {
  Built b = record();
  EXPECT_TRUE(eval(all_desc(), "u8 == 1 || u8 == 200 && s8 == -5", b));  // && binds tighter
  EXPECT_FALSE(eval(all_desc(), "(u8 == 1 || u8 == 200) && s8 == 5", b));
  EXPECT_TRUE(eval(all_desc(), "!(u8 == 1) && !u8 == 2", b));
  EXPECT_FALSE(eval(all_desc(), "!(u8 == 200 || s8 == 1)", b));
  EXPECT_TRUE(eval(all_desc(), "((((u8 == 200))))", b));
  EXPECT_TRUE(eval(all_desc(), "!!(u8 == 200)", b));
  EXPECT_TRUE(eval(all_desc(), "u8==200&&s8==-5", b));  // no blanks needed
  // events.rst 5.1.
  Built sig = record();
  sig.r()->s32 = 17;
  EXPECT_TRUE(eval(all_desc(), "((s32 >= 10 && s32 < 15) || s32 == 17) && name != \"bash\"", sig));
  std::strcpy(sig.r()->name, "bash");
  EXPECT_FALSE(eval(all_desc(), "((s32 >= 10 && s32 < 15) || s32 == 17) && name != \"bash\"", sig));
}

TEST(FilterTest, StringsGlobsCommAndCpu) {
  Built b = record("worker-1", "/api/users");
  struct Case {
    const char* expr;
    bool want;
  };
  const Case cases[] = {
      {"name == \"worker-1\"", true},
      {"name == 'worker-1'", true},
      {"name == \"worker\"", false},
      {"name != \"worker\"", true},
      {"name ~ \"work*\"", true},
      {"name ~ \"*-1\"", true},
      {"name ~ \"*rker*\"", true},
      {"name ~ \"w?rker-[0-9]\"", true},
      {"name ~ \"w*1\"", true},
      {"name ~ \"*\"", true},
      {"name ~ \"x*\"", false},
      {"name ~ \"worker-1\"", true},
      {"path == \"/api/users\"", true},
      {"path ~ \"/api/*\"", true},
      {"path ~ \"*users\"", true},
      {"path ~ \"*static*\"", false},
      {"comm == \"main\"", true},
      {"COMM ~ \"ma*\"", true},
      {"common_comm != \"main\"", false},
      {"CPU == 3", true},
      {"cpu != 3", false},
      {"common_cpu > 2", true},
  };
  Context ctx;
  ctx.cpu = 3;
  ctx.comm = "main";
  for (const Case& c : cases) EXPECT_EQ(eval(all_desc(), c.expr, b, ctx), c.want) << c.expr;
  // An unknown CPU matches no CPU test.
  EXPECT_FALSE(eval(all_desc(), "CPU == 0 || CPU != 0", b));
}

TEST(FilterTest, HostileRecordsReadAsEmptyStrings) {
  Built b = record();
  Error err;
  auto p = Program::compile(all_desc(), "path == \"\" && name ~ \"*\"", &err);
  ASSERT_NE(p, nullptr);
  // A __data_loc pointing past the record, of zero length, or without a NUL.
  for (internal::DataLoc bad : {internal::DataLoc{(100u << 16) | 4000u}, internal::DataLoc{0},
                                internal::DataLoc{(4u << 16) | sizeof(Rec)}}) {
    b.r()->path = bad;
    if (bad == ((4u << 16) | sizeof(Rec))) std::memcpy(b.buf + sizeof(Rec), "abcd", 4);
    EXPECT_EQ(p->match(b.buf, b.len, {}), bad != ((4u << 16) | sizeof(Rec))) << bad;
  }
  // A record shorter than its fields: fields past the end read as 0 / "".
  auto q = Program::compile(all_desc(), "s64 == 0 && name == \"\"", &err);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(q->match(b.buf, 8, {}));
}

TEST(FilterTest, TextIsTheTrimmedExpression) {
  Error err;
  auto p = Program::compile(all_desc(), "  u8 == 1 \n", &err);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->text(), "u8 == 1");
  EXPECT_EQ(error_text("prev_pid == abc", Error{ErrorCode::kInvalidValue, 13}),
            "prev_pid == abc\n             ^\nparse_error: Invalid value (did you forget quotes)?\n");
}

TEST(FilterTest, LongFiltersAndTheTermLimit) {
  std::string expr = "u8 == 0";
  for (int i = 1; i < 1000; ++i) expr += " || u8 == " + std::to_string(i);
  Built b = record();
  EXPECT_TRUE(eval(all_desc(), expr, b));  // the 201st term matches
  std::string deep;
  for (int i = 0; i < 150; ++i) deep += "(";
  deep += "u8 == 200";
  for (int i = 0; i < 150; ++i) deep += ")";
  EXPECT_TRUE(eval(all_desc(), deep, b));
  std::string too_deep(5000, '(');
  Error err;
  EXPECT_EQ(Program::compile(all_desc(), too_deep + "u8 == 1", &err), nullptr);
  EXPECT_EQ(err.code, ErrorCode::kTooManyOpen);
  std::string too_many = "u8 == 0";
  for (int i = 0; i < 16384; ++i) too_many += "||u8==1";
  EXPECT_EQ(Program::compile(all_desc(), too_many, &err), nullptr);
  EXPECT_EQ(err.code, ErrorCode::kTooManyPreds);
}

// The Malformed suite. Caret positions are the kernel's (see the top).
TEST(FilterMalformedTest, EveryErrorWithItsCaret) {
  struct Case {
    const char* expr;
    ErrorCode code;
    size_t pos;
  };
  const Case cases[] = {
      {"prev_pid == abc", ErrorCode::kInvalidValue, 13},
      {"foo == 1", ErrorCode::kFieldNotFound, 4},
      {"(prev_pid == 1", ErrorCode::kTooManyOpen, 0},
      {"prev_pid == 1)", ErrorCode::kTooManyClose, 13},
      {"prev_pid = 1", ErrorCode::kInvalidOp, 10},
      {"prev_pid ==", ErrorCode::kInvalidValue, 12},
      {"prev_pid", ErrorCode::kInvalidOp, 9},
      {"prev_comm > \"x\"", ErrorCode::kIllegalFieldOp, 13},
      {"prev_comm ~ 1", ErrorCode::kExpectString, 13},
      {"prev_pid ~ 1", ErrorCode::kIllegalFieldOp, 12},
      {"prev_comm == \"abc", ErrorCode::kMissingQuote, 13},
      {"prev_pid == 1 prev_pid == 2", ErrorCode::kTooManyPreds, 14},
      {"prev_pid == 12x", ErrorCode::kIllegalIntval, 13},
      {"prev_pid == 99999999999999999999", ErrorCode::kIllegalIntval, 13},
      {"!", ErrorCode::kNoFilter, 1},
      {"", ErrorCode::kNoFilter, 0},
      {"comm == bash", ErrorCode::kInvalidValue, 9},
      {"prev_pid >= 1 && next_comm != bash && prev_state < 5", ErrorCode::kInvalidValue, 31},
      {"prev_pid == \"1\"", ErrorCode::kExpectDigit, 13},
      {"prev_comm == ab c", ErrorCode::kInvalidValue, 14},
      {"prev_pid < 1 & 2", ErrorCode::kTooManyPreds, 13},
      {"prev_pid ! 1", ErrorCode::kInvalidOp, 10},
      {"prev_pid == 0x", ErrorCode::kIllegalIntval, 13},
      {"prev_pid == -", ErrorCode::kIllegalIntval, 13},
      {"prev_pid == 1 &", ErrorCode::kTooManyPreds, 14},
      {"prev_pid == 1 | prev_pid == 2", ErrorCode::kTooManyPreds, 14},
      {"prev_comm & 1", ErrorCode::kExpectString, 13},
      // The kernel says "Error" at 0 for these; we name them.
      {"&& prev_pid == 1", ErrorCode::kInvalidFilter, 0},
      {"()", ErrorCode::kInvalidFilter, 0},
      {"prev_pid == 1 || || prev_pid == 2", ErrorCode::kInvalidFilter, 0},
      // The kernel accepts a dangling operator; we refuse it.
      {"prev_pid == 1 &&", ErrorCode::kInvalidFilter, 0},
  };
  for (const Case& c : cases) {
    Error err;
    EXPECT_EQ(Program::compile(sw_desc(), c.expr, &err), nullptr) << c.expr;
    EXPECT_EQ(err.code, c.code) << c.expr << ": " << message(err.code);
    EXPECT_EQ(err.pos, c.pos) << c.expr;
  }
}

TEST(FilterMalformedTest, TypeErrorsOnOurFieldKinds) {
  struct Case {
    const char* expr;
    ErrorCode code;
  };
  const std::string too_long = "name == \"" + std::string(300, 'x') + "\"";
  const Case cases[] = {
      {"raw == 1", ErrorCode::kIllegalFieldOp},       {"blob == \"x\"", ErrorCode::kIllegalFieldOp},
      {"u8 == -1", ErrorCode::kIllegalIntval},        {"path < \"a\"", ErrorCode::kIllegalFieldOp},
      {"name ~ 3", ErrorCode::kExpectString},         {"CPU ~ \"1\"", ErrorCode::kIllegalFieldOp},
      {"COMM == 1", ErrorCode::kExpectString},        {"flag == true", ErrorCode::kInvalidValue},
      {too_long.c_str(), ErrorCode::kOperandTooLong},
  };
  for (const Case& c : cases) {
    Error err;
    EXPECT_EQ(Program::compile(all_desc(), c.expr, &err), nullptr) << c.expr;
    EXPECT_EQ(err.code, c.code) << c.expr << ": " << message(err.code);
  }
}

// The same expressions the kernel accepts are accepted (measured there too).
TEST(FilterMalformedTest, WhatTheKernelAccepts) {
  for (const char* expr :
       {"prev_pid == -1", "prev_state & 1", "prev_pid != 1 && (prev_comm ~ \"a*\" || next_pid > 0x10)",
        "CPU == 1", "COMM ~ \"ba*\"", "common_pid == 1", "cpu == 0", "  prev_pid == 1  ",
        "prev_comm == 'abc'", "prev_comm ~ \"[ab\"", "(((prev_pid == 1)))", "!(prev_pid == 1)",
        "!prev_pid == 1"}) {
    Error err;
    EXPECT_NE(Program::compile(sw_desc(), expr, &err), nullptr) << expr << ": " << message(err.code);
  }
}

}  // namespace
}  // namespace usrtrace::filter
