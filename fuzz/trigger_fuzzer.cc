// Feeds arbitrary trigger and filter commands to two events of the top
// instance, firing the events (from this thread) in between and reading
// the trigger, filter and hist files back. Bad commands must be refused
// with an error, never crash, leak or hang, and whatever is accepted must
// run on the write path safely.
//
// Input: lines. The first byte of a line picks what it is written to:
//   % 6 == 0 / 1  trigger of fz:a / fz:b      2 / 3  filter of fz:a / fz:b
//          4      filter of system fz         5      fire both events
// Every input starts from the same state: all triggers and filters gone.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "events/registry.h"
#include "instance/instance.h"
#include "trigger/control.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(fz, a, (int32_t, n)(uint64_t, bytes)(char[16], name)(const char*, path)(void*, ptr),
               "n=%d bytes=%llu name=%s path=%s ptr=%p", REC->n, REC->bytes, REC->name, __get_str(path),
               REC->ptr)
USRTRACE_EVENT(fz, b, (int16_t, s)(bool, flag), "s=%d flag=%d", REC->s, REC->flag)

namespace {

using usrtrace::internal::EventDesc;
namespace trigger = usrtrace::trigger;

void fire(int i) {
  trace_fz_a(i, static_cast<uint64_t>(i) * 4096, i % 2 ? "alpha" : "beta", i % 3 ? "/x/y" : "",
             reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
  trace_fz_b(static_cast<int16_t>(-i), i % 2 == 0);
}

void reset(EventDesc& a, EventDesc& b, int slot) {
  // Removing what each trigger file lists leaves both events clean.
  for (EventDesc* e : {&a, &b}) {
    for (int round = 0; round < 64; ++round) {
      const std::string text = trigger::trigger_text(slot, *e);
      if (text.rfind("# Available", 0) == 0) break;
      std::string line = text.substr(0, text.find('\n'));
      line = line.substr(0, line.find(" if "));
      line = line.substr(0, line.find(" ["));
      trigger::Error err;
      trigger::write_trigger(slot, *e, "!" + line, &err);
    }
  }
  trigger::Error err;
  trigger::set_system_filter(slot, "fz", "0", &err);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static usrtrace::instance::Instance* top = [] {
    auto* t = usrtrace::instance::Instance::top();
    t->set_event("fz", "*", true);
    return t;
  }();
  if (!top) return 0;
  EventDesc* a = usrtrace::events::Registry::get().find("fz", "a");
  EventDesc* b = usrtrace::events::Registry::get().find("fz", "b");
  const int slot = top->slot();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  int fired = 0;
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    if (line.empty()) continue;
    const int what = static_cast<unsigned char>(line[0]) % 6;
    line.remove_prefix(1);
    trigger::Error err;
    switch (what) {
      case 0:
        trigger::write_trigger(slot, *a, line, &err);
        break;
      case 1:
        trigger::write_trigger(slot, *b, line, &err);
        break;
      case 2:
        trigger::set_filter(slot, *a, line, &err);
        break;
      case 3:
        trigger::set_filter(slot, *b, line, &err);
        break;
      case 4:
        trigger::set_system_filter(slot, "fz", line, &err);
        break;
      default:
        break;
    }
    for (int i = 0; i < 4; ++i) fire(fired++);
  }
  for (EventDesc* e : {a, b}) {
    (void)trigger::trigger_text(slot, *e);
    (void)trigger::filter_text(slot, *e);
    (void)trigger::hist_text(slot, *e);
  }
  (void)trigger::system_filter_text(slot, "fz");
  reset(*a, *b, slot);
  top->set_tracing_on(true);
  top->buffer().reset();
  return 0;
}
