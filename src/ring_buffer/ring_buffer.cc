// Control plane of the ring buffer: creation, gates, reset, resize, swap,
// clocks, statistics and waiting. The write path is ring_buffer.h (fast) and
// slow_path.cc; readers are reader.cc.
#include "ring_buffer/ring_buffer.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "base/sys.h"
#include "ring_buffer/buffer_store.h"
#include "ring_buffer/internal.h"

namespace usrtrace::rb {

// What a closed gate points at: a limit of 0 fails every fast-path write.
// Never written: no fast path gets past the limit check.
WriterState g_closed;

namespace {

// Installed in the slots for rseq cpu_id -1 and -2; the slow path never uses
// it (it registers the thread first), so that no slot holds nullptr.
CpuBuffer g_trap;

// limit for a w0 that points into the page starting at `page`.
uint64_t limit_for(const uint8_t* page, uint32_t page_size) {
  return reinterpret_cast<uint64_t>(page + page_size) << 16;
}

bool is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

uint32_t pages_for(uint64_t bytes, uint32_t page_size) {
  uint64_t data = page_size - kPageHeaderSize;
  uint64_t n = (bytes + data - 1) / data;
  if (n < 2) n = 2;
  if (n > (1u << 24)) n = 1u << 24;
  return static_cast<uint32_t>(n);
}

// The state of a CPU with nothing written: w0 points 4 bytes before the end
// of the last slot, whose meta seq is 0 (no page open), so the first write
// takes the slow path, which opens slot 0 as seq 1. The first switch, like
// every other, thus opens a slot other than the one w0 names: a reader that
// sees the new page's meta change before w0 moves still finds the old tail
// (here: nothing) consistent.
uint64_t virgin_w0(const CpuBuffer* cb) {
  uint8_t* last = cb->pages + (uint64_t{cb->nr_pages - 1} << cb->page_shift);
  return reinterpret_cast<uint64_t>(last + cb->page_size - 4) << 16;
}

}  // namespace

void init_state(CpuBuffer* cb, bool metas_zero) {
  for (uint32_t i = 0; i < cb->nr_pages && !metas_zero; ++i) {
    cb->meta[i].seq.store(0, std::memory_order_relaxed);
    cb->meta[i].first_index.store(0, std::memory_order_relaxed);
    cb->meta[i].missed.store(0, std::memory_order_relaxed);
    cb->meta[i].entries.store(0, std::memory_order_relaxed);
  }
  cb->ws.w0.store(virgin_w0(cb), std::memory_order_relaxed);
  cb->ws.limit.store(limit_for(cb->page_at(cb->nr_pages - 1), cb->page_size), std::memory_order_relaxed);
  cb->ws.last_ts.store(0, std::memory_order_relaxed);
  cb->ws.dropped_seen.store(0, std::memory_order_relaxed);
  cb->dropped.store(0, std::memory_order_relaxed);
  cb->reader_next_seq.store(1, std::memory_order_relaxed);
  cb->reader_index.store(0, std::memory_order_relaxed);
  cb->floor_seq.store(0, std::memory_order_relaxed);
  cb->floor_index.store(0, std::memory_order_relaxed);
  cb->floor_dropped.store(0, std::memory_order_relaxed);
}

namespace {

// Anonymous memory: pages from map_aligned, metas and CpuBuffers from new.
class HeapStore final : public BufferStore {
 public:
  CpuBuffer* new_cpu_buffer() override {
    auto* cb = new (std::nothrow) CpuBuffer;
    if (cb) cb->store = this;
    return cb;
  }
  void delete_cpu_buffer(CpuBuffer* cb) override { delete cb; }
  bool alloc_pages(CpuBuffer* cb, uint32_t nr_pages) override {
    size_t bytes = size_t{nr_pages} * cb->page_size;
    auto* pages = static_cast<uint8_t*>(base::map_aligned(bytes, cb->page_size));
    if (!pages) return false;
    auto* meta = new (std::nothrow) PageMeta[nr_pages];
    if (!meta) {
      base::unmap_aligned(pages, bytes);
      return false;
    }
    cb->pages = pages;
    cb->meta = meta;
    cb->nr_pages = nr_pages;
    return true;
  }
  void free_pages(uint8_t* pages, PageMeta* meta, uint32_t nr, uint32_t page_size) override {
    base::unmap_aligned(pages, size_t{nr} * page_size);
    delete[] meta;
  }
};

void free_pages(CpuBuffer* cb) {
  cb->store->free_pages(cb->pages, cb->meta, cb->nr_pages, cb->page_size);
  cb->pages = nullptr;
  cb->meta = nullptr;
}

}  // namespace

BufferStore* BufferStore::heap() {
  static HeapStore* store = new HeapStore;  // never freed: CpuBuffers may outlive any owner
  return store;
}

std::unique_ptr<RingBuffer> RingBuffer::create(const Options& opts, int* err) {
  auto fail = [&](int e) {
    if (err) *err = e;
    return std::unique_ptr<RingBuffer>();
  };
  if (!is_pow2(opts.page_size) || opts.page_size < kMinPageSize || opts.page_size > kMaxPageSize ||
      opts.size_per_cpu == 0)
    return fail(EINVAL);
  if (!base::rseq_init()) return fail(ENOSYS);
  clock::start_calibration();

  const int n = base::nr_possible_cpus();
  void* mem = ::operator new (sizeof(RingBuffer) + 2 * size_t(n + kTrapSlots) * sizeof(void*),
                              std::align_val_t{alignof(RingBuffer)}, std::nothrow);
  if (!mem) return fail(ENOMEM);
  std::unique_ptr<RingBuffer> rb(new (mem) RingBuffer());
  rb->nr_cpus_ = n;
  rb->mode_.store(opts.mode, std::memory_order_relaxed);
  rb->clock_.store(opts.clock, std::memory_order_relaxed);
  rb->tag_ = opts.tag;
  rb->store_ = opts.store;
  BufferStore* store = opts.store ? opts.store.get() : BufferStore::heap();
  store->clock_changed(opts.clock);
  // Room for a long header and a time stamp, with the tail strictly inside.
  rb->max_payload_ = opts.page_size - kPageHeaderSize - 8 - 8 - 4;
  for (int i = 0; i < n + kTrapSlots; ++i) {
    new (&rb->gates()[i]) std::atomic<WriterState*>(&g_closed);
    new (&rb->slots()[i]) std::atomic<CpuBuffer*>(i < kTrapSlots ? &g_trap : nullptr);
  }
  const uint32_t nr = pages_for(opts.size_per_cpu, opts.page_size);
  for (int c = 0; c < n; ++c) {
    CpuBuffer* cb = store->new_cpu_buffer();
    if (!cb) return fail(ENOMEM);
    cb->cpu = c;
    cb->page_size = opts.page_size;
    cb->page_shift = static_cast<uint32_t>(__builtin_ctz(opts.page_size));
    rb->slots()[c + kTrapSlots].store(cb, std::memory_order_relaxed);
    if (!store->alloc_pages(cb, nr)) return fail(ENOMEM);
    init_state(cb);
    rb->adopt_cpu(c);
  }
  ControlGuard l(*rb);
  for (int c = 0; c < n; ++c) rb->unseal(c);
  return rb;
}

RingBuffer::~RingBuffer() {
  for (int c = 0; c < nr_cpus_; ++c)
    if (cpu_buffer(c)) seal(c);
  base::rseq_fence();
  wait_slow_paths();
  for (int c = 0; c < nr_cpus_; ++c) {
    CpuBuffer* cb = cpu_buffer(c);
    // A growth pool's CpuBuffers are freed by the pool, wherever they are.
    if (!cb || cb->grow_state.load(std::memory_order_relaxed) != kGrowNone) continue;
    if (cb->pages) free_pages(cb);
    cb->store->delete_cpu_buffer(cb);
  }
  free_grow_pool();
}

void RingBuffer::operator delete(void* p) { ::operator delete (p, std::align_val_t{alignof(RingBuffer)}); }

// ---------------------------------------------------------------------------
// Gates and seals.

void RingBuffer::seal(int cpu) {
  CpuBuffer* cb = cpu_buffer(cpu);
  // order: seq_cst; a slow path increments slow_active_ (seq_cst) and then
  // reads `sealed`, and wait_slow_paths() reads slow_active_ after this.
  cb->ws.sealed.store(1, std::memory_order_seq_cst);
  gates()[cpu + kTrapSlots].store(&g_closed, std::memory_order_seq_cst);
}

void RingBuffer::unseal(int cpu) {
  cpu_buffer(cpu)->ws.sealed.store(0, std::memory_order_release);
  update_gate(cpu);
}

bool RingBuffer::gate_may_open(const CpuBuffer* cb) const {
  return cb->ws.sealed.load(std::memory_order_relaxed) == 0 && !abs_ts_.load(std::memory_order_relaxed) &&
         clock::describe(clock_.load(std::memory_order_relaxed)).tsc &&
         waiters_any_.load(std::memory_order_relaxed) == 0;
}

void RingBuffer::update_gate(int cpu) {
  CpuBuffer* cb = cpu_buffer(cpu);
  // order: release; a writer that sees the gate open sees the state set up
  // before it.
  gates()[cpu + kTrapSlots].store(gate_may_open(cb) ? &cb->ws : &g_closed, std::memory_order_release);
}

void RingBuffer::update_gates() {
  for (int c = 0; c < nr_cpus_; ++c) update_gate(c);
}

void RingBuffer::wait_slow_paths() {
  while (slow_active_.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void RingBuffer::set_time_stamp_abs(bool on) {
  ControlGuard l(*this);
  abs_ts_.store(on, std::memory_order_relaxed);
  update_gates();
}

void RingBuffer::set_clock(clock::ClockId id) {
  ControlGuard l(*this);
  set_clock_locked(l, id);
}

void RingBuffer::set_clock_locked(const Locked&, clock::ClockId id) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  for (int c = 0; c < nr_cpus_; ++c) seal(c);
  base::rseq_fence();
  wait_slow_paths();
  clock_.store(id, std::memory_order_relaxed);
  (store_ ? store_.get() : BufferStore::heap())->clock_changed(id);
  time_start_.store(clock::read_raw(id), std::memory_order_relaxed);
  for (int c = 0; c < nr_cpus_; ++c) {
    reset_locked(cpu_buffer(c));
    unseal(c);
  }
}

// ---------------------------------------------------------------------------
// Reset, resize, swap.

void RingBuffer::reset_locked(CpuBuffer* cb) {
  base::MutexLock rl(&cb->reader_mu);
  init_state(cb);
  cb->reader_gen = cb->clear_gen.load(std::memory_order_relaxed);
  cb->pos = ReadPos{};
  cb->copy.seq = 0;
  cb->read = 0;
  cb->overrun = 0;
}

void RingBuffer::reset(int cpu) {
  ControlGuard l(*this);
  int lo = cpu < 0 ? 0 : cpu, hi = cpu < 0 ? nr_cpus_ : cpu + 1;
  if (lo >= nr_cpus_) return;
  for (int c = lo; c < hi; ++c) seal(c);
  base::rseq_fence();
  wait_slow_paths();
  if (cpu < 0) time_start_.store(clock::read_raw(clock()), std::memory_order_relaxed);
  for (int c = lo; c < hi; ++c) {
    reset_locked(cpu_buffer(c));
    unseal(c);
  }
}

int RingBuffer::resize(int cpu, uint64_t bytes) {
  ControlGuard l(*this);
  return resize_locked(l, cpu, bytes);
}

int RingBuffer::resize_locked(const Locked&, int cpu, uint64_t bytes) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  if (bytes == 0) return -EINVAL;
  int lo = cpu < 0 ? 0 : cpu, hi = cpu < 0 ? nr_cpus_ : cpu + 1;
  if (lo >= nr_cpus_) return -EINVAL;
  int rc = 0;
  for (int c = lo; c < hi && rc == 0; ++c) {
    CpuBuffer* cb = cpu_buffer(c);
    uint32_t nr = pages_for(bytes, cb->page_size);
    if (nr == cb->nr_pages) continue;
    seal(c);
    base::rseq_fence();
    wait_slow_paths();
    rc = resize_cpu_locked(cb, nr);
    unseal(c);
  }
  return rc;
}

// Moves the newest pages that fit into a new ring, keeping each page's seq,
// so readers find what was kept and count what was not as overrun.
// Context: control_ held, `cb` sealed and drained.
int RingBuffer::resize_cpu_locked(CpuBuffer* cb, uint32_t nr) {
  base::MutexLock rl(&cb->reader_mu);
  if (read_tail_raw(cb).seq != 0 && read_tail(cb).seq == 0) {
    // Emptied by clear_detached and not written since: make it a real
    // reset, so nothing below the floor is carried over.
    init_state(cb);
    cb->reader_gen = cb->clear_gen.load(std::memory_order_relaxed);
    cb->pos = ReadPos{};
    cb->copy.seq = 0;
    cb->read = 0;
    cb->overrun = 0;
  }
  CpuBuffer fresh;
  fresh.page_size = cb->page_size;
  fresh.page_shift = cb->page_shift;
  if (!cb->store->alloc_pages(&fresh, nr)) return -ENOMEM;
  Tail t = read_tail(cb);
  uint64_t w0;
  if (t.seq == 0) {
    w0 = virgin_w0(&fresh);
  } else {
    uint64_t keep = std::min<uint64_t>(nr, cb->nr_pages);
    uint64_t first =
        std::max(t.seq >= keep ? t.seq - keep + 1 : 1, cb->floor_seq.load(std::memory_order_relaxed));
    for (uint64_t s = first; s <= t.seq; ++s) {
      const PageMeta& m = cb->meta[cb->slot_of(s)];
      if (m.seq.load(std::memory_order_relaxed) != s) continue;
      uint64_t to = (s - 1) % nr;
      std::memcpy(fresh.page_at(to), cb->page_at(cb->slot_of(s)), cb->page_size);
      PageMeta& d = fresh.meta[to];
      d.seq.store(s, std::memory_order_relaxed);
      d.first_index.store(m.first_index.load(std::memory_order_relaxed), std::memory_order_relaxed);
      d.missed.store(m.missed.load(std::memory_order_relaxed), std::memory_order_relaxed);
      d.entries.store(m.entries.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    uint8_t* tail_page = fresh.page_at((t.seq - 1) % nr);
    w0 = (reinterpret_cast<uint64_t>(tail_page + kPageHeaderSize + t.len) << 16) | t.entries;
  }
  // The new geometry and w0 are in place before the old pages go, so that a
  // file-backed buffer whose process dies here still names pages that exist
  // (a recovery rejects the CPU if it sees only part of the new geometry).
  uint8_t* old_pages = cb->pages;
  PageMeta* old_meta = cb->meta;
  const uint32_t old_nr = cb->nr_pages;
  cb->pages = fresh.pages;
  cb->meta = fresh.meta;
  cb->nr_pages = fresh.nr_pages;
  fresh.pages = nullptr;
  fresh.meta = nullptr;
  cb->ws.w0.store(w0, std::memory_order_relaxed);
  uint8_t* wp = reinterpret_cast<uint8_t*>(w0 >> 16);
  cb->ws.limit.store(
      limit_for(cb->page_at(static_cast<uint64_t>(wp - cb->pages) >> cb->page_shift), cb->page_size),
      std::memory_order_relaxed);
  cb->store->free_pages(old_pages, old_meta, old_nr, cb->page_size);
  return 0;
}

int RingBuffer::swap_cpu(RingBuffer& other, int cpu) {
  if (&other == this) return -EINVAL;
  RingBuffer* a = this < &other ? this : &other;
  RingBuffer* b = this < &other ? &other : this;
  ControlGuard la(*a);
  ControlGuard lb(*b);
  return swap_locked(la, other, cpu);
}

int RingBuffer::swap_locked(const Locked&, RingBuffer& other, int cpu) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  // A CpuBuffer is freed through its own store, which its holder keeps alive.
  if (&other == this || other.nr_cpus_ != nr_cpus_ || clock() != other.clock() || store_ != other.store_)
    return -EINVAL;
  const int lo = cpu < 0 ? 0 : cpu, hi = cpu < 0 ? nr_cpus_ : cpu + 1;
  if (lo >= nr_cpus_) return -EINVAL;
  for (int c = lo; c < hi; ++c)
    if (cpu_buffer(c)->page_size != other.cpu_buffer(c)->page_size) return -EINVAL;
  for (int c = lo; c < hi; ++c) {
    CpuBuffer* mine = cpu_buffer(c);
    CpuBuffer* theirs = other.cpu_buffer(c);
    // A write in flight commits into the CpuBuffer it loaded, so it lands
    // in one of the two, never in neither. A sealed CPU stays sealed: its
    // CpuBuffer carries `sealed` with it, and the gate follows the slot.
    slots()[c + kTrapSlots].store(theirs, std::memory_order_release);
    other.slots()[c + kTrapSlots].store(mine, std::memory_order_release);
    update_gate(c);
    other.update_gate(c);
    adopt_cpu(c);
    other.adopt_cpu(c);
  }
  return 0;
}

// Nothing writes to a detached buffer, so its writer state may be changed
// from outside a section: limit = 0 sends the next write (once the buffer is
// swapped in) to the slow path, which sees the tail below the floor and
// opens page floor_seq, whose first_index is floor_index. Readers stop seeing
// the old pages as soon as floor_seq is stored (read_tail, oldest_seq).
void RingBuffer::clear_detached(int cpu) {
  const int lo = cpu < 0 ? 0 : cpu, hi = cpu < 0 ? nr_cpus_ : std::min(cpu + 1, nr_cpus_);
  for (int c = lo; c < hi; ++c) clear_detached_cpu_buffer(cpu_buffer(c));
}

void clear_detached_cpu_buffer(CpuBuffer* cb) {
  const Tail t = read_tail_raw(cb);
  cb->ws.limit.store(0, std::memory_order_relaxed);
  if (t.seq + 1 > cb->floor_seq.load(std::memory_order_relaxed)) {
    // order: the counts, relaxed, then the floor and the generation with
    // release: a reader that sees either sees the counts.
    cb->floor_index.store(t.seq ? t.first_index + t.entries : 0, std::memory_order_relaxed);
    cb->floor_dropped.store(cb->dropped.load(std::memory_order_relaxed), std::memory_order_relaxed);
    cb->floor_seq.store(t.seq + 1, std::memory_order_release);
  }
  cb->clear_gen.fetch_add(1, std::memory_order_release);
  // Discard mode reuses a page only once the consumer passed it: nothing
  // below the floor is waiting to be consumed any more.
  uint64_t ri = cb->reader_index.load(std::memory_order_relaxed);
  const uint64_t fi = cb->floor_index.load(std::memory_order_relaxed);
  while (ri < fi && !cb->reader_index.compare_exchange_weak(ri, fi, std::memory_order_release)) {
  }
}

void RingBuffer::run_deferred() {
  // order: seq_cst store, then (in drain) the lock attempt: either the lock
  // is free and this thread runs the work, or its holder's drain, which
  // reads the flag after unlocking, sees it.
  deferred_pending_.store(true, std::memory_order_seq_cst);
  drain_deferred();
}

void RingBuffer::drain_deferred() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  while (deferred_pending_.load(std::memory_order_seq_cst)) {
    if (!control_.try_lock()) return;  // the holder drains when it unlocks
    if (deferred_pending_.exchange(false, std::memory_order_acq_rel) && deferred_fn_) {
      const bool froze = grow_.load(std::memory_order_acquire) != nullptr;
      if (froze) freeze_growth();
      deferred_fn_(deferred_arg_, Locked{});
      if (froze) thaw_growth();
    }
    control_.unlock();
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

uint32_t RingBuffer::page_size(int cpu) const { return cpu_buffer(cpu < 0 ? 0 : cpu)->page_size; }
uint32_t RingBuffer::nr_pages(int cpu) const { return cpu_buffer(cpu < 0 ? 0 : cpu)->nr_pages; }
uint64_t RingBuffer::size_bytes(int cpu) const {
  const CpuBuffer* cb = cpu_buffer(cpu < 0 ? 0 : cpu);
  return uint64_t{cb->nr_pages} * (cb->page_size - kPageHeaderSize);
}

// ---------------------------------------------------------------------------
// Statistics.

CpuStats RingBuffer::stats(int cpu) {
  CpuStats s;
  if (cpu < 0 || cpu >= nr_cpus_) return s;
  CpuBuffer* cb = cpu_buffer(cpu);
  base::MutexLock rl(&cb->reader_mu);
  sync_clear(cb);
  Tail t = read_tail(cb);
  s.now_ts = clock::read_raw(clock());
  s.dropped_events =
      cb->dropped.load(std::memory_order_relaxed) - cb->floor_dropped.load(std::memory_order_relaxed);
  s.read_events = cb->read;
  s.written = t.seq ? t.first_index + t.entries - cb->floor_index.load(std::memory_order_relaxed) : 0;
  // Entries the reader holds or has consumed: nothing before `owned` can be
  // lost any more.
  const uint64_t floor_index = cb->floor_index.load(std::memory_order_relaxed);
  uint64_t owned = std::max(cb->pos.index, floor_index);
  if (cb->copy.seq != 0 && cb->copy.seq == cb->pos.seq) owned = cb->copy.first_index + cb->copy.entries;
  uint64_t overrun = cb->overrun;
  uint64_t unread_bytes = 0;
  uint64_t oldest_ts = 0;
  if (t.seq != 0) {
    // Pages the writer overwrote since the reader last looked.
    for (uint64_t s2 = std::max(oldest_seq(cb, t), cb->pos.seq); s2 <= t.seq; ++s2) {
      const PageMeta& m = cb->meta[cb->slot_of(s2)];
      uint64_t seq = m.seq.load(std::memory_order_acquire);
      uint64_t fi = m.first_index.load(std::memory_order_relaxed);
      uint64_t ts = reinterpret_cast<const PageHeader*>(cb->page_at(cb->slot_of(s2)))->timestamp;
      uint64_t len = s2 == t.seq ? t.len
                                 : reinterpret_cast<const PageHeader*>(cb->page_at(cb->slot_of(s2)))->commit &
                                       kCommitLengthMask;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (m.seq.load(std::memory_order_relaxed) != seq || seq != s2) continue;
      if (oldest_ts == 0) {
        if (fi > owned) overrun += fi - owned;
        oldest_ts = ts;
      }
      if (s2 == cb->pos.seq) {
        unread_bytes += len > cb->pos.off ? len - cb->pos.off : 0;
        if (cb->copy.seq == s2 && cb->pos.off < cb->copy.len) oldest_ts = cb->pos.ts;
      } else {
        unread_bytes += len;
      }
    }
  }
  s.overrun = overrun;
  s.read_events = cb->read;
  s.entries = s.written - std::min(s.written, s.read_events + s.overrun);
  s.bytes = s.entries ? unread_bytes : 0;
  s.oldest_event_ts = s.entries ? oldest_ts : 0;
  return s;
}

// ---------------------------------------------------------------------------
// Waiting.

bool RingBuffer::wait(int cpu, int percent, int timeout_ms) {
  if (percent < 0) percent = 0;
  if (percent > 100) percent = 100;
  for (;;) {
    // order: acquire pairs with wake_now()'s release increment.
    uint32_t seq = wake_seq_.load(std::memory_order_acquire);
    auto ready = [&] {
      if (cpu >= 0) return page_ready(cpu_buffer(cpu), percent);
      for (int c = 0; c < nr_cpus_; ++c)
        if (page_ready(cpu_buffer(c), percent)) return true;
      return false;
    };
    if (ready()) return true;
    {
      ControlGuard l(*this);
      if (percent == 0) {
        waiters_any_.fetch_add(1, std::memory_order_relaxed);
        update_gates();
      } else {
        uint32_t cur = wait_percent_.load(std::memory_order_relaxed);
        if (waiters_full_.fetch_add(1, std::memory_order_relaxed) == 0 || uint32_t(percent) < cur)
          wait_percent_.store(static_cast<uint32_t>(percent), std::memory_order_relaxed);
      }
      wake_pending_.store(true, std::memory_order_relaxed);
    }
    // Every writer either sees the registration after its commit, or its
    // commit is visible to the check below (see SlowPath::after_commit).
    base::rseq_fence();
    bool now = ready();
    if (!now) base::futex_wait(&wake_seq_, seq, timeout_ms);
    {
      ControlGuard l(*this);
      if (percent == 0) {
        waiters_any_.fetch_sub(1, std::memory_order_relaxed);
        update_gates();
      } else {
        waiters_full_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (now || ready()) return true;
    if (kicked_.exchange(false, std::memory_order_acq_rel)) return false;
    if (timeout_ms >= 0) return false;  // timed out, or woken for another waiter's percent
  }
}

void RingBuffer::wake_waiters() {
  kicked_.store(true, std::memory_order_release);
  wake_now();
}

bool RingBuffer::page_ready(CpuBuffer* cb, int percent) {
  base::MutexLock rl(&cb->reader_mu);
  sync_clear(cb);
  Tail t = read_tail(cb);
  if (t.seq == 0) return false;
  if (percent == 0) {
    if (cb->copy.seq == cb->pos.seq && cb->pos.off < cb->copy.len) return true;
    if (cb->pos.seq == 0 || t.seq > cb->pos.seq) return true;
    return t.seq == cb->pos.seq && t.len > cb->pos.off;
  }
  uint64_t from = std::max(cb->pos.seq, oldest_seq(cb, t));
  uint64_t dirty = t.seq > from ? t.seq - from : 0;
  return (dirty + 1) * 100 >= uint64_t(percent) * cb->nr_pages;
}

}  // namespace usrtrace::rb
