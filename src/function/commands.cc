// The function commands of set_ftrace_filter ("GLOB:COMMAND[:ARGS]", the
// kernel's ftrace probes): parsing, adding and removing them, and their
// listing. The hooks' side is probes.cc.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "events/registry.h"
#include "function/control_internal.h"
#include "trigger/control.h"

namespace usrtrace::function {
namespace {

std::vector<std::string> split_colons(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t c; (c = s.find(':', b)) != std::string::npos; b = c + 1) out.push_back(s.substr(b, c - b));
  out.push_back(s.substr(b));
  return out;
}

const char* probe_name(ProbeKind k) { return trigger::actions::name(k); }

bool same_probe(const ProbeEntry& e, int slot, const Command& c) {
  if (e.probe->slot != slot || e.probe->kind != c.kind) return false;
  if (c.kind != ProbeKind::kEnableEvent && c.kind != ProbeKind::kDisableEvent) return true;
  return e.system == c.system && e.event == c.event;
}

}  // namespace

size_t command_colon(const std::string& tok) {
  for (size_t i = 0; i < tok.size(); ++i) {
    if (tok[i] != ':') continue;
    if (i + 1 < tok.size() && tok[i + 1] == ':') {
      ++i;
      continue;
    }
    return i;
  }
  return std::string::npos;
}

int parse_command(const std::string& rest, size_t pos, Command* c, Error* err) {
  std::vector<std::string> parts = split_colons(rest);
  if (!trigger::actions::by_name(parts[0], trigger::actions::kFunctionCommand, &c->kind)) {
    *err = {Error::kUnknownCommand, "Unknown function command '" + parts[0] + "'", pos};
    return -EINVAL;
  }
  size_t count_at = 1;
  if (c->kind == ProbeKind::kEnableEvent || c->kind == ProbeKind::kDisableEvent) {
    if (parts.size() < 3 || parts[1].empty() || parts[2].empty()) {
      *err = {Error::kNoEvent, "enable_event/disable_event need SYS:EVENT", pos};
      return -EINVAL;
    }
    c->system = parts[1];
    c->event = parts[2];
    if (!c->op.remove) {
      c->target = events::Registry::get().find(c->system, c->event);
      if (c->target == nullptr) {
        *err = {Error::kNoEvent, "No event " + c->system + ":" + c->event, pos + parts[0].size() + 1};
        return -EINVAL;
      }
    }
    count_at = 3;
  }
  if (c->kind == ProbeKind::kDump || c->kind == ProbeKind::kCpuDump) {
    c->count = 1;  // the kernel's: only dump once
    // The dump writes from a hook: its storage is allocated now.
    if (c->op.remove) return 0;
    const DumpHooks* h = g_dump_hooks.load(std::memory_order_acquire);
    if (h == nullptr) {
      *err = {Error::kUnknownCommand, "dump needs the crash dump, not linked in", pos};
      return -EINVAL;
    }
    if (h->prepare() < 0) {
      *err = {Error::kNoMemory, "Cannot allocate the dump's storage", pos};
      return -ENOMEM;
    }
    return 0;
  }
  if (parts.size() > count_at + 1) {
    *err = {Error::kBadCount, "Too many arguments", pos};
    return -EINVAL;
  }
  if (parts.size() == count_at + 1 && !parts[count_at].empty() && !c->op.remove) {
    const std::string& n = parts[count_at];
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = strtoull(n.c_str(), &end, 0);
    size_t at = pos;
    for (size_t i = 0; i < count_at; ++i) at += parts[i].size() + 1;
    if (n[0] == '-' || n[0] == '+' || *end != '\0' || errno != 0 ||
        v > static_cast<unsigned long long>(LONG_MAX)) {
      *err = {Error::kBadCount, "Invalid count '" + n + "'", at};
      return -EINVAL;
    }
    c->count = static_cast<long>(v);
  }
  return 0;
}

void apply_command_locked(int slot, const Command& c, const std::vector<Func>& funcs)
    USRTRACE_REQUIRES(g_mu) {
  if (c.op.remove) {
    for (auto it = g_probes.begin(); it != g_probes.end();) {
      const auto f = std::lower_bound(funcs.begin(), funcs.end(), it->fn,
                                      [](const Func& a, uint64_t fn) { return a.addr < fn; });
      if (same_probe(*it, slot, c) && f != funcs.end() && f->addr == it->fn && matches(c.op, *f)) {
        if (it->probe->target != nullptr) trigger::hold_soft_mode(slot, *it->probe->target, -1);
        g_retired.push_back(std::move(it->probe));
        it = g_probes.erase(it);
      } else {
        ++it;
      }
    }
    return;
  }
  for (const Func& f : funcs) {
    if (!matches(c.op, f)) continue;
    auto it = std::find_if(g_probes.begin(), g_probes.end(),
                           [&](const ProbeEntry& e) { return e.fn == f.addr && same_probe(e, slot, c); });
    if (it != g_probes.end()) {
      it->probe->count.store(c.count, std::memory_order_relaxed);
      it->counted = c.count >= 0 && c.kind != ProbeKind::kCpuDump;
      continue;
    }
    auto p = std::make_unique<Probe>();
    p->kind = c.kind;
    p->slot = static_cast<uint8_t>(slot);
    p->count.store(c.count, std::memory_order_relaxed);
    p->target = c.target;
    if (c.target != nullptr) trigger::hold_soft_mode(slot, *c.target, +1);
    // The kernel lists cpudump as unlimited though it fires once.
    g_probes.push_back(
        {std::move(p), f.addr, f.name, c.system, c.event, c.count >= 0 && c.kind != ProbeKind::kCpuDump});
  }
}

bool drop_probes_locked(int slot, const internal::EventDesc* target) USRTRACE_REQUIRES(g_mu) {
  bool any = false;
  for (auto it = g_probes.begin(); it != g_probes.end();) {
    if ((slot >= 0 && it->probe->slot == slot) || (target != nullptr && it->probe->target == target)) {
      g_retired.push_back(std::move(it->probe));
      it = g_probes.erase(it);
      any = true;
    } else {
      ++it;
    }
  }
  return any;
}

std::string probe_lines_locked(int slot) USRTRACE_REQUIRES(g_mu) {
  std::string out;
  for (const ProbeEntry& e : g_probes) {
    if (e.probe->slot != slot) continue;
    out += e.name + ":" + probe_name(e.probe->kind);
    if (!e.system.empty()) out += ":" + e.system + ":" + e.event;
    out +=
        e.counted ? ":count=" + std::to_string(e.probe->count.load(std::memory_order_relaxed)) : ":unlimited";
    out += '\n';
  }
  return out;
}

}  // namespace usrtrace::function
