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

#include <limits.h>
#include <link.h>
#include <stdlib.h>

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
#include "hist/synth.h"
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
  // A USDT probe's fields: its first site's definition (each site's own
  // must give the same fields; a site whose do not is skipped).
  Definition fields;
  // A USDT probe: the objects whose notes were read, by real path and
  // load bias (a library loaded again is read again), and the sites
  // skipped there, with why (dynamic_probe_sites).
  std::vector<std::pair<std::string, uint64_t>> seen;
  std::vector<std::string> skipped;
  bool pending = false;      // its object is not loaded (a USDT probe: no site is)
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
  return instances != 0 || trigger::soft_mode_any(d);
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

// A USDT probe's site (sdt.h): a definition of its own, written as
// `p:GRP/EVENT OBJECT:0xFILEOFFSET ARGS` with the note's argument locations
// and the definition's names, parsed as any line, resolved when `loaded`.
// It must give the probe's fields (the event has one format). 0, or
// -errno with *e.
int make_sdt_site(const Definition& d, const SdtSite& s, const Definition* fields, bool loaded,
                  std::unique_ptr<Site>* out, Error* e) {
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
  site->semaphore = s.semaphore;
  Error sub;
  if (int rc = parse(line, &site->def, &sub); rc < 0) {
    *e = {"SDT site " + s.object + target + ": " + sub.text, d.target_pos, sub.errnum};
    return rc;
  }
  if (loaded) {
    bool pending = false;
    if (int rc = resolve(site->def.target, &site->where, &pending, &why); rc < 0) {
      *e = {why, d.target_pos, -rc};
      return rc;
    }
  }
  if (fields != nullptr) {
    bool same = fields->args.size() == site->def.args.size();
    for (size_t i = 0; same && i < fields->args.size(); ++i)
      same = fields->args[i].type == site->def.args[i].type && fields->args[i].name == site->def.args[i].name;
    if (!same) {
      *e = {"SDT probe's sites disagree on their arguments' types: " + site->def.text(), d.target_pos,
            EINVAL};
      return -EINVAL;
    }
  }
  *out = std::move(site);
  return 0;
}

bool sdt_matches(const Definition& d, const SdtSite& s) {
  return s.provider == d.sdt_provider && s.name == d.sdt_name;
}

// Whether a USDT probe reads `o`'s notes: any object, or PATH's alone.
bool sdt_reads(const Definition& d, const std::string& want_real, const LoadedObject& o) {
  return d.target.path.empty() || (o.real.empty() ? o.path : o.real) == want_real;
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
}

// Adds the sites of loaded object `o` to USDT probe p (not read before).
// At definition (`e` given) a bad site fails the definition; later (a
// dlopen) it is skipped and dynamic_probe_sites says why.
int add_sdt_object(Probe* p, const LoadedObject& o, Error* e) {
  p->seen.emplace_back(o.real.empty() ? o.path : o.real, o.bias);
  for (const SdtSite& s : sdt_sites_in(o)) {
    if (!sdt_matches(p->def, s)) continue;
    std::unique_ptr<Site> site;
    Error err;
    const Definition* fields = p->fields.event.empty() ? nullptr : &p->fields;  // none yet: this one's
    if (int rc = make_sdt_site(p->def, s, fields, true, &site, &err); rc < 0) {
      if (e != nullptr) {
        *e = std::move(err);
        return rc;
      }
      p->skipped.push_back(err.text);
      continue;
    }
    site->owner = p;
    if (fields == nullptr) p->fields = site->def;
    p->sites.push_back(std::move(site));
  }
  return 0;
}

// A USDT probe's sites at its definition: those of every loaded object (or
// of PATH's). -ENOENT when none has the probe, unless PATH is given and not
// loaded: then its file's notes give the fields, and the probe is pending
// until dlopen loads it.
int sdt_sites_of(Probe* p, Error* e) {
  const Definition& d = p->def;
  const std::string want_real = d.target.path.empty() ? "" : real_path(d.target.path);
  bool path_loaded = false;
  for (const LoadedObject& o : loaded_objects()) {
    if (!sdt_reads(d, want_real, o)) continue;
    path_loaded = true;
    if (int rc = add_sdt_object(p, o, e); rc < 0) return rc;
  }
  if (!p->sites.empty()) return 0;
  if (!d.target.path.empty() && !path_loaded) {
    for (const SdtSite& s : sdt_file_sites(d.target.path)) {
      if (!sdt_matches(d, s)) continue;
      std::unique_ptr<Site> site;
      const bool first = p->fields.event.empty();
      if (int rc = make_sdt_site(d, s, first ? nullptr : &p->fields, false, &site, e); rc < 0) return rc;
      if (first) p->fields = site->def;
    }
    if (!p->fields.event.empty()) {
      p->pending = true;
      return 0;
    }
  }
  *e = {"No such SDT probe in " +
            (d.target.path.empty() ? std::string("the loaded objects") : d.target.path) +
            " (available_sdt_probes)",
        d.target_pos, ENOENT};
  return -ENOENT;
}

// A USDT probe after the link map changed: the sites of objects gone are
// dropped without a write (their code is unmapped), those of objects new
// to it added; pending while it has no site.
void resync_sdt(Probe* p, const std::vector<LoadedObject>& objs) USRTRACE_REQUIRES(mu()) {
  auto loaded = [&objs](const std::string& real, uint64_t bias) {
    for (const LoadedObject& o : objs)
      if ((o.real.empty() ? o.path : o.real) == real && o.bias == bias) return true;
    return false;
  };
  for (size_t i = p->sites.size(); i-- > 0;) {
    Site& s = *p->sites[i];
    if (loaded(s.where.object, s.where.bias)) continue;
    if (s.armed) patch::remove(s.where.addr, on_hit, &s, /*code_gone=*/true);
    p->sites.erase(p->sites.begin() + static_cast<std::ptrdiff_t>(i));  // no handler runs it now
  }
  std::erase_if(p->seen, [&](const auto& k) { return !loaded(k.first, k.second); });
  const std::string want_real = p->def.target.path.empty() ? "" : real_path(p->def.target.path);
  for (const LoadedObject& o : objs) {
    if (!sdt_reads(p->def, want_real, o)) continue;
    const std::pair<std::string, uint64_t> key(o.real.empty() ? o.path : o.real, o.bias);
    if (std::find(p->seen.begin(), p->seen.end(), key) == p->seen.end()) (void)add_sdt_object(p, o, nullptr);
  }
  p->pending = p->sites.empty();
}

// After the link map changed (dlopen, dlclose): a pending probe whose
// object is now loaded is resolved (sync_armed then arms it if wanted); a
// probe whose object is gone is pending again, its site forgotten without
// a write (its code is unmapped; the address may be another object's by
// now). A USDT probe gains the sites of the objects loaded, and loses
// those unloaded.
void resync_objects() USRTRACE_REQUIRES(mu()) {
  std::vector<LoadedObject> objs;
  for (auto& p : probes()) {
    if (p->def.sdt) {
      if (objs.empty()) objs = loaded_objects();
      resync_sdt(p.get(), objs);
      continue;
    }
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
  if (find(d.group, d.event) != nullptr || (d.group == hist::synth::kSystem && hist::synth::find(d.event))) {
    *e = {"Event already exists", 0, EEXIST};
    return -EEXIST;
  }
  auto p = std::make_unique<Probe>();
  if (d.sdt) {
    p->def = d;
    if (int rc = sdt_sites_of(p.get(), e); rc < 0) return rc;
    p->shape = std::make_unique<EventShape>(p->fields);
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
  // A USDT probe also gains the sites of objects loaded later.
  if (p->pending || p->def.sdt) watch_loads();
  events::Registry::get().add(p->shape->desc());
  publish_shape(p->shape->desc()->id, p->shape.get());
  probes().push_back(std::move(p));
  return 0;
}

// dynamic_events' synthetic event lines (hist/synth.h): `s:` lines, and
// `-:` lines that name one (`-:synthetic/NAME`, or `-:NAME` when a
// synthetic event has that name). 1 when the line is not theirs, else 0 or
// -errno with *e.
int synth_line(std::string_view line, Error* e) USRTRACE_REQUIRES(mu()) {
  const bool define = line.rfind("s:", 0) == 0, removal = line.rfind("-:", 0) == 0;
  if (!define && !removal) return 1;
  const size_t end = std::min(line.find_first_of(" \t", 2), line.size());
  const std::string_view target = line.substr(2, end - 2);
  const size_t slash = target.find('/');
  const std::string_view group =
      slash == std::string_view::npos ? std::string_view() : target.substr(0, slash);
  const std::string_view event = slash == std::string_view::npos ? target : target.substr(slash + 1);
  if (removal && group != hist::synth::kSystem &&
      !(group.empty() && !event.empty() && hist::synth::find(event) != nullptr))
    return 1;
  hist::synth::Error se;
  if (int rc = hist::synth::write_dynamic(line, &se); rc < 0) {
    *e = {std::move(se.text), se.pos, -rc, "synthetic_events"};
    return rc;
  }
  // dyn_event_release(): `-:NAME` removes the events of every kind so named.
  if (removal && group.empty())
    if (int rc = add_line(line, e); rc < 0 && rc != -ENOENT) return rc;
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
        // dynamic_events takes every kind; ours are p, r, - and the
        // synthetic events' s.
        rc = dynamic ? synth_line(line.substr(lead), e) : 1;
        if (rc > 0) rc = add_line(line.substr(lead), e);
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
  // The same probe lines: dynamic_events lists every kind, ours are
  // uprobes and the synthetic events.
  std::string out;
  {
    Hold l;
    for (const auto& p : probes()) out += p->def.text() + "\n";
  }
  if (dynamic) out += hist::synth::dynamic_text();
  return out;
}

std::string profile_text() {
  Hold l;
  std::string out;
  char buf[512];
  for (const auto& p : probes()) {
    // The kernel's "  %s %-44s %15lu\n", and the misses after it.
    const std::string& object = p->sites.empty() ? std::string() : p->sites.front()->where.object;
    const std::string path = object.empty() || p->def.sdt ? p->def.target_path() : object;
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
    for (const std::string& why : p->skipped)
      out += p->def.group + "/" + p->def.event + " skipped " + why + "\n";
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
