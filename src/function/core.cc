// The function tracers' write side: the site table, the shadow stack, and
// what an entry and an exit record in each interested instance.
//
// Lock-free invariants (the kernel's ftrace_ops hash + ret_stack, in user
// space):
//
//  * The site table is immutable once published. The control plane builds a
//    new one (control.cc), publishes it with a release store into g_table,
//    runs synchronize_writers() and only then frees the old one. A hook reads
//    g_table once, between writers::enter() and exit(), so it never sees a
//    freed table. A call that read the old table records by the old filters:
//    a filter change takes effect for calls that start after the write to
//    set_ftrace_filter returned.
//  * Per-slot tracer settings (g_slots) are single words read relaxed: a
//    call that races a change uses either value. A slot whose tracer is nop
//    is never written to because its bit is cleared from every site of the
//    table that is published before the tracer is marked nop... and its
//    buffer is only freed after a grace period (instance.cc).
//  * The shadow stack belongs to its thread. A signal handler that runs
//    between two of its updates sees a consistent stack: a push writes the
//    frame first and then bumps `depth` (signal fence between); a pop copies
//    the frame, then lowers `depth`; a handler's own pushes and pops above
//    them leave the stack as they found it. So a handler that interrupts a
//    hook is traced like any code (the count of calls matches the
//    program's). Hooks nest at most kMaxNest deep on a thread (t_fn.nest):
//    beyond that they return at once, which also stops any recursion into
//    the tracer from code it calls.
#include "function/core.h"
#include "function/options.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "base/compiler.h"
#include "base/rseq.h"
#include "clock/trace_clock.h"
#include "events/flags.h"
#include "events/registry.h"
#include "instance/slot_write.h"
#include "symbols/resolver.h"
#include "trigger/internal.h"
#include "writers/writers.h"

namespace usrtrace::function {

std::atomic<uint64_t> g_tracing{0};
std::atomic<const SiteTable*> g_table{nullptr};
SlotSettings g_slots[instance::kMaxInstances];
std::atomic<uint64_t> g_function_slots{0};
std::atomic<uint64_t> g_graph_slots{0};
std::atomic<uint64_t> g_graph_restricted{0};
std::atomic<Profile*> g_profile{nullptr};
std::atomic<uint64_t> g_cpu_time_slots{0};
std::atomic<bool> g_profile_self_time{false};
std::atomic<uint64_t> g_sigreturn{0};

namespace {

// ---- Events: ftrace's own, with the kernel's ids and layouts
// (events/builtin.h), so that trace-cmd and libtraceevent print them (and
// trace-cmd's function graph display pairs entries and exits).

using events::FunctionRecord;
using events::GraphEntryRecord;
using events::GraphExitRecord;

template <class R>
R load(const void* rec) {
  R r;
  std::memcpy(&r, rec, sizeof r);
  return r;
}

int print_function(const void* rec, uint32_t len, char* out, size_t size) {
  if (len < sizeof(FunctionRecord)) return snprintf(out, size, "<bad function record>");
  const auto r = load<FunctionRecord>(rec);
  const std::string ip = symbols::Resolver::name(r.ip, false);
  const std::string parent = symbols::Resolver::name(r.parent_ip, false);
  return snprintf(out, size, "%s <-%s", ip.c_str(), parent.c_str());
}

int print_graph_entry(const void* rec, uint32_t len, char* out, size_t size) {
  if (len < sizeof(GraphEntryRecord)) return snprintf(out, size, "<bad funcgraph_entry record>");
  const auto r = load<GraphEntryRecord>(rec);
  return snprintf(out, size, "--> %s (%u)", symbols::Resolver::name(r.func, false).c_str(), r.depth);
}

int print_graph_exit(const void* rec, uint32_t len, char* out, size_t size) {
  if (len < sizeof(GraphExitRecord)) return snprintf(out, size, "<bad funcgraph_exit record>");
  const auto r = load<GraphExitRecord>(rec);
  return snprintf(out, size, "<-- %s (%u) (start: %llx  end: %llx) over: %u",
                  symbols::Resolver::name(r.func, false).c_str(), r.depth,
                  static_cast<unsigned long long>(r.calltime), static_cast<unsigned long long>(r.rettime),
                  r.depth);
}

constinit internal::EventDesc g_function_desc = events::builtin_desc<events::FunctionEvent>(&print_function);
constinit internal::EventDesc g_entry_desc =
    events::builtin_desc<events::GraphEntryEvent>(&print_graph_entry);
constinit internal::EventDesc g_exit_desc = events::builtin_desc<events::GraphExitEvent>(&print_graph_exit);

struct RegisterEvents {
  RegisterEvents() {
    events::Registry::get().add(&g_function_desc);
    events::Registry::get().add(&g_entry_desc);
    events::Registry::get().add(&g_exit_desc);
  }
};
__attribute__((init_priority(102))) RegisterEvents g_register_events;

// ---- The thread's state.

// Frames per thread: recursion 10000 deep and more. Mapped lazily, so only
// the pages a thread reaches are ever touched.
constexpr uint32_t kShadowFrames = 1u << 16;

struct ShadowStack {
  uint32_t depth = 0;
  uint32_t overrun = 0;                               // entries not traced because the stack was full
  uint64_t graph_on = 0;                              // slots: inside a set_graph_function function
  uint64_t notrace_on = 0;                            // slots: inside a set_graph_notrace function
  uint16_t slot_depth[instance::kMaxInstances] = {};  // graph depth per instance
  ShadowFrame frames[kShadowFrames];
};

// Hooks in progress on one thread: the program's, and signal handlers'
// interrupting it (a handler's handler...).
constexpr uint8_t kMaxNest = 4;

struct ThreadFn {
  ShadowStack* ss;
  writers::ThreadState* ws;  // writers::self(), once registered (the fast path)
  uint8_t nest;              // hooks in progress on the thread (signal handlers nest)
  bool failed;               // the shadow stack could not be mapped: no graph on this thread
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadFn t_fn;

pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

// The thread is exiting (a pthread key destructor): its stack goes, and a
// hook that still runs on it (a later destructor) does not map another.
void free_shadow(void* p) {
  t_fn.ss = nullptr;
  t_fn.failed = true;
  munmap(p, sizeof(ShadowStack));
}

// The thread's first traced entry maps its stack (one mmap, one
// pthread_setspecific so that thread exit unmaps it).
USRTRACE_NOINLINE ShadowStack* map_shadow() {
  if (t_fn.failed) return nullptr;
  pthread_once(&g_key_once, [] { pthread_key_create(&g_key, free_shadow); });
  void* p = mmap(nullptr, sizeof(ShadowStack), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    t_fn.failed = true;
    return nullptr;
  }
  auto* ss = static_cast<ShadowStack*>(p);  // zero-filled: a valid empty stack
  pthread_setspecific(g_key, ss);
  t_fn.ss = ss;
  return ss;
}

USRTRACE_ALWAYS_INLINE ShadowStack* shadow() {
  ShadowStack* ss = t_fn.ss;
  return USRTRACE_LIKELY(ss != nullptr) ? ss : map_shadow();
}

__extension__ typedef unsigned __int128 u128;

// Raw TSC to the ns of the local clock (calltime/rettime, which the kernel
// also takes from trace_clock_local whatever the trace clock). The
// calibration is complete before any graph tracer starts (control.cc).
USRTRACE_ALWAYS_INLINE uint64_t tsc_ns(uint64_t tsc) {
  const clock::TscCalibration& c = g_calibration;
  if (USRTRACE_UNLIKELY(tsc < c.tsc0)) return c.ns0;
  return c.ns0 + static_cast<uint64_t>((static_cast<u128>(tsc - c.tsc0) * c.mult) >> 32);
}

USRTRACE_ALWAYS_INLINE bool pid_ok(int slot, int tid) {
  const instance::PidFilter* f = g_slots[slot].pids.load(std::memory_order_acquire);
  return f == nullptr || f->admits(tid);
}

// options/funcgraph-irqs of the instance in `slot`.
bool irqs_on(int slot) {
  // order: acquire pairs with the release that published the instance.
  const instance::Instance* inst = instance::g_slot_state[slot].instance.load(std::memory_order_acquire);
  return inst == nullptr || inst->option(option(kFuncgraphIrqs));
}

// options/func_stack_trace of the instance in `slot`.
USRTRACE_ALWAYS_INLINE bool stack_trace_on(int slot) {
  // order: acquire pairs with the release that published the instance.
  const instance::Instance* inst = instance::g_slot_state[slot].instance.load(std::memory_order_acquire);
  return inst != nullptr && inst->option(option(kFuncStackTrace));
}

// func_stack_trace: the stack of the call just recorded, from its caller.
USRTRACE_NOINLINE USRTRACE_COLD void write_stack(int slot, const internal::CommonHeader& h, uint64_t parent) {
  unwind_stack_begin();
  trigger::write_user_stack_from(slot, h, parent);
  unwind_stack_end();
}

// The thread's CPU time (sleep-time off): a system call, taken only while
// some tracer asks for it.
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// The function profiler's part of an exit: one hit and its time in the
// returning thread's CPU row. `dur`: the call's time (its CPU time for
// sleep-time off); without graph-time its callees' time is taken out.
void profile_exit(const ShadowFrame& f, uint64_t dur) {
  const Profile* p = g_profile.load(std::memory_order_acquire);
  if (p == nullptr || p->gen != static_cast<uint32_t>(f.flags >> 32) || f.index >= p->nfuncs) return;
  int cpu = base::rseq_cpu_id();
  if (cpu < 0 || cpu >= p->ncpus) cpu = 0;
  if (g_profile_self_time.load(std::memory_order_relaxed)) dur = f.children < dur ? dur - f.children : 0;
  ProfileStats& st = p->stats[static_cast<size_t>(cpu) * p->nfuncs + f.index];
  st.hits.fetch_add(1, std::memory_order_relaxed);
  st.time_ns.fetch_add(dur, std::memory_order_relaxed);
  st.time_sq.fetch_add(dur * dur, std::memory_order_relaxed);
}

// Records the exits of `f` (just popped) in its instances and releases what
// it held.
void record_exit(ShadowStack* ss, const ShadowFrame& f, uint64_t tsc, writers::ThreadState& t) {
  ss->graph_on &= ~f.started;
  ss->notrace_on &= ~f.notraced;
  const uint64_t calltime = tsc_ns(f.calltime), rettime = tsc_ns(tsc);
  const uint64_t wall = rettime - calltime;
  // sleep-time off: the time the thread ran, not the time it slept.
  const uint64_t cpu = (f.flags & kFrameCpuTime) ? thread_cpu_ns() - f.cputime : wall;
  if (f.flags & kFrameProfiled) {
    const bool self = (g_cpu_time_slots.load(std::memory_order_relaxed) & kProfileBit) != 0;
    const uint64_t dur = self && (f.flags & kFrameCpuTime) ? cpu : wall;
    profile_exit(f, dur);
    // The caller's callee time (the kernel's subtime).
    if (ss->depth > 0) ss->frames[ss->depth - 1].children += dur;
  }
  uint64_t m = f.mask;
  if (m == 0) return;
  GraphExitRecord r;
  r.common.type = kGraphExitId;
  events::fill_common(&r, t);
  if (f.flags & kFrameInSignal) r.common.flags |= output::kFlagHardirq;
  r.func = f.fn;
  r.overrun = ss->overrun;
  r.rettime = rettime;
  const uint64_t cpu_slots = (f.flags & kFrameCpuTime) ? g_cpu_time_slots.load(std::memory_order_relaxed) : 0;
  while (m != 0) {
    const int slot = __builtin_ctzll(m);
    m &= m - 1;
    const uint32_t d = ss->slot_depth[slot] > 0 ? --ss->slot_depth[slot] : 0;
    // The kernel moves calltime forward by the time slept; so do we.
    const uint64_t dur = (cpu_slots >> slot & 1) ? std::min(cpu, wall) : wall;
    const uint64_t thresh = g_slots[slot].thresh_ns.load(std::memory_order_relaxed);
    if (thresh != 0 && dur < thresh) continue;
    r.depth = d;
    r.calltime = rettime - dur;
    events::write_to_slot_at(slot, &r, sizeof r, t.tid, tsc);
  }
}

// Where one call pops several frames (those a longjmp or an exception left),
// each pop takes its own `tsc`: exits that share one time stamp but land in
// two CPUs' buffers (the thread migrated between them) are a tie that a
// reader merging the CPUs by time (trace-cmd report, KernelShark) breaks by
// CPU number, so a parent's exit could come out before its child's. A
// migration takes microseconds, so fresh stamps order them. Found by
// tests/realworld (Lua's coroutine.yield longjmps out of eight frames).
USRTRACE_ALWAYS_INLINE void pop_record(ShadowStack* ss, uint64_t tsc, writers::ThreadState& t) {
  const ShadowFrame f = ss->frames[ss->depth - 1];
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ss->depth--;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  record_exit(ss, f, tsc, t);
}

// What an entry records; true when it pushed a frame. Between enter/exit.
USRTRACE_ALWAYS_INLINE bool entry_locked(uint64_t fn, uint64_t parent, uint64_t* slot, uint64_t sp,
                                         uint64_t redirect, writers::ThreadState& t) {
  const bool patched = redirect != 0;
  const SiteTable* tab = g_table.load(std::memory_order_acquire);
  if (USRTRACE_UNLIKELY(tab == nullptr)) return false;
  const Site* s = tab->find(fn);
  if (s == nullptr) return false;

  // Function commands: traceon first, so that the call that turns tracing
  // on is recorded; the others after the records, so that a traceoff or a
  // snapshot keeps the call that fired it.
  if (USRTRACE_UNLIKELY(s->nprobes != 0)) fire_probes(*s, parent, t, true);
  const uint64_t tsc = clock::rdtsc();
  // Signal context: a handler's own call (it returns to the signal return
  // trampoline), or a call below a frame that is in one. Its records get
  // the 'h' flag; funcgraph-irqs off leaves them out of the graph.
  const uint64_t sigret = g_sigreturn.load(std::memory_order_relaxed);
  const bool handler = sigret != 0 && parent == sigret;
  const ShadowStack* cur = t_fn.ss;
  const bool in_signal =
      handler || (cur != nullptr && cur->depth > 0 && (cur->frames[cur->depth - 1].flags & kFrameInSignal));
  // The function tracer: one record per instance.
  if (uint64_t m = s->trace & g_function_slots.load(std::memory_order_relaxed); m != 0) {
    FunctionRecord r;
    r.common.type = kFunctionId;
    events::fill_common(&r, t);
    if (in_signal) r.common.flags |= output::kFlagHardirq;
    r.ip = fn;
    r.parent_ip = parent;
    while (m != 0) {
      const int i = __builtin_ctzll(m);
      m &= m - 1;
      if (pid_ok(i, t.tid) && events::write_to_slot_at(i, &r, sizeof r, t.tid, tsc) &&
          USRTRACE_UNLIKELY(stack_trace_on(i)))
        write_stack(i, r.common, parent);
    }
  }
  if (USRTRACE_UNLIKELY(s->nprobes != 0)) fire_probes(*s, parent, t, false);

  // function_graph: which instances record this call.
  const uint64_t graph = g_graph_slots.load(std::memory_order_relaxed);
  const uint64_t start = s->start & graph, notrace = s->notrace & graph;
  uint64_t g = s->trace & graph;
  const bool prof = (s->trace & kProfileBit) != 0;
  // A handler's frame is pushed even when it is not graphed, so that the
  // calls it makes know they are in a signal handler.
  const bool mark = handler && graph != 0;
  if (g == 0 && start == 0 && notrace == 0 && !prof && !mark) return false;
  ShadowStack* ss = shadow();
  if (ss == nullptr) return false;
  const uint64_t restricted = g_graph_restricted.load(std::memory_order_relaxed);
  g &= ~restricted | ss->graph_on | start;  // set_graph_function: only inside one
  g &= ~(ss->notrace_on | notrace);         // set_graph_notrace: not it, not below it
  for (uint64_t m = g; m != 0; m &= m - 1) {
    const int i = __builtin_ctzll(m);
    const uint32_t maxd = g_slots[i].max_depth.load(std::memory_order_relaxed);
    if ((maxd != 0 && ss->slot_depth[i] >= maxd) || !pid_ok(i, t.tid)) g &= ~(uint64_t{1} << i);
  }
  if (USRTRACE_UNLIKELY(in_signal))
    for (uint64_t m = g; m != 0; m &= m - 1)
      if (!irqs_on(__builtin_ctzll(m))) g &= ~(uint64_t{1} << __builtin_ctzll(m));
  const uint64_t started = start & ~ss->graph_on, notraced = notrace & ~ss->notrace_on;
  if (g == 0 && started == 0 && notraced == 0 && !prof && !mark) return false;
  uint64_t flags = redirect | (in_signal ? kFrameInSignal : 0);
  if (prof) {
    if (const Profile* p = g_profile.load(std::memory_order_acquire); p != nullptr)
      flags |= kFrameProfiled | uint64_t{p->gen} << 32;
  }
  if (USRTRACE_UNLIKELY(ss->depth >= kShadowFrames)) {
    ss->overrun++;
    return false;
  }
  ShadowFrame& f = ss->frames[ss->depth];
  f.fn = fn;
  f.ret = patched ? *slot : 0;
  f.slot = patched ? slot : reinterpret_cast<uint64_t*>(sp);
  f.calltime = tsc;
  f.mask = g;
  f.started = started;
  f.notraced = notraced;
  f.index = s->index;
  f.children = 0;
  if (USRTRACE_UNLIKELY(((g | (prof ? kProfileBit : 0)) & g_cpu_time_slots.load(std::memory_order_relaxed)) !=
                        0)) {
    flags |= kFrameCpuTime;
    f.cputime = thread_cpu_ns();
  }
  f.flags = flags;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ss->depth++;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ss->graph_on |= started;
  ss->notrace_on |= notraced;

  GraphEntryRecord r;
  r.common.type = kGraphEntryId;
  events::fill_common(&r, t);
  if (in_signal) r.common.flags |= output::kFlagHardirq;
  r.func = fn;
  r.pad = 0;
  for (uint64_t m = g; m != 0; m &= m - 1) {
    const int i = __builtin_ctzll(m);
    r.depth = ss->slot_depth[i]++;
    if (g_slots[i].thresh_ns.load(std::memory_order_relaxed) == 0)
      events::write_to_slot_at(i, &r, sizeof r, t.tid, tsc);
  }
  return true;
}

// Enters the hooks' critical region: false if the thread is already in a
// hook (recursion, or a signal handler interrupting one) or cannot write.
struct Guard {
  writers::ThreadState* t = nullptr;
  USRTRACE_ALWAYS_INLINE bool enter() {
    if (t_fn.nest >= kMaxNest) return false;
    t_fn.nest++;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t = writers::enter();
    if (t == nullptr) {
      t_fn.nest--;
      return false;
    }
    t_fn.ws = t;
    return true;
  }
  USRTRACE_ALWAYS_INLINE ~Guard() {
    if (t == nullptr) return;
    writers::exit(*t);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_fn.nest--;
  }
};

// ---- The fast path: while exactly one instance runs function_graph and
// nothing else asks for a look per call (no function tracer, profiler,
// command, graph list, depth limit, threshold or set_ftrace_pid: control.cc
// keeps g_fast), an entry or an exit of a thread that is not already in a
// hook does only what that instance needs, inline. Its frames and records
// are the slow path's, so either path pops what the other pushed; anything
// unusual (another frame on top, a nested hook, a thread not registered
// yet) goes to the slow path, which handles every case.

// The writers' bracket (writers/writers.h [A] and [D]) and the nesting
// guard, for a thread whose ThreadState is known.
struct FastGuard {
  writers::ThreadState& ws;
  uint64_t depth;  // writes in progress on the thread before this one
  USRTRACE_ALWAYS_INLINE explicit FastGuard(writers::ThreadState& w) : ws(w) {
    t_fn.nest = 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    const uint64_t c = ws.ctr.load(std::memory_order_relaxed);
    depth = c & 0xff;
    // order: as writers::enter().
    ws.ctr.store(c + (depth != 0 ? 1 : 0x101), std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  USRTRACE_ALWAYS_INLINE ~FastGuard() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // order: as writers::exit().
    ws.ctr.store(ws.ctr.load(std::memory_order_relaxed) - 1, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_fn.nest = 0;
  }
  // fill_common() for this thread.
  USRTRACE_ALWAYS_INLINE void common(internal::CommonHeader* h, uint16_t type) const {
    h->type = type;
    h->flags = depth != 0 ? output::kFlagHardirq : 0;
    h->preempt_count = static_cast<uint8_t>(depth < 15 ? depth : 15);
    h->pid = ws.tid;
  }
};

// The thread's state if the fast path may run on it, else nullptr.
USRTRACE_ALWAYS_INLINE writers::ThreadState* fast_thread() {
  writers::ThreadState* ws = t_fn.ws;
  if (ws == nullptr || t_fn.nest != 0 || ws->state != writers::kRegistered) return nullptr;
  return ws;
}

enum class Fast : uint8_t { kDone, kUntraced, kSlow };

// An entry: kDone (recorded, frame pushed), kUntraced (the function is not
// traced: nothing to do) or kSlow.
USRTRACE_ALWAYS_INLINE Fast fast_entry(uint32_t fast, uint64_t fn, uint64_t parent, uint64_t ret,
                                       uint64_t* slot, uint64_t redirect) {
  writers::ThreadState* ws = fast_thread();
  // Signal handlers (their calls are marked) take the general path.
  if (ws == nullptr || USRTRACE_UNLIKELY(parent == g_sigreturn.load(std::memory_order_relaxed)))
    return Fast::kSlow;
  const int i = static_cast<int>(fast - 1);
  const uint64_t bit = uint64_t{1} << i;
  FastGuard g(*ws);
  const SiteTable* tab = g_table.load(std::memory_order_acquire);
  if (USRTRACE_UNLIKELY(tab == nullptr)) return Fast::kSlow;
  const Site* s = tab->find(fn);
  if (s == nullptr) return Fast::kUntraced;
  // A frame to push: the thread's stack must exist (the general path maps
  // it), have room, and not be in a signal handler.
  ShadowStack* ss = t_fn.ss;
  if (USRTRACE_UNLIKELY((s->trace & bit) == 0 || s->nprobes != 0 || ss == nullptr ||
                        ss->depth >= kShadowFrames) ||
      (ss->depth > 0 && (ss->frames[ss->depth - 1].flags & kFrameInSignal)))
    return Fast::kSlow;
  const uint64_t tsc = clock::rdtsc();
  ShadowFrame& f = ss->frames[ss->depth];
  f.fn = fn;
  f.ret = ret;
  f.slot = slot;
  f.calltime = tsc;
  f.mask = bit;
  f.started = 0;
  f.notraced = 0;
  f.flags = redirect;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ss->depth++;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  GraphEntryRecord r;
  g.common(&r.common, kGraphEntryId);
  r.func = fn;
  r.depth = ss->slot_depth[i]++;
  r.pad = 0;
  events::write_to_slot_at_n<sizeof r>(i, &r, ws->tid, tsc);
  return Fast::kDone;
}

// An exit whose frame `f` is on top of the thread's stack, if the fast
// path may take it: records it and pops it.
USRTRACE_ALWAYS_INLINE bool fast_exit(uint32_t fast, ShadowStack* ss, const ShadowFrame& f, uint64_t flags) {
  const int i = static_cast<int>(fast - 1);
  if (((f.mask ^ (uint64_t{1} << i)) | (f.flags ^ flags) | f.started | f.notraced) != 0) return false;
  writers::ThreadState* ws = fast_thread();
  if (ws == nullptr) return false;
  FastGuard g(*ws);
  const uint64_t tsc = clock::rdtsc();
  GraphExitRecord r;
  g.common(&r.common, kGraphExitId);
  r.func = f.fn;
  r.calltime = tsc_ns(f.calltime);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ss->depth--;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  r.depth = ss->slot_depth[i] > 0 ? --ss->slot_depth[i] : 0;
  r.overrun = ss->overrun;
  r.rettime = tsc_ns(tsc);
  events::write_to_slot_at_n<sizeof r>(i, &r, ws->tid, tsc);
  return true;
}

}  // namespace

std::atomic<uint32_t> g_fast{0};
clock::TscCalibration g_calibration{};

const Site* SiteTable::find(uint64_t fn) const {
  for (uint64_t i = (fn * 0x9E3779B97F4A7C15ull) >> shift;; i = (i + 1) & mask) {
    const Site& s = sites[i];
    if (s.fn == fn) return &s;
    if (s.fn == 0) return nullptr;
  }
}

namespace {

// -finstrument-functions calls the exit hook of every call, recorded or
// not, and instrumented_exit_slow pairs an exit with the frame on top by
// its function. A call that pushed no frame (past max_graph_depth, under a
// set_graph_notrace function, ...) while a call of its own function is on
// top would take that frame at its exit: the outer call ended at its first
// unrecorded descendant's return and the depth it held was lost (fib at
// max_graph_depth 2 was recorded whole, every call at depth 1). Such a call
// pushes a frame that records nothing (mask 0: no instance, no depth, no
// exit record) for its own exit to pop, as uftrace's cygprof entry keeps a
// NORECORD entry for each call it filters out. Other unrecorded calls need
// none: at their exits (and their callees') the top frame is another
// function's, of a shallower call, which instrumented_exit_slow leaves
// alone; so recursion is the only case that costs a frame. A patched call
// that records nothing has no return hook to pair and needs no frame.
// Between writers::enter/exit, after entry_locked.
USRTRACE_ALWAYS_INLINE void hold_unrecorded(uint64_t fn, uint64_t sp) {
  ShadowStack* ss = t_fn.ss;
  // A full stack: entry_locked counted the overrun.
  if (ss == nullptr || ss->depth == 0 || ss->depth >= kShadowFrames || ss->frames[ss->depth - 1].fn != fn)
    return;
  const uint64_t in_signal = ss->frames[ss->depth - 1].flags & kFrameInSignal;
  ShadowFrame& f = ss->frames[ss->depth];
  f.fn = fn;
  f.ret = 0;
  f.slot = reinterpret_cast<uint64_t*>(sp);
  f.calltime = 0;
  f.mask = 0;
  f.started = 0;
  f.notraced = 0;
  f.index = 0;
  f.children = 0;
  f.flags = in_signal;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  ss->depth++;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

// The general paths, out of line: the fast paths' functions stay small (few
// registers to save).
USRTRACE_NOINLINE void instrumented_entry_slow(uint64_t fn, uint64_t parent, uint64_t sp) {
  Guard g;
  if (!g.enter()) return;
  if (!entry_locked(fn, parent, nullptr, sp, 0, *g.t)) hold_unrecorded(fn, sp);
}

USRTRACE_NOINLINE void instrumented_exit_slow(ShadowStack* ss, uint64_t fn, uint64_t sp) {
  Guard g;
  if (!g.enter()) return;
  // Frames deeper than this one whose exits never came (an exception
  // unwound them where the compiler calls no exit hook, or a longjmp).
  // Each exit takes its own time stamp: see pop_record.
  while (ss->depth > 0) {
    const ShadowFrame& top = ss->frames[ss->depth - 1];
    if (top.fn == fn) {
      pop_record(ss, clock::rdtsc(), *g.t);
      return;
    }
    if (reinterpret_cast<uint64_t>(top.slot) >= sp) return;  // not ours: fn's entry was not traced
    pop_record(ss, clock::rdtsc(), *g.t);
  }
}

}  // namespace

void instrumented_entry(uint64_t fn, uint64_t parent, uint64_t sp) {
  if (const uint32_t fast = g_fast.load(std::memory_order_relaxed); fast != 0) {
    const Fast r = fast_entry(fast, fn, parent, 0, reinterpret_cast<uint64_t*>(sp), 0);
    if (r != Fast::kSlow) return;
  }
  instrumented_entry_slow(fn, parent, sp);
}

void instrumented_exit(uint64_t fn, uint64_t sp) {
  ShadowStack* ss = t_fn.ss;
  if (ss == nullptr || ss->depth == 0) return;
  if (const uint32_t fast = g_fast.load(std::memory_order_relaxed); fast != 0) {
    const ShadowFrame& top = ss->frames[ss->depth - 1];
    if (top.fn == fn && fast_exit(fast, ss, top, 0)) return;
  }
  instrumented_exit_slow(ss, fn, sp);
}

namespace {
USRTRACE_ALWAYS_INLINE bool redirected_entry(uint64_t fn, uint64_t parent, uint64_t* slot,
                                             uint64_t redirect) {
  if (const uint32_t fast = g_fast.load(std::memory_order_relaxed); fast != 0) {
    const Fast r = fast_entry(fast, fn, parent, *slot, slot, redirect);
    if (r != Fast::kSlow) return r == Fast::kDone;
  }
  Guard g;
  if (!g.enter()) return false;
  return entry_locked(fn, parent, slot, 0, redirect, *g.t);
}
}  // namespace

bool patched_entry(uint64_t fn, uint64_t parent, uint64_t* slot) {
  return redirected_entry(fn, parent, slot, kFrameRedirected);
}

bool plain_entry(uint64_t fn, uint64_t parent, uint64_t* slot) {
  return redirected_entry(fn, parent, slot, kFrameRedirected | kFrameFullSave);
}

uint64_t patched_return(uint64_t* slot) {
  ShadowStack* ss = t_fn.ss;
  if (const uint32_t fast = g_fast.load(std::memory_order_relaxed);
      fast != 0 && ss != nullptr && ss->depth > 0) {
    const ShadowFrame& top = ss->frames[ss->depth - 1];
    const uint64_t ret = top.ret;
    if (top.slot == slot && fast_exit(fast, ss, top, kFrameRedirected | (top.flags & kFrameFullSave)))
      return ret;
  }
  // Reached only through a redirected slot, so there is a frame for it:
  // pop the frames above it (left by longjmp), then it. No nesting check: the
  // return must be taken even inside a hook.
  writers::ThreadState* t = writers::enter();
  while (ss != nullptr && ss->depth > 0) {
    const ShadowFrame f = ss->frames[ss->depth - 1];
    if ((f.flags & kFrameRedirected) != 0 && f.slot == slot) {
      if (t) {
        pop_record(ss, clock::rdtsc(), *t);
      } else {
        ss->depth--;
      }
      if (t) writers::exit(*t);
      return f.ret;
    }
    if (reinterpret_cast<uint64_t>(f.slot) > reinterpret_cast<uint64_t>(slot)) break;
    if (t) {
      pop_record(ss, clock::rdtsc(), *t);
    } else {
      ss->depth--;
    }
  }
  if (t) writers::exit(*t);
  static const char kMsg[] = "usrtrace: function_graph return hook found no frame for its return address\n";
  (void)!write(2, kMsg, sizeof kMsg - 1);
  abort();
}

namespace {
// The return hook a redirected frame's slot holds: the one that keeps every
// register, for a plain function's frame (kFrameFullSave).
uint64_t hook_for(uint64_t flags) {
  return (flags & kFrameFullSave) != 0 ? patch::full_return_hook_address() : patch::return_hook_address();
}
}  // namespace

// Both walk the frames from the top down: a function entered by a tail call
// from a traced function shares its caller's slot, and its frame's `ret` is
// the return hook that slot already held. The deepest frame of a slot, the
// one that saw the real return address, must write last. (Bottom-up, an
// exception thrown under such a pair found the hook in the slot, where the
// unwinder stops: std::terminate. Found by tests/realworld.)
void shadow_unhook_all() {
  ShadowStack* ss = t_fn.ss;
  if (ss == nullptr) return;
  for (uint32_t i = ss->depth; i-- > 0;) {
    ShadowFrame& f = ss->frames[i];
    if ((f.flags & kFrameRedirected) == 0) continue;
    *f.slot = f.ret;
    f.flags = (f.flags & ~uint64_t{kFrameRedirected}) | kFrameUnhooked;
  }
}

void unwind_stack_begin() {
  ShadowStack* ss = t_fn.ss;
  if (ss == nullptr) return;
  for (uint32_t i = ss->depth; i-- > 0;) {  // top down: see shadow_unhook_all

    ShadowFrame& f = ss->frames[i];
    if ((f.flags & kFrameRedirected) == 0) continue;
    *f.slot = f.ret;
    f.flags = (f.flags & ~uint64_t{kFrameRedirected}) | kFrameWalked;
  }
}

void unwind_stack_end() {
  ShadowStack* ss = t_fn.ss;
  if (ss == nullptr) return;
  for (uint32_t i = 0; i < ss->depth; ++i) {
    ShadowFrame& f = ss->frames[i];
    if ((f.flags & kFrameWalked) == 0) continue;
    *f.slot = hook_for(f.flags);
    f.flags = (f.flags & ~uint64_t{kFrameWalked}) | kFrameRedirected;
  }
}

void shadow_rehook(uint64_t sp) {
  ShadowStack* ss = t_fn.ss;
  if (ss == nullptr) return;
  Guard g;
  const bool can_record = g.enter();
  while (ss->depth > 0) {
    const ShadowFrame& top = ss->frames[ss->depth - 1];
    if ((top.flags & kFrameUnhooked) == 0 || reinterpret_cast<uint64_t>(top.slot) >= sp) break;
    if (can_record) {
      pop_record(ss, clock::rdtsc(), *g.t);
    } else {
      ss->depth--;
    }
  }
  for (uint32_t i = 0; i < ss->depth; ++i) {
    ShadowFrame& f = ss->frames[i];
    if ((f.flags & kFrameUnhooked) == 0) continue;
    *f.slot = hook_for(f.flags);
    f.flags = (f.flags & ~uint64_t{kFrameUnhooked}) | kFrameRedirected;
  }
}

}  // namespace usrtrace::function
