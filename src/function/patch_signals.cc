// The patcher's signal side (patch.cc's [A]..[D] need them): the table of
// sites its signal handlers read, the SIGTRAP handler that moves a thread
// past a site being patched, the sweep that moves threads out of sites of
// several nops, and the core sync. See docs/design/function-patching.md.
#include <dirent.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "function/patch_internal.h"

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
// Sent to every other thread before the first arming of a site made of
// several nops (gcc's 0x90 x 5): a thread stopped between two of them would
// otherwise resume in the middle of the new call instruction. Its handler
// moves such a thread to the end of the site (skipping nops), then acks.
// A real-time signal, so that it queues and is never merged away.
constexpr size_t kSweepMax = 1024;  // threads signalled per round
std::atomic<int32_t> g_sweep_tid[kSweepMax];
std::atomic<uint32_t> g_sweep_ack[kSweepMax];
std::atomic<uint32_t> g_sweep_n{0};
std::atomic<uint32_t> g_sweep_gen{0};
struct sigaction g_prev_sweep;

// Context: signal handler, async-signal-safe.
void on_sweep(int sig, siginfo_t* info, void* ucv) {
  // order: acquire pairs with the patcher's release of the generation, after
  // it wrote the tids of this round.
  const uint32_t gen = g_sweep_gen.load(std::memory_order_acquire);
  auto* uc = static_cast<ucontext_t*>(ucv);
  const uint64_t ip = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
  g_handler_users.fetch_add(1);
  const HandlerSite* s = find_handler_site(g_handler_table.load(), ip, true);
  const uint64_t next = s ? s->fn + s->len : 0;
  g_handler_users.fetch_sub(1);
  if (s != nullptr) {
    uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(next);
    g_sweep_moves.fetch_add(1, std::memory_order_relaxed);  // order: a statistic
  }
  const int32_t tid = static_cast<int32_t>(syscall(SYS_gettid));
  const uint32_t n = std::min<uint32_t>(g_sweep_n.load(std::memory_order_acquire), kSweepMax);
  for (uint32_t i = 0; i < n; ++i) {
    if (g_sweep_tid[i].load(std::memory_order_relaxed) == tid) {
      // order: release publishes the rip fix-up above (made in our own
      // context, which the kernel restores) before the patcher goes on.
      g_sweep_ack[i].store(gen, std::memory_order_release);
      break;
    }
  }
  // A signal of ours that the program also uses would reach the program too.
  if ((info == nullptr || info->si_code != SI_TKILL) || info->si_pid != getpid()) {
    if ((g_prev_sweep.sa_flags & SA_SIGINFO) && g_prev_sweep.sa_sigaction != nullptr)
      g_prev_sweep.sa_sigaction(sig, info, ucv);
    else if (!(g_prev_sweep.sa_flags & SA_SIGINFO) && g_prev_sweep.sa_handler != SIG_DFL &&
             g_prev_sweep.sa_handler != SIG_IGN)
      g_prev_sweep.sa_handler(sig);
  }
}

// ---- Core sync ----------------------------------------------------------

enum class SyncMethod { kSyncCore, kExpedited, kMprotect };
SyncMethod g_sync = SyncMethod::kMprotect;
void* g_ipi_page = nullptr;
std::atomic<uint64_t> g_syncs{0};

long membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

void sync_init() {
  const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) &&
      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE) == 0) {
    g_sync = SyncMethod::kSyncCore;
    return;
  }
  if (cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
      membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0) {
    g_sync = SyncMethod::kExpedited;
    return;
  }
  g_ipi_page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  g_sync = SyncMethod::kMprotect;
}

// Every thread of the process executes a serializing instruction before
// this returns (the user-space analogue of text_poke_sync()).
//   kSyncCore:  what membarrier promises.
//   kExpedited: an IPI to every CPU running one of our threads; on x86 the
//               return from that interrupt (iret) is serializing, and a
//               thread not running is serialized by its next return to
//               user space. Not a documented membarrier guarantee.
//   kMprotect:  no membarrier (seccomp, old kernel): a write-protect of a
//               touched page makes the kernel shoot down its TLB entry on
//               every CPU running us, by IPI: the same argument as above.
// Context: control plane, patch lock held.
void sync_cores_now() {
  g_syncs.fetch_add(1, std::memory_order_relaxed);  // order: a statistic
  switch (g_sync) {
    case SyncMethod::kSyncCore:
      if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0) return;
      break;
    case SyncMethod::kExpedited:
      if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
      break;
    case SyncMethod::kMprotect:
      break;
  }
  if (g_ipi_page == nullptr) return;
  static_cast<volatile char*>(g_ipi_page)[0] = 1;
  mprotect(g_ipi_page, 4096, PROT_READ);
  mprotect(g_ipi_page, 4096, PROT_READ | PROT_WRITE);
}

}  // namespace

int sweep_signal_number() { return SIGRTMAX - 3; }

void install_signal_handlers() {
  sync_init();
  struct sigaction sa {};
  sa.sa_sigaction = on_sigtrap;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, &g_prev_trap);
  sa.sa_sigaction = on_sweep;
  sigaction(sweep_signal_number(), &sa, &g_prev_sweep);
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

void sync_cores() { sync_cores_now(); }

// [B]: every other thread runs on_sweep once. Returns false (and *why) when
// some thread did not answer in time (the signal blocked, or a handler of
// its own for it).
bool sweep_threads(std::string* why) {
  const pid_t pid = getpid();
  const int32_t self = static_cast<int32_t>(syscall(SYS_gettid));
  std::vector<int32_t> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      const long t = strtol(e->d_name, nullptr, 10);
      if (t > 0 && t != self) tids.push_back(static_cast<int32_t>(t));
    }
    closedir(d);
  } else {
    *why = "cannot list /proc/self/task for the patch sweep";
    return false;
  }
  for (size_t first = 0; first < tids.size(); first += kSweepMax) {
    const size_t n = std::min(kSweepMax, tids.size() - first);
    for (size_t i = 0; i < n; ++i) {
      g_sweep_tid[i].store(tids[first + i], std::memory_order_relaxed);
      g_sweep_ack[i].store(0, std::memory_order_relaxed);
    }
    g_sweep_n.store(static_cast<uint32_t>(n), std::memory_order_relaxed);
    uint32_t gen = g_sweep_gen.load(std::memory_order_relaxed) + 1;
    if (gen == 0) gen = 1;
    // order: release: a handler that sees this generation sees the tids.
    g_sweep_gen.store(gen, std::memory_order_release);
    std::vector<bool> done(n, false);
    for (size_t i = 0; i < n; ++i)
      if (syscall(SYS_tgkill, pid, tids[first + i], sweep_signal_number()) != 0) done[i] = true;  // gone
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (unsigned spin = 0;; ++spin) {
      bool all = true;
      for (size_t i = 0; i < n; ++i) {
        if (done[i]) continue;
        // order: acquire pairs with the handler's release.
        if (g_sweep_ack[i].load(std::memory_order_acquire) == gen ||
            (syscall(SYS_tgkill, pid, tids[first + i], 0) != 0 && errno == ESRCH))
          done[i] = true;
        else
          all = false;
      }
      if (all) break;
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec - start.tv_sec >= 3) {
        for (size_t i = 0; i < n; ++i)
          if (!done[i])
            *why = "thread " + std::to_string(tids[first + i]) +
                   " did not answer the patch sweep signal (blocked?)";
        return false;
      }
      if (spin < 64) {
        sched_yield();
      } else {
        const timespec ts{0, 100 * 1000};  // a thread that must first be scheduled
        nanosleep(&ts, nullptr);
      }
    }
  }
  return true;
}

SignalStats signal_stats() {
  const char* method = g_sync == SyncMethod::kSyncCore    ? "membarrier-sync-core"
                       : g_sync == SyncMethod::kExpedited ? "membarrier-expedited"
                                                          : "mprotect-ipi";
  return {g_traps.load(std::memory_order_relaxed), g_sweep_moves.load(std::memory_order_relaxed),
          g_syncs.load(std::memory_order_relaxed), method};
}

}  // namespace usrtrace::function::patch::detail
