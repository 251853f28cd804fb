#include "instance/instance.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include <unistd.h>

#include "events/registry.h"
#include "instance/slot_write.h"
#include "usrtrace/internal/event_impl.h"
#include "writers/writers.h"

namespace usrtrace::instance {

namespace {

// add_instance_hooks(): filled at load, then only read.
InstanceHooks g_hooks[kMaxInstanceHooks];
std::atomic<int> g_nr_hooks{0};

template <class F>
void for_each_hook(F f) {
  // order: acquire pairs with add_instance_hooks's release.
  const int n = g_nr_hooks.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) f(g_hooks[i]);
}

}  // namespace

void add_instance_hooks(const InstanceHooks& hooks) {
  const int n = g_nr_hooks.load(std::memory_order_relaxed);
  if (n >= kMaxInstanceHooks) {
    static const char kMsg[] = "usrtrace: too many instance hooks (kMaxInstanceHooks)\n";
    (void)!::write(2, kMsg, sizeof kMsg - 1);
    abort();
  }
  g_hooks[n] = hooks;
  g_nr_hooks.store(n + 1, std::memory_order_release);
}

namespace {

// The option table: the core options, then the tracers' blocks in the order
// they registered. Filled by static initialisers (register_options), read
// afterwards: g_nr_options is published with release after its entries.
constexpr OptionInfo kCoreOptions[kNumCoreOptions] = {
    {"print-parent", true}, {"sym-offset", false},
    {"sym-addr", false},    {"verbose", false},
    {"raw", false},         {"hex", false},
    {"bin", false},         {"block", false},
    {"fields", false},      {"trace_printk", true},
    {"annotate", true},     {"userstacktrace", false},
    {"sym-userobj", false}, {"printk-msg-only", false},
    {"context-info", true}, {"latency-format", false},
    {"record-cmd", true},   {"record-tgid", false},
    {"overwrite", true},    {"disable_on_free", false},
    {"irq-info", true},     {"markers", true},
    {"event-fork", false},
};
OptionInfo g_options[kMaxOptions];
int g_option_rank[kMaxOptions];  // core options: rank 0
std::atomic<int> g_nr_options{0};
base::Mutex g_options_mu;  // registrations

int nr_options() {
  // order: acquire pairs with register_options' release: entries below are set.
  const int n = g_nr_options.load(std::memory_order_acquire);
  return n == 0 ? kNumCoreOptions : n;
}

}  // namespace

const OptionInfo& option_info(int id) { return id < kNumCoreOptions ? kCoreOptions[id] : g_options[id]; }

int option_by_name(std::string_view name) {
  const int n = nr_options();
  for (int i = 0; i < n; ++i)
    if (name == option_info(i).name) return i;
  return -1;
}

std::vector<int> listed_options() {
  std::vector<int> ids(static_cast<size_t>(nr_options()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  std::stable_sort(ids.begin(), ids.end(), [](int a, int b) {
    return (a < kNumCoreOptions ? 0 : g_option_rank[a]) < (b < kNumCoreOptions ? 0 : g_option_rank[b]);
  });
  return ids;
}

bool PidFilter::admits(int tid) const {
  if (!trace.empty() && !std::binary_search(trace.begin(), trace.end(), tid)) return false;
  return notrace.empty() || !std::binary_search(notrace.begin(), notrace.end(), tid);
}

SlotState g_slot_state[kMaxInstances];
std::atomic<uint64_t> g_slot_cpus_off[kMaxInstances][kMaxCpus / 64];

namespace {

base::Mutex g_mu;  // the instance table
Instance* g_instances[kMaxInstances] USRTRACE_GUARDED_BY(g_mu) = {};

}  // namespace

int register_options(const OptionInfo* opts, int n, int rank) {
  base::MutexLock ol(&g_options_mu);
  const int first = nr_options();
  if (n < 0 || first + n > kMaxOptions) {
    fprintf(stderr, "usrtrace: more than %d trace options registered\n", kMaxOptions);
    abort();
  }
  for (int i = 0; i < n; ++i) {
    if (option_by_name(opts[i].name) >= 0) {
      fprintf(stderr, "usrtrace: trace option %s registered twice\n", opts[i].name);
      abort();
    }
    g_options[first + i] = opts[i];
    g_option_rank[first + i] = rank;
  }
  // order: release publishes the entries above to nr_options()' acquire.
  g_nr_options.store(first + n, std::memory_order_release);
  // An instance made before (only the top one can be, by an earlier static
  // initialiser) takes the defaults.
  base::MutexLock l(&g_mu);
  for (Instance* inst : g_instances)
    if (inst)
      for (int i = 0; i < n; ++i)
        inst->options_[first + i].store(opts[i].default_on, std::memory_order_relaxed);
  return first;
}

Instance::Instance(std::string name, int slot, std::unique_ptr<rb::RingBuffer> rb)
    : name_(std::move(name)), slot_(slot), rb_(rb.get()), snapshots_(new Snapshots(*rb, slot)) {
  const int n = nr_options();
  for (int i = 0; i < n; ++i) options_[i].store(option_info(i).default_on, std::memory_order_relaxed);
  buffers_.push_back(std::move(rb));
  all_snapshots_.emplace_back(snapshots_.load(std::memory_order_relaxed));
}

Instance::~Instance() = default;

Instance* Instance::top() {
  static Instance* top = [] {
    int err = 0;
    auto rb = rb::RingBuffer::create(rb::Options{}, &err);
    if (!rb) return static_cast<Instance*>(nullptr);
    auto* inst = new Instance("", 0, std::move(rb));
    inst->apply_buffer_dir();
    base::MutexLock l(&g_mu);
    g_instances[0] = inst;
    g_slot_state[0].instance.store(inst, std::memory_order_release);
    // order: release; a writer that loads the pointer sees the buffer built.
    g_slot_state[0].buffer.store(&inst->buffer(), std::memory_order_release);
    return inst;
  }();
  return top;
}

bool Instance::valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

Instance* Instance::create(std::string_view name, int* err) { return create(name, err, false); }

Instance* Instance::create(std::string_view name, int* err, bool get_ref) {
  auto fail = [&](int e) {
    if (err) *err = e;
    return static_cast<Instance*>(nullptr);
  };
  if (!valid_name(name)) return fail(EINVAL);
  top();  // slot 0 is the top's
  base::MutexLock l(&g_mu);
  int slot = -1;
  for (int i = 1; i < kMaxInstances; ++i) {
    if (g_instances[i] && g_instances[i]->name_ == name) return fail(EEXIST);
    if (!g_instances[i] && slot < 0) slot = i;
  }
  if (slot < 0) return fail(ENOSPC);
  int rerr = 0;
  auto rb = rb::RingBuffer::create(rb::Options{}, &rerr);
  if (!rb) return fail(rerr);
  auto* inst = new Instance(std::string(name), slot, std::move(rb));
  inst->apply_buffer_dir();
  if (get_ref) inst->get_reader();  // before anyone can see it
  g_instances[slot] = inst;
  // A previous instance in this slot may have left CPUs masked off. order:
  // relaxed; the release store of the buffer below publishes these.
  for (auto& w : g_slot_cpus_off[slot]) w.store(0, std::memory_order_relaxed);
  g_slot_state[slot].filters.store(0, std::memory_order_relaxed);
  g_slot_state[slot].instance.store(inst, std::memory_order_release);
  g_slot_state[slot].buffer.store(&inst->buffer(), std::memory_order_release);
  return inst;
}

Instance* Instance::find(std::string_view name) {
  if (name.empty()) return top();
  base::MutexLock l(&g_mu);
  for (int i = 1; i < kMaxInstances; ++i)
    if (g_instances[i] && g_instances[i]->name_ == name) return g_instances[i];
  return nullptr;
}

Instance* Instance::find_get(std::string_view name) {
  Instance* t = top();
  if (name.empty()) {
    if (t) t->get_reader();
    return t;
  }
  base::MutexLock l(&g_mu);
  for (int i = 1; i < kMaxInstances; ++i) {
    if (g_instances[i] && g_instances[i]->name_ == name) {
      g_instances[i]->get_reader();
      return g_instances[i];
    }
  }
  return nullptr;
}

template <class Match>
int Instance::remove(Match match, int max_refs, int missing) {
  Instance* inst = nullptr;
  {
    base::MutexLock l(&g_mu);
    for (int i = 1; i < kMaxInstances; ++i)
      if (g_instances[i] && match(g_instances[i])) inst = g_instances[i];
    if (!inst) return missing;
    if (inst->readers_.load(std::memory_order_acquire) > max_refs) return -EBUSY;
    g_instances[inst->slot_] = nullptr;
    // Unpublish: no new write can find the instance after this...
    events::Registry::get().clear_slot(inst->slot_);
    // Before the slot can be reused: its filters, triggers and tracer
    // configuration go too.
    for_each_hook([&](const InstanceHooks& h) {
      if (h.removed) h.removed(inst->slot_);
    });
    g_slot_state[inst->slot_].buffer.store(nullptr, std::memory_order_release);
    g_slot_state[inst->slot_].instance.store(nullptr, std::memory_order_release);
    g_slot_state[inst->slot_].pids.store(nullptr, std::memory_order_release);
    g_slot_state[inst->slot_].filters.fetch_and(~kSlotPids, std::memory_order_relaxed);
  }
  // ...and none in flight still uses it after this.
  writers::synchronize_writers();
  delete inst;
  return 0;
}

int Instance::destroy(std::string_view name) {
  if (name.empty()) return -EINVAL;
  return remove([&](const Instance* i) { return i->name_ == name; }, 0, -ENOENT);
}

int Instance::destroy(Instance* inst, int max_refs) {
  if (!inst || inst == top()) return -EINVAL;
  return remove([&](const Instance* i) { return i == inst; }, max_refs, -ENODEV);
}

Instance* Instance::get(std::string_view name, GetMode mode, int* err) {
  if (name.empty()) {
    Instance* t = top();
    if (!t) {
      if (err) *err = ENOSYS;
      return nullptr;
    }
    t->get_reader();
    return t;
  }
  if (!valid_name(name)) {
    if (err) *err = EINVAL;
    return nullptr;
  }
  for (;;) {
    if (mode != GetMode::kNew) {
      if (Instance* inst = find_get(name)) return inst;
      if (mode == GetMode::kExisting) {
        if (err) *err = ENOENT;
        return nullptr;
      }
    }
    int cerr = 0;
    if (Instance* inst = create(name, &cerr, /*get_ref=*/true)) return inst;
    // Created by another thread since we looked: look again.
    if (cerr == EEXIST && mode == GetMode::kExistingOrNew) continue;
    if (err) *err = cerr;
    return nullptr;
  }
}

std::vector<std::string> Instance::names() {
  base::MutexLock l(&g_mu);
  std::vector<std::string> out;
  for (int i = 1; i < kMaxInstances; ++i)
    if (g_instances[i]) out.push_back(g_instances[i]->name_);
  std::sort(out.begin(), out.end());
  return out;
}

void Instance::set_cpumask(const std::vector<uint64_t>& words) {
  SlotState& s = g_slot_state[slot_];
  // Off bits of CPUs the instance does not have (a mask of exactly its
  // CPUs turns the others off) refuse nothing: they do not count.
  const auto nr = static_cast<size_t>(buffer().nr_cpus());
  bool any_off = false;
  for (size_t i = 0; i < kMaxCpus / 64; ++i) {
    const uint64_t on = i < words.size() ? words[i] : ~uint64_t{0};
    const uint64_t real = i * 64 >= nr        ? 0
                          : nr - i * 64 >= 64 ? ~uint64_t{0}
                                              : (uint64_t{1} << (nr - i * 64)) - 1;
    any_off = any_off || (~on & real) != 0;
    // order: relaxed is enough; the mask is a soft switch (a write racing
    // with the change may land either way, as with tracing_on).
    g_slot_cpus_off[slot_][i].store(~on, std::memory_order_relaxed);
  }
  // order: relaxed; see SlotState::filters.
  if (any_off)
    s.filters.fetch_or(kSlotCpusOff, std::memory_order_relaxed);
  else
    s.filters.fetch_and(~kSlotCpusOff, std::memory_order_relaxed);
}

std::vector<uint64_t> Instance::cpumask() const {
  const size_t n = static_cast<size_t>(buffer().nr_cpus() + 63) / 64;
  std::vector<uint64_t> out(n);
  for (size_t i = 0; i < n && i < kMaxCpus / 64; ++i)
    out[i] = ~g_slot_cpus_off[slot_][i].load(std::memory_order_relaxed);
  const int rem = buffer().nr_cpus() % 64;
  if (rem && !out.empty()) out.back() &= (uint64_t{1} << rem) - 1;
  return out;
}

void Instance::set_tracing_on(bool on) {
  if (on)
    buffer().record_on();
  else
    buffer().record_off();
}

void Instance::set_option(Option o, bool on) {
  options_[o].store(on, std::memory_order_relaxed);
  if (o == kOptOverwrite) buffer().set_mode(on ? rb::Mode::kOverwrite : rb::Mode::kDiscard);
  for_each_hook([&](const InstanceHooks& h) {
    if (h.option_changed) h.option_changed(*this, o);
  });
}

int Instance::set_event(std::string_view system_glob, std::string_view event_glob, bool on,
                        std::string* why) {
  return events::Registry::get().set_enabled(slot_, system_glob, event_glob, on, why);
}

void Instance::clear_events() { events::Registry::get().set_enabled(slot_, "*", "*", false); }

bool Instance::event_enabled(uint16_t id) const {
  const auto* ev = events::Registry::get().by_id(id);
  return ev && (ev->enabled.load(std::memory_order_relaxed) >> slot_ & 1);
}

void Instance::set_pid_filter(std::vector<int> trace, std::vector<int> notrace) {
  std::sort(trace.begin(), trace.end());
  trace.erase(std::unique(trace.begin(), trace.end()), trace.end());
  std::sort(notrace.begin(), notrace.end());
  notrace.erase(std::unique(notrace.begin(), notrace.end()), notrace.end());
  std::unique_ptr<PidFilter> old;
  {
    base::MutexLock l(&mu_);
    old = std::move(pids_);
    if (!trace.empty() || !notrace.empty())
      pids_ = std::make_unique<PidFilter>(PidFilter{std::move(trace), std::move(notrace)});
    g_slot_state[slot_].pids.store(pids_.get(), std::memory_order_release);
    // order: relaxed; see SlotState::filters.
    if (pids_)
      g_slot_state[slot_].filters.fetch_or(kSlotPids, std::memory_order_relaxed);
    else
      g_slot_state[slot_].filters.fetch_and(~kSlotPids, std::memory_order_relaxed);
  }
  if (old) writers::synchronize_writers();
}

PidFilter Instance::pid_filter() const {
  base::MutexLock l(&mu_);
  return pids_ ? *pids_ : PidFilter{};
}

long Instance::write_marker(std::string_view text) {
  if (!option(kOptMarkers)) return -EINVAL;
  // The kernel's tracing_mark_write(): with the buffer off, "as if not open
  // for write". (A write racing with tracing_off is recorded or dropped.)
  if (!tracing_on()) return -EBADF;
  return events::write_marker(slot_, text);
}

long Instance::write_marker_raw(std::string_view data) {
  if (!option(kOptMarkers)) return -EINVAL;
  if (!tracing_on()) return -EBADF;  // as write_marker
  return events::write_raw(slot_, data);
}

long Instance::printk(std::string_view text, uintptr_t ip) {
  if (!option(kOptTracePrintk)) return 0;
  return events::write_print(slot_, text, ip);
}

uint64_t Instance::entries_written() {
  uint64_t n = 0;
  for (int c = 0; c < buffer().nr_cpus(); ++c) n += buffer().stats(c).written;
  return n;
}

void Instance::log_error(std::string_view subsystem, std::string_view message, std::string_view command,
                         size_t caret) {
  // The kernel's format: "[  secs.usecs] sys: error: msg\n  Command: cmd\n    ^\n".
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  char head[64];
  snprintf(head, sizeof head, "[%5lld.%06ld] ", static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000);
  std::string e = head;
  e.append(subsystem).append(": error: ").append(message).append("\n  Command: ");
  e.append(command).append("\n");
  e.append(std::string(11 + std::min(caret, command.size()), ' ')).append("^\n");
  base::MutexLock l(&mu_);
  error_log_.push_back(std::move(e));
  if (error_log_.size() > 16) error_log_.erase(error_log_.begin());  // the kernel keeps 16
}

std::string Instance::error_log() const {
  base::MutexLock l(&mu_);
  std::string out;
  for (const auto& e : error_log_) out += e;
  return out;
}

void Instance::clear_error_log() {
  base::MutexLock l(&mu_);
  error_log_.clear();
}

}  // namespace usrtrace::instance
