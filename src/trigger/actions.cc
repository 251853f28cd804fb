// Built with -fno-exceptions: the write path (trigger/actions.h).
#include "trigger/actions.h"

#include "instance/instance.h"

namespace usrtrace::trigger::actions {

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
