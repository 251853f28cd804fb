#include "events/registry.h"

#include "base/sys.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace usrtrace::events {
namespace {

uint16_t hash_id(std::string_view system, std::string_view name) {
  uint32_t h = 2166136261u;  // FNV-1a over "system:name"
  auto mix = [&](std::string_view s) {
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  };
  mix(system);
  mix(":");
  mix(name);
  return static_cast<uint16_t>(kFirstDynamicId + h % (65536u - kFirstDynamicId));
}

bool is_builtin(const EventDesc* ev) { return std::string_view(ev->system) == "ftrace"; }

}  // namespace

Registry& Registry::get() {
  static Registry* r = new Registry();  // never destroyed: events unregister at exit
  return *r;
}

void Registry::changed() {
  base::metadata_changed();
  if (auto* hook = change_hook_.load(std::memory_order_acquire)) hook();
}

void Registry::add(EventDesc* ev) {
  {
    base::MutexLock l(&mu_);
    if (ev->registered) return;
    add_locked(ev);
  }
  changed();
}

void Registry::add_locked(EventDesc* ev) {
  uint16_t id = 0;
  if (is_builtin(ev) && ev->id != 0 && by_id_[ev->id].load(std::memory_order_relaxed) == nullptr) {
    id = ev->id;
  } else {
    id = hash_id(ev->system, ev->name);
    while (by_id_[id].load(std::memory_order_relaxed) != nullptr)
      id = id == 65535 ? kFirstDynamicId : static_cast<uint16_t>(id + 1);
  }
  ev->id = id;
  ev->next = head_;
  head_ = ev;
  ev->registered = true;
  // order: release; a reader that finds the desc by id sees it complete.
  by_id_[id].store(ev, std::memory_order_release);
}

namespace {

// Set when this library's own destructors begin. A destructor function runs
// before the object's C++ static destructors: ld.so runs .fini_array last
// entry first, and crtbegin's __do_global_dtors_aux, which runs them
// (__cxa_finalize), is the first entry. From then on an event's removal
// (the Registrar of an event defined in this library, or in an object
// finalized after it) only unlinks the event: the remove hooks' state
// (function commands in src/function, triggers) may already be destroyed,
// and nothing reads it again. Before this, a program that exited with a
// function command set crashed in the function hook (found by
// tests/realworld: `record -l 'FUNC:stacktrace'`).
// order: relaxed: written and read by the exiting thread (ld.so's fini runs
// on the thread that called exit()).
std::atomic<bool> g_finalizing{false};
__attribute__((destructor)) void mark_finalizing() { g_finalizing.store(true, std::memory_order_relaxed); }

}  // namespace

void Registry::remove(EventDesc* ev) {
  {
    base::MutexLock l(&mu_);
    if (!ev->registered) return;
    remove_locked(ev);
  }
  if (g_finalizing.load(std::memory_order_relaxed)) return;
  for (auto& h : remove_hooks_)
    if (auto* hook = h.load(std::memory_order_acquire)) hook(ev);
  changed();
}

void Registry::add_remove_hook(void (*hook)(EventDesc*)) {
  for (auto& h : remove_hooks_) {
    void (*expected)(EventDesc*) = nullptr;
    if (h.compare_exchange_strong(expected, hook, std::memory_order_acq_rel)) return;
  }
  abort();  // more hooks than kRemoveHooks: a build error in spirit
}

void Registry::remove_locked(EventDesc* ev) {
  for (EventDesc** p = &head_; *p; p = &(*p)->next) {
    if (*p == ev) {
      *p = ev->next;
      break;
    }
  }
  ev->registered = false;
  // The control bit stays: a writer of this event may still be in flight;
  // the removal hook frees the control after a grace period.
  ev->enabled.fetch_and(uint64_t{1} << internal::kControlBit, std::memory_order_relaxed);
  by_id_[ev->id].store(nullptr, std::memory_order_release);
}

EventDesc* Registry::find(std::string_view system, std::string_view name) {
  base::MutexLock l(&mu_);
  for (EventDesc* e = head_; e; e = e->next)
    if (system == e->system && name == e->name) return e;
  return nullptr;
}

void Registry::for_each(const std::function<void(EventDesc&)>& f) {
  base::MutexLock l(&mu_);
  std::vector<EventDesc*> all;
  for (EventDesc* e = head_; e; e = e->next) all.push_back(e);
  std::sort(all.begin(), all.end(), [](const EventDesc* a, const EventDesc* b) {
    int c = std::string_view(a->system).compare(b->system);
    return c != 0 ? c < 0 : std::string_view(a->name) < std::string_view(b->name);
  });
  for (EventDesc* e : all) f(*e);
}

std::vector<std::string> Registry::systems() {
  std::vector<std::string> out;
  for_each([&](EventDesc& e) {
    if (out.empty() || out.back() != e.system) out.emplace_back(e.system);
  });
  return out;
}

int Registry::set_enabled(int slot, std::string_view system_glob, std::string_view name_glob, bool on,
                          std::string* why) {
  const int n = set_enabled_bits(slot, system_glob, name_glob, on);
  const int rc = enable_changed(why);
  return rc < 0 ? rc : n;
}

int Registry::set_enabled_bits(int slot, std::string_view system_glob, std::string_view name_glob, bool on) {
  base::MutexLock l(&mu_);
  int n = 0;
  const uint64_t bit = uint64_t{1} << slot;
  for (EventDesc* e = head_; e; e = e->next) {
    if (!glob_match(system_glob, e->system) || !glob_match(name_glob, e->name)) continue;
    ++n;
    // order: relaxed is enough; enabling is a soft switch. An RMW, because
    // enable_event triggers change the word from the write path.
    if (on)
      e->enabled.fetch_or(bit, std::memory_order_relaxed);
    else
      e->enabled.fetch_and(~bit, std::memory_order_relaxed);
  }
  return n;
}

void Registry::clear_slot(int slot) {
  {
    base::MutexLock l(&mu_);
    const uint64_t bit = uint64_t{1} << slot;
    for (EventDesc* e = head_; e; e = e->next) e->enabled.fetch_and(~bit, std::memory_order_relaxed);
  }
  enable_changed();
}

namespace {

void field_line(std::string& out, const char* decl, unsigned offset, unsigned size, bool is_signed) {
  char buf[512];
  snprintf(buf, sizeof buf, "\tfield:%s;\toffset:%u;\tsize:%u;\tsigned:%d;\n", decl, offset, size,
           is_signed ? 1 : 0);
  out += buf;
}

}  // namespace

std::string format_text(const EventDesc& ev) {
  std::string out;
  out += "name: ";
  out += ev.name;
  out += "\nID: " + std::to_string(ev.id) + "\nformat:\n";
  field_line(out, "unsigned short common_type", 0, 2, false);
  field_line(out, "unsigned char common_flags", 2, 1, false);
  field_line(out, "unsigned char common_preempt_count", 3, 1, false);
  field_line(out, "int common_pid", 4, 4, true);
  out += "\n";
  for (uint16_t i = 0; i < ev.nfields; ++i) {
    const FieldDesc& f = ev.fields[i];
    std::string decl;
    using internal::FieldKind;
    // "__data_loc char[] msg" and scalars are TYPE NAME; ftrace:print's
    // trailing buf is NAME[]; fixed arrays NAME[N].
    if (f.size == 0) {
      decl = std::string(f.type) + " " + f.name + "[]";
    } else if (f.kind == FieldKind::kCharArray || f.kind == FieldKind::kByteArray) {
      // A probe's T[N] (src/probe) is NAME[], its size saying how long, as
      // the kernel's probe events print it.
      decl =
          std::string(f.type) + " " + f.name + "[" + (f.array_len ? std::to_string(f.array_len) : "") + "]";
    } else {
      decl = std::string(f.type) + " " + f.name;
    }
    field_line(out, decl.c_str(), f.offset, f.size, f.is_signed);
  }
  out += "\nprint fmt: ";
  out += ev.print_fmt;
  out += "\n";
  return out;
}

bool glob_match(std::string_view p, std::string_view t) {
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '[') {
      size_t end = p.find(']', pi + 1);
      if (end != std::string_view::npos) {
        bool neg = pi + 1 < end && (p[pi + 1] == '!' || p[pi + 1] == '^');
        bool hit = false;
        for (size_t k = pi + 1 + (neg ? 1 : 0); k < end; ++k) {
          if (k + 2 < end && p[k + 1] == '-') {
            hit |= t[ti] >= p[k] && t[ti] <= p[k + 2];
            k += 2;
          } else {
            hit |= t[ti] == p[k];
          }
        }
        if (hit != neg) {
          pi = end + 1;
          ++ti;
          continue;
        }
      }
    } else if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi;
      ++ti;
      continue;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
      continue;
    }
    if (star == std::string_view::npos) return false;
    pi = star + 1;
    ti = ++mark;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace usrtrace::events

namespace usrtrace::internal {

void register_event(EventDesc* ev) { events::Registry::get().add(ev); }
void unregister_event(EventDesc* ev) { events::Registry::get().remove(ev); }

}  // namespace usrtrace::internal
