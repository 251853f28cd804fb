// Event control files: available_events, set_event, set_event_pid,
// set_event_notrace_pid and the events/ directory (trace_events.c), with
// the filter, trigger and hist files of src/trigger.
//
// set_event syntax, as the kernel's (plus globs on either side):
//   sys:event   that event            sys: or sys:*   every event of sys
//   event       every event named so, or every event of the system so named
//   *:* or *    everything            !token          disables instead
// The ftrace system is not enabled through these files (its events are
// written by trace_marker and printk only), as in the kernel; as there,
// events/ftrace/ has format files, id for print and function, and a
// trigger file for print, whose triggers trace_marker writes fire (and its
// hist file, where a kernel built with CONFIG_HIST_TRIGGERS has one).
//
// Their table, kEventFiles, is at the end.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "events/registry.h"
#include "ring_buffer/page_format.h"
#include "tracefs/internal.h"
#include "trigger/control.h"

namespace usrtrace::tracefs::detail {
namespace {

constexpr std::string_view kSub = "event";

// PID_MAX_LIMIT: the kernel refuses pids at or above pid_max.
constexpr uint64_t kPidMax = 4194304;

struct EventName {
  std::string system, name;
  uint16_t id;
};

// Every event set_event can name, sorted by system then name.
std::vector<EventName> settable_events() {
  std::vector<EventName> out;
  events::Registry::get().for_each([&](events::EventDesc& e) {
    if (std::string_view(e.system) != "ftrace") out.push_back({e.system, e.name, e.id});
  });
  return out;
}

bool any(std::string_view glob) { return glob.empty() || glob == "*"; }

// Applies one set_event token; returns how many events it matched. A probe
// event whose site could not be armed stays disabled; the first such
// error goes to *err (-errno) and *why.
int apply_token(Instance& inst, std::string_view tok, bool on, int* err, std::string* why) {
  std::vector<const EventName*> hit;
  const auto all = settable_events();
  const size_t colon = tok.find(':');
  for (const EventName& e : all) {
    bool m;
    if (colon == std::string_view::npos) {
      m = any(tok) || events::glob_match(tok, e.name) || events::glob_match(tok, e.system);
    } else {
      const std::string_view sys = tok.substr(0, colon), ev = tok.substr(colon + 1);
      m = (any(sys) || events::glob_match(sys, e.system)) && (any(ev) || events::glob_match(ev, e.name));
    }
    if (m) hit.push_back(&e);
  }
  // Outside for_each: set_event takes the registry lock itself.
  for (const EventName* e : hit) {
    std::string w;
    if (int rc = inst.set_event(e->system, e->name, on, &w); rc < 0 && *err == 0) {
      *err = rc;
      *why = std::move(w);
    }
  }
  return static_cast<int>(hit.size());
}

long write_set_event(Instance& inst, std::string_view s) {
  for (const Token& t : tokens(s)) {
    std::string_view tok = t.text;
    const bool on = tok.front() != '!';
    if (!on) tok.remove_prefix(1);
    int err = 0;
    std::string why;
    if (tok.empty() || apply_token(inst, tok, on, &err, &why) == 0)
      return fail(inst, kSub, Err::kNoSuchEvent, s, t.pos + (on ? 0 : 1), EINVAL);
    if (err < 0) return fail_text(inst, kSub, why, s, t.pos, -err);
  }
  return static_cast<long>(s.size());
}

std::string show_set_event(Instance& inst) {
  std::string out;
  for (const EventName& e : settable_events())
    if (inst.event_enabled(e.id)) out.append(e.system).append(":").append(e.name).append("\n");
  return out;
}

// "0", "1", "X" (mixed) or "?" (no events), the kernel's system_enable_read.
std::string show_enable(Instance& inst, std::string_view system) {
  bool some_on = false, some_off = false;
  for (const EventName& e : settable_events()) {
    if (!system.empty() && e.system != system) continue;
    (inst.event_enabled(e.id) ? some_on : some_off) = true;
  }
  if (some_on && some_off) return "X\n";
  if (some_on) return "1\n";
  if (some_off) return "0\n";
  return "?\n";
}

long parse_bool(Instance& inst, std::string_view s, bool* on) {
  uint64_t v = 0;
  size_t bad = 0;
  const int rc = parse_u64(s, 10, &v, &bad);
  if (rc == -ERANGE) return fail(inst, kSub, Err::kNumberRange, s, bad, ERANGE);
  if (rc < 0) return fail(inst, kSub, s.empty() ? Err::kEmpty : Err::kNotNumber, s, bad, EINVAL);
  if (v > 1) return fail(inst, kSub, Err::kNotBool, s, 0, EINVAL);
  *on = v == 1;
  return 0;
}

// The two pid files read, change and replace one filter: serialized.
base::Mutex& pid_mu() {
  static base::Mutex* mu = new base::Mutex();
  return *mu;
}

// set_event_pid / set_event_notrace_pid: whitespace-separated thread ids
// (kstrtoul base 0), added to the list; all or nothing per write.
long write_pids(Instance& inst, bool notrace, std::string_view s) {
  std::vector<int> add;
  for (const Token& t : tokens(s)) {
    uint64_t v = 0;
    size_t bad = 0;
    const int rc = parse_u64(t.text, 0, &v, &bad);
    if (rc < 0 || v >= kPidMax) return fail(inst, kSub, Err::kBadPid, s, t.pos + (rc < 0 ? bad : 0), EINVAL);
    add.push_back(static_cast<int>(v));
  }
  if (add.empty()) return static_cast<long>(s.size());
  base::MutexLock l(&pid_mu());
  instance::PidFilter f = inst.pid_filter();
  (notrace ? f.notrace : f.trace).insert((notrace ? f.notrace : f.trace).end(), add.begin(), add.end());
  inst.set_pid_filter(std::move(f.trace), std::move(f.notrace));
  return static_cast<long>(s.size());
}

void clear_pids(Instance& inst, bool notrace) {
  base::MutexLock l(&pid_mu());
  instance::PidFilter f = inst.pid_filter();
  (notrace ? f.notrace : f.trace).clear();
  inst.set_pid_filter(std::move(f.trace), std::move(f.notrace));
}

std::string show_pids(Instance& inst, bool notrace) {
  const instance::PidFilter f = inst.pid_filter();
  std::string out;
  for (int p : notrace ? f.notrace : f.trace) out += std::to_string(p) + "\n";
  return out;
}

// The event behind an events/SYS/EVENT file, looked up on every use: the
// object that defined it may have been unloaded since the open (ENODEV, as
// the kernel answers for a removed event's files).
events::EventDesc* lookup(const std::string& sys, const std::string& name) {
  return events::Registry::get().find(sys, name);
}

long fail_with(Instance& inst, const trigger::Error& err, int errnum) {
  return fail_text(inst, err.subsystem, err.message, err.command, err.pos, errnum);
}

bool truncating(int flags) { return (flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC); }

// ---- The open functions; `ip` stays valid as long as the file, which holds
// the node's reference on it.

std::unique_ptr<File> open_available_events(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] {
    std::string out;
    for (const EventName& e : settable_events()) out.append(e.system).append(":").append(e.name).append("\n");
    return out;
  };
  return f;
}

std::unique_ptr<File> open_set_event(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  if (truncating(flags)) ip->clear_events();  // echo > set_event
  f->show = [ip] { return show_set_event(*ip); };
  f->store = [ip](std::string_view s) { return write_set_event(*ip, s); };
  return f;
}

// set_event_pid (notrace false) and set_event_notrace_pid.
template <bool notrace>
std::unique_ptr<File> open_event_pids(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  if (truncating(flags)) clear_pids(*ip, notrace);
  f->show = [ip] { return show_pids(*ip, notrace); };
  f->store = [ip](std::string_view s) { return write_pids(*ip, notrace, s); };
  return f;
}

// events/enable (every system: n.system is empty) and events/SYS/enable.
std::unique_ptr<File> open_enable(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const std::string sys = n.system;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, sys] { return show_enable(*ip, sys); };
  f->store = [ip, sys](std::string_view s) -> long {
    bool on = false;
    if (long rc = parse_bool(*ip, s, &on); rc < 0) return rc;
    // Every event is set; the first whose probe could not be armed is
    // the answer (the kernel's __ftrace_set_clr_event).
    int err = 0;
    std::string why;
    for (const EventName& e : settable_events()) {
      if (!sys.empty() && e.system != sys) continue;
      std::string w;
      if (int rc = ip->set_event(e.system, e.name, on, &w); rc < 0 && err == 0) {
        err = rc;
        why = std::move(w);
      }
    }
    if (err < 0) return fail_text(*ip, kSub, why, s, 0, -err);
    return static_cast<long>(s.size());
  };
  return f;
}

std::unique_ptr<File> open_header_page(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return rb::header_page_text(ip->buffer().page_size(0)); };
  return f;
}

std::unique_ptr<File> open_header_event(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return rb::header_event_text(); };
  return f;
}

std::unique_ptr<File> open_system_filter(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const std::string sys = n.system;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, sys] { return trigger::system_filter_text(ip->slot(), sys); };
  f->store = [ip, sys](std::string_view s) -> long {
    trigger::Error why;
    if (int rc = trigger::set_system_filter(ip->slot(), sys, s, &why); rc < 0)
      return fail_with(*ip, why, -rc);
    return static_cast<long>(s.size());
  };
  return f;
}

std::unique_ptr<File> open_event_enable(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const std::string sys = n.system, name = n.event;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, sys, name]() -> std::string {
    const auto* e = lookup(sys, name);
    if (!e) return "0\n";
    // "0*" / "1*": enable_event / disable_event triggers name the event.
    std::string v = ip->event_enabled(e->id) ? "1" : "0";
    if (trigger::soft_mode(ip->slot(), *e)) v += "*";
    return v + "\n";
  };
  f->store = [ip, sys, name](std::string_view s) -> long {
    bool on = false;
    if (long rc = parse_bool(*ip, s, &on); rc < 0) return rc;
    if (!lookup(sys, name)) return -ENODEV;
    std::string why;
    if (int rc = ip->set_event(sys, name, on, &why); rc < 0) return fail_text(*ip, kSub, why, s, 0, -rc);
    return static_cast<long>(s.size());
  };
  return f;
}

std::unique_ptr<File> open_event_filter(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const std::string sys = n.system, name = n.event;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, sys, name]() -> std::string {
    const auto* e = lookup(sys, name);
    return e ? trigger::filter_text(ip->slot(), *e) + "\n" : std::string();
  };
  f->store = [ip, sys, name](std::string_view s) -> long {
    auto* e = lookup(sys, name);
    if (!e) return -ENODEV;
    trigger::Error why;
    if (int rc = trigger::set_filter(ip->slot(), *e, s, &why); rc < 0) return fail_with(*ip, why, -rc);
    return static_cast<long>(s.size());
  };
  return f;
}

std::unique_ptr<File> open_event_format(Node n, int, int*) {
  const std::string sys = n.system, name = n.event;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [sys, name]() -> std::string {
    const auto* e = lookup(sys, name);
    return e ? events::format_text(*e) : std::string();
  };
  return f;
}

std::unique_ptr<File> open_event_hist(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const std::string sys = n.system, name = n.event;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, sys, name]() -> std::string {
    const auto* e = lookup(sys, name);
    return e ? trigger::hist_text(ip->slot(), *e) : std::string();
  };
  return f;
}

std::unique_ptr<File> open_event_id(Node n, int, int*) {
  const std::string sys = n.system, name = n.event;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [sys, name]() -> std::string {
    const auto* e = lookup(sys, name);
    return e ? std::to_string(e->id) + "\n" : std::string();
  };
  return f;
}

std::unique_ptr<File> open_event_trigger(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const std::string sys = n.system, name = n.event;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, sys, name]() -> std::string {
    const auto* e = lookup(sys, name);
    return e ? trigger::trigger_text(ip->slot(), *e) : std::string();
  };
  f->store = [ip, sys, name](std::string_view s) -> long {
    auto* e = lookup(sys, name);
    if (!e) return -ENODEV;
    trigger::Error why;
    if (int rc = trigger::write_trigger(ip->slot(), *e, s, &why); rc < 0) {
      if (why.message.empty()) return rc;
      return fail_with(*ip, why, -rc);
    }
    return static_cast<long>(s.size());
  };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"available_events", kRO, Dir::kRoot, kTopOnly, open_available_events},
    {"set_event", kRW, Dir::kRoot, 0, open_set_event},
    {"set_event_notrace_pid", kRW, Dir::kRoot, 0, open_event_pids<true>},
    {"set_event_pid", kRW, Dir::kRoot, 0, open_event_pids<false>},
    {"enable", kRW, Dir::kEvents, 0, open_enable},
    {"header_page", kRO, Dir::kEvents, 0, open_header_page},
    {"header_event", kRO, Dir::kEvents, 0, open_header_event},
    {"enable", kRW, Dir::kSystem, kNoFtrace, open_enable},
    {"filter", kRW, Dir::kSystem, kNoFtrace, open_system_filter},
    {"enable", kRW, Dir::kEvent, kNoFtrace, open_event_enable},
    {"filter", kRW, Dir::kEvent, kNoFtrace, open_event_filter},
    {"format", kRO, Dir::kEvent, 0, open_event_format},
    {"hist", kRO, Dir::kEvent, kNoFtrace | kFtracePrint, open_event_hist},
    {"id", kRO, Dir::kEvent, kNoFtrace | kFtracePrint | kFtraceFunction, open_event_id},
    {"trigger", kRW, Dir::kEvent, kNoFtrace | kFtracePrint, open_event_trigger},
};

}  // namespace

constinit const std::span<const FileSpec> kEventFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
