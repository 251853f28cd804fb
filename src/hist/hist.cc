// Hist triggers (see hist.h and docs/design/histograms.md): the write side
// (record) and the printer, over the lock-free map of hist/tracing_map.h;
// the command parser is in hist_parse.cc.
#include "hist/hist.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "clock/trace_clock.h"
#include "events/record.h"
#include "events/registry.h"
#include "hist/hist_impl.h"
#include "hist/hist_parse.h"
#include "hist/synth.h"
#include "hist/syscalls.h"
#include "hist/tracing_map.h"
#include "symbols/resolver.h"
#include "writers/writers.h"

namespace usrtrace::hist {
namespace {

using internal::EventDesc;

// Live named tables, and the published variables of every histogram.
std::mutex g_named_mu;
std::map<std::string, std::weak_ptr<TracingMap>>& named() {
  static auto* m = new std::map<std::string, std::weak_ptr<TracingMap>>();
  return *m;
}

std::vector<std::shared_ptr<Published>>& published() {
  static auto* v = new std::vector<std::shared_ptr<Published>>();
  return *v;
}

std::string key_layout_of(const std::vector<Field>& keys) {
  std::string s;
  for (const Field& k : keys) {
    s += k.is_string() ? 's' : k.is_stack() ? 't' : 'n';
    s += std::to_string(k.is_string() || k.is_stack() ? k.size : 8);
    s += ',';
  }
  return s;
}

// ilog2(roundup_pow_of_two(v)), the kernel's log2 key.
uint64_t log2_key(uint64_t v) {
  if (v <= 1) return 0;
  return 64 - static_cast<uint64_t>(__builtin_clzll(v - 1));
}

}  // namespace

bool Histogram::Impl::create_tracing_map() {
  auto make = [&] {
    auto t = std::make_shared<TracingMap>(bits, key_size, vals.size(), vars.size(), aux_words);
    t->signature = signature;
    return t;
  };
  if (!name.empty()) {
    std::lock_guard<std::mutex> l(g_named_mu);
    auto& slot = named()[name];
    if (auto t = slot.lock()) {
      if (t->signature != signature || t->size != (1u << bits)) return false;
      table = std::move(t);
    }
    if (!table) {
      table = make();
      slot = table;
    }
  } else {
    table = make();
  }
  return true;
}

bool Histogram::Impl::resolve(Error* err) {
  auto fail = [&](const char* msg, size_t pos) {
    *err = Error{msg, pos};
    return false;
  };
  {
    std::lock_guard<std::mutex> l(g_named_mu);
    const std::string layout = key_layout_of(keys);
    for (Ref& r : refs) {
      std::shared_ptr<Published> found;
      int index = -1;
      for (const auto& p : published()) {
        if (p->slot != scope.slot) continue;
        if (!r.system.empty() && (p->system != r.system || p->event != r.event)) continue;
        for (size_t v = 0; v < p->vars.size(); ++v) {
          if (p->vars[v] != r.name) continue;
          if (found && (found->system != p->system || found->event != p->event))
            return fail(
                "Variable name not unique, need to use fully qualified name (subsys.event.var) for variable",
                r.pos);
          found = p;
          index = static_cast<int>(v);
        }
      }
      if (!found) return fail("Couldn't find variable", r.pos);
      if (found->key_layout != layout) return fail("Variable's histogram has other keys", r.pos);
      r.var = static_cast<uint32_t>(index);
      r.units = found->units[static_cast<size_t>(index)];
      size_t t = 0;
      while (t < ref_pubs.size() && ref_pubs[t] != found) ++t;
      if (t == ref_pubs.size()) {
        ref_pubs.push_back(found);
        ref_tables.emplace_back(found->system, found->event);
      }
      r.table = static_cast<int>(t);
    }
  }
  // Units, now that references have theirs (nodes come after their operands).
  for (Expr& e : exprs) {
    if (e.op == Expr::kRef) e.units = refs[static_cast<size_t>(e.index)].units;
    if (e.op == Expr::kSelfVar) e.units = Units::kNone;  // set below from the variable
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (Var& v : vars) v.units = exprs[static_cast<size_t>(v.expr)].units;
    for (Expr& e : exprs) {
      if (e.op == Expr::kSelfVar) e.units = vars[static_cast<size_t>(e.index)].units;
      if (e.op < Expr::kAdd) continue;
      const Units a = exprs[static_cast<size_t>(e.a)].units;
      const Units b = e.b >= 0 ? exprs[static_cast<size_t>(e.b)].units : Units::kNone;
      if ((e.op == Expr::kAdd || e.op == Expr::kSub) && a != Units::kNone && b != Units::kNone && a != b)
        return fail("Timestamp units in expression don't match", cmd_pos);
      e.units = a != Units::kNone ? a : b;
    }
  }
  synths.resize(actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    Action& a = actions[i];
    actions_sig += a.text + ":";
    if (a.handler == Action::kOnMatch && !events::Registry::get().find(a.match_system, a.match_event))
      return fail("Event file not found", a.pos);
    if (a.kind == Action::kSnapshot) snapshot_action = static_cast<int>(i);
    if (a.kind != Action::kTrace) continue;
    // Held from here (find and hold under the module's lock: a removal
    // cannot slip in between), let go by the destructor.
    std::shared_ptr<synth::Event> ev = synth::find_and_hold(a.synth_name);
    if (!ev) return fail("Couldn't find synthetic event", a.synth_pos);
    synths[i] = ev;
    const std::vector<synth::FieldSpec>& fs = synth::fields(*ev);
    if (fs.size() != a.params.size())
      return fail("Param count doesn't match synthetic event field count", a.pos);
    for (size_t k = 0; k < fs.size(); ++k) {
      const bool str = a.params[k].string.is_string();
      if (fs[k].is_stack != a.params[k].stack || fs[k].is_string != str)
        return fail("Param type doesn't match synthetic event field type", a.pos);
    }
    synths[i] = std::move(ev);
  }
  return true;
}

Histogram::Histogram() : impl_(std::make_unique<Impl>()) {}

Histogram::~Histogram() {
  Impl& im = *impl_;
  for (const auto& e : im.synths)
    if (e) synth::hold(*e, -1);
  std::lock_guard<std::mutex> l(g_named_mu);
  for (const auto& p : im.ref_pubs)
    if (im.mine) p->users.fetch_sub(1, std::memory_order_relaxed);
  if (im.mine) std::erase(published(), im.mine);
  if (!im.name.empty()) {
    auto it = named().find(im.name);
    im.table.reset();
    if (it != named().end() && it->second.expired()) named().erase(it);
  }
}

// Kernel: event_hist_trigger_parse(): the command (parse_hist_command()),
// then the table, then the references and actions.
std::unique_ptr<Histogram> Histogram::create(const EventDesc& ev, std::string_view cmd, Error* err,
                                             Scope scope) {
  std::unique_ptr<Histogram> h(new Histogram());
  Impl& im = *h->impl_;
  im.scope = scope;
  im.event = &ev;
  if (!parse_hist_command(ev, cmd, &im, err)) return nullptr;
  if (!scope.remove) {
    std::lock_guard<std::mutex> l(g_named_mu);
    for (const Var& v : im.vars)
      for (const auto& p : published())
        if (p->slot == scope.slot && p->system == ev.system && p->event == ev.name &&
            std::find(p->vars.begin(), p->vars.end(), v.name) != p->vars.end()) {
          *err = Error{"Variable already defined", im.cmd_pos};
          return nullptr;
        }
  }
  if (!im.resolve(err)) return nullptr;
  // common_timestamp converts the record's raw time stamp on the write path
  // (raw_to_ns): the TSC calibration, up to 20 ms of waiting and a static
  // guard the first time, is done here, on the control plane. (A test run
  // alone caught the first writer of a fresh process stalled 16 ms.)
  if (im.needs_ts) (void)clock::tsc_calibration();
  if (!im.create_tracing_map()) {
    *err = Error{"Named hist trigger doesn't match existing named trigger (includes variables)", im.cmd_pos};
    return nullptr;
  }
  return h;
}

void Histogram::publish() {
  Impl& im = *impl_;
  if (im.mine) return;
  auto p = std::make_shared<Published>();
  p->slot = im.scope.slot;
  p->system = im.event->system;
  p->event = im.event->name;
  for (const Var& v : im.vars) {
    p->vars.push_back(v.name);
    p->units.push_back(v.units);
  }
  p->table = im.table;
  p->key_layout = key_layout_of(im.keys);
  {
    std::lock_guard<std::mutex> l(g_named_mu);
    for (const auto& r : im.ref_pubs) r->users.fetch_add(1, std::memory_order_relaxed);
    published().push_back(p);
  }
  im.mine = std::move(p);
}

bool Histogram::takes_snapshots() const { return impl_->snapshot_action >= 0; }
bool Histogram::needs_time() const { return impl_->needs_ts; }

bool Histogram::referenced() const {
  const Impl& im = *impl_;
  return im.mine && im.mine->users.load(std::memory_order_relaxed) > 0;
}

void Histogram::record(const void* rec_v, uint32_t len, const RecordContext& ctx) {
  Impl& im = *impl_;
  // order: acquire pairs with clear()'s release: a table emptied by clear()
  // is seen empty by the writers that see it resumed.
  if (im.paused.load(std::memory_order_acquire)) return;
  TracingMap& t = *im.table;
  const auto* rec = static_cast<const uint8_t*>(rec_v);
  Eval ev{im, rec, len, ctx};
  // Only the key's own bytes are cleared: the buffer is sized for the
  // largest key, and zeroing it all would cost more than the insert.
  alignas(8) uint8_t key[kMaxKeys * 1032];
  std::memset(key, 0, t.key_size);
  for (const Field& k : im.keys) {
    uint8_t* out = key + k.key_offset;
    if (k.src == Src::kChars) {
      if (k.offset < len) {
        const uint32_t room = std::min<uint32_t>(len - k.offset, k.size);
        const auto* s = reinterpret_cast<const char*>(rec + k.offset);
        std::memcpy(out, s, strnlen(s, room));
      }
      out[k.size - 1] = 0;
    } else if (k.src == Src::kDynStr) {
      if (static_cast<uint32_t>(k.offset) + 4 <= len) {
        internal::DataLoc loc;
        std::memcpy(&loc, rec + k.offset, sizeof loc);
        const uint32_t off = loc & 0xffff, n = loc >> 16;
        if (n != 0 && off + n <= len) {
          const auto* s = reinterpret_cast<const char*>(rec + off);
          std::memcpy(out, s, std::min<size_t>(strnlen(s, n), k.size - 1));
        }
      }
    } else if (k.src == Src::kStack) {
      uint64_t ips[kStackDepth];
      const int n = ctx.stack ? ctx.stack(ctx.action_arg, ips, static_cast<int>(kStackDepth)) : 0;
      if (n > 0) std::memcpy(out, ips, static_cast<size_t>(n) * 8);
    } else if (k.src == Src::kDynStack) {
      // __data_loc of u64 frames: the first kStackDepth of them.
      if (static_cast<uint32_t>(k.offset) + 4 <= len) {
        internal::DataLoc loc;
        std::memcpy(&loc, rec + k.offset, sizeof loc);
        const uint32_t off = loc & 0xffff, n = loc >> 16;
        if (off + n <= len) std::memcpy(out, rec + off, std::min<uint32_t>(n & ~7u, k.size));
      }
    } else {
      uint64_t v = ev.field(k);
      if (k.flags & kLog2) v = log2_key(v);
      if (k.flags & kBuckets) v = v / k.buckets * k.buckets;
      std::memcpy(out, &v, 8);
    }
  }
  // Kernel: resolve_var_refs(): every variable of another histogram this
  // one reads must be set in that histogram's entry of the same key, else
  // the record does nothing here; those read are then unset (read once).
  if (!im.refs.empty()) {
    TracingMap::Elt* from[kMaxRefs] = {};
    uint64_t used[kMaxRefs] = {};
    for (const Ref& r : im.refs) {
      const auto ti = static_cast<size_t>(r.table);
      TracingMap& other = *im.ref_pubs[ti]->table;
      if (!from[ti]) from[ti] = other.find(key);
      if (!from[ti]) return;
      // order: acquire pairs with the release or of the bits below: the
      // values stored before it are seen.
      const uint64_t set = from[ti]->vars[other.nvars].load(std::memory_order_acquire);
      if (!(set >> r.var & 1)) return;
      used[ti] |= uint64_t{1} << r.var;
    }
    for (size_t i = 0; i < im.refs.size(); ++i) {
      const Ref& r = im.refs[i];
      ev.refs[i] = from[r.table]->vars[r.var].load(std::memory_order_relaxed);
    }
    for (size_t ti = 0; ti < im.ref_pubs.size(); ++ti)
      if (from[ti])
        from[ti]->vars[im.ref_pubs[ti]->table->nvars].fetch_and(~used[ti], std::memory_order_relaxed);
  }
  // Hits are not counted here: they are the hitcounts plus the drops.
  TracingMap::Elt* e = t.insert(key, ctx.comm);
  if (!e) return;
  e->sums[0].fetch_add(1, std::memory_order_relaxed);
  for (size_t v = 1; v < im.vals.size(); ++v)
    e->sums[v].fetch_add(ev.field(im.vals[v]), std::memory_order_relaxed);
  if (!im.vars.empty()) {
    uint64_t bits = 0;
    for (size_t i = 0; i < im.vars.size(); ++i) {
      e->vars[i].store(ev.var(static_cast<int>(i)), std::memory_order_relaxed);
      bits |= uint64_t{1} << i;
    }
    // order: release publishes the values to the readers' acquire.
    e->vars[im.vars.size()].fetch_or(bits, std::memory_order_release);
  }
  for (size_t i = 0; i < im.actions.size(); ++i) run_action(im, i, e, ev);
}

bool Histogram::wants_pause() const { return impl_->want_pause; }
bool Histogram::wants_cont() const { return impl_->want_cont; }
bool Histogram::wants_clear() const { return impl_->want_clear; }

bool Histogram::same_spec(const Histogram& o) const {
  const Impl &a = *impl_, &b = *o.impl_;
  if (a.name != b.name || a.table->signature != b.table->signature || a.sort.size() != b.sort.size() ||
      a.actions_sig != b.actions_sig)
    return false;
  for (size_t i = 0; i < a.sort.size(); ++i)
    if (a.sort[i].val != b.sort[i].val || a.sort[i].descending != b.sort[i].descending) return false;
  return true;
}

// order: pausing is a soft switch, like tracing_on (the kernel's paused
// flag is a plain bool); resuming is a release, as in clear(). Write-path
// safe: enable_hist/disable_hist call them.
void Histogram::pause() { impl_->paused.store(true, std::memory_order_relaxed); }
void Histogram::cont() { impl_->paused.store(false, std::memory_order_release); }
bool Histogram::paused() const { return impl_->paused.load(std::memory_order_relaxed); }

void Histogram::clear() {
  // No writer may be inside insert() while the table is emptied: pause,
  // wait out the writers that saw it running, clear, and resume. (A named
  // table's other histograms may still write; their records during the
  // clear land in the emptied table or are counted again from zero.)
  const bool was = impl_->paused.exchange(true, std::memory_order_relaxed);
  writers::synchronize_writers();
  impl_->table->clear();
  impl_->snap_n.store(0, std::memory_order_relaxed);
  impl_->paused.store(was, std::memory_order_release);
}

std::string Histogram::trigger_text(std::string_view filter) const {
  const Impl& im = *impl_;
  std::string s = "hist:";
  if (!im.name.empty()) {
    s += "name=";
    s += im.name;
    s += ':';
  }
  s += "keys=";
  for (size_t i = 0; i < im.keys.size(); ++i) {
    if (i) s += ',';
    s += im.keys[i].spec();
  }
  s += ":vals=";
  for (size_t i = 0; i < im.vals.size(); ++i) {
    if (i) s += ',';
    s += im.vals[i].spec();
  }
  for (size_t i = 0; i < im.vars.size(); ++i) {
    s += i ? "," : ":";
    s += im.vars[i].name + "=" + im.vars[i].text;
  }
  s += ":sort=";
  for (size_t i = 0; i < im.sort.size(); ++i) {
    const SortKey& k = im.sort[i];
    if (i) s += ",";
    // Kernel: hitcount is printed bare, whatever its display modifiers.
    s += k.val == 0  ? std::string("hitcount")
         : k.val > 0 ? im.vals[static_cast<size_t>(k.val)].spec()
                     : im.keys[static_cast<size_t>(-1 - k.val)].spec();
    if (k.descending) s += ".descending";
  }
  s += ":size=";
  s += std::to_string(1u << im.bits);
  for (const Action& a : im.actions) s += ":" + a.text;
  if (!filter.empty()) {
    s += " if ";
    s += filter;
  }
  s += paused() ? " [paused]" : " [active]";
  return s;
}

std::string format_key(const Field& k, const uint8_t* key, const char* comm) {
  char buf[512];
  if (k.is_stack()) {
    // Kernel: hist_trigger_stacktrace_print(): a frame a line, %pS.
    std::string out = k.spec() + ":\n";
    for (uint32_t i = 0; i < kStackDepth; ++i) {
      uint64_t ip;
      std::memcpy(&ip, key + k.key_offset + 8 * i, 8);
      if (ip == 0) break;
      // A return address: its function is the one holding the byte before
      // it (a call that ends a function returns into the next one); named
      // as the function tracers name functions (symbols::Resolver: .symtab
      // first, so static functions too), %pS's "sym+0xoff/0xsize".
      std::string fn, at;
      uint64_t off = 0;
      if (symbols::Resolver::lookup(ip - 1, &fn, &off)) {
        std::string here;
        uint64_t off2 = 0;
        at = symbols::Resolver::lookup(ip, &here, &off2) && here == fn
                 ? symbols::Resolver::name(ip, true)
                 : symbols::Resolver::name(ip - 1, true);
      } else {
        snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(ip));
        at = buf;
      }
      out += "         " + at + "\n";
    }
    return out;
  }
  if (k.is_string()) {
    const auto* s = reinterpret_cast<const char*>(key + k.key_offset);
    snprintf(buf, sizeof buf, "%s: %-50.*s", k.name.c_str(), static_cast<int>(strnlen(s, k.size)), s);
    return buf;
  }
  uint64_t v;
  std::memcpy(&v, key + k.key_offset, 8);
  const auto u = static_cast<unsigned long long>(v);
  if (k.flags & kHex) {
    snprintf(buf, sizeof buf, "%s: %llx", k.name.c_str(), u);
  } else if (k.flags & (kSym | kSymOffset)) {
    Dl_info info{};
    void* sym_v = nullptr;
    std::string where;
    if (dladdr1(reinterpret_cast<void*>(v), &info, &sym_v, RTLD_DL_SYMENT) && info.dli_sname) {
      where = info.dli_sname;
      if (k.flags & kSymOffset) {
        char off[64];
        snprintf(
            off, sizeof off, "+0x%llx/0x%llx",
            u - static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(info.dli_saddr)),
            sym_v ? static_cast<unsigned long long>(static_cast<const ElfW(Sym)*>(sym_v)->st_size) : 0ull);
        where += off;
      }
    } else {
      char hex[32];
      snprintf(hex, sizeof hex, "0x%llx", u);
      where = hex;
    }
    snprintf(buf, sizeof buf, (k.flags & kSym) ? "%s: [%llx] %-45s" : "%s: [%llx] %-55s", k.name.c_str(), u,
             where.c_str());
  } else if (k.flags & kExecname) {
    // The name the thread had when the entry was made; saved_cmdlines for
    // entries made without one.
    const std::string name =
        comm[0] ? std::string(comm, strnlen(comm, 16)) : writers::comm_of(static_cast<int>(v));
    snprintf(buf, sizeof buf, "%s: %-16s[%10llu]", k.name.c_str(), name.c_str(), u);
  } else if (k.flags & kSyscall) {
    const char* name = syscall_name(v);
    snprintf(buf, sizeof buf, "%s: %-30s[%3llu]", k.name.c_str(), name ? name : "unknown_syscall", u);
  } else if (k.flags & kLog2) {
    snprintf(buf, sizeof buf, "%s: ~ 2^%-2llu", k.name.c_str(), u);
  } else if (k.flags & kBuckets) {
    snprintf(buf, sizeof buf, "%s: ~ %llu-%llu", k.name.c_str(), u,
             u + static_cast<unsigned long long>(k.buckets) - 1);
  } else if (k.is_signed || k.src == Src::kCpu) {
    snprintf(buf, sizeof buf, "%s: %10lld", k.name.c_str(), static_cast<long long>(v));
  } else {
    snprintf(buf, sizeof buf, "%s: %10llu", k.name.c_str(), u);
  }
  return buf;
}

std::string Histogram::print(std::string_view filter) const {
  const Impl& im = *impl_;
  const TracingMap& t = *im.table;
  struct Entry {
    const uint8_t* key;
    const char* comm;
    std::vector<uint64_t> sums;
    const TracingMap::Elt* elt;
  };
  std::vector<Entry> entries;
  for (const auto& b : t.buckets) {
    // order: acquire pairs with insert()'s release: the key is complete.
    const TracingMap::Elt* e = t.element(b.load(std::memory_order_acquire));
    if (!e) continue;
    Entry en{e->key, e->comm, std::vector<uint64_t>(t.nvals), e};
    for (size_t v = 0; v < t.nvals; ++v) en.sums[v] = e->sums[v].load(std::memory_order_relaxed);
    entries.push_back(std::move(en));
  }
  auto key_cmp = [&](const Entry& a, const Entry& b, const Field& k) {
    if (k.is_stack()) return std::memcmp(a.key + k.key_offset, b.key + k.key_offset, k.size);
    if (k.is_string())
      return std::strncmp(reinterpret_cast<const char*>(a.key + k.key_offset),
                          reinterpret_cast<const char*>(b.key + k.key_offset), k.size);
    uint64_t x, y;
    std::memcpy(&x, a.key + k.key_offset, 8);
    std::memcpy(&y, b.key + k.key_offset, 8);
    if (k.is_signed) return static_cast<int64_t>(x) < static_cast<int64_t>(y) ? -1 : x == y ? 0 : 1;
    return x < y ? -1 : x == y ? 0 : 1;
  };
  // The sort keys, then the keys in order, so that equal entries print in
  // a stable order (the kernel leaves ties in table order).
  std::sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
    for (const SortKey& sk : im.sort) {
      int c;
      if (sk.val >= 0) {
        const uint64_t x = a.sums[static_cast<size_t>(sk.val)], y = b.sums[static_cast<size_t>(sk.val)];
        c = x < y ? -1 : x == y ? 0 : 1;
      } else {
        c = key_cmp(a, b, im.keys[static_cast<size_t>(-1 - sk.val)]);
      }
      if (c != 0) return sk.descending ? c > 0 : c < 0;
    }
    for (const Field& k : im.keys)
      if (int c = key_cmp(a, b, k); c != 0) return c < 0;
    return false;
  });
  std::vector<uint64_t> totals(t.nvals), maxs(t.nvals);
  for (const Entry& e : entries)
    for (size_t v = 0; v < t.nvals; ++v) {
      totals[v] += e.sums[v];
      maxs[v] = std::max(maxs[v], e.sums[v]);
    }
  const uint64_t drops = t.drops.load(std::memory_order_relaxed);

  std::string out = "# event histogram\n#\n# trigger info: ";
  out += trigger_text(filter);
  out += "\n#\n\n";
  char buf[256];
  for (const Entry& e : entries) {
    out += "{ ";
    for (size_t k = 0; k < im.keys.size(); ++k) {
      if (k) out += ", ";
      out += format_key(im.keys[k], e.key, e.comm);
    }
    // A stack ends with its last frame's line.
    out += im.keys.back().is_stack() ? "}" : " }";
    for (size_t v = 0; v < im.vals.size(); ++v) {
      const Field& f = im.vals[v];
      const auto u = static_cast<unsigned long long>(e.sums[v]);
      const char* sep = v == 0 ? " " : "  ";
      if (f.flags & kPercent) {
        if (totals[v] == 0) {
          snprintf(buf, sizeof buf, "%s%s (%%):[ERROR]", sep, f.name.c_str());
        } else {
          // The kernel's __get_percentage, in hundredths of a percent.
          const unsigned pc =
              static_cast<unsigned>(e.sums[v] < UINT64_MAX / 10000 ? e.sums[v] * 10000 / totals[v]
                                                                   : e.sums[v] / (totals[v] / 10000 + 1));
          snprintf(buf, sizeof buf, "%s%s (%%): %3u.%02u", sep, f.name.c_str(), pc / 100, pc % 100);
        }
      } else if (f.flags & kGraph) {
        // The kernel's __fill_bar_str(): 20 columns, the entry's share of
        // the largest entry's value.
        char bar[21];
        const uint64_t pc = maxs[v] == 0                     ? 0
                            : e.sums[v] < UINT64_MAX / 10000 ? e.sums[v] * 10000 / maxs[v]
                                                             : e.sums[v] / (maxs[v] / 10000 + 1);
        const uint64_t n = pc * 20 / 10000;
        for (uint64_t c = 0; c < 20; ++c) bar[c] = c < n ? '#' : ' ';
        bar[20] = 0;
        snprintf(buf, sizeof buf, "%s%s: %20s", sep, f.name.c_str(), bar);
      } else if (f.flags & kHex) {
        snprintf(buf, sizeof buf, "%s%s: %10llx", sep, f.name.c_str(), u);
      } else {
        snprintf(buf, sizeof buf, "%s%s: %10llu", sep, f.name.c_str(), u);
      }
      out += buf;
    }
    out += track_text(im, e.elt);
    out += "\n";
  }
  out += snapshot_text(im);
  const uint64_t hits = totals[0] + drops;
  snprintf(buf, sizeof buf, "\nTotals:\n    Hits: %llu\n    Entries: %zu\n    Dropped: %llu\n",
           static_cast<unsigned long long>(hits), entries.size(), static_cast<unsigned long long>(drops));
  out += buf;
  return out;
}

}  // namespace usrtrace::hist
