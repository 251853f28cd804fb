// Growth: a buffer whose pages an external consumer takes (`usrtrace
// record`) swaps a fresh CpuBuffer in for a CPU whose ring is about to
// overwrite pages the consumer has not taken, instead of overwriting them.
// docs/design/ring-buffer.md ("Growth") has the long form.
//
// The pool
// --------
// enable_growth() allocates the spares up front, from the buffer's store:
// the write path allocates nothing. A memfd store is sparse, so a spare
// costs its CpuBuffer's page until it is written. The pool holds the
// spares and the CPUs' first CpuBuffers, and frees them all at the end
// (~RingBuffer skips the ones it holds). Each CpuBuffer's grow_state says
// where it is: spare -> live -> retired -> drained -> live ...
//
// The switch (RingBuffer::grow, from the slow path's page switch)
// ----------------------------------------------------------------
// When the page a switch would open is within 1/8 of the ring of a page
// the consumer has not taken (grow_due), the writer, still in the slow
// path's C++ half, grows the CPU without a lock:
//
//   1. claims a spare (or a drained CpuBuffer, cleared in O(1) by its floor)
//      with a compare-and-swap of its grow_state, and gives it a new epoch
//      (one counter for the pool);
//   2. installs it in one rseq critical section on that CPU (rseq_install)
//      that checks the thread is still on the CPU, the slot still holds the
//      old CpuBuffer with the epoch the writer saw, the control generation
//      is the one it read and even (no control operation is running, see
//      below), then closes the CPU's gate and stores the slot. The slot
//      store is the section's commit. Every other section of the CPU that
//      was in flight was preempted by this one and restarts: a fast path
//      finds the gate closed, a slow path's section finds the slot changed.
//      So once the store is done no write can land in the old CpuBuffer: it
//      is complete, without a membarrier;
//   3. marks the old CpuBuffer retired (release: the consumer that sees it
//      retired sees every event in it), then gives the new one the CPU's
//      role word, in that order (a recorder never sees the new one live
//      while the old one still is);
//   4. reopens the gate (rseq_reopen), again in a section on the CPU that
//      checks the slot and the control generation.
//
// Why no lock: every thread of the CPU can reach a switch while one of
// them is growing, and the one growing may be preempted for a whole time
// slice. With a lock the others found it busy and went on into the ring's
// last 1/8, then overwrote: four writers on two busy CPUs lost 100,000
// events in one run of 150. Without one, two threads of a CPU that both
// grow claim a spare each; rseq lets one commit, and the other gives its
// spare back. Threads of different CPUs share only the pool's CASes.
//
// A thread that moved to another CPU, or a section that failed after it
// closed the gate, changes nothing else: the next slow path on the CPU
// reopens a gate it finds closed for no reason (reopen_gate), and the next
// switch tries to grow again.
//
// Control operations (reset, resize, swap, clock, gates) hold the control
// lock and, on a growing buffer, make the generation odd and fence
// (membarrier) before they touch a slot or a gate, even again after:
// freeze_growth(). A growth section in flight is aborted by the fence and
// fails when it restarts; one that starts later fails on the generation.
// Growth's steps outside a section touch only the old CpuBuffer (in no slot
// any more) and the role word of the new one, with a CAS a swap's adopt_cpu
// wins.
//
// The consumer (record/shared_buffers.cc) reads a CPU's retired CpuBuffers
// in epoch order, each to its last (open) page, marks each drained, then
// reads the live one. A drained CpuBuffer is a spare again. Epochs grow
// along a CPU's chain: a writer reads the old CpuBuffer's epoch before it
// takes a new one from the counter, and its section commits only if that
// CpuBuffer is still installed with that epoch (a CpuBuffer drained and
// installed again has a new one).
//
// Past the cap (no spare and nothing drained) the ring overwrites (or, in
// discard mode, drops) as it would without growth, and counts it; the pool
// is scanned again only after another 1/8 of the ring, so a CPU past the
// cap pays for a scan once per eighth of its ring, not on every switch.
#include <cerrno>
#include <vector>

#include "base/sys.h"
#include "ring_buffer/buffer_store.h"
#include "ring_buffer/internal.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::rb {

struct GrowPool {
  // Every CpuBuffer of the pool; fixed once enable_growth() returns.
  std::vector<CpuBuffer*> all;
  uint64_t spare_bytes = 0;  // fixed once enable_growth() returns
  // order: relaxed; each install takes a new value (see the design above).
  std::atomic<uint64_t> epoch{0};
  // order: relaxed; where the next scan for a spare starts (a hint).
  std::atomic<uint32_t> next{0};
  // order: relaxed; counters for display, and a hint per CPU.
  std::atomic<uint64_t> grown{0}, no_spare{0}, busy{0};
  std::unique_ptr<std::atomic<uint64_t>[]> retry_at;  // per CPU: no scan before this seq
};

namespace {

// order: relaxed; a switch that misses a change grows once more or once less.
std::atomic<bool> g_paused{false};

// ABI with the growth sections' assembly; offsets asserted below.
struct GrowOp {
  int64_t cpu;                         // 0: the CPU the writer read the slot on
  CpuBuffer* expect;                   // 8: the slot must still hold it, unsealed
  const std::atomic<uint64_t>* gen;    // 16: the buffer's control generation
  uint64_t expect_gen;                 // 24: ... must still be this (even)
  const std::atomic<uint64_t>* epoch;  // 32: install: expect's grow_epoch
  uint64_t expect_epoch;               // 40: ... must still be this
  std::atomic<WriterState*>* gates;    // 48: cpu 0's gate
  WriterState* closed;                 // 56: the closed gate
  uint64_t value;                      // 64: install: the new CpuBuffer; reopen: the gate
};
static_assert(offsetof(GrowOp, expect) == 8 && offsetof(GrowOp, gen) == 16 &&
              offsetof(GrowOp, expect_gen) == 24 && offsetof(GrowOp, epoch) == 32 &&
              offsetof(GrowOp, expect_epoch) == 40 && offsetof(GrowOp, gates) == 48 &&
              offsetof(GrowOp, closed) == 56 && offsetof(GrowOp, value) == 64);

// Arms a section and checks the CPU, the generation and the slot (with its
// CpuBuffer unsealed); leaves the CPU in %rax. Label 5 is the failure exit.
// clang-format off
#define USRTRACE_GROW_SECTION_CHECKS      \
  USRTRACE_RSEQ_CS_BEGIN("rax")           \
  "cmpq %%rax, 0(%[op])\n\t"              \
  "jne 5f\n\t"                            \
  "movq 16(%[op]), %%rdx\n\t"             \
  "movq (%%rdx), %%rdx\n\t"               \
  "cmpq %%rdx, 24(%[op])\n\t"             \
  "jne 5f\n\t"                            \
  "movq (%[slots],%%rax,8), %%rdx\n\t"    \
  "cmpq %%rdx, 8(%[op])\n\t"              \
  "jne 5f\n\t"                            \
  "cmpl $0, %c[sealed](%%rdx)\n\t"        \
  "jne 5f\n\t"
// clang-format on

// Installs op->value in the slot of op->cpu in place of op->expect, closing
// the CPU's gate first, if the checks hold and op->expect still has the
// epoch op->expect_epoch (see the design above). Returns whether it did.
// Context: any thread; async-signal-safe; no lock.
USRTRACE_NOINLINE bool rseq_install(std::atomic<CpuBuffer*>* cpu0_slot, const GrowOp* op) {
  int ok;
  asm volatile(USRTRACE_GROW_SECTION_CHECKS
               "movq 32(%[op]), %%rcx\n\t"
               "movq (%%rcx), %%rcx\n\t"
               "cmpq %%rcx, 40(%[op])\n\t"
               "jne 5f\n\t"
               "movq 48(%[op]), %%rcx\n\t"
               "movq 56(%[op]), %%rdx\n\t"
               "movq %%rdx, (%%rcx,%%rax,8)\n\t"  // close the gate
               "movq 64(%[op]), %%rdx\n\t"
               "movq %%rdx, (%[slots],%%rax,8)\n\t"  // commit
               "2:\n\t"
               "movl $1, %[ok]\n\t"
               "jmp 9f\n\t"
               "5:\n\t"
               "movl $0, %[ok]\n\t"
               "9:\n\t" USRTRACE_RSEQ_CS_TRAILER("rcx")
               : [ok] "=&r"(ok)
               : [op] "r"(op), [slots] "r"(cpu0_slot), [rseqoff] "r"(base::usrtrace_rseq_offset),
                 [sealed] "i"(kWsSealed)
               : "rax", "rcx", "rdx", "cc", "memory");
  return ok != 0;
}

// Opens the gate of op->cpu to op->value if the checks hold and the gate is
// closed. Context: any thread; async-signal-safe; no lock.
USRTRACE_NOINLINE void rseq_reopen(std::atomic<CpuBuffer*>* cpu0_slot, const GrowOp* op) {
  asm volatile(USRTRACE_GROW_SECTION_CHECKS
               "movq 48(%[op]), %%rcx\n\t"
               "movq (%%rcx,%%rax,8), %%rdx\n\t"
               "cmpq %%rdx, 56(%[op])\n\t"
               "jne 5f\n\t"
               "movq 64(%[op]), %%rdx\n\t"
               "movq %%rdx, (%%rcx,%%rax,8)\n\t"  // commit
               "2:\n\t"
               "5:\n\t" USRTRACE_RSEQ_CS_TRAILER("rcx")
               :
               : [op] "r"(op), [slots] "r"(cpu0_slot), [rseqoff] "r"(base::usrtrace_rseq_offset),
                 [sealed] "i"(kWsSealed)
               : "rax", "rcx", "rdx", "cc", "memory");
}

// Takes a spare or a drained CpuBuffer from the pool for the caller alone
// (its state becomes live), cleared; nullptr when there is none.
// Context: any thread; async-signal-safe; no lock.
CpuBuffer* claim_spare(GrowPool* g) {
  const auto n = static_cast<uint32_t>(g->all.size());
  const uint32_t start = g->next.load(std::memory_order_relaxed);
  for (uint32_t k = 0; k < n; ++k) {
    CpuBuffer* c = g->all[(start + k) % n];
    // order: acquire pairs with the consumer's release of drained: its last
    // reads of the pages happen before they are written again.
    uint64_t st = c->grow_state.load(std::memory_order_acquire);
    if (st != kGrowSpare && st != kGrowDrained) continue;
    if (!c->grow_state.compare_exchange_strong(st, kGrowLive, std::memory_order_acquire,
                                               std::memory_order_relaxed))
      continue;
    g->next.store((start + k + 1) % n, std::memory_order_relaxed);
    if (st == kGrowDrained) clear_detached_cpu_buffer(c);
    return c;
  }
  return nullptr;
}

void free_cpu_buffer(CpuBuffer* cb) {
  if (cb->pages) cb->store->free_pages(cb->pages, cb->meta, cb->nr_pages, cb->page_size);
  cb->pages = nullptr;
  cb->meta = nullptr;
  cb->store->delete_cpu_buffer(cb);
}

}  // namespace

void RingBuffer::pause_growth(bool paused) { g_paused.store(paused, std::memory_order_relaxed); }

int RingBuffer::enable_growth(uint32_t spares, uint32_t pages_each) {
  if (grow_.load(std::memory_order_relaxed) || pages_each < 2 || spares == 0) return -EINVAL;
  auto pool = std::make_unique<GrowPool>();
  pool->retry_at = std::make_unique<std::atomic<uint64_t>[]>(static_cast<size_t>(nr_cpus_));
  BufferStore* store = store_ ? store_.get() : BufferStore::heap();
  const uint32_t ps = page_size(0);
  pool->all.reserve(size_t{spares} + static_cast<size_t>(nr_cpus_));
  for (uint32_t i = 0; i < spares; ++i) {
    CpuBuffer* cb = store->new_cpu_buffer();
    if (cb) {
      cb->page_size = ps;
      cb->page_shift = static_cast<uint32_t>(__builtin_ctz(ps));
      cb->cpu = 0;
      if (store->alloc_pages(cb, pages_each)) {
        // Fresh from the store: zeroed, so the metas are left untouched.
        init_state(cb, /*metas_zero=*/true);
        cb->ws.sealed.store(0, std::memory_order_relaxed);
        cb->grow_state.store(kGrowSpare, std::memory_order_relaxed);
        pool->all.push_back(cb);
        pool->spare_bytes += uint64_t{pages_each} * ps;
        continue;
      }
      store->delete_cpu_buffer(cb);
    }
    for (CpuBuffer* p : pool->all) free_cpu_buffer(p);
    return -ENOMEM;
  }
  ControlGuard l(*this);
  for (int c = 0; c < nr_cpus_; ++c) {
    CpuBuffer* cb = cpu_buffer(c);
    cb->grow_epoch.store(pool->epoch.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    cb->grow_state.store(kGrowLive, std::memory_order_release);
    pool->all.push_back(cb);
  }
  grow_.store(pool.release(), std::memory_order_release);
  return 0;
}

void RingBuffer::free_grow_pool() {
  GrowPool* g = grow_.exchange(nullptr, std::memory_order_acq_rel);
  if (!g) return;
  for (CpuBuffer* cb : g->all) free_cpu_buffer(cb);
  delete g;
}

RingBuffer::GrowStats RingBuffer::grow_stats() const {
  GrowStats s;
  if (const GrowPool* g = grow_.load(std::memory_order_acquire)) {
    s.grown = g->grown.load(std::memory_order_relaxed);
    s.no_spare = g->no_spare.load(std::memory_order_relaxed);
    s.busy = g->busy.load(std::memory_order_relaxed);
    s.pool = static_cast<uint32_t>(g->all.size());
    s.spare_bytes = g->spare_bytes;
  }
  return s;
}

// Whether the switch that opens `next_slot` as `new_seq` is within 1/8 of
// the ring of a page the consumer has not taken: the page 1/8 of the ring
// ahead of it (the one that many switches from now would overwrite) is a
// page of this ring's life (written, at or above the floor, before the
// tail) with entries past what the consumer published as taken.
// Context: the slow path; reads only.
bool RingBuffer::grow_due(const CpuBuffer* cb, uint64_t next_slot, uint64_t new_seq) const {
  const uint32_t nr = cb->nr_pages;
  const uint64_t ahead = (next_slot + nr / 8) % nr;
  const PageMeta& m = cb->meta[ahead];
  // order: acquire on seq, as a reader's check of a page.
  const uint64_t seq = m.seq.load(std::memory_order_acquire);
  if (seq == 0 || seq >= new_seq || seq < cb->floor_seq.load(std::memory_order_relaxed)) return false;
  const uint64_t end =
      m.first_index.load(std::memory_order_relaxed) + m.entries.load(std::memory_order_relaxed);
  return end > cb->reader_index.load(std::memory_order_acquire);
}

bool RingBuffer::grow(int cpu, CpuBuffer* cb, uint64_t new_seq) {
  GrowPool* g = grow_.load(std::memory_order_acquire);
  // Only a pool's live CpuBuffer grows (one a snapshot swapped in does not).
  if (!g || cb->grow_state.load(std::memory_order_relaxed) != kGrowLive ||
      g_paused.load(std::memory_order_relaxed))
    return false;
  // order: relaxed; a hint.
  if (new_seq < g->retry_at[static_cast<size_t>(cpu)].load(std::memory_order_relaxed)) return false;
  // order: acquire pairs with thaw_growth()'s release: a writer that reads
  // the even value after a control operation sees the slots it left.
  const uint64_t gen = ctl_gen_.load(std::memory_order_acquire);
  if (gen & 1) {
    g->busy.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Read before the new epoch is taken, so the new one is larger.
  const uint64_t epoch = cb->grow_epoch.load(std::memory_order_relaxed);
  CpuBuffer* spare = claim_spare(g);
  if (!spare) {
    g->no_spare.fetch_add(1, std::memory_order_relaxed);
    g->retry_at[static_cast<size_t>(cpu)].store(new_seq + cb->nr_pages / 8 + 1, std::memory_order_relaxed);
    return false;
  }
  spare->cpu = cpu;
  spare->grow_epoch.store(g->epoch.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const uint64_t old_role = spare->role ? spare->role->load(std::memory_order_relaxed) : 0;
  GrowOp op{cpu,
            cb,
            &ctl_gen_,
            gen,
            &cb->grow_epoch,
            epoch,
            gates() + kTrapSlots,
            &g_closed,
            reinterpret_cast<uint64_t>(spare)};
  if (!rseq_install(slots() + kTrapSlots, &op)) {
    // Another thread of the CPU grew it, the thread moved, or control runs.
    spare->grow_state.store(kGrowSpare, std::memory_order_release);
    return false;
  }
  // order: release; the consumer that sees it retired (acquire) sees every
  // event committed to it (all before the install above). Retired first,
  // then the new one live (see the design above).
  cb->grow_state.store(kGrowRetired, std::memory_order_release);
  if (cb->role) cb->role->store(role_word(kRetiredTag, cpu), std::memory_order_release);
  if (spare->role) {
    // A swap that moved it since adopted it for its new buffer: keep that.
    uint64_t expect = old_role;
    spare->role->compare_exchange_strong(expect, role_word(tag_, cpu), std::memory_order_release,
                                         std::memory_order_relaxed);
  }
  g->grown.fetch_add(1, std::memory_order_relaxed);
  reopen_gate(cpu, spare);
  return true;
}

void RingBuffer::reopen_gate(int cpu, CpuBuffer* cb) {
  // order: acquire, as in grow().
  const uint64_t gen = ctl_gen_.load(std::memory_order_acquire);
  if ((gen & 1) || !gate_may_open(cb)) return;
  GrowOp op{cpu,
            cb,
            &ctl_gen_,
            gen,
            nullptr,
            0,
            gates() + kTrapSlots,
            &g_closed,
            reinterpret_cast<uint64_t>(&cb->ws)};
  rseq_reopen(slots() + kTrapSlots, &op);
}

void RingBuffer::freeze_growth() {
  // order: seq_cst, then the fence: a growth section either ran entirely
  // before (its effects are there for the caller to see) or fails.
  ctl_gen_.fetch_add(1, std::memory_order_seq_cst);
  base::rseq_fence();
}

void RingBuffer::thaw_growth() { ctl_gen_.fetch_add(1, std::memory_order_release); }

}  // namespace usrtrace::rb
