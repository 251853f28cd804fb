#include "writers/writers.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "base/mutex.h"
#include "base/sys.h"

namespace usrtrace::writers {

constinit __attribute__((tls_model("initial-exec"))) thread_local ThreadState t_state;

namespace {

std::atomic<ThreadState*> g_head{nullptr};
base::Mutex g_mu;  // unlinking and scanning
pthread_key_t g_exit_key;
std::atomic<int> g_membarrier{-1};
std::atomic<ThreadExitHook> g_exit_hook{nullptr};

void unlink(ThreadState* t) {
  base::MutexLock l(&g_mu);
  ThreadState* expected = t;
  if (g_head.compare_exchange_strong(expected, t->next, std::memory_order_acq_rel)) return;
  for (ThreadState* p = g_head.load(std::memory_order_acquire); p; p = p->next) {
    if (p->next == t) {
      p->next = t->next;
      return;
    }
  }
}

void on_thread_exit(void* p) {
  auto* t = static_cast<ThreadState*>(p);
  // order: acquire pairs with set_thread_exit_hook's release.
  if (ThreadExitHook hook = g_exit_hook.load(std::memory_order_acquire)) hook(t->tid);
  unlink(t);
  // A later key destructor that writes registers the thread again.
  t->state = kUnregistered;
}

void after_fork_child() {
  // Only the forking thread exists in the child; the other threads' nodes
  // would block grace periods forever.
  ThreadState* me = &t_state;
  me->next = nullptr;
  me->tid = 0;
  me->state = kUnregistered;
  g_head.store(nullptr, std::memory_order_relaxed);
  new (&g_mu) base::Mutex();
}

struct Init {
  Init() {
    pthread_key_create(&g_exit_key, on_thread_exit);
    pthread_atfork(nullptr, nullptr, after_fork_child);
    int ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    g_membarrier.store(ok, std::memory_order_release);
  }
};
__attribute__((init_priority(101))) Init g_init;

// saved_cmdlines: a fixed table, one entry per tid hash; a writer that
// finds the entry busy skips (the name is best effort).
constexpr int kCmdlines = kSavedCmdlines;
struct CmdlineEntry {
  std::atomic<uint32_t> seq{0};  // odd while written
  int tid = 0;
  char comm[16] = {};
};
CmdlineEntry g_cmdlines[kCmdlines];

// Mirrors, and the save_comm() calls that may be writing into them.
constexpr int kMaxMirrors = 64;
std::atomic<MirrorSlot*> g_mirrors[kMaxMirrors];
std::atomic<uint32_t> g_mirror_users{0};

// The seqlock write of one slot, as for g_cmdlines; a busy slot is skipped.
// The data is stored and loaded with relaxed atomics (a byte at a time for
// the name; a thread's name is saved once or on a rename): a reader that
// overlaps a write retries on the sequence, and no access is a data race.
template <class Slot>
void put_comm(Slot& e, int tid, const char* comm) {
  uint32_t s = e.seq.load(std::memory_order_relaxed);
  if ((s & 1) || !e.seq.compare_exchange_strong(s, s + 1, std::memory_order_acquire)) return;
  __atomic_store_n(&e.tid, tid, __ATOMIC_RELAXED);
  const size_t n = strnlen(comm, sizeof e.comm - 1);
  for (size_t i = 0; i < sizeof e.comm; ++i)
    __atomic_store_n(&e.comm[i], i < n ? comm[i] : '\0', __ATOMIC_RELAXED);
  e.seq.store(s + 2, std::memory_order_release);
}

}  // namespace

static bool read_entry(const CmdlineEntry& e, int* tid, char* comm);

bool register_self(ThreadState& t) {
  if (t.state == kRegistering) return false;
  t.state = kRegistering;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t.tid = base::gettid_cached();
  char comm[16] = {};
  if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) std::strcpy(comm, "<...>");
  std::memcpy(t.comm, comm, sizeof t.comm);
  save_comm(t.tid, comm);
  pthread_setspecific(g_exit_key, &t);
  ThreadState* head = g_head.load(std::memory_order_relaxed);
  do {
    t.next = head;
  } while (!g_head.compare_exchange_weak(head, &t, std::memory_order_acq_rel));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t.state = kRegistered;
  return true;
}

void set_thread_exit_hook(ThreadExitHook hook) { g_exit_hook.store(hook, std::memory_order_release); }

void synchronize_writers() {
  if (g_membarrier.load(std::memory_order_acquire) == 1)
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);  // single-threaded use only
  base::MutexLock l(&g_mu);
  for (ThreadState* t = g_head.load(std::memory_order_acquire); t; t = t->next) {
    if (t == &t_state) continue;  // the caller is not writing
    // order: acquire pairs with enter()/exit()'s release stores.
    const uint64_t seen = t->ctr.load(std::memory_order_acquire);
    if ((seen & 0xff) == 0) continue;
    for (int spins = 0;; ++spins) {
      const uint64_t now = t->ctr.load(std::memory_order_acquire);
      if ((now & 0xff) == 0 || (now >> 8) != (seen >> 8)) break;
      if (spins < 1000)
        __builtin_ia32_pause();
      else
        sched_yield();
    }
  }
}

void save_comm(int tid, const char* comm) {
  const unsigned i = static_cast<unsigned>(tid) % kCmdlines;
  put_comm(g_cmdlines[i], tid, comm);
  // order: seq_cst, with remove_cmdline_mirror(): either it sees us counted,
  // or we see its mirror gone.
  g_mirror_users.fetch_add(1, std::memory_order_seq_cst);
  for (auto& m : g_mirrors)
    if (MirrorSlot* slots = m.load(std::memory_order_seq_cst)) put_comm(slots[i], tid, comm);
  g_mirror_users.fetch_sub(1, std::memory_order_release);
}

bool add_cmdline_mirror(MirrorSlot* slots) {
  for (int i = 0; i < kCmdlines; ++i) {
    int tid = 0;
    char comm[16];
    if (read_entry(g_cmdlines[i], &tid, comm)) put_comm(slots[i], tid, comm);
  }
  for (auto& m : g_mirrors) {
    MirrorSlot* expected = nullptr;
    if (m.compare_exchange_strong(expected, slots, std::memory_order_seq_cst)) return true;
  }
  return false;
}

void remove_cmdline_mirror(MirrorSlot* slots) {
  for (auto& m : g_mirrors) {
    MirrorSlot* expected = slots;
    m.compare_exchange_strong(expected, nullptr, std::memory_order_seq_cst);
  }
  // A save_comm() that loaded the mirror is counted until it is done with it.
  while (g_mirror_users.load(std::memory_order_seq_cst) != 0) sched_yield();
}

static bool read_entry(const CmdlineEntry& e, int* tid, char* comm) {
  for (int tries = 0; tries < 100; ++tries) {
    uint32_t s = e.seq.load(std::memory_order_acquire);
    if (s & 1) continue;
    *tid = __atomic_load_n(&e.tid, __ATOMIC_RELAXED);
    for (size_t i = 0; i < 16; ++i) comm[i] = __atomic_load_n(&e.comm[i], __ATOMIC_RELAXED);
    // order: the data loads come before the re-check of seq (seqlock reader).
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) == s) return s != 0;
  }
  return false;
}

std::string comm_of(int tid) {
  if (tid == 0) return "<idle>";
  int t = 0;
  char comm[16];
  if (read_entry(g_cmdlines[static_cast<unsigned>(tid) % kCmdlines], &t, comm) && t == tid)
    return std::string(comm, strnlen(comm, 15));
  return "<...>";
}

std::vector<Cmdline> saved_cmdlines() {
  std::vector<Cmdline> out;
  for (const CmdlineEntry& e : g_cmdlines) {
    int tid = 0;
    char comm[16];
    if (read_entry(e, &tid, comm)) out.push_back({tid, std::string(comm, strnlen(comm, 15))});
  }
  return out;
}

}  // namespace usrtrace::writers
