// The write side of the function commands of set_ftrace_filter (the
// kernel's ftrace probes): what a traced function's entry does for each
// command on it. control.cc parses, lists and publishes them.
//
// traceon/traceoff, snapshot and enable_/disable_event are the event
// triggers' own actions (trigger/actions.h), counts included.
// Context: a hook, between writers::enter and exit; no lock, no allocation
// (dump writes with write(2), stacktrace unwinds).
#include <atomic>

#include "base/compiler.h"
#include "function/core.h"
#include "instance/instance.h"
#include "instance/slot_write.h"
#include "trigger/actions.h"
#include "trigger/internal.h"

namespace usrtrace::function {
namespace {

void fire(const Probe& p, uint64_t parent, const writers::ThreadState& t) {
  instance::SlotState& s = instance::g_slot_state[p.slot];
  // order: acquire pairs with the release that published the buffer.
  rb::RingBuffer* rb = s.buffer.load(std::memory_order_acquire);
  if (rb == nullptr) return;
  switch (p.kind) {
    case ProbeKind::kTraceOn:
    case ProbeKind::kTraceOff:
      trigger::actions::tracing_on(p.slot, p.kind == ProbeKind::kTraceOn, p.count);
      return;
    case ProbeKind::kSnapshot:
      trigger::actions::snapshot(p.slot, "function", p.count);
      return;
    case ProbeKind::kStacktrace: {
      if (!trigger::actions::take_count(p.count)) return;
      internal::CommonHeader h{};
      events::fill_common(&h, t);
      unwind_stack_begin();
      trigger::write_user_stack_from(p.slot, h, parent);
      unwind_stack_end();
      return;
    }
    case ProbeKind::kEnableEvent:
    case ProbeKind::kDisableEvent:
      trigger::actions::set_event(*p.target, p.slot, p.kind == ProbeKind::kEnableEvent, p.count);
      return;
    case ProbeKind::kDump:
    case ProbeKind::kCpuDump:
      if (!trigger::actions::take_count(p.count)) return;
      // The kernel's ftrace_dump(DUMP_ALL / DUMP_ORIG): the top instance,
      // to the console, here the dump-on-crash file (stderr by default).
      // order: acquire pairs with register_dump's release.
      if (const DumpHooks* h = g_dump_hooks.load(std::memory_order_acquire); h != nullptr)
        h->dump(p.kind == ProbeKind::kCpuDump);
      return;
    case ProbeKind::kEnableHist:
    case ProbeKind::kDisableHist:
    case ProbeKind::kHist:
      return;  // event triggers only
  }
}

}  // namespace

std::atomic<const DumpHooks*> g_dump_hooks{nullptr};

void register_dump(const DumpHooks& hooks) {
  static DumpHooks copy;
  copy = hooks;
  g_dump_hooks.store(&copy, std::memory_order_release);
}

USRTRACE_NOINLINE USRTRACE_COLD void fire_probes(const Site& s, uint64_t parent,
                                                 const writers::ThreadState& t, bool traceon) {
  for (uint32_t i = 0; i < s.nprobes; ++i) {
    const Probe& p = *s.probes[i];
    if ((p.kind == ProbeKind::kTraceOn) == traceon) fire(p, parent, t);
  }
}

}  // namespace usrtrace::function
