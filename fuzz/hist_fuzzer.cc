// Parses arbitrary text as a hist command against an event with every field
// type; what parses records a few records (one with a lying __data_loc),
// prints, pauses, clears. Must never crash, leak or hang.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "hist/hist.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(fzh, all,
               (uint8_t, u8)(int16_t, s16)(uint32_t, u32)(int64_t, s64)(bool, flag)(void*, ptr)(
                   char[16], name)(const char*, path)(uint8_t[4], raw),
               "u8=%u", REC->u8)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using usrtrace::hist::Histogram;
  std::string_view cmd(reinterpret_cast<const char*>(data), size);
  usrtrace::hist::Error err;
  auto h = Histogram::create(usrtrace_event_fzh_all::desc, cmd, &err);
  if (!h) return 0;
  alignas(8) char buf[usrtrace::internal::kMaxRecord] = {};
  auto* r = reinterpret_cast<usrtrace_record_fzh_all*>(buf);
  uint64_t now = 123456789;
  usrtrace::hist::RecordContext ctx;
  ctx.cpu = 1;
  ctx.now_ns = [](const void* a) { return *static_cast<const uint64_t*>(a); };
  ctx.now_arg = &now;
  for (int i = 0; i < 300; ++i) {
    uint32_t len = sizeof *r;
    r->u8 = static_cast<uint8_t>(i);
    r->s16 = static_cast<int16_t>(-i);
    r->u32 = static_cast<uint32_t>(i * 977);
    r->s64 = -static_cast<int64_t>(i) * 1000000007;
    r->ptr = static_cast<uint64_t>(i) << 12;
    std::strncpy(r->name, i % 2 ? "odd" : "even", sizeof r->name);
    r->path = i % 7 == 0 ? 0xfffffff0u : usrtrace::internal::append_dynamic(buf, len, "/p", 2, true);
    h->record(buf, len, ctx);
  }
  (void)h->print("x > 1");
  (void)h->trigger_text("");
  h->pause();
  h->cont();
  h->clear();
  (void)h->print("");
  return 0;
}
