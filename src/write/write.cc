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

// What write_event_n leaves to a call: several instances, or an
// instance's own filters. Ends the thread's write ([D]) for its caller,
// which tail-calls it.
USRTRACE_NOINLINE void write_event_slots(void* rec, uint32_t len, uint64_t mask) {
  writers::ThreadState& t = writers::self();
  while (mask) {
    const int slot = __builtin_ctzll(mask);
    mask &= mask - 1;
    events::write_to_slot(slot, rec, len, t.tid);
  }
  writers::exit(t);
}

// write_event for a record of kLen bytes of a registered thread, for an
// event without filters or triggers (write_event checked both), everything
// inline: the thread's counter, the common header and the ring buffer's
// fast path for that length. A typed event's length is its record's size,
// known when it was compiled; write_event picks this by it from a table
// (one indirect jump, predicted at a call site), where the generic path
// paid three calls and a second table. In the usual case (one instance
// without filters) nothing is called but the ring buffer's slow path; the
// rest is a tail call, so that this path saves few registers.
// bench/run.sh section 7.
template <uint32_t kLen>
void write_event_n(const EventDesc* ev, void* rec) {
  writers::ThreadState& t = writers::self();
  const uint64_t ctr = writers::begin(t);  // [A]
  events::fill_header(rec, static_cast<uint32_t>(ctr & 0xff), t.tid);
  // order: relaxed is enough; the mask is a soft switch, and the slot it
  // names is read with acquire below ([B], after [A]). A control bit set
  // since write_event looked is left out: a filter or trigger added while
  // an event is being written may miss it, as enabling one may.
  const uint64_t mask = ev->enabled.load(std::memory_order_relaxed) & ~(uint64_t{1} << kControlBit);
  if (USRTRACE_UNLIKELY(mask == 0 || (mask & (mask - 1)) != 0)) return write_event_slots(rec, kLen, mask);
  const instance::SlotState& s = instance::g_slot_state[__builtin_ctzll(mask)];
  // order: acquire pairs with the release that published the buffer.
  rb::RingBuffer* rb = s.buffer.load(std::memory_order_acquire);
  // order: relaxed is enough; see SlotState::filters.
  if (USRTRACE_UNLIKELY(rb != nullptr && s.filters.load(std::memory_order_relaxed) != 0))
    return write_event_slots(rec, kLen, mask);
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

namespace {

// write_event's generic way: a thread's first event, an event with filters
// or triggers (the controlled writer), records longer than the fast path
// takes. Always a frame of its own between write_event's and the
// controlled writer's (never inlined, never tail-called): a stacktrace
// trigger skips exactly it and write_event's (trigger/stacktrace.cc).
USRTRACE_NOINLINE void write_event_generic(const EventDesc* ev, void* rec, uint32_t len) {
  writers::ThreadState* t = writers::enter();
  if (!t) return;
  events::fill_common(rec, *t);
  // order: relaxed is enough; the slots it names are read with acquire in
  // write_to_slot ([B], after [A]).
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

}  // namespace

void write_event(const EventDesc* ev, void* rec, uint32_t len) {
  // A record's size is a multiple of 4 (its common header's pid aligns it);
  // longer ones than the fast path takes (strings) go the generic way, and
  // so do an event with filters or triggers and a thread's first event.
  // order: relaxed is enough; the mask is a soft switch.
  if (USRTRACE_LIKELY(len % 4 == 0 && len - 4 < rb::RingBuffer::kMaxInlinePayload &&
                      (ev->enabled.load(std::memory_order_relaxed) >> kControlBit) == 0 &&
                      writers::self().state == writers::kRegistered))
    return kEventWriters[len / 4 - 1](ev, rec);
  write_event_generic(ev, rec, len);
  // Not a tail call, in any build: see write_event_generic.
  asm volatile("" ::: "memory");
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
