// The code patcher (patch.h, docs/design/patch-engine.md).
//
// A site: the address, its original first byte, how its instruction is
// run after the probe (out of line in a slot, or emulated), and the
// (handler, cookie) pairs. The SIGTRAP handler finds sites in an
// immutable sorted table published by pointer:
//
//   publish:  the patcher builds a new table, stores its pointer, then
//             waits out the readers (synchronize_readers) before freeing
//             the old one.
//   read:     the handler brackets its use of the table with read_lock()
//             and read_unlock(): SRCU's counters (see "Readers" below), an
//             add to this CPU's slot each, no locked instruction and no
//             line shared with the other CPUs' hits.
//
// Arming writes 0xCC over the first byte; disarming writes the original
// back. x86 makes a one-byte store to code atomic for every core: a
// thread executes either the old instruction or the int3, never a mix.
// A thread that trapped on a site just disarmed finds no site in the table
// (or one whose byte is no longer 0xCC) and resumes at the restored byte:
// the kernel's uprobe does the same. Slots are never unmapped or reused: a
// thread may still be running a slot's copy after its site is gone.
#include "patch/patch.h"

#include "base/percpu.h"
#include "base/rseq.h"
#include "patch/detour.h"
#include "patch/text.h"

#include <Zydis/Zydis.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace usrtrace::patch {
namespace {

constexpr int kMaxHandlers = 8;
constexpr uint8_t kInt3 = 0xcc;

enum class Run : uint8_t { kSlot, kCall, kJmp };

struct Site {
  uintptr_t addr = 0;   // the probed address, Regs::ip
  uintptr_t at = 0;     // the patched one: addr, or addr + 4 past an endbr64
  uint8_t orig = 0;     // the first byte at `at`
  uint8_t len = 0;      // the instruction at `at`
  uint8_t xol_len = 0;  // kSlot: the copy's length before its jump back
  Run run = Run::kSlot;
  Method method = Method::kInt3;
  uintptr_t target = 0;              // kCall, kJmp: where to
  uintptr_t slot = 0;                // kSlot: the copy
  detail::Detour* detour = nullptr;  // armed as a jump (never freed)
  // Hits, counted by whichever path runs the handlers; allocated by add(),
  // freed by remove() after the publish that waits out every handler.
  base::PerCpuCounter* hits = nullptr;
  int nh = 0;
  Handler h[kMaxHandlers] = {};
  void* cookie[kMaxHandlers] = {};
};

struct Table {
  std::vector<Site> sites;  // sorted by `at`
};

// What add() prepared for an address, kept for its next add(): a site
// toggled a thousand times reuses its slots instead of taking new ones
// (slots are never freed, so this also bounds their number). Valid while
// the code there is still what it was (`bytes`).
struct Prepared {
  uintptr_t at;
  uint8_t bytes[24];
  Site site;               // run, target, slot, len, xol_len, orig
  detail::Detour* detour;  // nullptr: int3 only
  std::string why;         // why int3 only
};
// Under g_mu. A deque: pointers to its elements stay valid as it grows;
// g_prepared_at finds an address's (several, when its code changed).
std::deque<Prepared>* g_prepared = nullptr;
std::unordered_multimap<uintptr_t, Prepared*>* g_prepared_at = nullptr;

std::mutex g_mu;                       // the patcher's
std::vector<Site>* g_sites = nullptr;  // the truth, under g_mu
std::atomic<const Table*> g_table{nullptr};

// ---- Readers: Linux's classic SRCU (kernel/rcu/srcu.c before tree SRCU,
// `__synchronize_srcu`) on per-CPU counters (base::PerCpuCounter: an rseq
// add to the slot of the CPU the thread runs on).
//
//   read_lock:    i = g_idx & 1; lock[i] += 1        [B] then the table load
//   read_unlock:  the table's last use; unlock[i] += 1  [C]
//   idle(i):      u = sum(unlock[i]); FENCE; l = sum(lock[i]); l == u
//   synchronize:  FENCE; wait idle(inactive); g_idx += 1; FENCE;
//                 wait idle(the index readers took until now); FENCE
//
// A reader may move CPUs between [B] and [C]: its lock is counted on one
// slot and its unlock on another, and only the sums are compared. Once
// the unlocks read are all matched by locks read after them, no reader that
// used index i before the check is still inside: an unlock counted implies
// its lock is counted (the fence between the sums); a reader whose lock was
// not yet counted has not loaded the table, and will load the new one (the
// fence after the unpublishing store). The flip bounds the wait: readers
// that start during it take the other index. FENCE is the process-wide
// barrier (membarrier PRIVATE_EXPEDITED_RSEQ, base::rseq_fence) that stands
// in for the full barriers SRCU's readers execute at [B] and [C] (liburcu's
// "memb" flavour): the readers themselves only need the compiler's order.
// Where the kernel has no such membarrier (rseq_init() failed), each reader
// executes its own seq_cst fence at [B] and [C], and FENCE is a local one.
//
// ThreadSanitizer knows neither rseq nor membarrier: its build counts
// readers with one atomic counter (the protocol it can check), as this
// engine did before.
#if defined(__SANITIZE_THREAD__)
#define USRTRACE_PATCH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define USRTRACE_PATCH_TSAN 1
#endif
#endif
struct Readers {
  base::PerCpuCounter lock[2], unlock[2];
};
Readers* g_readers = nullptr;  // set by install(), before the first site
bool g_fenced = false;         // FENCE is membarrier: readers need no fence of their own
#ifdef USRTRACE_PATCH_TSAN
std::atomic<long> g_users{0};
#else
std::atomic<unsigned> g_idx{0};
#endif

// Context: any thread, signal handlers too; no lock, no system call.
inline unsigned read_lock() {
#ifdef USRTRACE_PATCH_TSAN
  g_users.fetch_add(1, std::memory_order_seq_cst);
  return 0;
#else
  const unsigned i = g_idx.load(std::memory_order_relaxed) & 1u;
  g_readers->lock[i].inc();
  if (g_fenced)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  return i;
#endif
}

inline void read_unlock(unsigned i) {
#ifdef USRTRACE_PATCH_TSAN
  (void)i;
  g_users.fetch_sub(1, std::memory_order_release);
#else
  if (g_fenced)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  g_readers->unlock[i].inc();
#endif
}

#ifndef USRTRACE_PATCH_TSAN
void process_fence() {
  if (g_fenced)
    base::rseq_fence();
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool idle(unsigned i) {
  const uint64_t unlocks = g_readers->unlock[i].sum();
  process_fence();
  return g_readers->lock[i].sum() == unlocks;
}
#endif

// Returns once no reader that could see a table unpublished before the
// call still reads it. Readers never block: the waits are short. Context:
// control plane, under g_mu (one synchronizer at a time, as SRCU's mutex).
void synchronize_readers() {
#ifdef USRTRACE_PATCH_TSAN
  while (g_users.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
#else
  process_fence();
  const unsigned cur = g_idx.load(std::memory_order_relaxed);
  while (!idle((cur + 1) & 1u)) std::this_thread::yield();
  g_idx.store(cur + 1, std::memory_order_relaxed);
  process_fence();
  while (!idle(cur & 1u)) std::this_thread::yield();
  process_fence();
#endif
}
struct sigaction g_prev_trap;
bool g_installed = false;

// ---- Slots: 64 bytes (the int3 path's copy) or kDetourSlotSize, in RWX
// regions near the code they copy (a relocated rip-relative operand must
// reach its target from the slot). Regions of 64 KiB: map_near() steps a
// megabyte per mapping it tries, so arming a large binary's tens of
// thousands of functions must take few of them (with one page each, the
// thousandth mapping tried a thousand addresses first).
struct SlotPage {
  uintptr_t base;
  size_t used;
};
std::vector<SlotPage>* g_pages = nullptr;
constexpr size_t kSlotSize = 64;  // an emulated indirect call: 20 + 15, then the jump back
constexpr size_t kPage = 4096;
constexpr size_t kSlotRegion = 16 * kPage;

uintptr_t alloc_slot(uintptr_t near, size_t size = kSlotSize) {
  // The newest regions first: the older ones are usually full.
  for (auto p = g_pages->rbegin(); p != g_pages->rend(); ++p) {
    const intptr_t d = static_cast<intptr_t>(p->base) - static_cast<intptr_t>(near);
    if (p->used + size <= kSlotRegion && d > -(1l << 30) &&
        d < (1l << 30) - static_cast<intptr_t>(kSlotRegion)) {
      const uintptr_t s = p->base + p->used;
      p->used += (size + 31) & ~size_t{31};
      return s;
    }
  }
  // A new region, the nearest free one (text.h); within 1 GiB, so that a
  // rip-relative operand's target near the site is within reach of the slot.
  std::string why;
  const uintptr_t at = map_near(near, near + 1, kSlotRegion, PROT_READ | PROT_WRITE | PROT_EXEC, &why);
  if (at == 0) return 0;
  const intptr_t d = static_cast<intptr_t>(at) - static_cast<intptr_t>(near);
  if (d <= -(1l << 30) || d >= (1l << 30) - static_cast<intptr_t>(kSlotRegion)) {
    munmap(reinterpret_cast<void*>(at), kSlotRegion);
    return 0;
  }
  g_pages->push_back({at, (size + 31) & ~size_t{31}});
  return at;
}

// ---- Slots of punned jumps (detour.h, plan_pun): each at an address the
// code's own bytes choose, within [lo, hi] (from one address to 16 MiB
// wide). Regions of two pages, mapped where such a range needs one; a slot
// goes at the lowest free address of the range in a region.
struct PunRegion {
  uintptr_t base;
  std::vector<std::pair<uintptr_t, uintptr_t>> used;  // [start, end)
};
std::vector<PunRegion>* g_pun_regions = nullptr;
constexpr size_t kPunRegion = 2 * kPage;

uintptr_t fit_pun(PunRegion& r, uintptr_t lo, uintptr_t hi, size_t size) {
  const uintptr_t first = std::max(lo, r.base), last = std::min(hi, r.base + kPunRegion - size);
  if (first > last) return 0;
  // Candidates: the range's start, and the end of every slot in it.
  std::vector<uintptr_t> cand{first};
  for (const auto& u : r.used)
    if (u.second >= first && u.second <= last) cand.push_back(u.second);
  std::sort(cand.begin(), cand.end());
  for (uintptr_t t : cand) {
    bool free = true;
    for (const auto& u : r.used) free = free && (t + size <= u.first || t >= u.second);
    if (free) {
      r.used.emplace_back(t, t + size);
      return t;
    }
  }
  return 0;
}

uintptr_t alloc_pun(uintptr_t lo, uintptr_t hi, size_t size) {
  if (g_pun_regions == nullptr) g_pun_regions = new std::vector<PunRegion>();
  for (PunRegion& r : *g_pun_regions)
    if (uintptr_t t = fit_pun(r, lo, hi, size); t != 0) return t;
  // A new region where the range starts, else at some of its later pages
  // (a range of several pages may be partly taken by other mappings).
  const uintptr_t span = hi - lo;
  for (int k = 0; k < 16; ++k) {
    const uintptr_t at = (lo + span / 16 * static_cast<uintptr_t>(k)) & ~(kPage - 1);
    if (k > 0 && at <= (lo & ~(kPage - 1))) continue;
    void* p = mmap(reinterpret_cast<void*>(at), kPunRegion, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) continue;
    if (reinterpret_cast<uintptr_t>(p) != at) {  // a kernel without MAP_FIXED_NOREPLACE
      munmap(p, kPunRegion);
      continue;
    }
    g_pun_regions->push_back({at, {}});
    if (uintptr_t t = fit_pun(g_pun_regions->back(), lo, hi, size); t != 0) return t;
  }
  return 0;
}

// ---- Writing one byte of code.
int write_byte(uintptr_t addr, uint8_t byte) {
  const uintptr_t page = addr & ~(kPage - 1);
  // The text is R-X; made writable for the store, then R-X again. The page
  // stays executable throughout: other threads keep running it.
  if (mprotect(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return -errno;
  // One byte of code is atomic for every core (text.h's poke: a store no
  // sanitizer instruments).
  usrtrace::patch::poke(addr, byte);
  mprotect(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_EXEC);
  return 0;
}

// Every address that ever was a site, for a trap that finds its site gone
// (append-only, read without a lock: an entry is written before the count
// that covers it is published).
constexpr int kMaxRetired = 4096;
std::atomic<uintptr_t> g_was[kMaxRetired];
std::atomic<int> g_nwas{0};

void note_site(uintptr_t addr) {
  const int n = g_nwas.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i)
    if (g_was[i].load(std::memory_order_relaxed) == addr) return;
  if (n == kMaxRetired) return;  // then the byte test alone decides
  g_was[n].store(addr, std::memory_order_relaxed);
  // order: release pairs with was_site's acquire: the entry is there.
  g_nwas.store(n + 1, std::memory_order_release);
}

bool was_site(uintptr_t addr) {
  const int n = g_nwas.load(std::memory_order_acquire);
  if (n == kMaxRetired) return true;
  for (int i = 0; i < n; ++i)
    if (g_was[i].load(std::memory_order_relaxed) == addr) return true;
  return false;
}

// Several bytes (the detour's tail); the same protection dance.
int poke_bytes(uintptr_t addr, const uint8_t* bytes, size_t n) {
  const uintptr_t first = addr & ~(kPage - 1), last = (addr + n - 1) & ~(kPage - 1);
  const size_t span = last - first + kPage;
  if (mprotect(reinterpret_cast<void*>(first), span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return -errno;
  for (size_t i = 0; i < n; ++i) usrtrace::patch::poke(addr + i, bytes[i]);
  mprotect(reinterpret_cast<void*>(first), span, PROT_READ | PROT_EXEC);
  return 0;
}

// ---- The trap.
void regs_from(const ucontext_t* uc, uintptr_t ip, Regs* r) {
  const greg_t* g = uc->uc_mcontext.gregs;
  auto u = [](greg_t v) { return static_cast<uint64_t>(v); };
  r->r15 = u(g[REG_R15]);
  r->r14 = u(g[REG_R14]);
  r->r13 = u(g[REG_R13]);
  r->r12 = u(g[REG_R12]);
  r->bp = u(g[REG_RBP]);
  r->bx = u(g[REG_RBX]);
  r->r11 = u(g[REG_R11]);
  r->r10 = u(g[REG_R10]);
  r->r9 = u(g[REG_R9]);
  r->r8 = u(g[REG_R8]);
  r->ax = u(g[REG_RAX]);
  r->cx = u(g[REG_RCX]);
  r->dx = u(g[REG_RDX]);
  r->si = u(g[REG_RSI]);
  r->di = u(g[REG_RDI]);
  r->orig_ax = 0;
  r->ip = ip;
  r->cs = 0;
  r->flags = u(g[REG_EFL]);
  r->sp = u(g[REG_RSP]);
  r->ss = 0;
}

// The site patched at `at`. Context: any thread, signal handlers too.
const Site* find(const Table* t, uintptr_t at) {
  auto it = std::lower_bound(t->sites.begin(), t->sites.end(), at,
                             [](const Site& s, uintptr_t a) { return s.at < a; });
  return it != t->sites.end() && it->at == at ? &*it : nullptr;
}

void chain(int sig, siginfo_t* info, void* uc) {
  const struct sigaction& prev = g_prev_trap;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) return prev.sa_sigaction(sig, info, uc);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    return prev.sa_handler(sig);
  }
  if (prev.sa_handler == SIG_IGN) return;
  // SIG_DFL: reset and let the trap happen again (the int3 is still there,
  // or the signal was sent): it kills as it would have.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (info->si_code != SI_KERNEL) raise(sig);
}

// The loader's r_brk (watch_loads): the address of its `ret`, trapped, and
// what to call there. Set once, under g_mu.
std::atomic<uintptr_t> g_load_at{0};
void (*g_load_hook)() = nullptr;

void on_trap(int sig, siginfo_t* info, void* ucv) {
  auto* uc = static_cast<ucontext_t*>(ucv);
  if (info->si_code == SI_KERNEL) {
    const uintptr_t at = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]) - 1;
    // order: acquire pairs with watch_loads' release: the hook is set.
    if (at == g_load_at.load(std::memory_order_acquire) && at != 0) {
      g_load_hook();
      // Then the `ret` the trap replaced.
      greg_t* g = uc->uc_mcontext.gregs;
      uint64_t ret;
      std::memcpy(&ret, reinterpret_cast<const void*>(g[REG_RSP]), 8);
      g[REG_RSP] += 8;
      g[REG_RIP] = static_cast<greg_t>(ret);
      return;
    }
    // order: the readers' protocol (read_lock), then an acquire of the table.
    const unsigned idx = read_lock();
    const Table* t = g_table.load(std::memory_order_acquire);
    const Site* s = t != nullptr ? find(t, at) : nullptr;
    if (s != nullptr) {
      Regs r;
      regs_from(uc, s->addr, &r);
      s->hits->inc();
      for (int i = 0; i < s->nh; ++i) s->h[i](&r, s->cookie[i]);
      greg_t* g = uc->uc_mcontext.gregs;
      switch (s->run) {
        case Run::kSlot:
          g[REG_RIP] = static_cast<greg_t>(s->slot);
          break;
        case Run::kCall: {
          const uint64_t ret = s->at + s->len;
          g[REG_RSP] -= 8;
          std::memcpy(reinterpret_cast<void*>(g[REG_RSP]), &ret, 8);
          g[REG_RIP] = static_cast<greg_t>(s->target);
          break;
        }
        case Run::kJmp:
          g[REG_RIP] = static_cast<greg_t>(s->target);
          break;
      }
      read_unlock(idx);
      return;
    }
    read_unlock(idx);
    // A site disarmed between the trap and now: its byte is back; run it.
    if (was_site(at) &&
        reinterpret_cast<const std::atomic<uint8_t>*>(at)->load(std::memory_order_relaxed) != kInt3) {
      uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(at);
      return;
    }
  }
  chain(sig, info, ucv);
}

// Our SIGTRAP handler, installed again if the program put its own in
// since (LLVM's InitLLVM sets one for every fatal signal in main(), after
// the recorder armed the constructors' functions): the program's becomes
// the one a trap that is not ours is chained to. Checked before each
// change of the code, when int3s are about to be written.
void own_trap() {
  struct sigaction cur {};
  if (sigaction(SIGTRAP, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_trap) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  // A trap of ours that comes between these two finds the program's
  // handler: the window is the one the first install() has too.
  g_prev_trap = cur;
  sigaction(SIGTRAP, &sa, nullptr);
}

void install() {
  if (g_installed) {
    own_trap();
    return;
  }
  g_installed = true;
  g_readers = new Readers();
  g_fenced = base::rseq_init();
  g_sites = new std::vector<Site>();
  g_pages = new std::vector<SlotPage>();
  g_prepared = new std::deque<Prepared>();
  g_prepared_at = new std::unordered_multimap<uintptr_t, Prepared*>();
  struct sigaction sa {};
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, &g_prev_trap);
}

void publish() {
  auto* t = new Table{*g_sites};
  std::sort(t->sites.begin(), t->sites.end(), [](const Site& a, const Site& b) { return a.at < b.at; });
  // Each slot's site in the new table, as find() would give it: a jump
  // written by arm_detour finds its site before the site records the
  // detour, and a slot left over from code since unloaded finds whatever
  // site is at its address now, as the trap does.
  for (const Prepared& p : *g_prepared)
    if (p.detour != nullptr)
      // order: release, before the table's exchange; the readers' order is
      // the table's (Readers, above).
      std::atomic_ref<const void*>(p.detour->live).store(find(t, p.at), std::memory_order_release);
  const Table* old = g_table.exchange(t, std::memory_order_seq_cst);
  synchronize_readers();
  delete old;
}

// How the instruction at s->at runs after its probe on the int3 path:
// copied into a slot (relocated by detour.cc's relocate(): rip-relative
// operands re-encoded, a short jcc widened), or emulated by the handler
// (call, jmp). 0 or -errno with *err.
int prepare(Site* s, std::string* err) {
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  const auto* code = reinterpret_cast<const uint8_t*>(s->at);
  if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, code, 15, &in, ops))) {
    *err = "the bytes there are not an instruction";
    return -EILSEQ;
  }
  s->len = in.length;
  s->orig = code[0];
  const bool is_call = in.mnemonic == ZYDIS_MNEMONIC_CALL, is_jmp = in.mnemonic == ZYDIS_MNEMONIC_JMP;
  if ((in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) && (is_call || is_jmp) && in.operand_count_visible == 1 &&
      ops[0].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
    ZyanU64 target = 0;
    if (ZYAN_FAILED(ZydisCalcAbsoluteAddress(&in, &ops[0], s->at, &target))) {
      *err = "cannot compute the branch's target";
      return -EINVAL;
    }
    s->run = is_call ? Run::kCall : Run::kJmp;
    s->target = target;
    return 0;
  }
  const uintptr_t slot = alloc_slot(s->at);
  if (slot == 0) {
    *err = "no free memory within 1 GiB of the site for its slot";
    return -ENOMEM;
  }
  uint8_t buf[kSlotSize] = {};
  const size_t k = detail::relocate(s->at, slot, true, buf, kSlotSize - 14, err);
  if (k == 0) return -EOPNOTSUPP;
  // jmp *0(%rip); .quad at + len
  static constexpr uint8_t kJmpAbs[6] = {0xff, 0x25, 0, 0, 0, 0};
  std::memcpy(buf + k, kJmpAbs, sizeof kJmpAbs);
  const uint64_t back = s->at + in.length;
  std::memcpy(buf + k + 6, &back, 8);
  std::memcpy(reinterpret_cast<void*>(slot), buf, sizeof buf);
  __builtin___clear_cache(reinterpret_cast<char*>(slot), reinterpret_cast<char*>(slot + kSlotSize));
  s->run = Run::kSlot;
  s->slot = slot;
  s->xol_len = static_cast<uint8_t>(k);
  return 0;
}

// Whether addr starts an instruction of [fn, fn + size) (decoded from fn,
// whose original bytes are at `code`).
bool on_boundary(uintptr_t addr, uintptr_t fn, size_t size, const uint8_t* code) {
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction in;
  for (uintptr_t at = fn; at < fn + size;) {
    if (at == addr) return true;
    if (at > addr) return false;
    if (ZYAN_FAILED(ZydisDecoderDecodeInstruction(&dec, nullptr, code + (at - fn),
                                                  std::min<size_t>(15, fn + size - at), &in)))
      return false;
    at += in.length;
  }
  return false;
}

// The bytes of [lo, hi) as they were before any probe: the code, with every
// site's original bytes put back. `by_at`: g_sites' indexes sorted by
// `at`. Under g_mu.
std::vector<uint8_t> original_code(uintptr_t lo, uintptr_t hi, const std::vector<size_t>& by_at) {
  std::vector<uint8_t> b(reinterpret_cast<const uint8_t*>(lo), reinterpret_cast<const uint8_t*>(hi));
  // A site's bytes start at most 23 bytes (Detour::orig) before hi's window.
  auto i = std::lower_bound(by_at.begin(), by_at.end(), lo > 24 ? lo - 24 : 0,
                            [](size_t k, uintptr_t a) { return (*g_sites)[k].at < a; });
  for (; i != by_at.end() && (*g_sites)[*i].at < hi; ++i) {
    const Site& s = (*g_sites)[*i];
    const size_t n = s.detour != nullptr ? s.detour->len : 1;  // a pun's bytes past len are unchanged
    for (size_t k = 0; k < n; ++k) {
      const uintptr_t a = s.at + k;
      if (a >= lo && a < hi) b[a - lo] = s.detour != nullptr ? s.detour->orig[k] : s.orig;
    }
  }
  return b;
}

// Writes each w[i], making each run of adjacent pages the writes touch
// writable once: an mprotect pair per run, not per write (detour.h's
// PokeMany). The text stays executable throughout: other threads keep
// running it.
void poke_many(detail::CodeWrite* w, size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return w[a].at < w[b].at; });
  for (size_t i = 0; i < n;) {
    const uintptr_t first = w[order[i]].at & ~(kPage - 1);
    uintptr_t last = (w[order[i]].at + w[order[i]].n - 1) & ~(kPage - 1);
    size_t j = i + 1;
    for (; j < n && (w[order[j]].at & ~(kPage - 1)) <= last + kPage; ++j)
      last = std::max(last, (w[order[j]].at + w[order[j]].n - 1) & ~(kPage - 1));
    const size_t span = last - first + kPage;
    int rc = 0;
    if (mprotect(reinterpret_cast<void*>(first), span, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) rc = -errno;
    for (size_t k = i; k < j; ++k) {
      detail::CodeWrite& c = w[order[k]];
      c.rc = rc;
      if (rc == 0)
        for (size_t b = 0; b < c.n; ++b) usrtrace::patch::poke(c.at + b, c.b[b]);
    }
    if (rc == 0) mprotect(reinterpret_cast<void*>(first), span, PROT_READ | PROT_EXEC);
    i = j;
  }
}

}  // namespace

const char* method_name(Method m) {
  switch (m) {
    case Method::kNop:
      return "nop";
    case Method::kDetour:
      return "detour";
    case Method::kPun:
      return "pun";
    case Method::kInt3:
      break;
  }
  return "int3";
}

namespace {

// g_sites' indexes sorted by `at`.
std::vector<size_t> sites_by_at() {
  std::vector<size_t> v(g_sites->size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  std::sort(v.begin(), v.end(), [](size_t a, size_t b) { return (*g_sites)[a].at < (*g_sites)[b].at; });
  return v;
}

// The site whose detour window holds `at` strictly inside, or -1.
long detour_around(uintptr_t at, const std::vector<size_t>& by_at) {
  auto i = std::lower_bound(by_at.begin(), by_at.end(), at,
                            [](size_t k, uintptr_t a) { return (*g_sites)[k].at < a; });
  // Windows are at most 19 bytes: the sites starting up to 19 bytes before.
  while (i != by_at.begin()) {
    --i;
    const Site& o = (*g_sites)[*i];
    if (o.at + 20 <= at) break;
    if (o.detour != nullptr && at > o.at && at < o.at + o.detour->span()) return static_cast<long>(*i);
  }
  return -1;
}

// The plan for one new site: what an earlier add() here prepared, if the
// code is still the same, else a new one. 0 or -errno with *err.
int plan_site(const Request& r, uintptr_t at, const std::vector<size_t>& by_at, Prepared** out,
              std::string* err) {
  // The original code around the site (other probes' bytes put back): the
  // function when its bounds are known, else the window's most.
  const uintptr_t lo = r.fn_size != 0 ? std::min(r.fn_start, at) : at;
  const uintptr_t hi = std::max(r.fn_size != 0 ? r.fn_start + r.fn_size : at, at + sizeof(Prepared::bytes));
  const std::vector<uint8_t> code = original_code(lo, hi, by_at);
  const uint8_t* here = code.data() + (at - lo);
  if (r.fn_size != 0 && !on_boundary(r.addr, r.fn_start, r.fn_size, code.data() + (r.fn_start - lo))) {
    *err = "Probe point is not an instruction boundary";
    return -EILSEQ;
  }
  auto [b, e] = g_prepared_at->equal_range(at);
  for (auto it = b; it != e; ++it)
    if (std::memcmp(it->second->bytes, here, sizeof(Prepared::bytes)) == 0) {
      *out = it->second;
      return 0;
    }
  Prepared p{};
  p.at = at;
  std::memcpy(p.bytes, here, sizeof p.bytes);
  p.site.addr = r.addr;
  p.site.at = at;
  if (int rc = prepare(&p.site, err); rc < 0) return rc;
  // Where it can be, the site becomes a jump (detour.cc).
  auto* d = new detail::Detour();
  uintptr_t slot = 0;
  // A function's entry: the ABI clears the direction flag at every call.
  const bool entry = r.fn_size != 0 && r.addr == r.fn_start;
  bool detour =
      detail::detour_supported() &&
      detail::plan_detour(at, r.fn_start, r.fn_size, {lo, code.data(), code.size()}, d, &p.why) == 0 &&
      (slot = alloc_slot(at, detail::kDetourSlotSize)) != 0 &&
      detail::build_slot(d, slot, detail::kDetourSlotSize, entry, &p.why) == 0;
  // Else a punned jump over the first instruction alone, where the code
  // after it lets one reach a slot (detour.h, plan_pun).
  if (!detour && detail::detour_supported()) {
    std::string why;
    uintptr_t plo = 0, phi = 0;
    detour = detail::plan_pun(at, {lo, code.data(), code.size()}, d, &why) == 0 &&
             detail::pun_range(d, here + d->len, &plo, &phi) &&
             (slot = alloc_pun(plo, phi, detail::kDetourSlotSize)) != 0 &&
             detail::build_slot(d, slot, detail::kDetourSlotSize, entry, &why) == 0;
    if (!detour) p.why += "; no punned jump either: " + (why.empty() ? "no free page where it points" : why);
  }
  if (!detour) {
    delete d;  // never published (its slot, if any, is simply not used)
    d = nullptr;
  } else {
    d->addr = r.addr;
    d->xol = p.site.run == Run::kSlot ? p.site.slot : 0;
    d->xol_len = p.site.xol_len;
  }
  p.detour = d;
  g_prepared->push_back(p);
  *out = &g_prepared->back();
  g_prepared_at->emplace(at, *out);
  return 0;
}

}  // namespace

std::vector<Outcome> add_many(const std::vector<Request>& reqs) {
  std::lock_guard<std::mutex> l(g_mu);
  install();
  std::vector<Outcome> out(reqs.size());
  std::unordered_map<uintptr_t, size_t> by_addr;  // live sites, and the batch's new ones, by addr
  for (size_t i = 0; i < g_sites->size(); ++i) by_addr.emplace((*g_sites)[i].addr, i);
  std::vector<size_t> by_at = sites_by_at();
  const size_t old_n = g_sites->size();
  bool changed = false;
  // The new sites, appended to a copy of the list that the first publish
  // below makes the truth; their detours, planned.
  std::vector<Site> fresh;
  std::vector<detail::Detour*> planned;
  std::vector<size_t> fresh_req;  // the request that made each
  std::vector<std::string> why;   // why each would stay on int3
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[i];
    Outcome& o = out[i];
    if (auto it = by_addr.find(r.addr); it != by_addr.end()) {
      Site& s = it->second < old_n ? (*g_sites)[it->second] : fresh[it->second - old_n];
      if (s.nh == kMaxHandlers) {
        o.rc = -EBUSY;
        o.err = "more than " + std::to_string(kMaxHandlers) + " probes on one address";
        continue;
      }
      s.h[s.nh] = r.h;
      s.cookie[s.nh] = r.cookie;
      ++s.nh;
      o.how = s.method;
      changed = true;
      continue;
    }
    // An endbr64 stays where it is (an indirect branch to addr must still
    // find it) and the site is the instruction after it: it changes no
    // register, so the handlers see the state at addr all the same.
    const uintptr_t at = detail::is_endbr64(r.addr) ? r.addr + 4 : r.addr;
    // Inside another probe's jump window (a mid-function probe a few bytes
    // after an entry probe): that probe goes back to int3, which runs one
    // instruction at a time and so reaches this one. Its int3 at byte 0
    // first, then the original bytes under it, synced (disarm_detour); a
    // thread in its copy finishes there; its int3 path runs its first
    // instruction alone again.
    bool near_other = false;  // then this one stays on int3 too
    for (long k; (k = detour_around(at, by_at)) >= 0;) {
      near_other = true;
      Site& os = (*g_sites)[static_cast<size_t>(k)];
      const detail::Detour* od = os.detour;
      detail::disarm_detour(od, poke_bytes);
      if (os.run == Run::kSlot && od->xol != 0) os.slot = od->xol;
      os.detour = nullptr;
      os.method = Method::kInt3;
      publish();
    }
    if (reinterpret_cast<const uint8_t*>(at)[0] == kInt3) {
      o.rc = -EBUSY;
      o.err = "there is an int3 there already (a debugger's breakpoint, or another tool's probe)";
      continue;
    }
    Prepared* prep = nullptr;
    if ((o.rc = plan_site(r, at, by_at, &prep, &o.err)) < 0) continue;
    if (r.jump_only && (near_other || prep->detour == nullptr)) {
      o.rc = -EOPNOTSUPP;
      o.err = near_other ? "inside another probe's jump" : prep->why;
      continue;
    }
    if (prep->detour == nullptr && getenv("USRTRACE_PATCH_DEBUG") != nullptr)
      fprintf(stderr, "usrtrace patch: 0x%lx stays on int3: %s\n", static_cast<unsigned long>(r.addr),
              prep->why.c_str());
    Site s = prep->site;
    s.addr = r.addr;
    s.detour = nullptr;
    s.method = Method::kInt3;
    s.hits = new base::PerCpuCounter();
    s.h[0] = r.h;
    s.cookie[0] = r.cookie;
    s.nh = 1;
    by_addr.emplace(r.addr, old_n + fresh.size());
    fresh.push_back(s);
    why.push_back(near_other ? "inside another probe's jump" : prep->detour == nullptr ? prep->why : "");
    planned.push_back(near_other ? nullptr : prep->detour);
    fresh_req.push_back(i);
  }
  if (fresh.empty()) {
    if (changed) publish();
    return out;
  }

  // A window over another probe's site (live or new): that site's bytes
  // would be copied (an int3) or overwritten (a jmp). Such a site stays on
  // int3.
  std::vector<uintptr_t> ats;
  for (size_t k : by_at) ats.push_back((*g_sites)[k].at);
  for (const Site& s : fresh) ats.push_back(s.at);
  std::sort(ats.begin(), ats.end());
  for (size_t k = 0; k < fresh.size(); ++k) {
    const detail::Detour* d = planned[k];
    if (d == nullptr) continue;
    auto next = std::upper_bound(ats.begin(), ats.end(), fresh[k].at);
    if (next != ats.end() && *next < fresh[k].at + d->span()) {
      planned[k] = nullptr;
      why[k] = "another probe's site inside its jump";
    }
  }
  // Requests that take a jump or nothing: those left without one go.
  std::unordered_map<uintptr_t, std::string> refused;  // addr -> why
  {
    size_t w = 0;
    for (size_t k = 0; k < fresh.size(); ++k) {
      if (planned[k] == nullptr && reqs[fresh_req[k]].jump_only) {
        refused.emplace(fresh[k].addr, why[k]);
        delete fresh[k].hits;
        continue;
      }
      fresh[w] = fresh[k];
      planned[w] = planned[k];
      why[w] = why[k];
      fresh_req[w] = fresh_req[k];
      ++w;
    }
    fresh.resize(w);
    planned.resize(w);
    why.resize(w);
    fresh_req.resize(w);
    for (auto it = by_addr.begin(); it != by_addr.end();)
      it = it->second >= old_n ? by_addr.erase(it) : std::next(it);
    for (size_t k = 0; k < fresh.size(); ++k) by_addr.emplace(fresh[k].addr, old_n + k);
  }
  auto refuse = [&]() {
    for (size_t i = 0; i < reqs.size() && !refused.empty(); ++i)
      if (auto it = refused.find(reqs[i].addr); it != refused.end() && out[i].rc == 0) {
        out[i].rc = -EOPNOTSUPP;
        out[i].err = it->second;
      }
  };
  if (fresh.empty()) {
    refuse();
    if (changed) publish();
    return out;
  }

  // [A]: the table first, so that a thread that traps finds its site; then
  // every new site's int3.
  for (const Site& s : fresh) {
    g_sites->push_back(s);
    note_site(s.at);
  }
  publish();
  std::vector<detail::CodeWrite> traps(fresh.size());
  for (size_t k = 0; k < fresh.size(); ++k) {
    traps[k].at = fresh[k].at;
    traps[k].n = 1;
    traps[k].b[0] = kInt3;
  }
  poke_many(traps.data(), traps.size());
  // Those that could not be written go; the others are armed (int3).
  std::vector<size_t> live(fresh.size());  // each new site's index in g_sites, or SIZE_MAX
  bool dropped = false;
  for (size_t k = 0, at = old_n; k < fresh.size(); ++k) {
    if (traps[k].rc == 0) {
      live[k] = at++;
      continue;
    }
    live[k] = SIZE_MAX;
    Outcome& o = out[fresh_req[k]];
    o.rc = traps[k].rc;
    o.err = std::string("cannot write the code: ") + strerror(-traps[k].rc);
    // The handlers of later requests on this address went with it.
    for (size_t i = fresh_req[k] + 1; i < reqs.size(); ++i)
      if (reqs[i].addr == fresh[k].addr && out[i].rc == 0) out[i] = o;
    dropped = true;
  }
  if (dropped) {
    std::vector<base::PerCpuCounter*> gone;
    std::vector<Site> kept(g_sites->begin(), g_sites->begin() + static_cast<std::ptrdiff_t>(old_n));
    for (size_t k = 0; k < fresh.size(); ++k) {
      if (live[k] != SIZE_MAX) {
        kept.push_back((*g_sites)[old_n + k]);
      } else {
        gone.push_back((*g_sites)[old_n + k].hits);
      }
    }
    *g_sites = std::move(kept);
    publish();
    for (base::PerCpuCounter* c : gone) delete c;  // no handler can count on them now
  }

  // From now on the int3 path runs the whole window's copy, so that no
  // thread returns into a window while its bytes change; then [B] [C] [D]
  // for all of them at once.
  std::vector<detail::Detour*> arm;
  std::vector<size_t> arm_site, arm_fresh;
  for (size_t k = 0; k < fresh.size(); ++k) {
    if (live[k] == SIZE_MAX || planned[k] == nullptr) continue;
    Site& s = (*g_sites)[live[k]];
    if (s.run == Run::kSlot) s.slot = planned[k]->copy;
    arm.push_back(planned[k]);
    arm_site.push_back(live[k]);
    arm_fresh.push_back(k);
  }
  if (!arm.empty()) {
    publish();
    std::unique_ptr<bool[]> ok(new bool[arm.size()]);
    detail::arm_detours(arm.data(), arm.size(), ok.get(), poke_many);
    // Left on int3 (a thread did not answer the sweep): the bytes after the
    // first are the original ones again; the copy stays the int3 path's.
    std::vector<detail::CodeWrite> back;
    for (size_t k = 0; k < arm.size(); ++k) {
      Site& s = (*g_sites)[arm_site[k]];
      if (!ok[k]) why[arm_fresh[k]] = "a thread did not answer the sweep";
      if (ok[k]) {
        s.detour = arm[k];
        s.method = arm[k]->nop ? Method::kNop : arm[k]->pun ? Method::kPun : Method::kDetour;
        continue;
      }
      detail::CodeWrite c;
      c.at = arm[k]->win + 1;
      c.n = static_cast<uint8_t>(arm[k]->len - 1u);
      std::memcpy(c.b, arm[k]->orig + 1, c.n);
      back.push_back(c);
    }
    if (!back.empty()) {
      poke_many(back.data(), back.size());
      sync_cores();
    }
    publish();
    // Jump-only requests left on int3: their first byte back, then out of
    // the table (remove()'s order).
    std::vector<detail::CodeWrite> undo;
    std::vector<bool> drop(g_sites->size(), false);
    for (size_t k = 0; k < arm.size(); ++k) {
      Site& s = (*g_sites)[arm_site[k]];
      if (ok[k] || !reqs[fresh_req[arm_fresh[k]]].jump_only) continue;
      detail::CodeWrite c;
      c.at = s.at;
      c.n = 1;
      c.b[0] = s.orig;
      undo.push_back(c);
      drop[arm_site[k]] = true;
      refused.emplace(s.addr, "a thread did not answer the sweep (it blocks the signal)");
      live[arm_fresh[k]] = SIZE_MAX;
    }
    if (!undo.empty()) {
      poke_many(undo.data(), undo.size());
      std::vector<base::PerCpuCounter*> gone;
      std::vector<Site> kept;
      std::vector<size_t> moved(g_sites->size(), SIZE_MAX);
      for (size_t i = 0; i < g_sites->size(); ++i) {
        if (drop[i]) {
          gone.push_back((*g_sites)[i].hits);
        } else {
          moved[i] = kept.size();
          kept.push_back((*g_sites)[i]);
        }
      }
      *g_sites = std::move(kept);
      for (size_t& lv : live)
        if (lv != SIZE_MAX) lv = moved[lv];
      publish();
      for (base::PerCpuCounter* c : gone) delete c;
    }
  }
  refuse();
  for (size_t k = 0; k < fresh.size(); ++k)
    if (live[k] != SIZE_MAX) {
      out[fresh_req[k]].how = (*g_sites)[live[k]].method;
      if (out[fresh_req[k]].how == Method::kInt3) out[fresh_req[k]].why = why[k];
    }
  // Requests that joined a new site's address later in the batch.
  for (size_t i = 0; i < reqs.size(); ++i)
    if (out[i].rc == 0)
      if (auto it = by_addr.find(reqs[i].addr); it != by_addr.end() && it->second >= old_n) {
        const size_t k = it->second - old_n;
        if (live[k] != SIZE_MAX) out[i].how = (*g_sites)[live[k]].method;
      }
  return out;
}

int add(uintptr_t addr, uintptr_t fn_start, size_t fn_size, Handler h, void* cookie, Method* how,
        std::string* err) {
  std::vector<Outcome> o = add_many({{addr, fn_start, fn_size, h, cookie}});
  *how = o[0].how;
  if (o[0].rc < 0) *err = o[0].err;
  return o[0].rc;
}

// Detour hits (the common stub's call). Context: the hit's thread; no
// lock, no allocation, no system call.
extern "C" __attribute__((visibility("hidden"))) void usrtrace_patch_detour_hit(Regs* r,
                                                                                const detail::Detour* d) {
  // order: as the trap's (Readers, at the top of the file).
  const unsigned idx = read_lock();
  // order: acquire pairs with publish()'s release, as the table's load.
  const auto* s = static_cast<const Site*>(__atomic_load_n(&d->live, __ATOMIC_ACQUIRE));
  if (s != nullptr) {
    s->hits->inc();
    for (int i = 0; i < s->nh; ++i) s->h[i](r, s->cookie[i]);
  }
  read_unlock(idx);
}

int remove(uintptr_t addr, Handler h, void* cookie, bool code_gone) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_sites == nullptr) return -ENOENT;
  own_trap();
  for (size_t i = 0; i < g_sites->size(); ++i) {
    Site& s = (*g_sites)[i];
    if (s.addr != addr) continue;
    for (int k = 0; k < s.nh; ++k) {
      if (s.h[k] != h || s.cookie[k] != cookie) continue;
      for (int j = k; j + 1 < s.nh; ++j) {
        s.h[j] = s.h[j + 1];
        s.cookie[j] = s.cookie[j + 1];
      }
      --s.nh;
      base::PerCpuCounter* hits = nullptr;
      if (s.nh == 0) {
        // The byte first: a thread that traps now finds no site and runs
        // the restored byte; then the table, whose publish waits out every
        // handler still running the pair.
        if (!code_gone) {
          if (s.detour != nullptr) detail::disarm_detour(s.detour, poke_bytes);
          write_byte(s.at, s.orig);
        }
        hits = s.hits;
        g_sites->erase(g_sites->begin() + static_cast<std::ptrdiff_t>(i));
      }
      publish();
      delete hits;  // no handler can still count on it
      return 0;
    }
  }
  return -ENOENT;
}

void remove_many(const std::vector<Removal>& rs, bool code_gone) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_sites == nullptr || rs.empty()) return;
  own_trap();
  std::unordered_map<uintptr_t, size_t> by_addr;
  for (size_t i = 0; i < g_sites->size(); ++i) by_addr.emplace((*g_sites)[i].addr, i);
  std::vector<bool> drop(g_sites->size(), false);
  bool changed = false;
  for (const Removal& r : rs) {
    auto it = by_addr.find(r.addr);
    if (it == by_addr.end()) continue;
    Site& s = (*g_sites)[it->second];
    for (int k = 0; k < s.nh; ++k) {
      if (s.h[k] != r.h || s.cookie[k] != r.cookie) continue;
      for (int j = k; j + 1 < s.nh; ++j) {
        s.h[j] = s.h[j + 1];
        s.cookie[j] = s.cookie[j + 1];
      }
      --s.nh;
      drop[it->second] = s.nh == 0;
      changed = true;
      break;
    }
  }
  if (!changed) return;
  // The bytes first, as remove() does, each step once for the batch: the
  // detours back to int3 over their original bytes ([A]' [C]'), then every
  // first byte. A thread that traps now finds its site still published
  // (the table goes last) or, after, none and the restored byte.
  if (!code_gone) {
    std::vector<detail::CodeWrite> w;
    auto add = [&w](uintptr_t at, const uint8_t* b, size_t n) {
      detail::CodeWrite c;
      c.at = at;
      c.n = static_cast<uint8_t>(n);
      std::memcpy(c.b, b, n);
      w.push_back(c);
    };
    static constexpr uint8_t kTrap[1] = {kInt3};
    for (size_t i = 0; i < drop.size(); ++i)
      if (drop[i] && (*g_sites)[i].detour != nullptr) add((*g_sites)[i].at, kTrap, 1);
    if (!w.empty()) {
      poke_many(w.data(), w.size());
      sync_cores();
      w.clear();
      for (size_t i = 0; i < drop.size(); ++i)
        if (const detail::Detour* d = (*g_sites)[i].detour; drop[i] && d != nullptr)
          add(d->win + 1, d->orig + 1, d->len - 1u);
      poke_many(w.data(), w.size());
      sync_cores();
      w.clear();
    }
    for (size_t i = 0; i < drop.size(); ++i)
      if (drop[i]) add((*g_sites)[i].at, &(*g_sites)[i].orig, 1);
    poke_many(w.data(), w.size());
  }
  std::vector<base::PerCpuCounter*> gone;
  std::vector<Site> kept;
  kept.reserve(g_sites->size());
  for (size_t i = 0; i < drop.size(); ++i) {
    if (drop[i]) {
      gone.push_back((*g_sites)[i].hits);
    } else {
      kept.push_back((*g_sites)[i]);
    }
  }
  *g_sites = std::move(kept);
  publish();
  for (base::PerCpuCounter* c : gone) delete c;  // no handler can count on them now
}

std::vector<uintptr_t> stale_sites() {
  std::lock_guard<std::mutex> l(g_mu);
  std::vector<uintptr_t> out;
  if (g_sites == nullptr || g_sites->empty()) return out;
  std::vector<std::pair<uintptr_t, uintptr_t>> code;  // the loaded objects' executable ranges
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* r = static_cast<std::vector<std::pair<uintptr_t, uintptr_t>>*>(arg);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
            r->emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        return 0;
      },
      &code);
  for (const Site& s : *g_sites) {
    bool mapped = false;
    for (const auto& [lo, hi] : code) mapped |= s.at >= lo && s.at < hi;
    const uint8_t armed = s.detour != nullptr ? 0xe9 : kInt3;
    if (!mapped || *reinterpret_cast<const volatile uint8_t*>(s.at) != armed) out.push_back(s.addr);
  }
  return out;
}

int watch_loads(void (*hook)(), std::string* err) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_load_at.load(std::memory_order_relaxed) != 0) return 0;
  install();
  // An empty function the loader calls after each change of the link map
  // (with r_state RT_ADD or RT_DELETE before, RT_CONSISTENT after), for
  // debuggers; its `ret` (after an endbr64 on a CET build) is trapped.
  uintptr_t at = _r_debug.r_brk;
  if (at == 0) {
    *err = "no dynamic loader to watch (r_debug.r_brk is 0)";
    return -ENOTSUP;
  }
  if (detail::is_endbr64(at)) at += 4;
  if (*reinterpret_cast<const uint8_t*>(at) != 0xc3) {
    *err = "the loader's r_brk is not an empty function";
    return -ENOTSUP;
  }
  g_load_hook = hook;
  // order: release, before the trap can be taken.
  g_load_at.store(at, std::memory_order_release);
  if (int rc = write_byte(at, kInt3); rc < 0) {
    g_load_at.store(0, std::memory_order_relaxed);
    *err = "cannot write the loader's code";
    return rc;
  }
  return 0;
}

std::vector<SiteInfo> sites() {
  std::lock_guard<std::mutex> l(g_mu);
  std::vector<SiteInfo> out;
  if (g_sites != nullptr)
    for (const Site& s : *g_sites)
      out.push_back({s.addr, s.method, static_cast<size_t>(s.nh), s.hits->sum()});
  return out;
}

}  // namespace usrtrace::patch
