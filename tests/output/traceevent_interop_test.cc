// libtraceevent (what trace-cmd and KernelShark use) reads our event
// formats and records: every format file parses, every field decodes to
// the value written, and plain print fmts print the same text as ours.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

extern "C" {
#include <event-parse.h>
#include <trace-seq.h>
}

#include "events/registry.h"
#include "instance/instance.h"
#include "instance/slot_write.h"
#include "output/trace_output.h"
#include "usrtrace/event.h"

enum class Color : int16_t { kRed = -2, kBlue = 7 };

// Every integer size and sign, bool, enum, char. The print fmt leaves out
// the signed fields narrower than int: libtraceevent 1.7 prints a field's
// bits without sign extension (s8 -5 with %d gives 251, casts or not), so
// their text cannot match; their values are checked field by field.
USRTRACE_EVENT(interop, ints,
               (int8_t, s8)(uint8_t, u8)(int16_t, s16)(uint16_t, u16)(int32_t, s32)(uint32_t, u32)(
                   int64_t, s64)(uint64_t, u64)(bool, b)(Color, color)(char, ch),
               "u8=%u u16=%u s32=%d u32=%u s64=%lld u64=%llu b=%d ch=%d", REC->u8, REC->u16, REC->s32,
               REC->u32, REC->s64, REC->u64, REC->b, REC->ch)
// Pointers, fixed arrays and both dynamic kinds.
USRTRACE_EVENT(interop, arrays,
               (const void*, ptr)(char[12], name)(uint8_t[4], raw)(const char*, path)(usrtrace::Bytes,
                                                                                      blob)(uint32_t, tail),
               "name=%s path=%s tail=%u", REC->name, __get_str(path), REC->tail)
// A fixed-size record with a string: the usual shape.
USRTRACE_EVENT(interop, request, (uint64_t, id)(uint32_t, bytes)(char[16], name), "id=%llu bytes=%u name=%s",
               REC->id, REC->bytes, REC->name)

namespace usrtrace {
namespace {

using instance::Instance;

struct Tep {
  Tep() {
    tep = tep_alloc();
    tep_set_long_size(tep, 8);
    tep_set_file_bigendian(tep, TEP_LITTLE_ENDIAN);
    tep_set_local_bigendian(tep, TEP_LITTLE_ENDIAN);
  }
  ~Tep() { tep_free(tep); }
  // Parses an event's format text; returns "" or libtraceevent's error.
  std::string parse(const internal::EventDesc& d) {
    const std::string text = events::format_text(d);
    enum tep_errno e = tep_parse_event(tep, text.data(), text.size(), d.system);
    if (e == 0) return "";
    char buf[256];
    tep_strerror(tep, e, buf, sizeof buf);
    return std::string(buf) + "\n" + text;
  }
  tep_handle* tep;
};

struct Seq {
  Seq() { trace_seq_init(&s); }
  ~Seq() { trace_seq_destroy(&s); }
  std::string str() {
    trace_seq_terminate(&s);
    return std::string(s.buffer, s.len);
  }
  trace_seq s;
};

void touch_events() {
  (void)&usrtrace_event_interop_ints::registrar;
  (void)&usrtrace_event_interop_arrays::registrar;
  (void)&usrtrace_event_interop_request::registrar;
}

TEST(TraceeventInterop, EveryRegisteredFormatParses) {
  touch_events();
  Tep t;
  int n = 0;
  bool saw_print = false, saw_raw = false;
  events::Registry::get().for_each([&](internal::EventDesc& d) {
    ++n;
    EXPECT_EQ(t.parse(d), "") << d.system << ":" << d.name;
    tep_event* e = tep_find_event(t.tep, d.id);
    ASSERT_NE(e, nullptr) << d.name;
    EXPECT_STREQ(e->name, d.name);
    EXPECT_EQ(e->format.nr_fields, d.nfields) << d.name;
    saw_print |= d.id == events::kPrintId;
    saw_raw |= d.id == events::kRawDataId;
  });
  EXPECT_GE(n, 5);
  EXPECT_TRUE(saw_print);
  EXPECT_TRUE(saw_raw);
}

TEST(TraceeventInterop, FieldTypesAsLibtraceeventSeesThem) {
  touch_events();
  Tep t;
  const auto& ints = usrtrace_event_interop_ints::desc;
  const auto& arrays = usrtrace_event_interop_arrays::desc;
  ASSERT_EQ(t.parse(ints), "");
  ASSERT_EQ(t.parse(arrays), "");
  tep_event* e = tep_find_event(t.tep, ints.id);
  ASSERT_NE(e, nullptr);
  struct Want {
    const char* name;
    int size;
    bool is_signed;
  } want[] = {{"s8", 1, true},  {"u8", 1, false},   {"s16", 2, true}, {"u16", 2, false},
              {"s32", 4, true}, {"u32", 4, false},  {"s64", 8, true}, {"u64", 8, false},
              {"b", 1, false},  {"color", 2, true}, {"ch", 1, true}};
  for (const Want& w : want) {
    tep_format_field* f = tep_find_field(e, w.name);
    ASSERT_NE(f, nullptr) << w.name;
    EXPECT_EQ(f->size, w.size) << w.name;
    EXPECT_EQ((f->flags & TEP_FIELD_IS_SIGNED) != 0, w.is_signed) << w.name;
  }
  tep_event* a = tep_find_event(t.tep, arrays.id);
  ASSERT_NE(a, nullptr);
  tep_format_field* f = tep_find_field(a, "name");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_ARRAY);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_STRING);
  EXPECT_EQ(f->arraylen, 12u);
  f = tep_find_field(a, "raw");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_ARRAY);
  EXPECT_EQ(f->size, 4);
  f = tep_find_field(a, "path");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_DYNAMIC);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_STRING);
  f = tep_find_field(a, "blob");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_DYNAMIC);
  f = tep_find_field(a, "ptr");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->flags & TEP_FIELD_IS_POINTER);
  EXPECT_EQ(f->size, 8);
}

// Records written through the real write path, read back by libtraceevent.
class WrittenRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    touch_events();
    int err = 0;
    inst_ = Instance::create("traceevent_interop", &err);
    ASSERT_NE(inst_, nullptr) << err;
    ASSERT_EQ(inst_->set_event("interop", "*", true), 3);
    for (const internal::EventDesc* d : std::initializer_list<const internal::EventDesc*>{
             &usrtrace_event_interop_ints::desc, &usrtrace_event_interop_arrays::desc,
             &usrtrace_event_interop_request::desc, &events::print_event()})
      ASSERT_EQ(tep_.parse(*d), "");
  }
  void TearDown() override {
    if (inst_) {
      EXPECT_EQ(Instance::destroy("traceevent_interop"), 0);
    }
  }
  // Consumes every event: (record bytes, our printed text).
  struct Rec {
    std::vector<uint8_t> data;
    std::string ours;
  };
  std::vector<Rec> drain() {
    std::vector<Rec> out;
    rb::Event ev;
    while (inst_->buffer().consume(&ev)) {
      internal::CommonHeader h;
      std::memcpy(&h, ev.data, sizeof h);
      const auto* d = events::Registry::get().by_id(h.type);
      char buf[1024];
      int n = d ? d->print(ev.data, ev.len, buf, sizeof buf) : 0;
      out.push_back({std::vector<uint8_t>(ev.data, ev.data + ev.len),
                     std::string(buf, n > 0 ? static_cast<size_t>(n) : 0)});
    }
    return out;
  }
  tep_record record(Rec& r) {
    tep_record rec{};
    rec.data = r.data.data();
    rec.size = static_cast<int>(r.data.size());
    return rec;
  }
  std::string tep_text(Rec& r) {
    tep_record rec = record(r);
    Seq s;
    tep_print_event(tep_.tep, &s.s, &rec, "%s", TEP_PRINT_INFO);
    return s.str();
  }
  unsigned long long val(tep_event* e, const char* name, Rec& r) {
    tep_record rec = record(r);
    Seq s;
    unsigned long long v = 0;
    const int rc = std::strncmp(name, "common_", 7) == 0
                       ? tep_get_common_field_val(&s.s, e, name, &rec, &v, 1)
                       : tep_get_field_val(&s.s, e, name, &rec, &v, 1);
    EXPECT_EQ(rc, 0) << name << s.str();
    return v;
  }
  Tep tep_;
  Instance* inst_ = nullptr;
};

TEST_F(WrittenRecords, IntegersDecodeAndPrintTheSame) {
  trace_interop_ints(-5, 250, -30000, 65000, -2000000000, 4000000000u, -9000000000000000000LL,
                     18000000000000000000ULL, true, Color::kRed, 'x');
  trace_interop_request(42, 512, "alpha");
  std::vector<Rec> recs = drain();
  ASSERT_EQ(recs.size(), 2u);
  tep_event* e = tep_find_event(tep_.tep, usrtrace_event_interop_ints::desc.id);
  ASSERT_NE(e, nullptr);
  // tep_get_field_val returns the bits, sign-extension is the reader's.
  EXPECT_EQ(static_cast<int8_t>(val(e, "s8", recs[0])), -5);
  EXPECT_EQ(val(e, "u8", recs[0]), 250u);
  EXPECT_EQ(static_cast<int16_t>(val(e, "s16", recs[0])), -30000);
  EXPECT_EQ(val(e, "u16", recs[0]), 65000u);
  EXPECT_EQ(static_cast<int32_t>(val(e, "s32", recs[0])), -2000000000);
  EXPECT_EQ(val(e, "u32", recs[0]), 4000000000u);
  EXPECT_EQ(static_cast<int64_t>(val(e, "s64", recs[0])), -9000000000000000000LL);
  EXPECT_EQ(val(e, "u64", recs[0]), 18000000000000000000ULL);
  EXPECT_EQ(val(e, "b", recs[0]), 1u);
  EXPECT_EQ(static_cast<int16_t>(val(e, "color", recs[0])), -2);
  EXPECT_EQ(val(e, "ch", recs[0]), static_cast<unsigned>('x'));
  EXPECT_EQ(val(e, "common_type", recs[0]), usrtrace_event_interop_ints::desc.id);
  EXPECT_GT(val(e, "common_pid", recs[0]), 0u);
  // Plain print fmts: the same text.
  EXPECT_EQ(recs[0].ours,
            "u8=250 u16=65000 s32=-2000000000 u32=4000000000 "
            "s64=-9000000000000000000 u64=18000000000000000000 b=1 ch=120");
  EXPECT_EQ(tep_text(recs[0]), recs[0].ours);
  EXPECT_EQ(recs[1].ours, "id=42 bytes=512 name=alpha");
  EXPECT_EQ(tep_text(recs[1]), recs[1].ours);
}

TEST_F(WrittenRecords, ArraysStringsAndPointers) {
  int anchor = 0;
  const uint8_t raw[4] = {1, 2, 3, 4};
  const uint8_t blob[5] = {9, 8, 7, 6, 5};
  trace_interop_arrays(&anchor, "eleven-char", std::span<const uint8_t, 4>(raw), "/a/path", Bytes(blob, 5),
                       77);
  std::vector<Rec> recs = drain();
  ASSERT_EQ(recs.size(), 1u);
  Rec& r = recs[0];
  tep_event* e = tep_find_event(tep_.tep, usrtrace_event_interop_arrays::desc.id);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(val(e, "ptr", r), reinterpret_cast<uintptr_t>(&anchor));
  EXPECT_EQ(val(e, "tail", r), 77u);
  tep_record rec = record(r);
  Seq s;
  int len = 0;
  auto* name = static_cast<const char*>(tep_get_field_raw(&s.s, e, "name", &rec, &len, 1));
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(len, 12);
  EXPECT_STREQ(name, "eleven-char");
  auto* rw = static_cast<const uint8_t*>(tep_get_field_raw(&s.s, e, "raw", &rec, &len, 1));
  ASSERT_NE(rw, nullptr);
  ASSERT_EQ(len, 4);
  EXPECT_EQ(std::memcmp(rw, raw, 4), 0);
  auto* path = static_cast<const char*>(tep_get_field_raw(&s.s, e, "path", &rec, &len, 1));
  ASSERT_NE(path, nullptr);
  EXPECT_EQ(len, 8);  // with its NUL
  EXPECT_STREQ(path, "/a/path");
  auto* bl = static_cast<const uint8_t*>(tep_get_field_raw(&s.s, e, "blob", &rec, &len, 1));
  ASSERT_NE(bl, nullptr);
  ASSERT_EQ(len, 5);
  EXPECT_EQ(std::memcmp(bl, blob, 5), 0);
  EXPECT_EQ(r.ours, "name=eleven-char path=/a/path tail=77");
  EXPECT_EQ(tep_text(r), r.ours);
}

TEST_F(WrittenRecords, MarkerFields) {
  ASSERT_GT(inst_->write_marker("hello marker"), 0);
  std::vector<Rec> recs = drain();
  ASSERT_EQ(recs.size(), 1u);
  tep_event* e = tep_find_event(tep_.tep, events::kPrintId);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(val(e, "ip", recs[0]), 0u);
  tep_record rec = record(recs[0]);
  Seq s;
  int len = 0;
  auto* buf = static_cast<const char*>(tep_get_field_raw(&s.s, e, "buf", &rec, &len, 1));
  ASSERT_NE(buf, nullptr);
  EXPECT_STREQ(buf, "hello marker\n");
  EXPECT_EQ(val(e, "common_preempt_count", recs[0]), 1u);
}

}  // namespace
}  // namespace usrtrace
