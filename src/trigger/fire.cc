// The write path of filters and triggers (see control.h for the protocol).
// Built with -fno-exceptions: nothing here throws, allocates or locks.
#include <atomic>
#include <cerrno>

#include "base/compiler.h"
#include "base/rseq.h"
#include "clock/trace_clock.h"
#include "instance/slot_write.h"
#include "trigger/actions.h"
#include "trigger/internal.h"

namespace usrtrace::trigger {
namespace {

struct Fire {
  const internal::EventDesc& ev;
  const void* rec;
  uint32_t len;
  const filter::Context& fctx;
  const void* caller_ip;
};

// What a hist trigger's record asks of its slot: the record's time stamp
// (common_timestamp is the one the ring buffer stored with the record, read
// once for the slot: write_controlled passes it to the write), snapshots
// and the stack.
struct SlotCtx {
  int slot;
  rb::RingBuffer* rb;
  uint64_t raw;  // the record's time stamp, raw clock units
  const Fire* f;
};

uint64_t slot_now_ns(const void* arg) {
  const auto* c = static_cast<const SlotCtx*>(arg);
  return clock::raw_to_ns(c->rb->clock(), c->raw);
}

instance::Instance* slot_instance(const void* arg) {
  // order: acquire pairs with the release that published the instance.
  return instance::g_slot_state[static_cast<const SlotCtx*>(arg)->slot].instance.load(
      std::memory_order_acquire);
}

int slot_snapshot(const void* arg, const char* reason, uint64_t score, bool scored) {
  instance::Instance* inst = slot_instance(arg);
  if (!inst) return -ENODEV;
  return scored ? inst->snapshots().take_scored(reason, score) : inst->snapshots().take(reason);
}

int slot_snapshot_ring(const void* arg) {
  instance::Instance* inst = slot_instance(arg);
  return inst ? inst->snapshots().ring_size() : 1;
}

int slot_stack(const void* arg, uint64_t* out, int max) {
  const Fire& f = *static_cast<const SlotCtx*>(arg)->f;
  return user_stack(f.caller_ip, has_dynamic_fields(f.ev), out, max);
}

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

void fire(Trigger& t, int slot, const Fire& f, const SlotCtx& sctx) {
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
      hctx.now_arg = &sctx;
      hctx.snapshot = &slot_snapshot;
      hctx.snapshot_ring = &slot_snapshot_ring;
      hctx.stack = &slot_stack;
      hctx.action_arg = &sctx;
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
    // A slot whose hist triggers read common_timestamp reads the clock once: the record is written
    // with that time stamp and the histograms see it as common_timestamp.
    // order: acquire pairs with the release that published the buffer.
    SlotCtx sctx{slot, instance::g_slot_state[slot].buffer.load(std::memory_order_acquire), 0, &f};
    bool timed = false;
    if (sc && sctx.rb)
      for (const auto& tr : sc->triggers)
        timed = timed || (tr->kind == Kind::kHist && tr->hist->needs_time());
    if (timed) sctx.raw = clock::read_raw(sctx.rb->clock());
    if (sc)
      for (const auto& tr : sc->triggers)
        if (tr->kind == Kind::kTraceOn) fire(*tr, slot, f, sctx);
    if ((record_mask >> slot & 1) && (!sc || !sc->filter || sc->filter->match(rec, len, fctx))) {
      if (timed)
        events::write_to_slot_at(slot, rec, len, t.tid, sctx.raw);
      else
        events::write_to_slot(slot, rec, len, t.tid);
    }
    if (sc)
      for (const auto& tr : sc->triggers)
        if (tr->kind != Kind::kTraceOn) fire(*tr, slot, f, sctx);
  }
}

// Takes one firing from a ":N" count; false when none is left.

}  // namespace usrtrace::trigger
