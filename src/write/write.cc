// The event write path (write/write.h) and the thread lifecycle events'
// registration with the writer registry.
#include "write/write.h"

#include <array>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <utility>

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
namespace {

// What write_event_n leaves to a call, from the enabled mask on: several
// instances, the event's filters and triggers, an instance's own filters.
// Ends the thread's write ([D]) for its caller, which tail-calls it.
USRTRACE_NOINLINE void write_event_slots(const EventDesc* ev, void* rec, uint32_t len, uint64_t mask) {
  writers::ThreadState& t = writers::self();
  if (USRTRACE_UNLIKELY(mask >> kControlBit)) {
    // order: acquire; the control bit seen by the caller was set after the store.
    if (events::ControlledWriter w = events::g_controlled.load(std::memory_order_acquire))
      w(*ev, rec, len, t, mask & ~(uint64_t{1} << kControlBit));
  } else {
    while (mask) {
      const int slot = __builtin_ctzll(mask);
      mask &= mask - 1;
      events::write_to_slot(slot, rec, len, t.tid);
    }
  }
  writers::exit(t);
}

// A write of a thread that has not written before (or a signal handler's
// during that): registration, then the generic path.
USRTRACE_NOINLINE void write_event_first(const EventDesc* ev, void* rec, uint32_t len) {
  writers::ThreadState* t = writers::enter();
  if (!t) return;
  events::fill_common(rec, *t);
  // order: relaxed is enough; see write_event_n.
  write_event_slots(ev, rec, len, ev->enabled.load(std::memory_order_relaxed));
}

// write_event for a record of kLen bytes, everything inline: the thread's
// state, the common header and the ring buffer's fast path for that
// length. A typed event's length is its record's size, known when it was
// compiled; write_event picks this by it from a table (one indirect jump,
// predicted at a call site), where the generic path paid three calls and a
// second table. In the usual case (a registered thread, one instance, no
// filter or trigger) nothing is called but the ring buffer's slow path;
// everything else is a tail call, so that this path saves no register.
// bench/run.sh section 7.
template <uint32_t kLen>
void write_event_n(const EventDesc* ev, void* rec) {
  writers::ThreadState& t = writers::self();
  if (USRTRACE_UNLIKELY(t.state != writers::kRegistered)) return write_event_first(ev, rec, kLen);
  const uint64_t ctr = writers::begin(t);  // [A]
  events::fill_header(rec, static_cast<uint32_t>(ctr & 0xff), t.tid);
  // order: relaxed is enough; the mask is a soft switch, and the slot it
  // names is read with acquire below ([B], after [A]).
  const uint64_t mask = ev->enabled.load(std::memory_order_relaxed);
  if (USRTRACE_UNLIKELY(mask == 0 || (mask & (mask - 1)) != 0 || (mask >> kControlBit) != 0))
    return write_event_slots(ev, rec, kLen, mask);
  const instance::SlotState& s = instance::g_slot_state[__builtin_ctzll(mask)];
  // order: acquire pairs with the release that published the buffer.
  rb::RingBuffer* rb = s.buffer.load(std::memory_order_acquire);
  // order: relaxed is enough; see SlotState::filters.
  if (USRTRACE_UNLIKELY(rb != nullptr && s.filters.load(std::memory_order_relaxed) != 0))
    return write_event_slots(ev, rec, kLen, mask);
  if (rb) rb->template write<kLen>(rec);
  writers::exit(t);  // [D]
}

using EventWriter = void (*)(const EventDesc*, void*);
template <uint32_t... kWords>
constexpr std::array<EventWriter, sizeof...(kWords)> make_event_writers(
    std::integer_sequence<uint32_t, kWords...>) {
  return {&write_event_n<(kWords + 1) * 4>...};
}
constexpr auto kEventWriters =
    make_event_writers(std::make_integer_sequence<uint32_t, rb::RingBuffer::kMaxInlinePayload / 4>{});

}  // namespace

void write_event(const EventDesc* ev, void* rec, uint32_t len) {
  // A record's size is a multiple of 4 (its common header's pid aligns it);
  // longer ones than the fast path takes (strings) go the generic way.
  if (USRTRACE_LIKELY(len % 4 == 0 && len - 4 < rb::RingBuffer::kMaxInlinePayload))
    return kEventWriters[len / 4 - 1](ev, rec);
  write_event_first(ev, rec, len);
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
