#include "function/control.h"

#include <fnmatch.h>
#include <link.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "base/mutex.h"
#include "base/sys.h"
#include "events/registry.h"
#include "function/control_internal.h"
#include "function/core.h"
#include "function/options.h"
#include "instance/instance.h"
#include "symbols/symbols.h"
#include "trigger/control.h"
#include "writers/writers.h"

extern "C" void __cyg_profile_func_enter(void* fn, void* site);

namespace usrtrace::function {

// The shared state (control_internal.h).
base::Mutex g_mu;
std::vector<ProbeEntry> g_probes USRTRACE_GUARDED_BY(g_mu);  // in the order added
std::vector<std::unique_ptr<Probe>> g_retired USRTRACE_GUARDED_BY(g_mu);
bool g_profiling USRTRACE_GUARDED_BY(g_mu) = false;  // function_profile_enabled
SlotConfig g_config[instance::kMaxInstances] USRTRACE_GUARDED_BY(g_mu);

namespace {

std::vector<Func>* g_funcs USRTRACE_GUARDED_BY(g_mu) = nullptr;  // by address
// Published pid filters are freed after a grace period; kept until then.
std::vector<std::unique_ptr<instance::PidFilter>> g_pid_filters[instance::kMaxInstances] USRTRACE_GUARDED_BY(
    g_mu);

std::string program_name() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// Whether a function symbol of plain code names an entry that calls reach:
// not `_start` (the kernel jumps there: no return address), not a cold part
// (gcc's `f.cold`, `f.cold.N`: a block of f moved away, jumped to from
// inside f, never called).
bool plain_entry_symbol(const std::string& name) {
  if (name == "_start") return false;
  const size_t cold = name.find(".cold");
  return cold == std::string::npos ||
         !(cold + 5 == name.size() ||
           (name[cold + 5] == '.' && name.find('.', cold + 6) == std::string::npos));
}

bool internal_name(const std::string& name) {
  return name.rfind("usrtrace::", 0) == 0 || name.rfind("__cyg_profile_func_", 0) == 0;
}

// Readable address ranges of the loaded objects, to follow a call target
// only where it can be read.
struct Ranges {
  std::vector<std::pair<uint64_t, uint64_t>> r;
  bool readable(uint64_t a, uint64_t len) const {
    for (const auto& [lo, hi] : r)
      if (a >= lo && a + len <= hi && a + len >= a) return true;
    return false;
  }
};

Ranges loaded_ranges() {
  Ranges out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* rs = static_cast<Ranges*>(arg);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_R))
            rs->r.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_filesz);
        }
        return 0;
      },
      &out);
  return out;
}

// Whether the function at `addr` was compiled with -finstrument-functions:
// its prologue calls __cyg_profile_func_enter, directly (a program linked
// with libusrtrace.a), through its PLT stub (jmp *GOT) or through the GOT
// (-fno-plt). The compiler puts that call before any other call.
bool calls_entry_hook(const symbols::Symbol& s, const Ranges& ranges) {
  const uint64_t hook = reinterpret_cast<uint64_t>(&__cyg_profile_func_enter);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(s.size, 192));
  if (n < 5 || !ranges.readable(s.addr, n)) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(s.addr);
  auto rel32 = [](const uint8_t* q) {
    int32_t v;
    std::memcpy(&v, q, 4);
    return static_cast<int64_t>(v);
  };
  for (size_t i = 0; i + 5 <= n; ++i) {
    if (p[i] == 0xe8) {
      const uint64_t t = s.addr + i + 5 + static_cast<uint64_t>(rel32(p + i + 1));
      if (t == hook) return true;
      if (s.hook_got == 0 || !ranges.readable(t, 16)) continue;
      const auto* q = reinterpret_cast<const uint8_t*>(t);
      size_t k = 0;
      if (q[0] == 0xf3 && q[1] == 0x0f && q[2] == 0x1e && q[3] == 0xfa) k = 4;  // endbr64
      if (q[k] == 0xf2) ++k;                                                    // bnd
      if (q[k] == 0xff && q[k + 1] == 0x25 &&
          t + k + 6 + static_cast<uint64_t>(rel32(q + k + 2)) == s.hook_got)
        return true;
    } else if (p[i] == 0xff && i + 6 <= n && p[i + 1] == 0x15 && s.hook_got != 0 &&
               s.addr + i + 6 + static_cast<uint64_t>(rel32(p + i + 2)) == s.hook_got) {
      return true;
    }
  }
  return false;
}

}  // namespace

namespace {
std::atomic<uint64_t> g_function_table_reads{0};
}  // namespace

uint64_t function_table_reads() { return g_function_table_reads.load(std::memory_order_relaxed); }

const std::vector<Func>& funcs_locked() USRTRACE_REQUIRES(g_mu) {
  if (g_funcs != nullptr) return *g_funcs;
  g_function_table_reads.fetch_add(1, std::memory_order_relaxed);
  auto* out = new std::vector<Func>;
  const std::vector<uint64_t> patchable = patch::patchable_functions();
  const std::string prog = program_name();
  const Ranges ranges = loaded_ranges();
  std::vector<symbols::Symbol> syms = symbols::load_process_symbols();
  // Functions with a compiler hook (patchable, or calling the entry hook),
  // and the objects that have any: their other functions were left out by
  // the build (notrace), the others' are plain (plain.cc).
  std::vector<bool> hooked(syms.size(), false);
  std::set<std::string> built = runtime_modules();
  for (size_t i = 0; i < syms.size(); ++i) {
    const symbols::Symbol& s = syms[i];
    if (s.type != 't' && s.type != 'T') continue;
    hooked[i] = std::binary_search(patchable.begin(), patchable.end(), s.addr) ||
                (s.instrumented && calls_entry_hook(s, ranges));
    if (hooked[i]) built.insert(s.module);
  }
  for (size_t i = 0; i < syms.size(); ++i) {
    symbols::Symbol& s = syms[i];
    if (s.type != 't' && s.type != 'T') continue;
    const bool plain = !hooked[i] && s.size != 0 && !built.count(s.module) && plain_entry_symbol(s.name);
    if (!hooked[i] && !plain) continue;
    std::string name = symbols::kallsyms_name(s.name);
    if (internal_name(name)) continue;
    if (!out->empty() && out->back().addr == s.addr) continue;  // aliases: the first name
    const bool library = !s.module.empty();
    std::string module = std::move(s.module);
    if (module.empty()) module = prog;
    out->push_back({s.addr, std::move(name), std::move(s.name), std::move(module), s.size, plain, library});
  }
  g_funcs = out;
  return *out;
}

namespace {

bool module_matches(const std::string& glob, const std::string& module) {
  if (fnmatch(glob.c_str(), module.c_str(), 0) == 0) return true;
  const size_t so = module.find(".so");
  return so != std::string::npos && fnmatch(glob.c_str(), module.substr(0, so).c_str(), 0) == 0;
}

}  // namespace

bool matches(const Op& op, const Func& f) {
  if (!op.module.empty() && !module_matches(op.module, f.module)) return false;
  if (op.glob.empty()) return true;  // ":mod:NAME" alone: the whole object
  if (fnmatch(op.glob.c_str(), f.name.c_str(), 0) == 0) return true;
  // "ns::f" or "ns::f*" for "ns::f(int)": the name without its parameters.
  if (const size_t paren = f.name.find('(');
      paren != std::string::npos && paren > 0 &&
      fnmatch(op.glob.c_str(), f.name.substr(0, paren).c_str(), 0) == 0)
    return true;
  return fnmatch(op.glob.c_str(), f.mangled.c_str(), 0) == 0;
}

namespace {

// What an empty set_ftrace_filter ("all functions") takes: every function
// with a compiler hook, and the plain functions of the main program. A
// shared object's plain functions (libstdc++ is not one: the runtime's own
// objects are never traced) are taken when a filter names them (a glob, or
// ":mod:NAME"), as uftrace patches the libraries only it is told to: an
// empty filter would otherwise arm every function of every library the
// program uses (libomp's, libz's...), at a cost nobody asked for.
bool by_default(const Func& f) { return !f.plain || !f.library; }

// The set a list names, as a flag per function.
std::vector<bool> evaluate(const std::vector<Op>& ops, const std::vector<Func>& funcs) {
  std::vector<bool> in(funcs.size(), false);
  for (const Op& op : ops)
    for (size_t i = 0; i < funcs.size(); ++i)
      if (matches(op, funcs[i])) in[i] = !op.remove;
  return in;
}

// g_fast (core.h): the one function_graph instance, if nothing else needs
// the hooks' general path. Stored last, after what it summarises.
// g_cpu_time_slots and g_profile_self_time from the instances' sleep-time
// and graph-time options (the profiler: the top instance's).
uint64_t update_times_locked(uint64_t graph_slots) USRTRACE_REQUIRES(g_mu) {
  auto is_on = [](int slot, FuncOption o) {
    // order: acquire pairs with the release that published the instance.
    const instance::Instance* inst = instance::g_slot_state[slot].instance.load(std::memory_order_acquire);
    return inst == nullptr || inst->option(option(o));
  };
  uint64_t cpu = 0;
  for (uint64_t m = graph_slots; m != 0; m &= m - 1)
    if (!is_on(__builtin_ctzll(m), kSleepTime)) cpu |= uint64_t{1} << __builtin_ctzll(m);
  if (g_profiling && !is_on(0, kSleepTime)) cpu |= kProfileBit;
  g_cpu_time_slots.store(cpu, std::memory_order_relaxed);
  g_profile_self_time.store(!is_on(0, kGraphTime), std::memory_order_relaxed);
  return cpu;
}

void update_fast_locked(uint64_t graph_slots, uint64_t fn_slots, uint64_t lists) USRTRACE_REQUIRES(g_mu) {
  uint32_t fast = 0;
  if (update_times_locked(graph_slots) != 0) graph_slots = 0;  // sleep-time off: the general path
  if (fn_slots == 0 && __builtin_popcountll(graph_slots) == 1 && lists == 0 && !g_profiling &&
      g_probes.empty()) {
    const int slot = __builtin_ctzll(graph_slots);
    const SlotConfig& c = g_config[slot];
    if (c.max_depth == 0 && c.thresh_us == 0 && c.pids[0].empty() && c.pids[1].empty())
      fast = static_cast<uint32_t>(slot) + 1;
  }
  g_fast.store(fast, std::memory_order_relaxed);
}

// The inputs of update_fast_locked() as rebuild_locked() last saw them.
uint64_t g_fast_graph USRTRACE_GUARDED_BY(g_mu) = 0, g_fast_fn USRTRACE_GUARDED_BY(g_mu) = 0,
                      g_fast_lists USRTRACE_GUARDED_BY(g_mu) = 0;

// A setting of the fast path's conditions changes: off before it changes,
// recomputed after.
struct FastOff {
  FastOff() USRTRACE_REQUIRES(g_mu) { g_fast.store(0, std::memory_order_relaxed); }
  ~FastOff() USRTRACE_NO_THREAD_SAFETY_ANALYSIS { update_fast_locked(g_fast_graph, g_fast_fn, g_fast_lists); }
};

}  // namespace

void rebuild_locked() USRTRACE_REQUIRES(g_mu) {
  g_fast.store(0, std::memory_order_relaxed);
  const std::vector<Func>& funcs = funcs_locked();
  struct Masks {
    uint64_t trace = 0, start = 0, notrace = 0;
  };
  std::vector<Masks> masks(funcs.size());
  uint64_t fn_slots = 0, graph_slots = 0, restricted = 0, graph_lists = 0;
  for (int slot = 0; slot < instance::kMaxInstances; ++slot) {
    const SlotConfig& c = g_config[slot];
    if (c.tracer == Tracer::kNop) continue;
    const uint64_t bit = uint64_t{1} << slot;
    (c.tracer == Tracer::kFunction ? fn_slots : graph_slots) |= bit;
    const std::vector<bool> filter = evaluate(c.lists[int(List::kFilter)], funcs);
    const std::vector<bool> notrace = evaluate(c.lists[int(List::kNotrace)], funcs);
    const bool all = std::find(filter.begin(), filter.end(), true) == filter.end();
    for (size_t i = 0; i < funcs.size(); ++i)
      if ((filter[i] || (all && by_default(funcs[i]))) && !notrace[i]) masks[i].trace |= bit;
    if (c.tracer != Tracer::kGraph) continue;
    const std::vector<bool> gf = evaluate(c.lists[int(List::kGraphFunction)], funcs);
    const std::vector<bool> gn = evaluate(c.lists[int(List::kGraphNotrace)], funcs);
    for (size_t i = 0; i < funcs.size(); ++i) {
      if (gf[i]) masks[i].start |= bit;
      if (gn[i]) masks[i].notrace |= bit;
    }
    if (std::find(gf.begin(), gf.end(), true) != gf.end()) restricted |= bit;
    if (restricted & bit || std::find(gn.begin(), gn.end(), true) != gn.end()) graph_lists |= bit;
  }

  // The function profiler times the functions the top instance's
  // set_ftrace_filter / set_ftrace_notrace select, whatever its tracer.
  if (g_profiling) {
    const SlotConfig& top = g_config[0];
    const std::vector<bool> filter = evaluate(top.lists[int(List::kFilter)], funcs);
    const std::vector<bool> notrace = evaluate(top.lists[int(List::kNotrace)], funcs);
    const bool all = std::find(filter.begin(), filter.end(), true) == filter.end();
    for (size_t i = 0; i < funcs.size(); ++i)
      if ((filter[i] || (all && by_default(funcs[i]))) && !notrace[i]) masks[i].trace |= kProfileBit;
  }
  // Function commands: per function, its probes (any instance, any tracer).
  std::map<uint64_t, std::vector<const Probe*>> probes;
  for (const ProbeEntry& e : g_probes) probes[e.fn].push_back(e.probe.get());
  size_t n = 0, nprobes = 0;
  for (size_t i = 0; i < funcs.size(); ++i) {
    const auto it = probes.find(funcs[i].addr);
    if (it != probes.end()) nprobes += it->second.size();
    n += (masks[i].trace | masks[i].start | masks[i].notrace) != 0 || it != probes.end();
  }
  auto* table = new SiteTable;
  table->probes.reset(new const Probe*[nprobes + 1]);
  size_t next_probe = 0;
  int bits = 4;
  while ((size_t{1} << bits) < 2 * n + 1) ++bits;
  table->sites.reset(new Site[size_t{1} << bits]());
  table->mask = (uint64_t{1} << bits) - 1;
  table->shift = 64 - bits;
  std::vector<uint64_t> wanted;
  for (size_t i = 0; i < funcs.size(); ++i) {
    const Masks& m = masks[i];
    const uint64_t fn = funcs[i].addr;
    const auto it = probes.find(fn);
    if ((m.trace | m.start | m.notrace) == 0 && it == probes.end()) continue;
    uint64_t j = (fn * 0x9E3779B97F4A7C15ull) >> table->shift;
    while (table->sites[j].fn != 0) j = (j + 1) & table->mask;
    Site site{fn, m.trace, m.start, m.notrace, static_cast<uint32_t>(i), 0, nullptr};
    if (it != probes.end()) {
      site.probes = &table->probes[next_probe];
      site.nprobes = static_cast<uint32_t>(it->second.size());
      for (const Probe* p : it->second) table->probes[next_probe++] = p;
    }
    table->sites[j] = site;
    wanted.push_back(fn);
  }

  // Publish: the table before the masks that make hooks use it.
  const SiteTable* old = g_table.exchange(table, std::memory_order_acq_rel);
  g_graph_restricted.store(restricted, std::memory_order_relaxed);
  g_function_slots.store(fn_slots, std::memory_order_relaxed);
  g_graph_slots.store(graph_slots, std::memory_order_relaxed);
  // Only compared with zero: any bit makes the hooks look at the table.
  g_tracing.store(fn_slots | graph_slots | (g_profiling ? kProfileBit : 0) | (g_probes.empty() ? 0 : 1),
                  std::memory_order_release);
  g_fast_graph = graph_slots;
  g_fast_fn = fn_slots;
  g_fast_lists = graph_lists;
  update_fast_locked(graph_slots, fn_slots, graph_lists);
  writers::synchronize_writers();
  delete old;
  g_retired.clear();

  std::string why;
  std::vector<uint64_t> patchable = patch::patchable_functions();
  std::vector<uint64_t> patch_set;
  std::set_intersection(wanted.begin(), wanted.end(), patchable.begin(), patchable.end(),
                        std::back_inserter(patch_set));
  // The kernel reports a failed patch in dmesg; a process's is stderr. The
  // table is published anyway: -finstrument-functions sites and the sites
  // already patched trace as asked.
  if (int rc = patch::apply(patch_set, &why); rc < 0)
    fprintf(stderr, "usrtrace: function: patching failed (%s): %s\n", strerror(-rc), why.c_str());
  arm_plain_locked(funcs, wanted);
  if (graph_slots != 0) ensure_unwind_hooks();  // return hooks: exceptions must not meet them
}

namespace {

void publish_pids_locked(int slot) USRTRACE_REQUIRES(g_mu) {
  const SlotConfig& c = g_config[slot];
  instance::PidFilter* f = nullptr;
  if (!c.pids[0].empty() || !c.pids[1].empty()) {
    auto p = std::make_unique<instance::PidFilter>();
    p->trace = c.pids[0];
    p->notrace = c.pids[1];
    std::sort(p->trace.begin(), p->trace.end());
    std::sort(p->notrace.begin(), p->notrace.end());
    f = p.get();
    g_pid_filters[slot].push_back(std::move(p));
  }
  const instance::PidFilter* old = g_slots[slot].pids.exchange(f, std::memory_order_acq_rel);
  writers::synchronize_writers();
  auto& keep = g_pid_filters[slot];
  keep.erase(std::remove_if(keep.begin(), keep.end(),
                            [&](const std::unique_ptr<instance::PidFilter>& p) { return p.get() != f; }),
             keep.end());
  (void)old;
}

// glibc's signal return trampoline (__restore_rt, not exported): the
// sa_restorer glibc's sigaction sets for every handler, read back from one
// installed (the patcher's SIGTRAP handler once a table was published).
uint64_t find_signal_return() {
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    struct sigaction sa {};
    if (sigaction(sig, nullptr, &sa) != 0 || sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
    if (sa.sa_restorer != nullptr) return reinterpret_cast<uint64_t>(sa.sa_restorer);
  }
  return 0;
}

}  // namespace

const std::vector<std::string>& tracer_names() {
  static const std::vector<std::string> names{"function_graph", "function", "nop"};
  return names;
}

bool is_tracer(std::string_view name) {
  return name == "nop" || name == "function" || name == "function_graph";
}

int set_tracer(instance::Instance& inst, std::string_view name) {
  Tracer t;
  if (name == "nop") {
    t = Tracer::kNop;
  } else if (name == "function") {
    t = Tracer::kFunction;
  } else if (name == "function_graph") {
    t = Tracer::kGraph;
  } else {
    return -EINVAL;
  }
  // calltime/rettime need the calibration before a graph tracer writes
  // (up to 20 ms, once per process).
  if (t == Tracer::kGraph && g_calibration.mult == 0) g_calibration = clock::tsc_calibration();
  base::MutexLock l(&g_mu);
  SlotConfig& c = g_config[inst.slot()];
  if (c.tracer == t) return 0;
  c.tracer = t;
  rebuild_locked();
  if (g_sigreturn.load(std::memory_order_relaxed) == 0)
    g_sigreturn.store(find_signal_return(), std::memory_order_relaxed);
  return 0;
}

Tracer tracer(const instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  return g_config[inst.slot()].tracer;
}

std::string tracer_name(const instance::Instance& inst) {
  switch (tracer(inst)) {
    case Tracer::kFunction:
      return "function";
    case Tracer::kGraph:
      return "function_graph";
    case Tracer::kNop:
      break;
  }
  return "nop";
}

int write_list(instance::Instance& inst, List list, std::string_view text, bool truncate, Error* err) {
  std::vector<Op> ops;
  std::vector<Command> commands;
  base::MutexLock l(&g_mu);
  const std::vector<Func>& funcs = funcs_locked();
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t' && text[i] != '\n') ++i;
    if (start == i) break;
    std::string tok(text.substr(start, i - start));
    Op op;
    if (tok[0] == '!') {
      op.remove = true;
      tok.erase(0, 1);
    }
    const size_t colon = command_colon(tok);
    if (colon != std::string::npos) {
      const std::string rest = tok.substr(colon + 1);
      tok.resize(colon);
      if (rest.rfind("mod:", 0) == 0) {
        op.module = rest.substr(4);
        if (op.module.empty()) {
          *err = {Error::kBadModule, "Missing module name after ':mod:'", start};
          return -EINVAL;
        }
      } else {
        if (list != List::kFilter) {
          *err = {Error::kNotHere, "Function commands only work in set_ftrace_filter", start};
          return -EINVAL;
        }
        Command c;
        if (tok == "*") tok.clear();
        c.op = op;
        c.op.glob = tok;
        const size_t rest_at = start + (op.remove ? 1 : 0) + colon + 1;
        if (int rc = parse_command(rest, rest_at, &c, err); rc < 0) return rc;
        if (!c.op.remove &&
            std::none_of(funcs.begin(), funcs.end(), [&](const Func& f) { return matches(c.op, f); })) {
          *err = {Error::kNoFunction, "No traceable function matches", start};
          return -EINVAL;
        }
        commands.push_back(std::move(c));
        continue;
      }
    }
    if (tok == "*") tok.clear();
    op.glob = tok;
    if (!op.remove &&
        std::none_of(funcs.begin(), funcs.end(), [&](const Func& f) { return matches(op, f); })) {
      *err = {Error::kNoFunction, "No traceable function matches", start};
      return -EINVAL;
    }
    ops.push_back(std::move(op));
  }
  for (const Command& c : commands) {
    // The kernel allocates the spare buffer when a snapshot command is set.
    if (c.kind == ProbeKind::kSnapshot && !c.op.remove) {
      if (int rc = inst.snapshots().allocate(); rc < 0) {
        *err = {Error::kNoMemory, "Cannot allocate the snapshot buffer", 0};
        return rc;
      }
    }
  }
  const int slot = inst.slot();
  std::vector<Op>& l_ops = g_config[slot].lists[int(list)];
  const bool list_changed = truncate ? !l_ops.empty() || !ops.empty() : !ops.empty();
  if (truncate) l_ops.clear();
  l_ops.insert(l_ops.end(), ops.begin(), ops.end());
  for (const Command& c : commands) apply_command_locked(slot, c, funcs);
  const bool uses_list = g_config[slot].tracer != Tracer::kNop || (g_profiling && slot == 0);
  if (!commands.empty() || (list_changed && uses_list)) rebuild_locked();
  return 0;
}

void clear_list(instance::Instance& inst, List list) {
  base::MutexLock l(&g_mu);
  g_config[inst.slot()].lists[int(list)].clear();
  if (g_config[inst.slot()].tracer != Tracer::kNop || (g_profiling && inst.slot() == 0)) rebuild_locked();
}

std::string show_list(const instance::Instance& inst, List list) {
  base::MutexLock l(&g_mu);
  const std::vector<Func>& funcs = funcs_locked();
  const std::vector<bool> in = evaluate(g_config[inst.slot()].lists[int(list)], funcs);
  std::string out;
  for (size_t i = 0; i < funcs.size(); ++i)
    if (in[i]) out += funcs[i].name + "\n";
  if (out.empty())
    out = list == List::kFilter || list == List::kGraphFunction ? "#### all functions enabled ####\n"
                                                                : "#### no functions disabled ####\n";
  // The function commands follow the filter, as the kernel lists them.
  if (list == List::kFilter) out += probe_lines_locked(inst.slot());
  return out;
}

int set_pids(instance::Instance& inst, bool notrace, std::vector<int> add, bool truncate) {
  base::MutexLock l(&g_mu);
  FastOff off;
  std::vector<int>& v = g_config[inst.slot()].pids[notrace ? 1 : 0];
  if (truncate) v.clear();
  v.insert(v.end(), add.begin(), add.end());
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  publish_pids_locked(inst.slot());
  return 0;
}

std::vector<int> pids(const instance::Instance& inst, bool notrace) {
  base::MutexLock l(&g_mu);
  return g_config[inst.slot()].pids[notrace ? 1 : 0];
}

int set_max_graph_depth(instance::Instance& inst, uint32_t depth) {
  base::MutexLock l(&g_mu);
  FastOff off;
  g_config[inst.slot()].max_depth = depth;
  g_slots[inst.slot()].max_depth.store(depth, std::memory_order_relaxed);
  return 0;
}

uint32_t max_graph_depth(const instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  return g_config[inst.slot()].max_depth;
}

int set_thresh_us(instance::Instance& inst, uint64_t us) {
  if (us > UINT64_MAX / 1000) return -EINVAL;
  base::MutexLock l(&g_mu);
  FastOff off;
  g_config[inst.slot()].thresh_us = us;
  g_slots[inst.slot()].thresh_ns.store(us * 1000, std::memory_order_relaxed);
  return 0;
}

uint64_t thresh_us(const instance::Instance& inst) {
  base::MutexLock l(&g_mu);
  return g_config[inst.slot()].thresh_us;
}

std::string available_filter_functions() {
  base::MutexLock l(&g_mu);
  std::string out;
  const std::string prog = program_name();
  for (const Func& f : funcs_locked()) {
    out += f.name;
    if (f.module != prog) out += " [" + f.module + "]";
    out += '\n';
  }
  return out;
}

std::string enabled_functions() {
  base::MutexLock l(&g_mu);
  const SiteTable* t = g_table.load(std::memory_order_acquire);
  std::string out;
  if (t == nullptr) return out;
  for (const Func& f : funcs_locked()) {
    const Site* s = t->find(f.addr);
    if (s == nullptr || (s->trace & ~kProfileBit) == 0) continue;
    if (f.plain && *plain_method_locked(f.addr) == '\0') continue;  // refused: refused_functions says why
    out += f.name + " (" + std::to_string(__builtin_popcountll(s->trace & ~kProfileBit)) + ")";
    // A plain function: how the patch engine took its entry.
    if (f.plain) out += std::string("\tpatch:") + plain_method_locked(f.addr);
    out += '\n';
  }
  return out;
}

std::string refused_functions() {
  base::MutexLock l(&g_mu);
  return plain_refused_locked();
}

void options_changed() {
  base::MutexLock l(&g_mu);
  FastOff off;
}

void instance_removed(int slot) {
  base::MutexLock l(&g_mu);
  SlotConfig& c = g_config[slot];
  const bool was_tracing = c.tracer != Tracer::kNop;
  c = SlotConfig{};
  g_slots[slot].max_depth.store(0, std::memory_order_relaxed);
  g_slots[slot].thresh_ns.store(0, std::memory_order_relaxed);
  if (g_slots[slot].pids.load(std::memory_order_relaxed) != nullptr) publish_pids_locked(slot);
  if (drop_probes_locked(slot, nullptr) || was_tracing) rebuild_locked();
}

namespace {
// The instance layer tells us of removed instances and of the options the
// function tracers own (sleep-time and graph-time leave the fast path).
struct RegisterHooks {
  RegisterHooks() {
    instance::add_instance_hooks({&instance_removed, [](instance::Instance&, instance::Option o) {
                                    if (o == option(kSleepTime) || o == option(kGraphTime)) options_changed();
                                  }});
  }
};
RegisterHooks g_register_hooks;
}  // namespace

void objects_changed() {
  base::metadata_changed();  // kallsyms
  base::MutexLock l(&g_mu);
  delete g_funcs;
  g_funcs = nullptr;
  // With no tracer, probe or profile, the list is read again only when one
  // first asks for it: a program that links usrtrace and dlopens plugins
  // (libtraceevent loads 20) must not read every symbol table at each one.
  bool any = g_profiling || !g_probes.empty() || !g_retired.empty();
  for (const SlotConfig& c : g_config) any |= c.tracer != Tracer::kNop;
  if (!any) return;
  if (g_profiling) new_profile_locked();  // function indexes changed
  // Commands on functions of an object that went away go with it (an
  // address may come back as another function).
  const std::vector<Func>& funcs = funcs_locked();
  for (auto it = g_probes.begin(); it != g_probes.end();) {
    const auto f = std::lower_bound(funcs.begin(), funcs.end(), it->fn,
                                    [](const Func& a, uint64_t fn) { return a.addr < fn; });
    if (f != funcs.end() && f->addr == it->fn && f->name == it->name) {
      ++it;
      continue;
    }
    if (it->probe->target != nullptr) trigger::hold_soft_mode(it->probe->slot, *it->probe->target, -1);
    g_retired.push_back(std::move(it->probe));
    it = g_probes.erase(it);
  }
  rebuild_locked();
}

namespace {

// The registry's remove hook: commands that enable or disable the event go.
void on_event_removed(internal::EventDesc* ev) {
  base::MutexLock l(&g_mu);
  if (drop_probes_locked(-1, ev)) rebuild_locked();
}

struct InstallHook {
  InstallHook() { events::Registry::get().add_remove_hook(&on_event_removed); }
};
__attribute__((init_priority(103))) InstallHook g_install_hook;

}  // namespace

}  // namespace usrtrace::function
