// Writing code while it runs (text.h): pages near code, the core sync and
// the thread sweep. Moved here from src/function/ (patch.cc's stub pages,
// patch_signals.cc's sync and sweep) so that the function tracers' patcher
// and the probe engine share one of each: one sweep signal, one membarrier
// registration, one allocator.
#include "patch/text.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

namespace usrtrace::patch {

// ---- Pages near code ------------------------------------------------------

uintptr_t map_near(uintptr_t lo, uintptr_t hi, size_t size, int prot, std::string* why) {
  constexpr uint64_t kPage = 4096, kStep = 1 << 20;
  // A rel32 reaches [next - 2 GiB, next + 2 GiB); two pages of margin cover
  // the instruction's own length on either side.
  constexpr uint64_t kReach = (1ull << 31) - 2 * kPage;
  for (uint64_t k = 1; k < 2048; ++k) {
    for (int dir = 0; dir < 2; ++dir) {
      uint64_t at;
      if (dir == 0) {
        if (lo < k * kStep + size) continue;
        at = (lo - k * kStep) & ~(kPage - 1);
      } else {
        at = ((hi + kPage - 1) & ~(kPage - 1)) + k * kStep;
      }
      const uint64_t far = std::max(hi > at ? hi - at : 0, at + size > lo ? at + size - lo : 0);
      if (far > kReach) continue;
      void* p = mmap(reinterpret_cast<void*>(at), size, prot,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == MAP_FAILED) continue;
      if (reinterpret_cast<uint64_t>(p) != at) {  // a kernel without MAP_FIXED_NOREPLACE
        munmap(p, size);
        continue;
      }
      return at;
    }
  }
  *why = "no free page within +-2 GiB of the code";
  return 0;
}

// ---- Core sync ------------------------------------------------------------

namespace {

enum class SyncMethod { kSyncCore, kExpedited, kMprotect };
std::once_flag g_sync_once;
SyncMethod g_sync = SyncMethod::kMprotect;  // written once, under g_sync_once
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
  if (g_ipi_page == MAP_FAILED) g_ipi_page = nullptr;
  g_sync = SyncMethod::kMprotect;
}

}  // namespace

// Every thread of the process executes a serializing instruction before
// this returns.
//   kSyncCore:  what membarrier promises.
//   kExpedited: an IPI to every CPU running one of our threads; on x86 the
//               return from that interrupt (iret) is serializing, and a
//               thread not running is serialized by its next return to
//               user space. Not a documented membarrier guarantee.
//   kMprotect:  no membarrier (seccomp, old kernel): a write-protect of a
//               touched page makes the kernel shoot down its TLB entry on
//               every CPU running us, by IPI: the same argument as above.
void sync_cores() {
  std::call_once(g_sync_once, sync_init);
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

const char* sync_method() {
  std::call_once(g_sync_once, sync_init);
  return g_sync == SyncMethod::kSyncCore    ? "membarrier-sync-core"
         : g_sync == SyncMethod::kExpedited ? "membarrier-expedited"
                                            : "mprotect-ipi";
}

uint64_t sync_count() { return g_syncs.load(std::memory_order_relaxed); }

// ---- The sweep ------------------------------------------------------------
//
// The patcher lists /proc/self/task, writes the tids of a round, publishes
// the round's generation (release), and tgkills each thread with the sweep
// signal. A thread's handler runs the fixups on its interrupted context,
// then finds its tid and stores the generation into its ack (release). The
// patcher waits for every ack or for the thread to be gone (ESRCH).
//
//   fixups:  an append-only array; a fixup's pointer is stored before the
//            count that covers it (release), so the handler (acquire) never
//            calls a null one.

namespace {

constexpr int kMaxFixups = 4;
std::atomic<SweepFixup> g_fixups[kMaxFixups];
std::atomic<int> g_nfixups{0};
std::mutex g_sweep_mu;  // one sweep at a time, and the handler's installation
bool g_sweep_installed = false;
struct sigaction g_prev_sweep;  // written once, before our handler is installed

constexpr size_t kSweepMax = 1024;  // threads signalled per round
std::atomic<int32_t> g_sweep_tid[kSweepMax];
std::atomic<uint32_t> g_sweep_ack[kSweepMax];
std::atomic<uint32_t> g_sweep_n{0};
std::atomic<uint32_t> g_sweep_gen{0};
std::atomic<uint64_t> g_sweep_moves{0};

// Context: signal handler, async-signal-safe.
void on_sweep(int sig, siginfo_t* info, void* ucv) {
  // order: acquire pairs with the patcher's release of the generation, after
  // it wrote the tids of this round.
  const uint32_t gen = g_sweep_gen.load(std::memory_order_acquire);
  auto* uc = static_cast<ucontext_t*>(ucv);
  // order: acquire pairs with add_sweep_fixup's release.
  const int nf = g_nfixups.load(std::memory_order_acquire);
  for (int i = 0; i < nf; ++i) {
    if (g_fixups[i].load(std::memory_order_relaxed)(uc, false)) {
      g_sweep_moves.fetch_add(1, std::memory_order_relaxed);  // order: a statistic
      break;  // one window at most: the thread is outside every other now
    }
  }
  const auto tid = static_cast<int32_t>(syscall(SYS_gettid));
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

// Under g_sweep_mu.
void install_sweep_locked() {
  if (g_sweep_installed) return;
  g_sweep_installed = true;
  struct sigaction sa {};
  sa.sa_sigaction = on_sweep;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(sweep_signal(), &sa, &g_prev_sweep);
}

// Whether thread `tid` is off its CPU (blocked in a system call, or
// preempted) at a user address no fixup would move, per
// /proc/self/task/TID/syscall: "NR ARGS... SP PC" in a call, "-1 SP PC"
// outside one, "running" on a CPU. Only then may the sweep leave it
// unsignalled (text.h). Control plane: reads a file.
bool off_cpu_outside(int32_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(tid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  if (strncmp(buf, "running", 7) == 0) return false;
  // The last field is the user pc.
  const char* last = strrchr(buf, ' ');
  if (last == nullptr) return false;
  char* end = nullptr;
  const unsigned long long pc = strtoull(last + 1, &end, 16);
  if (end == last + 1 || pc == 0) return false;
  ucontext_t uc{};
  uc.uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(pc);
  const int nf = g_nfixups.load(std::memory_order_acquire);
  for (int i = 0; i < nf; ++i)
    if (g_fixups[i].load(std::memory_order_relaxed)(&uc, true)) return false;
  return true;
}

}  // namespace

void add_sweep_fixup(SweepFixup fixup) {
  std::lock_guard<std::mutex> lock(g_sweep_mu);
  install_sweep_locked();
  const int n = g_nfixups.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    if (g_fixups[i].load(std::memory_order_relaxed) == fixup) return;
  if (n == kMaxFixups) abort();  // a programming error: one per patcher
  g_fixups[n].store(fixup, std::memory_order_relaxed);
  // order: release: a handler that sees the count sees the pointer.
  g_nfixups.store(n + 1, std::memory_order_release);
}

int sweep_signal() { return SIGRTMAX - 3; }

uint64_t sweep_moves() { return g_sweep_moves.load(std::memory_order_relaxed); }

bool sweep_threads(std::string* why) {
  std::lock_guard<std::mutex> lock(g_sweep_mu);
  install_sweep_locked();
  const pid_t pid = getpid();
  const auto self = static_cast<int32_t>(syscall(SYS_gettid));
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
    for (size_t i = 0; i < n; ++i) {
      if (off_cpu_outside(tids[first + i])) {
        done[i] = true;  // nothing to move, and no EINTR to cause
        continue;
      }
      if (syscall(SYS_tgkill, pid, tids[first + i], sweep_signal()) != 0) done[i] = true;  // gone
    }
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

}  // namespace usrtrace::patch
