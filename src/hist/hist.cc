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

#include "events/record.h"
#include "hist/hist_parse.h"
#include "hist/syscalls.h"
#include "hist/tracing_map.h"
#include "writers/writers.h"

namespace usrtrace::hist {
namespace {

using internal::EventDesc;

// Live named tables.
std::mutex g_named_mu;
std::map<std::string, std::weak_ptr<TracingMap>>& named() {
  static auto* m = new std::map<std::string, std::weak_ptr<TracingMap>>();
  return *m;
}

// ilog2(roundup_pow_of_two(v)), the kernel's log2 key.
uint64_t log2_key(uint64_t v) {
  if (v <= 1) return 0;
  return 64 - static_cast<uint64_t>(__builtin_clzll(v - 1));
}

}  // namespace

// The parsed command, and the live state beside it.
struct Histogram::Impl : HistSpec {
  std::atomic<bool> paused{false};
  std::shared_ptr<TracingMap> table;

  // Makes the table this histogram aggregates into or, for a name=, joins the
  // one the live histograms of that name share; false if that one's keys,
  // values or size differ. Kernel: create_tracing_map(), and
  // hist_register_trigger()'s named-trigger check.
  // Context: control plane; takes g_named_mu; allocates the table.
  bool create_tracing_map() {
    if (!name.empty()) {
      std::lock_guard<std::mutex> l(g_named_mu);
      auto& slot = named()[name];
      if (auto t = slot.lock()) {
        if (t->signature != signature || t->size != (1u << bits)) return false;
        table = std::move(t);
      }
      if (!table) {
        table = std::make_shared<TracingMap>(bits, key_size, vals.size());
        table->signature = signature;
        slot = table;
      }
    } else {
      table = std::make_shared<TracingMap>(bits, key_size, vals.size());
      table->signature = signature;
    }
    return true;
  }

  uint64_t value_of(const Field& f, const uint8_t* rec, uint32_t len, const RecordContext& ctx, uint64_t* ts,
                    bool* have_ts) const {
    uint64_t v;
    switch (f.src) {
      case Src::kCpu:
        v = static_cast<uint64_t>(static_cast<int64_t>(ctx.cpu));
        break;
      case Src::kTimestamp:
        if (!*have_ts) {
          *ts = ctx.now_ns ? ctx.now_ns(ctx.now_arg) : 0;
          *have_ts = true;
        }
        v = *ts;
        if (f.flags & kUsecs) v /= 1000;
        break;
      case Src::kHitcount:
        v = 1;
        break;
      default:
        v = events::read_int_field(rec, len, f.offset, f.size, f.is_signed);
        break;
    }
    return v;
  }
};

Histogram::Histogram() : impl_(std::make_unique<Impl>()) {}

Histogram::~Histogram() {
  if (!impl_->name.empty()) {
    std::lock_guard<std::mutex> l(g_named_mu);
    auto it = named().find(impl_->name);
    impl_->table.reset();
    if (it != named().end() && it->second.expired()) named().erase(it);
  }
}

// Kernel: event_hist_trigger_parse(): the command (parse_hist_command()),
// then the table.
std::unique_ptr<Histogram> Histogram::create(const EventDesc& ev, std::string_view cmd, Error* err) {
  std::unique_ptr<Histogram> h(new Histogram());
  Impl& im = *h->impl_;
  if (!parse_hist_command(ev, cmd, &im, err)) return nullptr;
  if (!im.create_tracing_map()) {
    *err = Error{"Named hist trigger doesn't match existing named trigger (includes variables)", im.cmd_pos};
    return nullptr;
  }
  return h;
}

void Histogram::record(const void* rec_v, uint32_t len, const RecordContext& ctx) {
  Impl& im = *impl_;
  // order: acquire pairs with clear()'s release: a table emptied by clear()
  // is seen empty by the writers that see it resumed.
  if (im.paused.load(std::memory_order_acquire)) return;
  TracingMap& t = *im.table;
  const auto* rec = static_cast<const uint8_t*>(rec_v);
  // Only the key's own bytes are cleared: the buffer is sized for the
  // largest key, and zeroing it all would cost more than the insert.
  alignas(8) uint8_t key[kMaxKeys * 1032];
  std::memset(key, 0, t.key_size);
  uint64_t ts = 0;
  bool have_ts = false;
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
    } else {
      uint64_t v = im.value_of(k, rec, len, ctx, &ts, &have_ts);
      if (k.flags & kLog2) v = log2_key(v);
      if (k.flags & kBuckets) v = v / k.buckets * k.buckets;
      std::memcpy(out, &v, 8);
    }
  }
  // Hits are not counted here: they are the hitcounts plus the drops.
  TracingMap::Elt* e = t.insert(key, ctx.comm);
  if (!e) return;
  e->sums[0].fetch_add(1, std::memory_order_relaxed);
  for (size_t v = 1; v < im.vals.size(); ++v)
    e->sums[v].fetch_add(im.value_of(im.vals[v], rec, len, ctx, &ts, &have_ts), std::memory_order_relaxed);
}

bool Histogram::wants_pause() const { return impl_->want_pause; }
bool Histogram::wants_cont() const { return impl_->want_cont; }
bool Histogram::wants_clear() const { return impl_->want_clear; }

bool Histogram::same_spec(const Histogram& o) const {
  const Impl &a = *impl_, &b = *o.impl_;
  if (a.name != b.name || a.table->signature != b.table->signature || a.sort.size() != b.sort.size())
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
  s += ":sort=";
  for (size_t i = 0; i < im.sort.size(); ++i) {
    const SortKey& k = im.sort[i];
    if (i) s += ",";
    s += k.val >= 0 ? im.vals[static_cast<size_t>(k.val)].spec()
                    : im.keys[static_cast<size_t>(-1 - k.val)].spec();
    if (k.descending) s += ".descending";
  }
  s += ":size=";
  s += std::to_string(1u << im.bits);
  if (!filter.empty()) {
    s += " if ";
    s += filter;
  }
  s += paused() ? " [paused]" : " [active]";
  return s;
}

namespace {

std::string format_key(const Field& k, const uint8_t* key, const char* comm) {
  char buf[512];
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

}  // namespace

std::string Histogram::print(std::string_view filter) const {
  const Impl& im = *impl_;
  const TracingMap& t = *im.table;
  struct Entry {
    const uint8_t* key;
    const char* comm;
    std::vector<uint64_t> sums;
  };
  std::vector<Entry> entries;
  for (const auto& b : t.buckets) {
    // order: acquire pairs with insert()'s release: the key is complete.
    const TracingMap::Elt* e = t.element(b.load(std::memory_order_acquire));
    if (!e) continue;
    Entry en{e->key, e->comm, std::vector<uint64_t>(t.nvals)};
    for (size_t v = 0; v < t.nvals; ++v) en.sums[v] = e->sums[v].load(std::memory_order_relaxed);
    entries.push_back(std::move(en));
  }
  auto key_cmp = [&](const Entry& a, const Entry& b, const Field& k) {
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
  std::vector<uint64_t> totals(t.nvals);
  for (const Entry& e : entries)
    for (size_t v = 0; v < t.nvals; ++v) totals[v] += e.sums[v];
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
    out += " }";
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
      } else if (f.flags & kHex) {
        snprintf(buf, sizeof buf, "%s%s: %10llx", sep, f.name.c_str(), u);
      } else {
        snprintf(buf, sizeof buf, "%s%s: %10llu", sep, f.name.c_str(), u);
      }
      out += buf;
    }
    out += "\n";
  }
  const uint64_t hits = totals[0] + drops;
  snprintf(buf, sizeof buf, "\nTotals:\n    Hits: %llu\n    Entries: %zu\n    Dropped: %llu\n",
           static_cast<unsigned long long>(hits), entries.size(), static_cast<unsigned long long>(drops));
  out += buf;
  return out;
}

}  // namespace usrtrace::hist
