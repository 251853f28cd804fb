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
// path's C++ half, tries the control lock (never waits for it) and:
//
//   1. takes a spare (or a drained CpuBuffer, cleared in O(1) by its floor)
//      and gives it the CPU, a new epoch and the live role;
//   2. closes the CPU's gate, so every fast path of the CPU goes to the
//      slow path, which finds its CpuBuffer through the slot;
//   3. stores the slot in one rseq critical section on that CPU
//      (rseq_install), checking that the thread is still on the CPU and the
//      slot still holds the old CpuBuffer. The store is the section's
//      commit. Every other section of the CPU that was in flight was
//      preempted by this one and restarts; restarted, a fast path finds the
//      gate closed and a slow path's section finds the slot changed. So once
//      the store is done, no write can land in the old CpuBuffer: it is
//      complete, without a membarrier;
//   4. opens the gate again (update_gate, for whichever CpuBuffer the slot
//      holds), and, if the slot moved, marks the old CpuBuffer retired
//      (release: the consumer that sees it retired sees every event in it).
//
// If the thread moved to another CPU before the section, nothing changed
// but the gate, which step 4 reopens; the next switch tries again. The
// 1/8 of the ring left when growth is first due is what absorbs a lock
// held elsewhere (a snapshot, a resize) or a thread that keeps migrating:
// the ring overwrites only once it is full.
//
// The consumer (record/shared_buffers.cc) reads a CPU's retired CpuBuffers
// in epoch order, each to its last (open) page, marks each drained, then
// reads the live one. A drained CpuBuffer is a spare again.
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
  // Under the control lock.
  uint64_t epoch = 0;
  uint32_t next = 0;         // where the next scan for a spare starts
  uint64_t spare_bytes = 0;  // fixed once enable_growth() returns
  // order: relaxed; counters for display, and a hint per CPU.
  std::atomic<uint64_t> grown{0}, no_spare{0}, busy{0};
  std::unique_ptr<std::atomic<uint64_t>[]> retry_at;  // per CPU: no scan before this seq
};

namespace {

// order: relaxed; a switch that misses a change grows once more or once less.
std::atomic<bool> g_paused{false};

// Stores `spare` into the slot of `cpu` if the thread runs on `cpu` and the
// slot holds `cb`: one rseq critical section whose commit is that store
// (see the design above). Returns whether the slot holds `spare` after it.
// Context: any thread; async-signal-safe.
USRTRACE_NOINLINE bool rseq_install(std::atomic<CpuBuffer*>* cpu0_slot, int64_t cpu, CpuBuffer* cb,
                                    CpuBuffer* spare) {
  asm volatile(
      "6:\n\t"
      "leaq 3f(%%rip), %%rax\n\t"
      "movq %%rax, %%fs:8(%[rseqoff])\n\t"
      "1:\n\t"
      "movslq %%fs:4(%[rseqoff]), %%rax\n\t"
      "cmpq %%rax, %[cpu]\n\t"
      "jne 2f\n\t"
      "cmpq %[cb], (%[slots],%%rax,8)\n\t"
      "jne 2f\n\t"
      "movq %[spare], (%[slots],%%rax,8)\n\t"  // commit
      "2:\n\t" USRTRACE_RSEQ_CS_TRAILER("rax")
      :
      : [cpu] "r"(cpu), [cb] "r"(cb), [spare] "r"(spare), [slots] "r"(cpu0_slot),
        [rseqoff] "r"(base::usrtrace_rseq_offset)
      : "rax", "cc", "memory");
  return cpu0_slot[cpu].load(std::memory_order_acquire) == spare;
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
    cb->grow_epoch.store(++pool->epoch, std::memory_order_relaxed);
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

bool RingBuffer::grow(int cpu, CpuBuffer* cb, uint64_t new_seq) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  GrowPool* g = grow_.load(std::memory_order_acquire);
  // Only a pool's live CpuBuffer grows (one a snapshot swapped in does not).
  if (!g || cb->grow_state.load(std::memory_order_relaxed) != kGrowLive ||
      g_paused.load(std::memory_order_relaxed))
    return false;
  // order: relaxed; a hint.
  if (new_seq < g->retry_at[static_cast<size_t>(cpu)].load(std::memory_order_relaxed)) return false;
  if (!control_.try_lock()) {
    g->busy.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  bool grown = false;
  CpuBuffer* spare = nullptr;
  const auto n = static_cast<uint32_t>(g->all.size());
  for (uint32_t k = 0; k < n && !spare; ++k) {
    CpuBuffer* c = g->all[(g->next + k) % n];
    // order: acquire pairs with the consumer's release of drained: its last
    // reads of the pages happen before they are written again.
    const uint64_t st = c->grow_state.load(std::memory_order_acquire);
    if (st != kGrowSpare && st != kGrowDrained) continue;
    spare = c;
    g->next = (g->next + k + 1) % n;
    if (st == kGrowDrained) clear_detached_cpu_buffer(c);
  }
  if (!spare) {
    g->no_spare.fetch_add(1, std::memory_order_relaxed);
    g->retry_at[static_cast<size_t>(cpu)].store(new_seq + cb->nr_pages / 8 + 1, std::memory_order_relaxed);
  } else if (cpu_buffer(cpu) == cb && cb->ws.sealed.load(std::memory_order_relaxed) == 0) {
    spare->cpu = cpu;
    spare->grow_epoch.store(g->epoch + 1, std::memory_order_relaxed);
    spare->grow_state.store(kGrowLive, std::memory_order_relaxed);
    close_gate(cpu);
    grown = rseq_install(slots() + kTrapSlots, cpu, cb, spare);
    update_gate(cpu);
    if (grown) {
      ++g->epoch;
      adopt_cpu(cpu);
      // order: release; the consumer that sees it retired (acquire) sees
      // every event committed to it (all before the install above).
      cb->grow_state.store(kGrowRetired, std::memory_order_release);
      if (cb->role) cb->role->store(role_word(kRetiredTag, cpu), std::memory_order_release);
      g->grown.fetch_add(1, std::memory_order_relaxed);
    } else {
      spare->grow_state.store(kGrowSpare, std::memory_order_relaxed);
    }
  }
  control_.unlock();
  drain_deferred();
  return grown;
}

}  // namespace usrtrace::rb
