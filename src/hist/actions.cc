// The actions of hist triggers (histogram.rst section 2.2: onmatch, onmax,
// onchange with trace, save and snapshot), run on the write path by
// Histogram::record() (hist.cc), and their part of the hist file. The
// per-entry words and the snapshot list are described in hist_impl.h's
// Impl and in docs/design/histograms.md.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "hist/hist_impl.h"

namespace usrtrace::hist {
namespace {

// Writes `v` in decimal at `out` (no locale, no allocation: the write path's
// snapshot reason). Returns the end.
char* put_u64(char* out, uint64_t v) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *out++ = tmp[--n];
  return out;
}

// A string param: the record's string, NUL-terminated in `out`.
void string_param(const Field& f, const Eval& ev, char (&out)[kSavedString]) {
  out[0] = 0;
  if (f.src == Src::kChars) {
    if (f.offset < ev.len) {
      const uint32_t room = std::min<uint32_t>({ev.len - f.offset, f.size, kSavedString - 1});
      const auto* s = reinterpret_cast<const char*>(ev.rec + f.offset);
      const size_t n = strnlen(s, room);
      std::memcpy(out, s, n);
      out[n] = 0;
    }
  } else if (f.src == Src::kDynStr && static_cast<uint32_t>(f.offset) + 4 <= ev.len) {
    internal::DataLoc loc;
    std::memcpy(&loc, ev.rec + f.offset, sizeof loc);
    const uint32_t off = loc & 0xffff, n = loc >> 16;
    if (n != 0 && off + n <= ev.len) {
      const auto* s = reinterpret_cast<const char*>(ev.rec + off);
      const size_t m = std::min<size_t>(strnlen(s, n), kSavedString - 1);
      std::memcpy(out, s, m);
      out[m] = 0;
    }
  }
}

// trace(SYNTH, params): the synthetic event, with the params' values.
// Synthetic events generated while generating one (a synthetic event's own
// hist trigger with a trace() action): a bound on the nesting, so that one
// that generates itself stops (initial-exec TLS, no constructor: any thread).
constinit __attribute__((tls_model("initial-exec"))) thread_local int t_synth_depth = 0;
constexpr int kMaxSynthDepth = 4;

void trace_synth(const Histogram::Impl& im, size_t i, Eval& ev) {
  const synth::Event* se = im.synths[i].get();
  if (!se || t_synth_depth >= kMaxSynthDepth) return;
  const Action& a = im.actions[i];
  uint64_t vals[kMaxParams];
  char strs[kMaxStringParams][kSavedString];
  size_t nstr = 0;
  uint64_t frames[1 + kStackDepth];  // a stack param: the count, then the frames
  for (size_t k = 0; k < a.params.size(); ++k) {
    const Param& pr = a.params[k];
    if (pr.stack) {
      const RecordContext& ctx = ev.ctx;
      const int n = ctx.stack ? ctx.stack(ctx.action_arg, frames + 1, static_cast<int>(kStackDepth)) : 0;
      frames[0] = n > 0 ? static_cast<uint64_t>(n) : 0;
      vals[k] = reinterpret_cast<uint64_t>(frames);
      continue;
    }
    if (pr.string.is_string()) {
      if (nstr == kMaxStringParams) return;  // refused when parsed
      string_param(pr.string, ev, strs[nstr]);
      vals[k] = reinterpret_cast<uint64_t>(strs[nstr++]);
    } else {
      vals[k] = ev.eval(pr.expr);
    }
  }
  ++t_synth_depth;
  synth::trace(*se, vals, a.params.size());
  --t_synth_depth;
}

// .snapshot(): onmax keeps the instance's N worst (N: how many snapshots it
// keeps; the kernel's one global max when N is 1), onchange takes one at
// every change and tells of the newest.
void take_snapshot(Histogram::Impl& im, const Action& a, const TracingMap::Elt* e, uint64_t v,
                   const RecordContext& ctx) {
  if (!ctx.snapshot) return;
  // order: acquire pairs with the release below: the kept list is whole.
  if (im.snap_busy.exchange(1, std::memory_order_acquire)) {
    im.snap_lost.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  int ring = ctx.snapshot_ring ? ctx.snapshot_ring(ctx.action_arg) : 1;
  ring = std::clamp(ring, 1, 16);
  const uint32_t n =
      std::min<uint32_t>(im.snap_n.load(std::memory_order_relaxed), static_cast<uint32_t>(ring));
  uint32_t slot = n;  // where the new one is told of
  if (a.handler == Action::kOnMax) {
    if (n == static_cast<uint32_t>(ring)) {
      slot = 0;
      for (uint32_t k = 1; k < n; ++k)
        if (im.snap_val[k].load(std::memory_order_relaxed) <
            im.snap_val[slot].load(std::memory_order_relaxed))
          slot = k;
      if (v <= im.snap_val[slot].load(std::memory_order_relaxed)) slot = UINT32_MAX;
    }
  } else {
    slot = 0;
  }
  if (slot != UINT32_MAX) {
    char reason[96];
    char* p = reason;
    const char* h = a.handler == Action::kOnMax ? "hist onmax($" : "hist onchange($";
    const std::string& var = im.vars[static_cast<size_t>(a.track_var)].name;
    const size_t hn = std::strlen(h), vn = std::min<size_t>(var.size(), 48);
    std::memcpy(p, h, hn);
    p += hn;
    std::memcpy(p, var.data(), vn);
    p += vn;
    *p++ = ')';
    *p++ = ' ';
    *p++ = '=';
    *p++ = ' ';
    p = put_u64(p, v);
    *p = 0;
    if (ctx.snapshot(ctx.action_arg, reason, v, a.handler == Action::kOnMax) >= 0) {
      im.snap_val[slot].store(v, std::memory_order_relaxed);
      im.snap_elt[slot].store(static_cast<uint32_t>(e - im.table->elts.data()), std::memory_order_relaxed);
      if (slot == n) im.snap_n.store(n + 1, std::memory_order_relaxed);
    }
  }
  im.snap_busy.store(0, std::memory_order_release);
}

}  // namespace

// Kernel: action_trace(), ontrack_action() (check_track_val_max,
// check_track_val_changed, save_track_data, track_data_snapshot).
//
// An entry's track value and saved fields are changed by the writer that
// sets the flag word's bit 1 (a try-lock: never waited on, a signal handler
// may interrupt its holder); one that finds it set only raises the max
// (compare-and-swap) and saves nothing, so the saved fields may then be
// those of an earlier, lower maximum. The max itself is never lost.
void run_action(Histogram::Impl& im, size_t i, TracingMap::Elt* e, Eval& ev) {
  const Action& a = im.actions[i];
  const RecordContext& ctx = ev.ctx;
  if (a.handler == Action::kOnMatch) {
    trace_synth(im, i, ev);
    return;
  }
  const uint64_t v = ev.var(a.track_var);
  std::atomic<uint64_t>& val = e->aux[a.aux];
  std::atomic<uint64_t>& flags = e->aux[a.aux + 1];
  // order: acquire pairs with the release that let go of the entry.
  const uint64_t was = flags.fetch_or(2, std::memory_order_acquire);
  const bool mine = !(was & 2);
  bool fired = false;
  if (a.handler == Action::kOnMax) {
    // An entry's first value is its max; after that, a greater one.
    uint64_t cur = val.load(std::memory_order_relaxed);
    bool first = !(was & 1);
    while (first || v > cur) {
      // order: relaxed; the flag word orders the readers.
      if (val.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
        fired = true;
        break;
      }
      first = false;  // another writer stored one: compare with it
    }
  } else {
    fired = (was & 1) == 0 ? (val.store(v, std::memory_order_relaxed), true)
                           : val.exchange(v, std::memory_order_relaxed) != v;
  }
  if (mine) {
    if (fired && a.kind == Action::kSave) {
      uint32_t w = a.aux + 2;
      for (const Param& pr : a.params) {
        if (pr.string.is_string()) {
          char buf[kSavedString] = {};
          string_param(pr.string, ev, buf);
          for (uint32_t k = 0; k < kSavedString / 8; ++k) {
            uint64_t word;
            std::memcpy(&word, buf + 8 * k, 8);
            e->aux[w++].store(word, std::memory_order_relaxed);
          }
        } else {
          e->aux[w++].store(ev.eval(pr.expr), std::memory_order_relaxed);
        }
      }
    }
    // order: release lets go of the entry and publishes its words.
    flags.store(1, std::memory_order_release);
  } else if (!(was & 1)) {
    flags.fetch_or(1, std::memory_order_release);
  }
  // onmax().snapshot() weighs every value against the kept snapshots, not
  // only an entry's new max: the instance's max (or its N worst) may be
  // below an entry's own max.
  if (a.kind == Action::kSnapshot && a.handler == Action::kOnMax) take_snapshot(im, a, e, v, ctx);
  if (!fired) return;
  if (a.kind == Action::kTrace) trace_synth(im, i, ev);
  if (a.kind == Action::kSnapshot && a.handler == Action::kOnChange) take_snapshot(im, a, e, v, ctx);
}

// Kernel: track_data_print(): after an entry, each onmax/onchange's value
// ("max:", "changed:") and what its save() kept; one line per variable
// tracked (a save() and a snapshot() of one variable share it), and a blank
// line after the entry.
std::string track_text(const Histogram::Impl& im, const TracingMap::Elt* e) {
  std::string out;
  char buf[160];
  std::vector<std::pair<int, int>> shown;  // (handler, var)
  for (size_t i = 0; i < im.actions.size(); ++i) {
    const Action& a = im.actions[i];
    if (a.handler == Action::kOnMatch) continue;
    const std::pair<int, int> id{a.handler, a.track_var};
    if (std::find(shown.begin(), shown.end(), id) != shown.end()) continue;
    // The save() of this variable if there is one (its words hold the values).
    const Action* with = &a;
    for (const Action& b : im.actions)
      if (b.handler == a.handler && b.track_var == a.track_var && b.kind == Action::kSave) with = &b;
    shown.push_back(id);
    // order: acquire pairs with the writer's release of the entry.
    if (!(e->aux[with->aux + 1].load(std::memory_order_acquire) & 1)) continue;
    snprintf(buf, sizeof buf, "\n\t%s: %10llu", a.handler == Action::kOnMax ? "max" : "changed",
             static_cast<unsigned long long>(e->aux[with->aux].load(std::memory_order_relaxed)));
    out += buf;
    if (with->kind != Action::kSave) continue;
    uint32_t w = with->aux + 2;
    for (const Param& pr : with->params) {
      if (pr.string.is_string()) {
        char str[kSavedString];
        for (uint32_t k = 0; k < kSavedString / 8; ++k) {
          const uint64_t word = e->aux[w++].load(std::memory_order_relaxed);
          std::memcpy(str + 8 * k, &word, 8);
        }
        str[kSavedString - 1] = 0;
        snprintf(buf, sizeof buf, "  %s: %-32s", pr.text.c_str(), str);
      } else {
        snprintf(buf, sizeof buf, "  %s: %10llu", pr.text.c_str(),
                 static_cast<unsigned long long>(e->aux[w++].load(std::memory_order_relaxed)));
      }
      out += buf;
    }
  }
  if (!out.empty()) out += "\n";
  return out;
}

// Kernel: track_data_snapshot_print(). With several snapshots kept (this
// project's snapshot_ring_size), onmax() keeps the N worst: each is told
// of, the worst first.
std::string snapshot_text(const Histogram::Impl& im) {
  if (im.snapshot_action < 0) return {};
  const uint32_t n = std::min<uint32_t>(im.snap_n.load(std::memory_order_acquire), 16);
  if (n == 0) return {};
  const Action& a = im.actions[static_cast<size_t>(im.snapshot_action)];
  std::vector<std::pair<uint64_t, uint32_t>> kept;
  for (uint32_t k = 0; k < n; ++k)
    kept.emplace_back(im.snap_val[k].load(std::memory_order_relaxed),
                      im.snap_elt[k].load(std::memory_order_relaxed));
  std::sort(kept.begin(), kept.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string out = n == 1 ? "\nSnapshot taken (see tracing/snapshot).  Details:\n"
                           : "\nSnapshots taken (see tracing/snapshot and snapshot.AGE).  Details:\n";
  char buf[160];
  const char* h = a.handler == Action::kOnMax ? "onmax" : "onchange";
  const std::string& var = im.vars[static_cast<size_t>(a.track_var)].name;
  for (const auto& [v, elt] : kept) {
    snprintf(buf, sizeof buf, "\ttriggering value { %s($%s) }: %10llu", h, var.c_str(),
             static_cast<unsigned long long>(v));
    out += buf;
    out += "\ttriggered by event with key: { ";
    const TracingMap::Elt& e = im.table->elts[elt];
    for (size_t k = 0; k < im.keys.size(); ++k) {
      if (k) out += ", ";
      out += format_key(im.keys[k], e.key, e.comm);
    }
    out += " }\n";
  }
  if (const uint64_t lost = im.snap_lost.load(std::memory_order_relaxed))
    out += "\tnot taken (another was being taken): " + std::to_string(lost) + "\n";
  return out;
}

}  // namespace usrtrace::hist
