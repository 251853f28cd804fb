// The write path of filters and triggers (see control.h for the protocol).
// Built with -fno-exceptions: nothing here throws, allocates or locks.
#include <atomic>

#include "base/compiler.h"
#include "base/rseq.h"
#include "clock/trace_clock.h"
#include "instance/slot_write.h"
#include "trigger/actions.h"
#include "trigger/internal.h"

namespace usrtrace::trigger {
namespace {

uint64_t slot_now_ns(const void* arg) {
  const auto* rb = static_cast<const rb::RingBuffer*>(arg);
  const clock::ClockId id = rb->clock();
  return clock::raw_to_ns(id, clock::read_raw(id));
}

struct Fire {
  const internal::EventDesc& ev;
  const void* rec;
  uint32_t len;
  const filter::Context& fctx;
  const void* caller_ip;
};

// The hist triggers of `target` in `slot`: paused or continued.
void set_hists_paused(const internal::EventDesc& target, int slot, bool pause) {
  const internal::EventControl* c = target.control.load(std::memory_order_acquire);
  if (!c) return;
  const SlotControl* sc = c->slots[slot].load(std::memory_order_acquire);
  if (!sc) return;
  for (const auto& t : sc->triggers) {
    if (t->kind != Kind::kHist) continue;
    if (pause)
      t->hist->pause();
    else
      t->hist->cont();
  }
}

void fire(Trigger& t, int slot, const Fire& f) {
  if (t.filter && !t.filter->match(f.rec, f.len, f.fctx)) return;
  instance::SlotState& s = instance::g_slot_state[slot];
  // order: acquire pairs with the release that published the buffer.
  rb::RingBuffer* rb = s.buffer.load(std::memory_order_acquire);
  if (!rb) return;
  switch (t.kind) {
    case Kind::kTraceOn:
    case Kind::kTraceOff:
      actions::tracing_on(slot, t.kind == Kind::kTraceOn, t.count);
      return;
    case Kind::kSnapshot:
      actions::snapshot(slot, "trigger", t.count);
      return;
    case Kind::kStacktrace:
      if (!actions::take_count(t.count)) return;
      write_user_stack(slot, *static_cast<const internal::CommonHeader*>(f.rec), f.caller_ip,
                       has_dynamic_fields(f.ev));
      return;
    case Kind::kEnableEvent:
    case Kind::kDisableEvent:
      actions::set_event(*t.target, slot, t.kind == Kind::kEnableEvent, t.count);
      return;
    case Kind::kEnableHist:
    case Kind::kDisableHist:
      if (!actions::take_count(t.count)) return;
      set_hists_paused(*t.target, slot, t.kind == Kind::kDisableHist);
      return;
    case Kind::kHist: {
      hist::RecordContext hctx;
      hctx.cpu = f.fctx.cpu;
      hctx.comm = f.fctx.comm;
      hctx.now_ns = &slot_now_ns;
      hctx.now_arg = rb;
      t.hist->record(f.rec, f.len, hctx);
      return;
    }
    case Kind::kDump:
    case Kind::kCpuDump:
      return;  // function commands only
  }
}

}  // namespace

// Not inlined: its return address marks write_event's frame for the
// stacktrace trigger.
[[gnu::noinline]] void write_controlled(const internal::EventDesc& ev, void* rec, uint32_t len,
                                        const writers::ThreadState& t, uint64_t record_mask) {
  // order: acquire pairs with the release that published the control
  // before the control bit was set.
  const internal::EventControl* c = ev.control.load(std::memory_order_acquire);
  if (USRTRACE_UNLIKELY(!c)) {
    for (uint64_t m = record_mask; m; m &= m - 1) events::write_to_slot(__builtin_ctzll(m), rec, len, t.tid);
    return;
  }
  filter::Context fctx;
  fctx.cpu = base::rseq_cpu_id();
  fctx.comm = t.comm;
  const Fire f{ev, rec, len, fctx, __builtin_return_address(0)};
  uint64_t slots = record_mask | c->trigger_slots.load(std::memory_order_relaxed);
  while (slots) {
    const int slot = __builtin_ctzll(slots);
    slots &= slots - 1;
    // order: acquire pairs with the release publishing the SlotControl.
    const SlotControl* sc = c->slots[slot].load(std::memory_order_acquire);
    if (sc)
      for (const auto& tr : sc->triggers)
        if (tr->kind == Kind::kTraceOn) fire(*tr, slot, f);
    if ((record_mask >> slot & 1) && (!sc || !sc->filter || sc->filter->match(rec, len, fctx)))
      events::write_to_slot(slot, rec, len, t.tid);
    if (sc)
      for (const auto& tr : sc->triggers)
        if (tr->kind != Kind::kTraceOn) fire(*tr, slot, f);
  }
}

// Takes one firing from a ":N" count; false when none is left.

}  // namespace usrtrace::trigger
