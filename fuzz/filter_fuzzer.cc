// Compiles arbitrary text as a filter against an event with every field
// type; what compiles is run on a well-formed record and on records whose
// __data_loc fields point anywhere. Must never crash, leak or hang, and the
// same program must give the same answer twice.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "filter/filter.h"
#include "usrtrace/event.h"

enum class FzColor : uint8_t { kRed = 1 };

USRTRACE_EVENT(fzf, all,
               (uint8_t, u8)(int8_t, s8)(uint16_t, u16)(int16_t, s16)(uint32_t, u32)(int32_t, s32)(
                   uint64_t, u64)(int64_t, s64)(bool, flag)(FzColor, color)(void*, ptr)(char[16], name)(
                   const char*, path)(uint8_t[4], raw)(usrtrace::Bytes, blob),
               "u8=%u", REC->u8)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using usrtrace::filter::Program;
  std::string_view expr(reinterpret_cast<const char*>(data), size);
  usrtrace::filter::Error err;
  auto p = Program::compile(usrtrace_event_fzf_all::desc, expr, &err);
  if (!p) {
    (void)usrtrace::filter::message(err.code);
    (void)usrtrace::filter::error_text(expr, err);
    return 0;
  }
  alignas(8) char buf[usrtrace::internal::kMaxRecord] = {};
  auto* r = reinterpret_cast<usrtrace_record_fzf_all*>(buf);
  uint32_t len = sizeof *r;
  std::strcpy(r->name, "worker");
  r->s32 = -3;
  r->path = usrtrace::internal::append_dynamic(buf, len, "/api/x", 6, true);
  usrtrace::filter::Context ctx;
  ctx.cpu = 1;
  ctx.comm = "fuzz";
  const bool a = p->match(buf, len, ctx);
  if (a != p->match(buf, len, ctx)) __builtin_trap();
  // Lying records: a __data_loc past the end, and a record cut short.
  r->path = 0xffffffffu;
  p->match(buf, len, ctx);
  p->match(buf, 3, ctx);
  return 0;
}
