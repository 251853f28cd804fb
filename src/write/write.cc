// The event write path (write/write.h) and the thread lifecycle events'
// registration with the writer registry.
#include "write/write.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

#include "base/compiler.h"
#include "instance/slot_write.h"
#include "write/thread_events.h"

namespace usrtrace::events {
namespace {

std::atomic<ControlledWriter> g_controlled{nullptr};

// usrtrace:thread_exit is written by the writer registry's exit hook.
struct RegisterThreadExit {
  RegisterThreadExit() { writers::set_thread_exit_hook(&on_thread_exit); }
};
RegisterThreadExit g_register_thread_exit;

}  // namespace

void set_controlled_writer(ControlledWriter w) { g_controlled.store(w, std::memory_order_release); }

}  // namespace usrtrace::events

namespace usrtrace::internal {

void write_event(const EventDesc* ev, void* rec, uint32_t len) {
  writers::ThreadState* t = writers::enter();
  if (!t) return;
  events::fill_common(rec, *t);
  // order: relaxed is enough; the mask is a soft switch, and the slots it
  // names are read with acquire in write_slot.
  uint64_t mask = ev->enabled.load(std::memory_order_relaxed);
  if (USRTRACE_UNLIKELY(mask >> kControlBit)) {
    // order: acquire; the control bit seen above was set after the store.
    if (events::ControlledWriter w = events::g_controlled.load(std::memory_order_acquire))
      w(*ev, rec, len, *t, mask & ~(uint64_t{1} << kControlBit));
  } else {
    while (mask) {
      const int slot = __builtin_ctzll(mask);
      mask &= mask - 1;
      events::write_to_slot(slot, rec, len, t->tid);
    }
  }
  writers::exit(*t);
}

int print_record(char* buf, size_t size, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  int n = vsnprintf(buf, size, fmt, ap);
#pragma GCC diagnostic pop
  va_end(ap);
  return n;
}

}  // namespace usrtrace::internal
