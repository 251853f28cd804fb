// The control plane of filters and triggers (see control.h).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>
#include <utility>

#include "base/mutex.h"
#include "events/registry.h"
#include "instance/slot_write.h"
#include "trigger/internal.h"
#include "write/write.h"

namespace usrtrace::trigger {
namespace {

using internal::EventControl;
using internal::EventDesc;

constexpr uint64_t kControlMask = uint64_t{1} << internal::kControlBit;

constexpr char kAvailableTriggers[] =
    "# Available triggers:\n"
    "# traceon traceoff snapshot stacktrace enable_event disable_event enable_hist disable_hist "
    "hist\n";

constexpr char kSystemFilterHead[] =
    "### global filter ###\n"
    "# Use this to set filters for multiple events.\n"
    "# Only events with the given fields will be affected.\n"
    "# If no events are modified, an error message will be displayed here\n";

constexpr const char* kFilterSubsystem = "event filter parse error";

// Serializes every change of filters and triggers.
base::Mutex& mu() {
  static base::Mutex* m = new base::Mutex();
  return *m;
}

struct State {
  std::vector<EventDesc*> controlled;                                 // events with an EventControl
  std::map<std::pair<int, std::string>, std::string> system_filters;  // (slot, system) -> text
};
State& state() USRTRACE_REQUIRES(mu()) {
  static State* s = new State();
  return *s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

EventControl& control_of(EventDesc& ev) USRTRACE_REQUIRES(mu()) {
  if (EventControl* c = ev.control.load(std::memory_order_relaxed)) return *c;
  auto* c = new EventControl();
  // order: release; a writer that sees the control bit (set later) sees
  // the control complete.
  ev.control.store(c, std::memory_order_release);
  state().controlled.push_back(&ev);
  return *c;
}

const SlotControl* current(const EventDesc& ev, int slot) {
  const EventControl* c = ev.control.load(std::memory_order_acquire);
  return c ? c->owned[slot].get() : nullptr;
}

// A copy of the slot's control to change and publish.
std::unique_ptr<SlotControl> copy_of(const EventDesc& ev, int slot) {
  auto next = std::make_unique<SlotControl>();
  if (const SlotControl* sc = current(ev, slot)) *next = *sc;
  return next;
}

// Publishes `next` as the slot's control; the old one is appended to
// `retired` for the caller to free after a grace period.
void publish(EventDesc& ev, int slot, std::unique_ptr<SlotControl> next,
             std::vector<std::unique_ptr<SlotControl>>* retired) USRTRACE_REQUIRES(mu()) {
  EventControl& c = control_of(ev);
  if (next && !next->filter && next->triggers.empty()) next.reset();
  const SlotControl* shown = next.get();
  const bool has_triggers = next && !next->triggers.empty();
  retired->push_back(std::exchange(c.owned[slot], std::move(next)));
  // order: release pairs with the write path's acquire load of the slot.
  c.slots[slot].store(shown, std::memory_order_release);
  const uint64_t bit = uint64_t{1} << slot;
  if (has_triggers)
    c.trigger_slots.fetch_or(bit, std::memory_order_relaxed);
  else
    c.trigger_slots.fetch_and(~bit, std::memory_order_relaxed);
  bool any = false;
  for (const auto& o : c.owned) any = any || o != nullptr;
  // The control bit after the slot: a writer that sees the bit finds the
  // control published (write_controlled's acquire loads).
  if (any) {
    events::set_controlled_writer(&write_controlled);
    events::set_marker_writer(&write_controlled);  // ftrace:print's, for trace_marker
    ev.enabled.fetch_or(kControlMask, std::memory_order_release);
  } else
    ev.enabled.fetch_and(~kControlMask, std::memory_order_relaxed);
}

// Frees retired controls once no writer can still be reading them.
void retire(std::vector<std::unique_ptr<SlotControl>>* retired) {
  bool any = false;
  for (const auto& r : *retired) any = any || r != nullptr;
  if (any) writers::synchronize_writers();
  retired->clear();
}

Error filter_error(std::string_view expr, const filter::Error& fe, std::string_view command = {},
                   size_t offset = 0) {
  Error e;
  e.subsystem = kFilterSubsystem;
  e.message = filter::message(fe.code);
  e.command = std::string(command.empty() ? expr : command);
  e.pos = offset + fe.pos;
  return e;
}

Error trigger_error(std::string_view message, std::string_view command, size_t pos) {
  Error e;
  e.subsystem = "event trigger";
  e.message = std::string(message);
  e.command = std::string(command);
  e.pos = pos;
  return e;
}

std::vector<EventDesc*> events_of(std::string_view system) {
  std::vector<EventDesc*> out;
  events::Registry::get().for_each([&](EventDesc& e) {
    if (system == e.system) out.push_back(&e);
  });
  return out;
}

// ---- Trigger commands.

struct Command {
  bool remove = false;
  Kind kind = Kind::kTraceOn;
  std::string_view name;    // "traceon", "enable_event", "hist"...
  std::string_view head;    // cmd[:args], no blanks
  std::string_view args;    // after the first ':'
  size_t args_pos = 0;      // offset of args in the command
  std::string_view filter;  // after " if ", "" for none
  size_t filter_pos = 0;
};

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

// Splits "[!]cmd[:args][ if FILTER]"; `s` is trimmed. Offsets are into `s`.
int parse_command(std::string_view s, Command* c, Error* err) {
  size_t i = 0;
  if (s[0] == '!') {
    c->remove = true;
    i = 1;
  }
  size_t end = i;
  while (end < s.size() && !is_blank(s[end])) ++end;
  c->head = s.substr(i, end - i);
  const size_t colon = c->head.find(':');
  c->name = c->head.substr(0, colon);
  if (colon != std::string_view::npos) {
    c->args = c->head.substr(colon + 1);
    c->args_pos = i + colon + 1;
  }
  if (!actions::by_name(c->name, actions::kTrigger, &c->kind)) {
    *err = trigger_error("Unknown trigger command", s, i);
    return -EINVAL;
  }
  size_t j = end;
  while (j < s.size() && is_blank(s[j])) ++j;
  if (j == s.size()) return 0;
  if (s.substr(j, 2) != "if" || (j + 2 < s.size() && !is_blank(s[j + 2]))) {
    *err = trigger_error("Expected 'if FILTER' after the trigger", s, j);
    return -EINVAL;
  }
  j += 2;
  while (j < s.size() && is_blank(s[j])) ++j;
  if (j == s.size()) {
    *err = trigger_error("Missing filter after 'if'", s, j);
    return -EINVAL;
  }
  c->filter = s.substr(j);
  c->filter_pos = j;
  return 0;
}

// A ":N" count (kstrtoul base 0: decimal, 0x hex, 0 octal).
bool parse_count(std::string_view s, long* out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
  }
  unsigned long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v > static_cast<unsigned long>(LONG_MAX))
    return false;
  *out = static_cast<long>(v);
  return true;
}

// The kernel's "same trigger" test, for EEXIST and for '!' removal.
bool same_trigger(const Trigger& a, const Trigger& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kEnableEvent:
    case Kind::kDisableEvent:
    case Kind::kEnableHist:
    case Kind::kDisableHist:
      return a.target == b.target;
    case Kind::kHist: {
      // The kernel's hist_trigger_match compares the filters too.
      const std::string fa = a.filter ? a.filter->text() : std::string();
      const std::string fb = b.filter ? b.filter->text() : std::string();
      return fa == fb && a.hist->same_spec(*b.hist);
    }
    default:
      return true;
  }
}

// Builds the trigger a command describes (also for '!' commands, to find
// the one to remove). A removal's count and filter are not parsed, as the
// kernel's event_trigger_parse() unregisters before it reads them: the
// file's own listing ("traceoff:count=3", "... if x > 1") written back with
// a '!' removes the trigger, as the selftests' reset_trigger_file does. A
// hist trigger's filter is part of what it is matched by
// (hist_trigger_match), so event_hist_trigger_parse() reads it first, and
// so do we.
int build_trigger(int slot, const EventDesc& ev, std::string_view s, const Command& c,
                  std::unique_ptr<Trigger>* out, Error* err) {
  auto t = std::make_unique<Trigger>();
  t->kind = c.kind;
  std::string_view count_text;
  size_t count_pos = 0;
  switch (c.kind) {
    case Kind::kTraceOn:
    case Kind::kTraceOff:
    case Kind::kSnapshot:
    case Kind::kStacktrace:
      if (c.head.find(':') != std::string_view::npos) {
        count_text = c.args;
        count_pos = c.args_pos;
        if (count_text.empty()) {
          *err = trigger_error("Missing count after ':'", s, count_pos);
          return -EINVAL;
        }
      }
      break;
    case Kind::kEnableEvent:
    case Kind::kDisableEvent:
    case Kind::kEnableHist:
    case Kind::kDisableHist: {
      // SYS:EVENT[:N]
      const size_t c1 = c.args.find(':');
      if (c.args.empty() || c1 == std::string_view::npos || c1 == 0) {
        *err = trigger_error("Expected SYS:EVENT", s, c.args_pos ? c.args_pos : c.head.size());
        return -EINVAL;
      }
      const std::string_view sys = c.args.substr(0, c1);
      std::string_view rest = c.args.substr(c1 + 1);
      const size_t c2 = rest.find(':');
      const std::string_view name = rest.substr(0, c2);
      if (c2 != std::string_view::npos) {
        count_text = rest.substr(c2 + 1);
        count_pos = c.args_pos + c1 + 1 + c2 + 1;
        if (count_text.empty()) {
          *err = trigger_error("Missing count after ':'", s, count_pos);
          return -EINVAL;
        }
      }
      t->target = events::Registry::get().find(sys, name);
      if (!t->target || std::string_view(t->target->system) == "ftrace") {
        *err = trigger_error("Event not found", s, c.args_pos);
        return -EINVAL;
      }
      break;
    }
    case Kind::kHist: {
      hist::Error he;
      t->hist = hist::Histogram::create(ev, c.head, &he, hist::Scope{slot, c.remove});
      if (!t->hist) {
        Error e;
        e.subsystem = std::string("hist:") + ev.system + ":" + ev.name;
        e.message = he.message;
        e.command = std::string(s);
        e.pos = static_cast<size_t>(c.head.data() - s.data()) + he.pos;
        *err = std::move(e);
        return -EINVAL;
      }
      break;
    }
    case Kind::kDump:
    case Kind::kCpuDump:
      return -EINVAL;  // function commands only: parse_command refused them
  }
  if (c.remove && c.kind != Kind::kHist) {
    *out = std::move(t);
    return 0;
  }
  if (!count_text.empty()) {
    long n = 0;
    if (!parse_count(count_text, &n)) {
      *err = trigger_error("Invalid count", s, count_pos);
      return -EINVAL;
    }
    t->count.store(n, std::memory_order_relaxed);
  }
  if (!c.filter.empty()) {
    filter::Error fe;
    t->filter = filter::Program::compile(ev, c.filter, &fe);
    if (!t->filter) {
      *err = filter_error(c.filter, fe, s, c.filter_pos);
      return -EINVAL;
    }
  }
  (void)slot;
  *out = std::move(t);
  return 0;
}

void adjust_soft(const Trigger& t, int slot, int delta) USRTRACE_REQUIRES(mu()) {
  if (t.kind == Kind::kEnableEvent || t.kind == Kind::kDisableEvent)
    control_of(*t.target).soft[slot] += delta;
}

std::string count_text(const Trigger& t) {
  const long n = t.count.load(std::memory_order_relaxed);
  return n < 0 ? std::string("unlimited") : "count=" + std::to_string(n);
}

std::string trigger_line(const Trigger& t) {
  const std::string filter = t.filter ? t.filter->text() : std::string();
  if (t.kind == Kind::kHist) {
    std::string line = t.hist->trigger_text(filter);
    if (line.empty() || line.back() != '\n') line.push_back('\n');
    return line;
  }
  std::string line = actions::name(t.kind);
  if (t.target) line.append(":").append(t.target->system).append(":").append(t.target->name);
  line.append(":").append(count_text(t));
  if (t.filter) line.append(" if ").append(filter);
  line.push_back('\n');
  return line;
}

}  // namespace

// ---- Filters.

int set_filter(int slot, EventDesc& ev, std::string_view expr_in, Error* err) {
  const std::string_view expr = trim(expr_in);
  std::shared_ptr<const filter::Program> prog;
  if (!expr.empty() && expr != "0") {
    filter::Error fe;
    prog = filter::Program::compile(ev, expr, &fe);
    if (!prog) {
      *err = filter_error(expr, fe);
      return -EINVAL;
    }
  }
  std::vector<std::unique_ptr<SlotControl>> retired;
  {
    base::MutexLock l(&mu());
    if (!prog && !current(ev, slot)) return 0;
    auto next = copy_of(ev, slot);
    next->filter = std::move(prog);
    publish(ev, slot, std::move(next), &retired);
    retire(&retired);
  }
  return 0;
}

std::string filter_text(int slot, const EventDesc& ev) {
  base::MutexLock l(&mu());
  const SlotControl* sc = current(ev, slot);
  return sc && sc->filter ? sc->filter->text() : std::string("none");
}

int set_system_filter(int slot, std::string_view system, std::string_view expr_in, Error* err) {
  const std::string_view expr = trim(expr_in);
  const bool clear = expr.empty() || expr == "0";
  base::MutexLock l(&mu());
  const std::vector<EventDesc*> evs = events_of(system);
  std::vector<std::pair<EventDesc*, std::shared_ptr<const filter::Program>>> set;
  if (!clear) {
    filter::Error first_other;
    bool other = false;
    for (EventDesc* e : evs) {
      filter::Error fe;
      std::shared_ptr<const filter::Program> p = filter::Program::compile(*e, expr, &fe);
      if (p) {
        set.emplace_back(e, std::move(p));
      } else if (fe.code != filter::ErrorCode::kFieldNotFound && !other) {
        first_other = fe;
        other = true;
      }
    }
    if (set.empty()) {
      if (other) {
        *err = filter_error(expr, first_other);
      } else {
        *err = Error{kFilterSubsystem, "Couldn't find or set field in one of a subsystem's events",
                     std::string(expr), 0};
      }
      return -EINVAL;
    }
  } else {
    for (EventDesc* e : evs) set.emplace_back(e, nullptr);
  }
  std::vector<std::unique_ptr<SlotControl>> retired;
  for (auto& [e, p] : set) {
    if (!p && !current(*e, slot)) continue;
    auto next = copy_of(*e, slot);
    next->filter = std::move(p);
    publish(*e, slot, std::move(next), &retired);
  }
  retire(&retired);
  const auto key = std::make_pair(slot, std::string(system));
  if (clear)
    state().system_filters.erase(key);
  else
    state().system_filters[key] = std::string(expr);
  return 0;
}

std::string system_filter_text(int slot, std::string_view system) {
  base::MutexLock l(&mu());
  std::string out = kSystemFilterHead;
  const auto it = state().system_filters.find(std::make_pair(slot, std::string(system)));
  if (it != state().system_filters.end()) out += it->second + "\n";
  return out;
}

// ---- Triggers.

namespace {
int write_trigger_once(int slot, EventDesc& ev, std::string_view cmd, Error* err) {
  const std::string_view s = trim(cmd);
  if (s.empty() || s == "!") return 0;
  Command c;
  if (int rc = parse_command(s, &c, err); rc < 0) return rc;
  std::unique_ptr<Trigger> t;
  if (int rc = build_trigger(slot, ev, s, c, &t, err); rc < 0) return rc;

  std::vector<std::unique_ptr<SlotControl>> retired;
  base::MutexLock l(&mu());
  const SlotControl* cur = current(ev, slot);
  std::shared_ptr<Trigger> existing;
  if (cur)
    for (const auto& x : cur->triggers)
      if (same_trigger(*x, *t)) existing = x;

  if (c.remove) {
    if (!existing) return 0;  // the kernel ignores removing what is not there
    // Kernel: hist_trigger_check_refs(): a histogram whose variables
    // another reads stays.
    if (existing->kind == Kind::kHist && existing->hist->referenced()) {
      *err = Error{"hist:" + std::string(ev.system) + ":" + ev.name,
                   "Hist trigger's variables are used by another hist trigger", std::string(s), 0};
      return -EBUSY;
    }
    auto next = copy_of(ev, slot);
    std::erase(next->triggers, existing);
    adjust_soft(*existing, slot, -1);
    publish(ev, slot, std::move(next), &retired);
    retire(&retired);
    return 0;
  }
  if (c.kind == Kind::kHist) {
    const bool act = t->hist->wants_pause() || t->hist->wants_cont() || t->hist->wants_clear();
    if (existing) {
      if (!act) {
        *err = Error{"hist:" + std::string(ev.system) + ":" + ev.name, "Hist trigger already exists",
                     std::string(s), 0};
        return -EEXIST;
      }
      if (t->hist->wants_pause()) existing->hist->pause();
      if (t->hist->wants_cont()) existing->hist->cont();
      if (t->hist->wants_clear()) existing->hist->clear();
      return 0;
    }
    if (t->hist->wants_cont() || t->hist->wants_clear()) {
      *err = Error{"hist:" + std::string(ev.system) + ":" + ev.name,
                   "Can't clear or continue a nonexistent hist trigger", std::string(s), 0};
      return -ENOENT;
    }
    if (t->hist->wants_pause()) t->hist->pause();
  } else if (existing) {
    *err = trigger_error("Trigger already exists", s, 0);
    return -EEXIST;
  }
  if (c.kind == Kind::kSnapshot || (c.kind == Kind::kHist && t->hist->takes_snapshots())) {
    // Kernel: a snapshot trigger allocates the snapshot buffer.
    instance::Instance* inst = instance::g_slot_state[slot].instance.load(std::memory_order_acquire);
    if (!inst) return -ENODEV;
    if (int rc = inst->snapshots().allocate(); rc < 0) {
      *err = trigger_error("Cannot allocate the snapshot buffer", s, 0);
      return rc;
    }
  }
  auto next = copy_of(ev, slot);
  adjust_soft(*t, slot, +1);
  if (t->hist) t->hist->publish();
  next->triggers.insert(next->triggers.begin(), std::shared_ptr<Trigger>(std::move(t)));
  publish(ev, slot, std::move(next), &retired);
  retire(&retired);
  return 0;
}
}  // namespace

int write_trigger(int slot, EventDesc& ev, std::string_view cmd, Error* err) {
  const int rc = write_trigger_once(slot, ev, cmd, err);
  if (rc != 0) return rc;
  // enable_/disable_event triggers put their target in soft mode, or take
  // it out: a probe event's site is armed while in soft mode (src/probe).
  // Outside mu(): the hook reads soft_mode().
  std::string why;
  const int armed = events::Registry::get().enable_changed(&why);
  if (armed == 0) return 0;
  // The target is a probe whose site cannot be armed: the kernel's trigger
  // write fails (event_enable_register_trigger enables the target, and
  // that fails), and so does this one, the trigger taken back. Only for
  // this trigger's own target (the failure names GRP/EVENT).
  const std::string_view s = trim(cmd);
  Command c;
  Error ignored;
  if (s.empty() || parse_command(s, &c, &ignored) < 0 || c.remove ||
      (c.kind != Kind::kEnableEvent && c.kind != Kind::kDisableEvent))
    return 0;
  const std::string_view target = c.args.substr(0, c.args.find(':', c.args.find(':') + 1));
  std::string named(target);
  if (const size_t colon = named.find(':'); colon != std::string::npos) named[colon] = '/';
  if (why.rfind(named + ":", 0) != 0) return 0;
  (void)write_trigger_once(slot, ev, "!" + std::string(s), &ignored);
  events::Registry::get().enable_changed();
  *err = {"event trigger", why, std::string(s), c.args_pos};
  return armed;
}

std::string trigger_text(int slot, const EventDesc& ev) {
  base::MutexLock l(&mu());
  const SlotControl* sc = current(ev, slot);
  if (!sc || sc->triggers.empty()) return kAvailableTriggers;
  std::string out;
  for (const auto& t : sc->triggers) out += trigger_line(*t);
  return out;
}

std::string hist_text(int slot, const EventDesc& ev) {
  base::MutexLock l(&mu());
  const SlotControl* sc = current(ev, slot);
  std::string out;
  if (!sc) return out;
  int n = 0;
  for (const auto& t : sc->triggers) {
    if (t->kind != Kind::kHist) continue;
    if (n++ > 0) out += "\n\n";
    out += t->hist->print(t->filter ? t->filter->text() : std::string());
  }
  return out;
}

void hold_soft_mode(int slot, EventDesc& ev, int delta) {
  {
    base::MutexLock l(&mu());
    int& n = control_of(ev).soft[slot];
    n = std::max(0, n + delta);
  }
  // A probe event in soft mode has its site armed (src/probe).
  events::Registry::get().enable_changed();
}

bool soft_mode(int slot, const EventDesc& ev) {
  base::MutexLock l(&mu());
  const EventControl* c = ev.control.load(std::memory_order_acquire);
  return c && c->soft[slot] > 0;
}

bool soft_mode_any(const EventDesc& ev) {
  base::MutexLock l(&mu());
  const EventControl* c = ev.control.load(std::memory_order_acquire);
  if (c == nullptr) return false;
  for (int slot = 0; slot < instance::kMaxInstances; ++slot)
    if (c->soft[slot] > 0) return true;
  return false;
}

void clear_slot(int slot) {
  {
    base::MutexLock l(&mu());
    std::vector<std::unique_ptr<SlotControl>> retired;
    for (EventDesc* e : state().controlled) {
      EventControl& c = control_of(*e);
      c.soft[slot] = 0;
      if (c.owned[slot]) publish(*e, slot, nullptr, &retired);
    }
    for (auto it = state().system_filters.begin(); it != state().system_filters.end();)
      it = it->first.first == slot ? state().system_filters.erase(it) : std::next(it);
    retire(&retired);
  }
  events::Registry::get().enable_changed();  // soft modes gone
}

namespace {
// A removed instance's filters and triggers go with it.
struct RegisterHooks {
  RegisterHooks() { instance::add_instance_hooks({&clear_slot, nullptr}); }
};
RegisterHooks g_register_hooks;
}  // namespace

namespace {

// The registry's remove hook: the event's own controls go, and so do the
// triggers of other events that act on it.
void on_event_removed(EventDesc* ev) {
  base::MutexLock l(&mu());
  std::vector<std::unique_ptr<SlotControl>> retired;
  for (EventDesc* e : state().controlled) {
    for (int slot = 0; slot < instance::kMaxInstances; ++slot) {
      const SlotControl* sc = current(*e, slot);
      if (!sc || e == ev) continue;
      if (std::none_of(sc->triggers.begin(), sc->triggers.end(),
                       [&](const auto& t) { return t->target == ev; }))
        continue;
      auto next = copy_of(*e, slot);
      std::erase_if(next->triggers, [&](const auto& t) { return t->target == ev; });
      publish(*e, slot, std::move(next), &retired);
    }
  }
  EventControl* c = ev->control.load(std::memory_order_relaxed);
  if (c) {
    for (int slot = 0; slot < instance::kMaxInstances; ++slot) {
      if (!c->owned[slot]) continue;
      for (const auto& t : c->owned[slot]->triggers)
        if (t->target != ev) adjust_soft(*t, slot, -1);
      publish(*ev, slot, nullptr, &retired);
    }
    ev->control.store(nullptr, std::memory_order_release);
    std::erase(state().controlled, ev);
  }
  // A writer of `ev` may still be in write_controlled, and one of another
  // event may still fire a trigger that names `ev`.
  if (c || !retired.empty()) writers::synchronize_writers();
  retired.clear();
  delete c;
}

struct InstallHook {
  InstallHook() { events::Registry::get().add_remove_hook(&on_event_removed); }
};
__attribute__((init_priority(103))) InstallHook g_install_hook;

}  // namespace

}  // namespace usrtrace::trigger
