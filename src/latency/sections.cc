// The measuring side of the section and sigsoff tracers, and the report
// that swaps a new worst case into the max buffer.
//
// A thread's sections nest: per kind, and across kinds for the `section`
// tracer. The state is the thread's own (initial-exec TLS) and only the
// thread and its signal handlers touch it. A handler runs to completion
// inside whatever the thread was doing, so every handler leaves the depths
// as it found them; the order of the steps below (depth, then the start
// time, each a single store, with compiler barriers between) makes an
// interruption at any point harmless:
//
//   begin: d = depth; depth = d + 1; [barrier] if d == 0: start = now
//     A handler before the depth store finds depth d: if 0 it measures its
//     own section and restores 0, and then this section stores its start.
//     After it, the handler sees depth >= 1 and leaves start alone.
//   end:   s = start; [barrier] depth = d - 1; [barrier] if d == 1: report
//     The start is read while this section still holds depth >= 1, so no
//     handler can have replaced it.
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/mutex.h"
#include "base/rseq.h"
#include "base/sys.h"
#include "clock/trace_clock.h"
#include "latency/internal.h"
#include "writers/writers.h"

namespace usrtrace::latency {
namespace detail {

__extension__ typedef unsigned __int128 u128;

std::atomic<KindImpl*> g_kinds[kMaxKinds];
std::atomic<int> g_nkinds{0};
std::atomic<uint64_t> g_any_slots{0};
std::atomic<uint64_t> g_sigsoff_slots{0};
std::atomic<uint64_t> g_wakeup_slots{0};
std::atomic<uint64_t> g_wakeup_rt_slots{0};
std::atomic<uint64_t> g_timerlat_slots{0};
Bar g_bars[instance::kMaxInstances];

uint64_t ticks_to_ns(uint64_t ticks) {
  const clock::TscCalibration& c = clock::tsc_calibration();
  return static_cast<uint64_t>((static_cast<u128>(ticks) * c.mult) >> 32);
}

uint64_t ns_to_ticks(uint64_t ns) {
  const clock::TscCalibration& c = clock::tsc_calibration();
  if (c.mult == 0) return ns;
  // Rounded up, so that a bar written in microseconds reads back the same.
  const u128 t = ((static_cast<u128>(ns) << 32) + c.mult - 1) / c.mult;
  return t > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(t);
}

void report_slow(int slot, const Measure& m) {
  Bar& b = g_bars[slot];
  const uint64_t delta = m.end - m.start;
  if (b.thresh.load(std::memory_order_relaxed) != 0) {
    // Every latency over the threshold is kept (the kernel's tracing_thresh).
    b.max.store(delta, std::memory_order_relaxed);
  } else {
    // Only a new worst case; of two at once, the longer wins the bar.
    uint64_t cur = b.max.load(std::memory_order_relaxed);
    do {
      if (delta <= cur) return;
    } while (!b.max.compare_exchange_weak(cur, delta, std::memory_order_relaxed));
  }
  writers::ThreadState* t = writers::enter();
  if (t == nullptr) return;
  // order: acquire pairs with the release that published the instance; the
  // grace period of its removal waits for this writer section.
  if (instance::Instance* inst = instance::g_slot_state[slot].instance.load(std::memory_order_acquire)) {
    instance::SnapshotInfo info;
    info.tid = m.tid != 0 ? m.tid : t->tid;
    info.window_start = m.start;
    info.window_end = m.shown_end != 0 ? m.shown_end : m.end;
    info.latency_ticks = delta;
    info.start_ip = m.start_ip;
    info.end_ip = m.end_ip;
    info.end_cpu = base::rseq_cpu_id();
    // The task line (the kernel's max_data): a few system calls, on a new
    // worst case only.
    info.uid = static_cast<int>(getuid());
    errno = 0;
    const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(info.tid));
    info.nice = errno == 0 ? nice : 0;
    const int policy = sched_getscheduler(info.tid);
    info.policy = policy < 0 ? 0 : policy & ~SCHED_RESET_ON_FORK;
    sched_param sp{};
    info.rt_prio = sched_getparam(info.tid, &sp) == 0 ? sp.sched_priority : 0;
    const size_t n = strnlen(m.what, sizeof info.reason - 1);
    memcpy(info.reason, m.what, n);
    info.reason[n] = '\0';
    inst->snapshots().take_max(info);
  }
  writers::exit(*t);
}

namespace {

// A thread's open sections: per kind, and of any kind.
struct ThreadSections {
  uint32_t depth[kMaxKinds];
  uint64_t start[kMaxKinds];
  uintptr_t ip[kMaxKinds];
  uint32_t any_depth;
  uint64_t any_start;
  uintptr_t any_ip;
  const char* any_what;
  // sigsoff: signals blocked since `sig_start` beyond those in `sig_base`.
  uint64_t sig_start;
  uint64_t sig_base;
  uintptr_t sig_ip;
  bool sig_off;
};
// Mapped at the thread's first section (or first watched signal block) and
// unmapped as it exits: the TLS block stays a pointer, so that
// libusrtrace's initial-exec TLS fits what glibc keeps for a library loaded
// late (attaching to a running process, docs/guide/attach.md).
__attribute__((tls_model("initial-exec"))) thread_local ThreadSections* t_sec = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local bool t_sec_gone = false;
pthread_key_t g_sec_key;
pthread_once_t g_sec_once = PTHREAD_ONCE_INIT;

void free_sections(void* p) {
  t_sec = nullptr;
  t_sec_gone = true;
  munmap(p, sizeof(ThreadSections));
}

// The thread's sections, mapped on first use (zero-filled: none open);
// nullptr when they cannot be. Async-signal-safe (see patch/ret.cc's stack()).
USRTRACE_NOINLINE ThreadSections* map_sections() {
  if (t_sec_gone) return nullptr;
  pthread_once(&g_sec_once, [] { pthread_key_create(&g_sec_key, free_sections); });
  void* p = mmap(nullptr, sizeof(ThreadSections), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  t_sec = static_cast<ThreadSections*>(p);
  pthread_setspecific(g_sec_key, p);
  return t_sec;
}

inline ThreadSections* sections() {
  ThreadSections* s = t_sec;
  return USRTRACE_LIKELY(s != nullptr) ? s : map_sections();
}

// "section NAME", the reason line of a kind's max trace.
struct KindWhat {
  char text[kMaxKinds][8 + kMaxKindName + 1];
} g_what;

base::Mutex g_kinds_mu;

bool valid_kind_name(const char* name) {
  if (name == nullptr || *name == '\0') return false;
  size_t n = 0;
  for (const char* p = name; *p; ++p, ++n) {
    const char c = *p;
    if (n >= kMaxKindName) return false;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

}  // namespace

KindImpl* find_kind(std::string_view name) {
  const int n = g_nkinds.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    KindImpl* k = g_kinds[i].load(std::memory_order_acquire);
    if (k != nullptr && name == k->name) return k;
  }
  return nullptr;
}

KindImpl* register_kind(const char* name, int* err) {
  if (!valid_kind_name(name)) {
    *err = EINVAL;
    return nullptr;
  }
  base::MutexLock l(&g_kinds_mu);
  if (KindImpl* k = find_kind(name)) return k;
  const int n = g_nkinds.load(std::memory_order_relaxed);
  if (n >= kMaxKinds) {
    *err = ENOSPC;
    return nullptr;
  }
  auto* k = new KindImpl;
  k->id = n;
  strncpy(k->name, name, kMaxKindName);
  snprintf(g_what.text[n], sizeof g_what.text[n], "section %s", name);
  // A `section` tracer already running watches the new kind too.
  k->watched.store(g_any_slots.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_kinds[n].store(k, std::memory_order_release);
  g_nkinds.store(n + 1, std::memory_order_release);
  return k;
}

}  // namespace detail

void signals_changed(uint64_t before, uint64_t after, uintptr_t ip) {
  using namespace detail;  // NOLINT
  const uint64_t slots = g_sigsoff_slots.load(std::memory_order_relaxed);
  ThreadSections* sp = t_sec;
  if (sp == nullptr || !sp->sig_off) {
    if (slots == 0 || (after & ~before) == 0) return;
    if (sp == nullptr && (sp = map_sections()) == nullptr) return;
  }
  ThreadSections& s = *sp;
  if (!s.sig_off) {
    s.sig_base = before;
    s.sig_ip = ip;
    s.sig_start = clock::rdtsc();
    std::atomic_signal_fence(std::memory_order_seq_cst);
    s.sig_off = true;
    return;
  }
  if ((after & ~s.sig_base) != 0) return;  // still more blocked than before
  const uint64_t now = clock::rdtsc();
  const uint64_t start = s.sig_start;
  const uintptr_t start_ip = s.sig_ip;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s.sig_off = false;
  if (slots != 0) report(slots, Measure{start, now, start_ip, ip, "sigsoff", 0});
}

}  // namespace usrtrace::latency

using usrtrace::latency::detail::KindImpl;

extern "C" {

USRTRACE_EXPORT usrtrace_section_kind* usrtrace_section_kind_get(const char* name) {
  int err = 0;
  KindImpl* k = usrtrace::latency::detail::register_kind(name, &err);
  if (k == nullptr) errno = err;
  return k;
}

USRTRACE_EXPORT uint64_t usrtrace_section_begin(usrtrace_section_kind* kind) {
  using namespace usrtrace::latency::detail;  // NOLINT
  if (kind == nullptr || kind->watched.load(std::memory_order_relaxed) == 0) return 0;
  const auto* k = static_cast<const KindImpl*>(kind);
  ThreadSections* sp = sections();
  if (sp == nullptr) return 0;
  ThreadSections& s = *sp;
  const uint64_t now = usrtrace::clock::rdtsc();
  const uintptr_t ip = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  const uint32_t d = s.depth[k->id];
  s.depth[k->id] = d + 1;
  const uint32_t ad = s.any_depth;
  s.any_depth = ad + 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (d == 0) {
    s.start[k->id] = now;
    s.ip[k->id] = ip;
  }
  if (ad == 0) {
    s.any_start = now;
    s.any_ip = ip;
    s.any_what = g_what.text[k->id];
  }
  return now | 1;  // never 0
}

USRTRACE_EXPORT void usrtrace_section_end(usrtrace_section_kind* kind, uint64_t token) {
  using namespace usrtrace::latency::detail;  // NOLINT
  if (kind == nullptr || token == 0) return;
  const auto* k = static_cast<const KindImpl*>(kind);
  ThreadSections* sp = t_sec;
  if (sp == nullptr) return;  // an end without its begin
  ThreadSections& s = *sp;
  const uint32_t d = s.depth[k->id];
  const uint32_t ad = s.any_depth;
  if (d == 0 || ad == 0) return;  // an end without its begin
  const uint64_t start = s.start[k->id], any_start = s.any_start;
  const uintptr_t start_ip = s.ip[k->id], any_ip = s.any_ip;
  const char* any_what = s.any_what;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s.depth[k->id] = d - 1;
  s.any_depth = ad - 1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (d != 1 && ad != 1) return;
  const uint64_t now = usrtrace::clock::rdtsc();
  const uintptr_t ip = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (d == 1)
    if (const uint64_t own = k->own.load(std::memory_order_relaxed))
      report(own, Measure{start, now, start_ip, ip, g_what.text[k->id], 0});
  if (ad == 1)
    if (const uint64_t any = g_any_slots.load(std::memory_order_relaxed))
      report(any, Measure{any_start, now, any_ip, ip, any_what, 0});
}

}  // extern "C"

// The preloaded runtime's pthread_sigmask/sigprocmask (src/preload).
extern "C" USRTRACE_EXPORT void usrtrace_internal_sigmask_changed(uint64_t before, uint64_t after,
                                                                  uintptr_t ip) {
  usrtrace::latency::signals_changed(before, after, ip);
}
