// The patcher's signal side (patch.cc's [A]..[D] need them): the table of
// sites its signal handlers read, the SIGTRAP handler that moves a thread
// past a site being patched and the sweep's fixup that moves threads out of
// sites of several nops. The sweep itself and the core sync are the patch
// level's (src/patch/text.h), shared with the probe engine. See
// docs/design/function-patching.md.
#include <sched.h>
#include <signal.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "function/patch_internal.h"
#include "patch/text.h"

namespace usrtrace::function::patch::detail {
namespace {

// ---- The table the signal handlers read --------------------------------
//
// Every site ever discovered in a loaded object, sorted by entry address,
// immutable once published. Handlers bracket their use with g_handler_users;
// the patcher publishes a new table, waits until no handler is inside, then
// frees the old one (a two-state grace period: handlers are short and never
// block).
struct HandlerTable {
  size_t n;
  HandlerSite sites[1];  // n of them (n >= 1 in every published table)
};
std::atomic<HandlerTable*> g_handler_table{nullptr};
std::atomic<int> g_handler_users{0};

// Context: signal handlers. The site whose bytes [fn, fn+len) contain `ip`
// strictly after fn when `inside`, or whose entry is exactly `ip` otherwise.
const HandlerSite* find_handler_site(const HandlerTable* t, uint64_t ip, bool inside) {
  if (t == nullptr) return nullptr;
  size_t lo = 0, hi = t->n;  // first site with fn > ip
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (t->sites[mid].fn <= ip)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return nullptr;
  const HandlerSite* s = &t->sites[lo - 1];
  if (inside) return ip > s->fn && ip < s->fn + s->len ? s : nullptr;
  return ip == s->fn ? s : nullptr;
}

std::atomic<uint64_t> g_traps{0};
std::atomic<uint64_t> g_sweep_moves{0};
struct sigaction g_prev_trap;  // written once before our handler is installed

// SIGTRAP: a thread hit the int3 of a site being patched ([A]..[D]), or of a
// site whose patch finished after it trapped (hence every known site, not
// only those of the batch in flight). It goes on past the site.
// Context: signal handler, async-signal-safe.
void on_sigtrap(int sig, siginfo_t* info, void* ucv) {
  auto* uc = static_cast<ucontext_t*>(ucv);
  // An int3 leaves rip after itself and si_code SI_KERNEL; kill() does not.
  if (info != nullptr && info->si_code == SI_KERNEL) {
    const uint64_t ip = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
    g_handler_users.fetch_add(1);
    const HandlerSite* s = find_handler_site(g_handler_table.load(), ip - 1, false);
    const uint64_t next = s ? s->fn + s->len : 0;
    g_handler_users.fetch_sub(1);
    if (s != nullptr) {
      uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(next);
      g_traps.fetch_add(1, std::memory_order_relaxed);  // order: a statistic
      return;
    }
  }
  // Not ours: what the program asked for.
  if (g_prev_trap.sa_flags & SA_SIGINFO) {
    if (g_prev_trap.sa_sigaction != nullptr) g_prev_trap.sa_sigaction(sig, info, ucv);
    return;
  }
  if (g_prev_trap.sa_handler == SIG_IGN) return;
  if (g_prev_trap.sa_handler == SIG_DFL) {
    // Die as the program would have: the default action, delivered when this
    // handler returns (SIGTRAP is blocked while it runs).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGTRAP, &dfl, nullptr);
    raise(SIGTRAP);
    return;
  }
  g_prev_trap.sa_handler(sig);
}

// ---- The sweep ([B]) ----------------------------------------------------
//
// Before the first arming of a site made of several nops (gcc's 0x90 x 5),
// every other thread runs this fixup in patch::sweep_threads()'s signal
// handler (src/patch/text.h, shared with the probe engine): a thread stopped
// between two of them would otherwise resume in the middle of the new call
// instruction. It is moved to the end of the site (skipping nops).
// Context: signal handler, async-signal-safe.
bool sweep_fixup(ucontext_t* uc, bool dry) {
  const uint64_t ip = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
  g_handler_users.fetch_add(1);
  const HandlerSite* s = find_handler_site(g_handler_table.load(), ip, true);
  const uint64_t next = s ? s->fn + s->len : 0;
  g_handler_users.fetch_sub(1);
  if (s == nullptr) return false;
  if (dry) return true;
  uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(next);
  g_sweep_moves.fetch_add(1, std::memory_order_relaxed);  // order: a statistic
  return true;
}

}  // namespace

int sweep_signal_number() { return usrtrace::patch::sweep_signal(); }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigtrap;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, &g_prev_trap);
  usrtrace::patch::add_sweep_fixup(sweep_fixup);
}

void publish_handler_sites(const std::vector<HandlerSite>& sites) {
  HandlerTable* t = nullptr;
  if (!sites.empty()) {
    const size_t bytes = sizeof(HandlerTable) + (sites.size() - 1) * sizeof(HandlerSite);
    t = static_cast<HandlerTable*>(std::malloc(bytes));
    if (t == nullptr) return;  // keep the old table: it covers the old sites
    t->n = sites.size();
    std::copy(sites.begin(), sites.end(), t->sites);
  }
  HandlerTable* old = g_handler_table.exchange(t);
  // Grace period: a handler that loaded `old` still has g_handler_users up.
  while (g_handler_users.load() != 0) sched_yield();
  std::free(old);
}

void sync_cores() { usrtrace::patch::sync_cores(); }

bool sweep_threads(std::string* why) { return usrtrace::patch::sweep_threads(why); }

SignalStats signal_stats() {
  return {g_traps.load(std::memory_order_relaxed), g_sweep_moves.load(std::memory_order_relaxed),
          usrtrace::patch::sync_count(), usrtrace::patch::sync_method()};
}

}  // namespace usrtrace::function::patch::detail
