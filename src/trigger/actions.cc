// Built with -fno-exceptions: the write path (trigger/actions.h).
#include "trigger/actions.h"

#include <iterator>

#include "instance/instance.h"

namespace usrtrace::trigger::actions {
namespace {

struct Entry {
  const char* name;
  Action action;
  uint8_t users;  // User bits
};
constexpr uint8_t kBoth = kTrigger | kFunctionCommand;
// In Action's order (name() indexes it).
constexpr Entry kActions[] = {
    {"traceon", Action::kTraceOn, kBoth},
    {"traceoff", Action::kTraceOff, kBoth},
    {"snapshot", Action::kSnapshot, kBoth},
    {"stacktrace", Action::kStacktrace, kBoth},
    {"enable_event", Action::kEnableEvent, kBoth},
    {"disable_event", Action::kDisableEvent, kBoth},
    {"enable_hist", Action::kEnableHist, kTrigger},
    {"disable_hist", Action::kDisableHist, kTrigger},
    {"hist", Action::kHist, kTrigger},
    {"dump", Action::kDump, kFunctionCommand},
    {"cpudump", Action::kCpuDump, kFunctionCommand},
};
constexpr bool in_order() {
  for (size_t i = 0; i < std::size(kActions); ++i)
    if (static_cast<size_t>(kActions[i].action) != i) return false;
  return true;
}
static_assert(in_order(), "kActions must list the actions in Action's order");

}  // namespace

bool by_name(std::string_view n, User user, Action* out) {
  for (const Entry& e : kActions) {
    if (n == e.name && (e.users & user) != 0) {
      *out = e.action;
      return true;
    }
  }
  return false;
}

const char* name(Action a) {
  const auto i = static_cast<size_t>(a);
  return i < std::size(kActions) ? kActions[i].name : "?";
}

bool take_count(std::atomic<long>& count) {
  long v = count.load(std::memory_order_relaxed);
  do {
    if (v < 0) return true;  // unlimited
    if (v == 0) return false;
    // order: relaxed; the count only bounds firings, it orders nothing.
  } while (!count.compare_exchange_weak(v, v - 1, std::memory_order_relaxed));
  return true;
}

void tracing_on(int slot, bool on, std::atomic<long>& count) {
  // order: acquire pairs with the release that published the buffer.
  rb::RingBuffer* rb = instance::g_slot_state[slot].buffer.load(std::memory_order_acquire);
  if (rb == nullptr || rb->record_is_on() == on || !take_count(count)) return;
  if (on)
    rb->record_on();
  else
    rb->record_off();
}

void snapshot(int slot, const char* why, std::atomic<long>& count) {
  if (!take_count(count)) return;
  // order: acquire pairs with the release that published the instance.
  instance::Instance* inst = instance::g_slot_state[slot].instance.load(std::memory_order_acquire);
  if (inst != nullptr) inst->snapshots().take(why);  // the whole buffer, as the kernel's
}

void set_event(internal::EventDesc& target, int slot, bool on, std::atomic<long>& count) {
  const uint64_t bit = uint64_t{1} << slot;
  const bool is_on = (target.enabled.load(std::memory_order_relaxed) & bit) != 0;
  if (is_on == on || !take_count(count)) return;
  // order: relaxed; enabling is a soft switch (the registry does the same).
  if (on)
    target.enabled.fetch_or(bit, std::memory_order_relaxed);
  else
    target.enabled.fetch_and(~bit, std::memory_order_relaxed);
}

}  // namespace usrtrace::trigger::actions
