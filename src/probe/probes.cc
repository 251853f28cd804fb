// The dynamic probes' registry: definitions made by uprobe_events writes,
// their events, where their sites are, and when they are armed.
//
// Life of a probe (the kernel's trace_uprobe, in one process):
//   defined   parsed (lang.h), its target resolved (targets.h), its event
//             registered: events/GRP/EVENT exists, disabled. A target in an
//             object not loaded yet is *pending* (armed when it loads).
//   armed     while some instance enables the event, or an enable_event
//             trigger names it (soft mode): the patch engine's site calls
//             on_hit(). Decided by sync_armed(), the registry's enable hook.
//   removed   `-:GRP/EVENT` (EBUSY while enabled, as the kernel), or `>`.
//             Disarmed, unregistered; freed after a writers grace period,
//             which no handler outlives (on_hit runs between
//             writers::enter and exit).
//
// The handler (on_hit, on_return) runs on the traced thread, in any
// context the program's code runs in: no lock, no allocation, no system
// call. A hit inside a hit on the same thread (a probe on a function that
// a handler reaches, or a signal handler's probe while the thread was in a
// handler) is dropped and counted as a miss, as the kernel counts a
// kprobe's nmissed.
#include "probe/probes.h"

#include <link.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/percpu.h"
#include "base/safe_copy.h"
#include "events/registry.h"
#include "instance/instance.h"
#include "patch/patch.h"
#include "probe/fetch.h"
#include "probe/parse.h"
#include "probe/sdt.h"
#include "probe/targets.h"
#include "trigger/control.h"
#include "writers/writers.h"

namespace usrtrace::probe {
namespace {

struct Probe;

// Where a probe is patched: one address, with the fetch program for the
// registers there. A probe has one site, or (a USDT probe) one per site of
// the note, each with its own argument locations and semaphore.
struct Site {
  Probe* owner = nullptr;
  Definition def;  // the site's fetch program: the probe's own, or from its note
  Resolved where;
  uint64_t semaphore = 0;  // a USDT site's u16, raised while armed
  bool armed = false;
  patch::Method method = patch::Method::kInt3;
};

struct Probe {
  Definition def;                     // as written (the listing)
  std::unique_ptr<EventShape> shape;  // the fields, print fmt and the EventDesc
  // A removed return probe stays allocated (leaked, a few hundred bytes):
  // a thread may still be inside the function it hooked, and its
  // trampoline will call on_return with its site.
  std::atomic<bool> dead{false};
  std::vector<std::unique_ptr<Site>> sites;
  bool pending = false;      // its object is not loaded
  base::PerCpuCounter hits;  // every hit of a thread at its sites: as hot as the hit
  std::atomic<uint64_t> misses{0};
};

base::Mutex& mu() {
  static base::Mutex* m = new base::Mutex();
  return *m;
}

std::vector<std::unique_ptr<Probe>>& probes() USRTRACE_REQUIRES(mu()) {
  static auto* v = new std::vector<std::unique_ptr<Probe>>();
  return *v;
}

// The registry's enable hook (sync_armed) may be reached from inside our
// own changes (an event removed or added runs the registry's hooks, and
// those of the triggers): it then only notes that a resync is due, which
// the outermost holder of mu() runs once it has let go.
thread_local int t_holding = 0;
thread_local bool t_resync = false;

int resync(bool report, std::string* why);

class USRTRACE_SCOPED_CAPABILITY Hold {
 public:
  Hold() USRTRACE_ACQUIRE(mu()) {
    mu().lock();
    ++t_holding;
  }
  ~Hold() USRTRACE_RELEASE() {
    --t_holding;
    mu().unlock();
    if (t_holding == 0 && t_resync) {
      t_resync = false;
      (void)resync(/*report=*/false, nullptr);
    }
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
};

// Nesting guard: initial-exec TLS (a handler may run in any thread of the
// program, before and after ours registered it), no constructor.
constinit __attribute__((tls_model("initial-exec"))) thread_local bool t_in_probe = false;

void write_record(const Site& s, RunContext* ctx, const writers::ThreadState& t) {
  alignas(8) uint8_t rec[internal::kMaxRecord];
  ctx->comm = t.comm;
  internal::EventDesc* d = s.owner->shape->desc();
  const uint32_t len = run(s.def, d->id, *ctx, rec, sizeof rec);
  if (len == 0) return;
  internal::write_event(d, rec, len);
}

void on_return(const patch::Regs* regs, void* cookie, uint64_t func, const uint64_t entry_args[6]) {
  auto* s = static_cast<Site*>(cookie);
  Probe* p = s->owner;
  // order: acquire pairs with remove_at's release: a dead probe's event is
  // gone; its record is not written.
  if (p->dead.load(std::memory_order_acquire)) return;
  if (t_in_probe) {
    p->misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  t_in_probe = true;
  writers::ThreadState* t = writers::enter();
  if (t != nullptr) {
    RunContext ctx;
    ctx.regs = regs;
    ctx.func = func;
    ctx.entry_args = entry_args;
    ctx.bias = s->where.bias;
    if (!p->dead.load(std::memory_order_acquire)) write_record(*s, &ctx, *t);
    writers::exit(*t);
  }
  t_in_probe = false;
}

void on_hit(const patch::Regs* regs, void* cookie) {
  auto* s = static_cast<Site*>(cookie);
  Probe* p = s->owner;
  p->hits.inc();
  if (t_in_probe) {
    p->misses.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  t_in_probe = true;
  if (p->def.is_return) {
    if (!patch::hook_return(regs, on_return, s)) p->misses.fetch_add(1, std::memory_order_relaxed);
  } else if (writers::ThreadState* t = writers::enter(); t != nullptr) {
    RunContext ctx;
    ctx.regs = regs;
    ctx.bias = s->where.bias;
    write_record(*s, &ctx, *t);
    writers::exit(*t);
  }
  t_in_probe = false;
}

// Whether some instance wants the event: enabled in one, or in soft mode
// (an enable_event trigger names it).
bool wanted(const internal::EventDesc& d) {
  const uint64_t instances =
      d.enabled.load(std::memory_order_relaxed) & ~(uint64_t{1} << internal::kControlBit);
  if (instances != 0) return true;
  for (int slot = 0; slot < instance::kMaxInstances; ++slot)
    if (trigger::soft_mode(slot, d)) return true;
  return false;
}

// A USDT semaphore: the program tests it (non-zero) before it prepares a
// probe's arguments; each armed site raises it once, as the kernel's
// uprobe does its reference counter. The address was checked to be in the
// object's writable data (sdt.cc).
void raise_semaphore(uint64_t addr, int by) {
  if (addr == 0) return;
  __atomic_fetch_add(reinterpret_cast<uint16_t*>(addr), static_cast<uint16_t>(by), __ATOMIC_RELAXED);
}

int arm(Site& s, std::string* why) {
  patch::Method how{};
  const int rc = patch::add(s.where.addr, s.where.fn_start, s.where.fn_size, on_hit, &s, &how, why);
  if (rc == 0) {
    s.armed = true;
    s.method = how;
    raise_semaphore(s.semaphore, 1);
  }
  return rc;
}

void disarm(Site& s) {
  if (!s.armed) return;
  patch::remove(s.where.addr, on_hit, &s);
  raise_semaphore(s.semaphore, -1);
  s.armed = false;
}

// Removed return probes: kept, never freed (see Probe::dead).
std::vector<std::unique_ptr<Probe>>& graveyard() USRTRACE_REQUIRES(mu()) {
  static auto* v = new std::vector<std::unique_ptr<Probe>>();
  return *v;
}

Probe* find(std::string_view group, std::string_view event) USRTRACE_REQUIRES(mu()) {
  for (auto& p : probes())
    if (p->def.group == group && p->def.event == event) return p.get();
  return nullptr;
}

// Removes probes()[i]: disarmed, its event unregistered, freed once no
// handler can still run it.
void remove_at(size_t i) USRTRACE_REQUIRES(mu()) {
  std::unique_ptr<Probe> p = std::move(probes()[i]);
  probes().erase(probes().begin() + static_cast<std::ptrdiff_t>(i));
  for (auto& site : p->sites) disarm(*site);
  // order: release pairs with on_return's acquire.
  p->dead.store(true, std::memory_order_release);
  publish_shape(p->shape->desc()->id, nullptr);
  events::Registry::get().remove(p->shape->desc());
  // A handler that entered before the disarm may still be running it: the
  // engine's remove() waited out its dispatch, writers' grace period the
  // record. A return probe's trampolines may still come: it stays.
  writers::synchronize_writers();
  if (p->def.is_return) graveyard().push_back(std::move(p));
}

// A USDT probe's sites (sdt.h): each a definition of its own, written as
// `p:GRP/EVENT OBJECT:0xFILEOFFSET ARGS` with the note's argument
// locations and the definition's names, parsed as any line. Every site must
// give the same fields (the event has one format). -ENOENT when no loaded
// object has the probe.
int sdt_sites_of(const Definition& d, Probe* p, Error* e) {
  for (const SdtSite& s : sdt_sites()) {
    if (s.provider != d.sdt_provider || s.name != d.sdt_name) continue;
    std::string args, why;
    if (!sdt_fetch_args(s.args, d.sdt_names, &args, &why)) {
      *e = {why, d.target_pos, EINVAL};
      return -EINVAL;
    }
    char target[64];
    snprintf(target, sizeof target, ":0x%llx", static_cast<unsigned long long>(s.file_offset));
    const std::string line =
        "p:" + d.group + "/" + d.event + " " + s.object + target + (args.empty() ? "" : " ") + args;
    auto site = std::make_unique<Site>();
    site->owner = p;
    site->semaphore = s.semaphore;
    Error sub;
    if (int rc = parse(line, &site->def, &sub); rc < 0) {
      *e = {"SDT site " + s.object + target + ": " + sub.text, d.target_pos, sub.errnum};
      return rc;
    }
    bool pending = false;
    if (int rc = resolve(site->def.target, &site->where, &pending, &why); rc < 0) {
      *e = {why, d.target_pos, -rc};
      return rc;
    }
    if (!p->sites.empty()) {
      const Definition& first = p->sites.front()->def;
      bool same = first.args.size() == site->def.args.size();
      for (size_t i = 0; same && i < first.args.size(); ++i)
        same = first.args[i].type == site->def.args[i].type && first.args[i].name == site->def.args[i].name;
      if (!same) {
        *e = {"SDT probe's sites disagree on their arguments' types: " + site->def.text(), d.target_pos,
              EINVAL};
        return -EINVAL;
      }
    }
    p->sites.push_back(std::move(site));
  }
  if (p->sites.empty()) {
    *e = {"No such SDT probe in the loaded objects (available_sdt_probes)", d.target_pos, ENOENT};
    return -ENOENT;
  }
  return 0;
}

// After the link map changed (dlopen, dlclose): a pending probe whose
// object is now loaded is resolved (sync_armed then arms it if wanted); a
// probe whose object is gone is pending again, its site forgotten without
// a write (its code is unmapped; the address may be another object's by
// now). USDT probes are resolved once, at definition.
void resync_objects() USRTRACE_REQUIRES(mu()) {
  for (auto& p : probes()) {
    if (p->def.sdt) continue;
    Site& s = *p->sites.front();
    if (p->pending) {
      Resolved r;
      bool pending = false;
      std::string why;
      if (resolve(p->def.target, &r, &pending, &why) == 0) {
        s.where = std::move(r);
        s.semaphore = p->def.ref_ctr_offset != 0 ? data_address(s.where.object, p->def.ref_ctr_offset) : 0;
        p->pending = false;
      }
    } else if (!s.where.object.empty() && !is_loaded(s.where.object)) {
      if (s.armed) patch::remove(s.where.addr, on_hit, &s, /*code_gone=*/true);
      s.armed = false;
      s.semaphore = 0;  // unmapped with its object: nothing to lower
      p->pending = true;
    }
  }
}

// The loader's hook (patch::watch_loads): in the SIGTRAP handler of the
// thread that called dlopen or dlclose, before it returns, so that a
// library's probes are armed before its code first runs (its
// constructors included: they run after this).
void on_link_map_change() {
  if (_r_debug.r_state != r_debug::RT_CONSISTENT) return;
  {
    Hold l;
    resync_objects();
  }
  (void)resync(/*report=*/false, nullptr);
}

void watch_loads() {
  std::string why;
  // Without a loader to watch (a static program) a pending probe stays
  // pending; dynamic_probe_sites says so.
  (void)patch::watch_loads(on_link_map_change, &why);
}

int add_line(std::string_view line, Error* e) USRTRACE_REQUIRES(mu()) {
  Definition d;
  if (int rc = parse(line, &d, e); rc < 0) return rc;
  base::install_fault_fixup();
  if (d.kind == '-') {
    // `-:EVENT` names it in any group and `-:GRP/` every event of GRP, as
    // the kernel matches them (removal_matches); all or nothing: none goes
    // while one of them is enabled.
    std::vector<size_t> hit;
    for (size_t i = 0; i < probes().size(); ++i)
      if (removal_matches(d, probes()[i]->def)) hit.push_back(i);
    if (hit.empty()) {
      *e = {"", 0, ENOENT};  // the kernel logs nothing here
      return -ENOENT;
    }
    for (size_t i : hit)
      if (wanted(*probes()[i]->shape->desc())) {
        *e = {"", 0, EBUSY};
        return -EBUSY;
      }
    for (size_t k = hit.size(); k-- > 0;) remove_at(hit[k]);
    return 0;
  }
  if (find(d.group, d.event) != nullptr) {
    *e = {"Event already exists", 0, EEXIST};
    return -EEXIST;
  }
  auto p = std::make_unique<Probe>();
  if (d.sdt) {
    if (int rc = sdt_sites_of(d, p.get(), e); rc < 0) return rc;
    p->shape = std::make_unique<EventShape>(p->sites.front()->def);
  } else {
    auto site = std::make_unique<Site>();
    site->owner = p.get();
    std::string why;
    bool pending = false;
    if (int rc = resolve(d.target, &site->where, &pending, &why); rc < 0 && !pending) {
      *e = {why, d.target_pos, -rc};
      return rc;
    }
    p->pending = pending;
    // PATH:OFFSET(REF_CTR_OFFSET): a counter raised while armed, as the
    // kernel's uprobe raises it (a USDT semaphore named by hand).
    if (d.ref_ctr_offset != 0 && !pending &&
        (site->semaphore = data_address(site->where.object, d.ref_ctr_offset)) == 0) {
      *e = {"Invalid reference counter offset", d.target_pos, EINVAL};
      return -EINVAL;
    }
    site->def = d;
    p->sites.push_back(std::move(site));
    p->shape = std::make_unique<EventShape>(d);
  }
  p->def = std::move(d);
  if (p->pending) watch_loads();
  events::Registry::get().add(p->shape->desc());
  publish_shape(p->shape->desc()->id, p->shape.get());
  probes().push_back(std::move(p));
  return 0;
}

}  // namespace

int write_text(std::string_view text, bool dynamic, Error* e, size_t* line_at) {
  size_t at = 0;
  int rc = 0;
  {
    Hold l;
    while (at < text.size()) {
      size_t nl = text.find('\n', at);
      if (nl == std::string_view::npos) nl = text.size();
      std::string_view line = text.substr(at, nl - at);
      const size_t hash = line.find('#');
      if (hash != std::string_view::npos) line = line.substr(0, hash);
      while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
        line.remove_suffix(1);
      size_t lead = 0;
      while (lead < line.size() && (line[lead] == ' ' || line[lead] == '\t')) ++lead;
      if (lead < line.size()) {
        // dynamic_events takes every kind; ours are p, r and -.
        (void)dynamic;
        rc = add_line(line.substr(lead), e);
        if (rc < 0) {
          *line_at = at + lead;
          break;
        }
      }
      at = nl + 1;
    }
  }
  // A probe defined while its event is wanted (an enable_event trigger
  // written before it) is armed now.
  (void)resync(/*report=*/false, nullptr);
  return rc;
}

int clear_all() {
  Hold l;
  for (const auto& p : probes())
    if (wanted(*p->shape->desc())) return -EBUSY;
  while (!probes().empty()) remove_at(probes().size() - 1);
  return 0;
}

std::string events_text(bool dynamic) {
  (void)dynamic;  // the same lines: dynamic_events lists every kind, and ours are uprobes
  Hold l;
  std::string out;
  for (const auto& p : probes()) out += p->def.text() + "\n";
  return out;
}

std::string profile_text() {
  Hold l;
  std::string out;
  char buf[512];
  for (const auto& p : probes()) {
    // The kernel's "  %s %-44s %15lu\n", and the misses after it.
    const Resolved& w = p->sites.front()->where;
    const std::string path = w.object.empty() || p->def.sdt ? p->def.target_path() : w.object;
    snprintf(buf, sizeof buf, "  %s %-44s %15llu %15llu\n", path.c_str(), p->def.event.c_str(),
             static_cast<unsigned long long>(p->hits.sum()),
             static_cast<unsigned long long>(p->misses.load(std::memory_order_relaxed)));
    out += buf;
  }
  return out;
}

std::string sites_text() {
  Hold l;
  std::string out;
  char buf[512];
  for (const auto& p : probes()) {
    if (p->pending) {
      snprintf(buf, sizeof buf, "%s/%s pending %s\n", p->def.group.c_str(), p->def.event.c_str(),
               p->def.target_path().c_str());
      out += buf;
      continue;
    }
    for (const auto& s : p->sites) {
      snprintf(buf, sizeof buf, "%s/%s 0x%llx %s %s\n", p->def.group.c_str(), p->def.event.c_str(),
               static_cast<unsigned long long>(s->where.addr),
               s->armed ? patch::method_name(s->method) : "disarmed", s->where.function.c_str());
      out += buf;
    }
  }
  return out;
}

namespace {

// Arms the sites of the probes some instance wants, disarms the others.
// `report` (an enable change): a probe with a site that cannot be armed
// has its other sites disarmed and its instances' enable bits cleared
// (the kernel's enable fails, and the event stays disabled); the first
// failure is returned. Otherwise (the loader's hook, a definition) such a
// site stays disarmed and dynamic_probe_sites says so, as the kernel's
// uprobe in a file mapped later is inserted, or not, without a word.
int resync(bool report, std::string* why) {
  if (t_holding > 0) {
    t_resync = true;
    return 0;
  }
  int first = 0;
  Hold l;
  for (const auto& p : probes()) {
    if (p->pending) continue;
    internal::EventDesc& d = *p->shape->desc();
    const bool want = wanted(d);
    std::string failed;
    int rc = 0;
    for (auto& s : p->sites) {
      if (want && !s->armed) {
        std::string w;
        if ((rc = arm(*s, &w)) < 0) {
          char at[32];
          snprintf(at, sizeof at, "0x%llx", static_cast<unsigned long long>(s->where.addr));
          failed = p->def.group + "/" + p->def.event + ": cannot arm the probe at " + at + ": " + w;
          break;
        }
      } else if (!want && s->armed) {
        disarm(*s);
      }
    }
    if (rc == 0 || !report) continue;
    for (auto& s : p->sites) disarm(*s);
    // Only the instances' bits: an enable_event trigger's soft mode stays
    // (the trigger is there); the site is tried again at the next change.
    d.enabled.fetch_and(uint64_t{1} << internal::kControlBit, std::memory_order_relaxed);
    if (first == 0) {
      first = rc;
      if (why != nullptr) *why = std::move(failed);
    }
  }
  return first;
}

}  // namespace

int sync_armed(std::string* why) { return resync(/*report=*/true, why); }

namespace {
// The hook runs where the registry is changed: set_event, enable files,
// the API, trigger writes, instance removal.
[[maybe_unused]] const bool g_hooked = [] {
  events::Registry::get().set_enable_hook(sync_armed);
  return true;
}();
}  // namespace

}  // namespace usrtrace::probe
