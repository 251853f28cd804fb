// The registry of trace events: every EventDesc of every loaded object, by
// id and by system/name, and the format-file text generated from each.
//
// Ids: the kernel's ids are dynamic; ours are stable for a given event name
// (a hash of "system:name" into [kFirstDynamicId, 65535], probing on a
// collision), so the same program gives the same ids run after run. The
// built-in ftrace events keep the kernel's ids.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/compiler.h"
#include "base/mutex.h"
#include "events/builtin.h"  // kPrintId, kRawDataId
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::events {

using internal::EventDesc;
using internal::FieldDesc;

inline constexpr uint16_t kFirstDynamicId = 1000;

class Registry {
 public:
  static Registry& get();

  // Context: any thread but not signal handlers; takes the registry lock.
  void add(EventDesc* ev);
  void remove(EventDesc* ev);

  // Lock-free lookup for readers and printers. The pointer stays valid
  // while the object that defines the event is loaded.
  // Context: any thread.
  const EventDesc* by_id(uint16_t id) const {
    // order: acquire pairs with add()'s release store: the desc is complete.
    return by_id_[id].load(std::memory_order_acquire);
  }

  // Context: control plane.
  EventDesc* find(std::string_view system, std::string_view name);
  // Calls f for every event, sorted by system then name, under the lock:
  // f must not call back into the registry.
  void for_each(const std::function<void(EventDesc&)>& f);
  std::vector<std::string> systems();

  // Sets or clears bit `slot` of `enabled` in every event whose system and
  // name match the globs; returns how many matched, or -errno with *why
  // when the enable hook failed (an event's probe could not be armed: that
  // event is disabled again, the others keep the change, as the kernel's
  // __ftrace_set_clr_event returns its first error). Context: control plane.
  int set_enabled(int slot, std::string_view system_glob, std::string_view name_glob, bool on,
                  std::string* why = nullptr);
  // Clears bit `slot` everywhere (instance removal).
  void clear_slot(int slot);

  // Called after every add() or remove(), outside the registry lock (buffer
  // files keep their copy of the formats current with it). One hook.
  // Context: control plane.
  void set_change_hook(void (*hook)()) { change_hook_.store(hook, std::memory_order_release); }
  // Called after set_enabled() and clear_slot(), and by whoever else changes
  // which events may be written (the triggers' soft mode), outside the
  // registry lock: the dynamic probes arm the sites of the events that some
  // instance now wants, and disarm the others (src/probe). One hook. It
  // returns 0, or -errno with *why (may be null) when a site could not be
  // armed. Context: control plane.
  using EnableHook = int (*)(std::string* why);
  void set_enable_hook(EnableHook hook) { enable_hook_.store(hook, std::memory_order_release); }
  int enable_changed(std::string* why = nullptr) {
    auto* hook = enable_hook_.load(std::memory_order_acquire);
    return hook != nullptr ? hook(why) : 0;
  }
  // Called by remove() with the removed event, outside the registry lock,
  // before the change hook (the filters and triggers of the event, and
  // those that name it, go: src/trigger; the function commands that name it:
  // src/function). Up to kRemoveHooks hooks, called in the order added.
  // Context: control plane (static initialisation).
  static constexpr int kRemoveHooks = 4;
  void add_remove_hook(void (*hook)(EventDesc*));

 private:
  Registry() = default;
  mutable base::Mutex mu_;
  EventDesc* head_ USRTRACE_GUARDED_BY(mu_) = nullptr;
  std::atomic<const EventDesc*> by_id_[65536] = {};
  std::atomic<void (*)()> change_hook_{nullptr};
  std::atomic<EnableHook> enable_hook_{nullptr};
  std::atomic<void (*)(EventDesc*)> remove_hooks_[kRemoveHooks] = {};
  void changed();
  int set_enabled_bits(int slot, std::string_view system_glob, std::string_view name_glob, bool on);
  void add_locked(EventDesc* ev) USRTRACE_REQUIRES(mu_);
  void remove_locked(EventDesc* ev) USRTRACE_REQUIRES(mu_);
};

// The events/SYS/NAME/format text, as the kernel writes it.
std::string format_text(const EventDesc& ev);
// events/header_page and events/header_event are in ring_buffer/page_format.h.

// Glob match as the kernel's set_event uses it (*, ?, [...]).
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace usrtrace::events
