// The latency tracers' control side: current_tracer, tracing_max_latency,
// tracing_thresh, timerlat_period_us, and which slots each measuring side
// reports to. Context: control plane; one mutex.
#include <cerrno>
#include <cstring>

#include "base/mutex.h"
#include "clock/trace_clock.h"
#include "function/control.h"
#include "instance/instance.h"
#include "latency/internal.h"

namespace usrtrace::latency {

namespace {
// function-trace, the latency tracers' option (irqsoff's tracer_flags):
// trace the functions a section calls. Rank 2: after the function tracers'.
int g_function_trace;
struct RegisterOptions {
  RegisterOptions() {
    static constexpr instance::OptionInfo kOpts[] = {{"function-trace", true}};
    g_function_trace = instance::register_options(kOpts, 1, 2);
  }
};
__attribute__((init_priority(101))) RegisterOptions g_register_options;
instance::Option function_trace_option() { return static_cast<instance::Option>(g_function_trace); }
}  // namespace

using namespace detail;  // NOLINT: this component's own

namespace {

struct SlotConfig {
  Tracer tracer = Tracer::kNone;
  KindImpl* kind = nullptr;          // section_KIND
  bool restore_latency_fmt = false;  // latency-format was off before
  uint64_t timerlat_period_us = 1000;
};

base::Mutex g_mu;
SlotConfig g_config[instance::kMaxInstances] USRTRACE_GUARDED_BY(g_mu);

constexpr std::string_view kSectionPrefix = "section_";

std::atomic<uint64_t>* mask_of(Tracer t) {
  switch (t) {
    case Tracer::kSection:
      return &g_any_slots;
    case Tracer::kSigsoff:
      return &g_sigsoff_slots;
    case Tracer::kWakeup:
      return &g_wakeup_slots;
    case Tracer::kWakeupRt:
      return &g_wakeup_rt_slots;
    case Tracer::kTimerlat:
      return &g_timerlat_slots;
    case Tracer::kNone:
    case Tracer::kSectionKind:
      break;
  }
  return nullptr;
}

// Every kind's `watched` = its own slots | the `section` slots.
void update_watched() {
  const uint64_t any = g_any_slots.load(std::memory_order_relaxed);
  const int n = g_nkinds.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    KindImpl* k = g_kinds[i].load(std::memory_order_acquire);
    k->watched.store(k->own.load(std::memory_order_relaxed) | any, std::memory_order_relaxed);
  }
}

Tracer parse(std::string_view name, KindImpl** kind) {
  if (name == "section") return Tracer::kSection;
  if (name == "sigsoff") return Tracer::kSigsoff;
  if (name == "wakeup") return Tracer::kWakeup;
  if (name == "wakeup_rt") return Tracer::kWakeupRt;
  if (name == "timerlat") return Tracer::kTimerlat;
  if (name.substr(0, kSectionPrefix.size()) == kSectionPrefix) {
    if (KindImpl* k = find_kind(name.substr(kSectionPrefix.size()))) {
      *kind = k;
      return Tracer::kSectionKind;
    }
  }
  return Tracer::kNone;
}

// The timer thread's period: the smallest of the timerlat instances'.
void retime_locked() USRTRACE_REQUIRES(g_mu) {
  uint64_t us = 0;
  for (const SlotConfig& c : g_config)
    if (c.tracer == Tracer::kTimerlat && (us == 0 || c.timerlat_period_us < us)) us = c.timerlat_period_us;
  timerlat_update((us == 0 ? 1000 : us) * 1000);
}

// Stops the measuring of `slot` (its bits go; the bars stay readable).
void unwatch_locked(int slot) USRTRACE_REQUIRES(g_mu) {
  SlotConfig& c = g_config[slot];
  const uint64_t bit = uint64_t{1} << slot;
  if (std::atomic<uint64_t>* m = mask_of(c.tracer)) m->fetch_and(~bit, std::memory_order_relaxed);
  if (c.tracer == Tracer::kSectionKind) c.kind->own.fetch_and(~bit, std::memory_order_relaxed);
  update_watched();
  if (c.tracer == Tracer::kTimerlat) retime_locked();
}

}  // namespace

std::vector<std::string> tracer_names() {
  std::vector<std::string> names{"timerlat", "wakeup_rt", "wakeup", "sigsoff", "section"};
  const int n = g_nkinds.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) names.push_back(std::string(kSectionPrefix) + g_kinds[i].load()->name);
  return names;
}

bool is_tracer(std::string_view name) {
  KindImpl* k = nullptr;
  return parse(name, &k) != Tracer::kNone;
}

int set_tracer(instance::Instance& inst, std::string_view name, std::string* why) {
  KindImpl* kind = nullptr;
  const Tracer t = parse(name, &kind);
  if (t == Tracer::kNone) {
    *why = "Unknown tracer";
    return -EINVAL;
  }
  if (!clock::is_tsc(inst.buffer().clock())) {
    *why = "Latency tracers need a TSC trace_clock (local, global, perf, x86-tsc)";
    return -EINVAL;
  }
  if (inst.snapshots().allocate() < 0) {
    *why = "Could not allocate the max buffer";
    return -ENOMEM;
  }
  clock::tsc_calibration();  // the conversions below and at read time
  base::MutexLock l(&g_mu);
  const int slot = inst.slot();
  SlotConfig& c = g_config[slot];
  const bool had = c.tracer != Tracer::kNone;
  unwatch_locked(slot);
  if (!had) {
    c.restore_latency_fmt = !inst.option(instance::kOptLatencyFormat);
    inst.set_option(instance::kOptLatencyFormat, true);
  }
  c.tracer = t;
  c.kind = kind;
  inst.snapshots().clear(-1);  // an older max trace is not this tracer's
  g_bars[slot].max.store(0, std::memory_order_relaxed);
  g_bars[slot].thresh.store(ns_to_ticks(function::thresh_us(inst) * 1000), std::memory_order_relaxed);
  // Functions are traced as the function tracer does, with function-trace.
  function::set_tracer(inst, inst.option(function_trace_option()) ? "function" : "nop");
  const uint64_t bit = uint64_t{1} << slot;
  if (std::atomic<uint64_t>* m = mask_of(t)) m->fetch_or(bit, std::memory_order_relaxed);
  if (t == Tracer::kSectionKind) kind->own.fetch_or(bit, std::memory_order_relaxed);
  update_watched();
  if (t == Tracer::kTimerlat) retime_locked();
  return 0;
}

void clear_tracer(instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  SlotConfig& c = g_config[inst.slot()];
  if (c.tracer == Tracer::kNone) return;
  unwatch_locked(inst.slot());
  if (c.restore_latency_fmt) inst.set_option(instance::kOptLatencyFormat, false);
  c.tracer = Tracer::kNone;
  c.kind = nullptr;
}

Tracer tracer(const instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  return g_config[inst.slot()].tracer;
}

std::string tracer_name(const instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  const SlotConfig& c = g_config[inst.slot()];
  switch (c.tracer) {
    case Tracer::kNone:
      return "";
    case Tracer::kSection:
      return "section";
    case Tracer::kSectionKind:
      return std::string(kSectionPrefix) + c.kind->name;
    case Tracer::kSigsoff:
      return "sigsoff";
    case Tracer::kWakeup:
      return "wakeup";
    case Tracer::kWakeupRt:
      return "wakeup_rt";
    case Tracer::kTimerlat:
      return "timerlat";
  }
  return "";
}

bool uses_max_buffer(const instance::Instance& inst) { return tracer(inst) != Tracer::kNone; }

uint64_t max_latency_us(const instance::Instance& inst) {
  return ticks_to_ns(g_bars[inst.slot()].max.load(std::memory_order_relaxed)) / 1000;
}

void set_max_latency_us(instance::Instance& inst, uint64_t us) {
  const uint64_t ns = us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000;
  g_bars[inst.slot()].max.store(ns_to_ticks(ns), std::memory_order_relaxed);
}

void set_thresh_us(instance::Instance& inst, uint64_t us) {
  const uint64_t ns = us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000;
  g_bars[inst.slot()].thresh.store(us == 0 ? 0 : std::max<uint64_t>(ns_to_ticks(ns), 1),
                                   std::memory_order_relaxed);
}

void options_changed(instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  if (g_config[inst.slot()].tracer == Tracer::kNone) return;
  function::set_tracer(inst, inst.option(function_trace_option()) ? "function" : "nop");
}

Window window_of(const instance::SnapshotInfo& info) {
  Window w;
  if (info.window_end != 0) {
    w.start = info.window_start;
    w.end = info.window_end;
  }
  return w;
}

uint64_t latency_ns(const instance::SnapshotInfo& info) { return ticks_to_ns(info.latency_ticks); }

uint64_t timerlat_period_us(const instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  return g_config[inst.slot()].timerlat_period_us;
}

int set_timerlat_period_us(instance::Instance& inst, uint64_t us) {
  if (us < 100 || us > 1000000) return -EINVAL;  // the kernel's bounds
  base::MutexLock l(&g_mu);
  g_config[inst.slot()].timerlat_period_us = us;
  if (g_config[inst.slot()].tracer == Tracer::kTimerlat) retime_locked();
  return 0;
}

void instance_removed(int slot) {
  base::MutexLock l(&g_mu);
  unwatch_locked(slot);
  g_config[slot] = SlotConfig{};
  g_bars[slot].max.store(0, std::memory_order_relaxed);
  g_bars[slot].thresh.store(0, std::memory_order_relaxed);
}

namespace {
// The instance layer tells us of removed instances and of function-trace,
// the latency tracers' option.
struct RegisterHooks {
  RegisterHooks() {
    instance::add_instance_hooks({&instance_removed, [](instance::Instance& inst, instance::Option o) {
                                    if (o == function_trace_option()) options_changed(inst);
                                  }});
  }
};
RegisterHooks g_register_hooks;
}  // namespace

}  // namespace usrtrace::latency
