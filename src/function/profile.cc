// The function profiler: function_profile_enabled and trace_stat/functionN
// (the kernel's ftrace_profile). The hooks' side is core.cc's profile_exit.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/sys.h"
#include "function/control_internal.h"
#include "writers/writers.h"

namespace usrtrace::function {

namespace {

uint32_t g_profile_gen USRTRACE_GUARDED_BY(g_mu) = 0;

// Kernel: trace_print_graph_duration() without the marks.
std::string duration_us(uint64_t ns) {
  char buf[64];
  const std::string us = std::to_string(ns / 1000);
  std::string out = us;
  if (us.size() < 7) {
    snprintf(buf, sizeof buf, "%03llu", static_cast<unsigned long long>(ns % 1000));
    out += '.';
    out += std::string(buf).substr(0, 7 - us.size());
  }
  out += " us ";
  while (out.size() < 12) out += ' ';
  return out;
}

}  // namespace

void new_profile_locked() {
  auto* p = new Profile;
  p->gen = ++g_profile_gen;
  p->nfuncs = static_cast<uint32_t>(funcs_locked().size());
  p->ncpus = base::nr_possible_cpus();
  p->stats.reset(new ProfileStats[static_cast<size_t>(p->ncpus) * p->nfuncs]);
  Profile* old = g_profile.exchange(p, std::memory_order_acq_rel);
  writers::synchronize_writers();
  delete old;
}

int set_profiling(bool on) {
  if (on && g_calibration.mult == 0) g_calibration = clock::tsc_calibration();
  base::MutexLock l(&g_mu);
  if (on == g_profiling) return 0;
  if (on) new_profile_locked();  // the kernel resets the counts at each enable
  g_profiling = on;
  rebuild_locked();
  return 0;
}

bool profiling() {
  base::MutexLock l(&g_mu);
  return g_profiling;
}

std::string function_stat(int cpu) {
  base::MutexLock l(&g_mu);
  std::string out =
      "  Function                               Hit    Time            Avg             s^2\n"
      "  --------                               ---    ----            ---             ---\n";
  const Profile* p = g_profile.load(std::memory_order_acquire);
  if (p == nullptr || cpu < 0 || cpu >= p->ncpus) return out;
  const std::vector<Func>& funcs = funcs_locked();
  struct Row {
    size_t i;
    uint64_t hits, time, sq;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < p->nfuncs && i < funcs.size(); ++i) {
    const ProfileStats& st = p->stats[static_cast<size_t>(cpu) * p->nfuncs + i];
    const uint64_t hits = st.hits.load(std::memory_order_relaxed);
    if (hits != 0)
      rows.push_back(
          {i, hits, st.time_ns.load(std::memory_order_relaxed), st.time_sq.load(std::memory_order_relaxed)});
  }
  // The kernel's order: by total time, the longest first.
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.time > b.time; });
  char line[96];
  for (const Row& r : rows) {
    const uint64_t avg = r.time / r.hits;
    // Sample variance, as the kernel computes it (ns^2 / 1000).
    uint64_t s2 = 0;
    if (r.hits > 1) {
      const uint64_t mean_sq = r.hits * avg * avg;
      s2 = r.sq > mean_sq ? (r.sq - mean_sq) / (r.hits * (r.hits - 1) * 1000) : 0;
    }
    snprintf(line, sizeof line, "  %-30.30s  %10llu", funcs[r.i].name.c_str(),
             static_cast<unsigned long long>(r.hits));
    out += line;
    out += "    " + duration_us(r.time) + "    " + duration_us(avg) + "    " + duration_us(s2) + "\n";
  }
  return out;
}

}  // namespace usrtrace::function
