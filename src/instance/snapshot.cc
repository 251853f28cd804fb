#include "instance/snapshot.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>

#include "base/rseq.h"
#include "base/sys.h"
#include "instance/slot_write.h"
#include "writers/writers.h"

namespace usrtrace::instance {

// Merges from signal handlers fold their score with a CAS loop.
static_assert(std::atomic<uint64_t>::is_always_lock_free);

Snapshots::Snapshots(rb::RingBuffer& live, int slot) : live_(live), slot_(slot) {
  forget_kept();
  live_.set_deferred(&Snapshots::run_requests, this);
}

Snapshots::~Snapshots() {
  // No request can run after this: the live buffer is being destroyed too,
  // and its owner waited for writers (and so for snapshots from writers'
  // signal handlers) to leave it.
  live_.set_deferred(nullptr, nullptr);
}

int Snapshots::allocate() {
  base::MutexLock l(&mu_);
  if (allocated()) return 0;
  return reallocate(ring_size());
}

int Snapshots::release() {
  base::MutexLock l(&mu_);
  if (!allocated()) return 0;
  if (readers_.load(std::memory_order_acquire) != 0) return -EBUSY;
  return reallocate(0);
}

int Snapshots::set_ring_size(int n) {
  if (n < 1 || n > kMaxSnapshotRing) return -EINVAL;
  base::MutexLock l(&mu_);
  if (n == ring_size()) return 0;
  if (!allocated()) {
    ring_.store(n, std::memory_order_relaxed);
    return 0;
  }
  if (readers_.load(std::memory_order_acquire) != 0) return -EBUSY;
  return reallocate(n);  // stores ring_ with the spares
}

// Context: mu_ held. Allocation happens outside the live buffer's control
// lock (it may be slow); the exchange inside it.
int Snapshots::reallocate(int n) USRTRACE_NO_THREAD_SAFETY_ANALYSIS {
  std::unique_ptr<rb::RingBuffer> fresh[kMaxSnapshotRing];
  for (int i = 0; i < n; ++i) {
    rb::Options o;
    o.page_size = live_.page_size(0);
    o.size_per_cpu = live_.size_bytes(0);
    o.mode = live_.mode();
    o.clock = live_.clock();
    // In the live buffer's store (its file, for a crash-surviving buffer:
    // swaps move CpuBuffers between the two, and the file must keep every
    // one), tagged 1..n so a recovery tells the snapshots from the live one.
    o.store = live_.store();
    o.tag = live_.tag() + 1 + static_cast<uint32_t>(i);
    int err = 0;
    fresh[i] = rb::RingBuffer::create(o, &err);
    if (!fresh[i]) return -err;
    for (int c = 1; c < live_.nr_cpus(); ++c)
      if (live_.size_bytes(c) != live_.size_bytes(0))
        if (int rc = fresh[i]->resize(c, live_.size_bytes(c)); rc < 0) return rc;
  }
  {
    rb::RingBuffer::ControlGuard g(live_);
    // The clock may have changed since the spares were made; they are empty.
    for (int i = 0; i < n; ++i)
      if (fresh[i]->clock() != live_.clock()) fresh[i]->set_clock(live_.clock());
    for (int i = 0; i < kMaxSnapshotRing; ++i) {
      std::swap(spares_[i], fresh[i]);
      info_[i] = SnapshotInfo{};
    }
    forget_kept();
    // order: relaxed is enough; take_locked and get() read it under the
    // same lock. (Stored here, not after the lock, so a swap never sees a
    // ring size that does not match the spares.)
    if (n > 0) ring_.store(n, std::memory_order_relaxed);
    taken_.store(0, std::memory_order_release);
    allocated_.store(n > 0, std::memory_order_release);
  }
  // A swap lets a write in flight commit into the CpuBuffer it loaded
  // (RingBuffer::swap_locked), so an old spare may hold a CpuBuffer that a
  // writer of the live buffer is still in: a grace period before it goes.
  // (~RingBuffer waits only for its own slow paths; the soak test under
  // TSan caught a live writer in a freed spare's pages.)
  if (std::any_of(std::begin(fresh), std::end(fresh), [](const auto& b) { return b != nullptr; }))
    writers::synchronize_writers();
  return 0;  // the old spares are freed here, outside the lock
}

// Context: live_'s control lock held, or the constructor.
void Snapshots::forget_kept() {
  for (int i = 0; i < kMaxSnapshotRing; ++i) order_[i] = static_cast<uint8_t>(i);
  kept_ = 0;
}

void Snapshots::clear(int cpu) {
  base::MutexLock l(&mu_);
  if (!allocated()) return;
  rb::RingBuffer::ControlGuard g(live_);
  if (cpu >= 0) {
    // That CPU of the most recent snapshot; it stays kept.
    if (kept_ > 0) spares_[order_[0]]->clear_detached(cpu);
    return;
  }
  for (int i = 0; i < ring_size(); ++i) {
    spares_[i]->clear_detached(-1);
    info_[i] = SnapshotInfo{};
  }
  forget_kept();
}

int Snapshots::resize(int cpu, uint64_t bytes) {
  base::MutexLock l(&mu_);
  rb::RingBuffer::ControlGuard g(live_);
  if (int rc = live_.resize_locked(g, cpu, bytes); rc < 0) return rc;
  for (auto& s : spares_)
    if (s)
      if (int rc = s->resize(cpu, bytes); rc < 0) return rc;
  return 0;
}

void Snapshots::set_clock(clock::ClockId id) {
  base::MutexLock l(&mu_);
  rb::RingBuffer::ControlGuard g(live_);
  live_.set_clock_locked(g, id);
  for (int i = 0; i < kMaxSnapshotRing; ++i) {
    if (spares_[i]) spares_[i]->set_clock(id);  // resets them, as the kernel does
    info_[i] = SnapshotInfo{};
  }
  forget_kept();
}

int Snapshots::take(std::string_view reason, int cpu) { return request(reason, cpu, false, 0); }

int Snapshots::take_scored(std::string_view reason, uint64_t score) {
  return request(reason, -1, true, score);
}

// take() and take_scored(). Context: as take().
int Snapshots::request(std::string_view reason, int cpu, bool scored, uint64_t score) {
  if (!allocated()) {
    // The kernel's answer to tracing_snapshot() without a spare: say so in
    // the trace and stop it, so the events before the error are kept.
    events::write_print(slot_, "*** SNAPSHOT NOT ALLOCATED ***\n", 0);
    events::write_print(slot_, "*** stopping trace here!   ***\n", 0);
    live_.record_off();
    return -ENOENT;
  }
  uint32_t free_state = 0;
  // order: acquire pairs with run_requests' release of the slot, so this
  // requester's stores do not mix with the reader's copy.
  if (request_state_.compare_exchange_strong(free_state, 1, std::memory_order_acquire,
                                             std::memory_order_relaxed)) {
    SnapshotInfo& r = request_;
    r = SnapshotInfo{};
    r.ts = clock::read_raw(live_.clock());
    r.tid = base::gettid_cached();
    r.cpu = cpu;
    const size_t n = std::min(reason.size(), kSnapshotReasonMax - 1);
    if (n != 0) std::memcpy(r.reason, reason.data(), n);  // data() may be null when empty
    r.reason[n] = '\0';
    r.scored = scored;
    r.score = score;
    // order: release; run_requests reads the request after seeing 2.
    request_state_.store(2, std::memory_order_release);
  } else {
    // A request is pending (or being filled): this one is served by it,
    // and a scored one raises its score (run_requests folds it in).
    // order: relaxed is enough for both: run_requests needs their values
    // only, no other store made before them.
    if (scored) {
      const uint64_t enc = std::min(score, std::numeric_limits<uint64_t>::max() - 1) + 1;
      uint64_t cur = merged_score_.load(std::memory_order_relaxed);
      while (cur < enc && !merged_score_.compare_exchange_weak(cur, enc, std::memory_order_relaxed,
                                                               std::memory_order_relaxed)) {
      }
    }
    merged_.fetch_add(1, std::memory_order_relaxed);
  }
  live_.run_deferred();
  return 0;
}

int Snapshots::take_max(const SnapshotInfo& info) {
  if (!allocated()) return -ENOENT;
  uint32_t free_state = 0;
  // order: as in take().
  if (request_state_.compare_exchange_strong(free_state, 1, std::memory_order_acquire,
                                             std::memory_order_relaxed)) {
    request_ = info;
    if (request_.ts == 0) request_.ts = clock::read_raw(live_.clock());
    if (request_.tid == 0) request_.tid = base::gettid_cached();
    request_.cpu = -1;
    request_.merged = 0;
    request_.scored = false;
    request_.score = 0;
    request_state_.store(2, std::memory_order_release);
  } else {
    merged_.fetch_add(1, std::memory_order_relaxed);
  }
  live_.run_deferred();
  return 0;
}

void Snapshots::run_requests(void* self, const rb::RingBuffer::Locked& held) {
  auto* s = static_cast<Snapshots*>(self);
  // 1: a requester is still filling it (perhaps the thread this handler
  // interrupted); it calls run_deferred when done.
  if (s->request_state_.load(std::memory_order_acquire) != 2) return;
  SnapshotInfo req = s->request_;
  // order: relaxed, as the merges that add to them.
  req.merged = s->merged_.exchange(0, std::memory_order_relaxed);
  if (const uint64_t m = s->merged_score_.exchange(0, std::memory_order_relaxed); m != 0) {
    req.score = req.scored ? std::max(req.score, m - 1) : m - 1;
    req.scored = true;
  }
  s->request_state_.store(0, std::memory_order_release);
  s->take_locked(held, req);
}

namespace {

// Rule 3's rank: does kept snapshot `a` rank below `b`? (Age is the
// caller's: it scans from the oldest and keeps the first of equals.)
bool ranks_below(const SnapshotInfo& a, const SnapshotInfo& b) {
  if (a.scored != b.scored) return !a.scored;
  return a.score < b.score;
}

}  // namespace

// Context: live_'s control lock held; async-signal-safe.
void Snapshots::take_locked(const rb::RingBuffer::Locked& held, const SnapshotInfo& req) {
  if (!allocated_.load(std::memory_order_acquire)) return;  // released meanwhile
  const int n = ring_.load(std::memory_order_relaxed);      // order: written under this lock
  // [A] Which age gives its spare up (the rules at the top of snapshot.h).
  int at;
  if (kept_ < n) {
    at = kept_;  // 1: an empty spare
  } else if (!req.scored) {
    at = n - 1;  // 2: the oldest
  } else {
    at = n - 1;  // 3: the lowest-ranked, the oldest of equals
    for (int age = n - 2; age >= 0; --age)
      if (ranks_below(info_[order_[age]], info_[order_[at]])) at = age;
    const SnapshotInfo& low = info_[order_[at]];
    if (low.scored && low.score > req.score) return;  // the new one ranks lowest
  }
  const int i = order_[at];
  rb::RingBuffer& spare = *spares_[i];
  // [B] Empty it in O(1) so the live buffer goes on from clean pages, then
  // exchange the pages. (The swap fails only for a CPU the buffer does not
  // have, of which nothing was emptied: the spares match the live buffer.)
  spare.clear_detached(req.cpu);
  if (live_.swap_locked(held, spare, req.cpu) != 0) return;
  // [C] It is now the most recent: ages 0..at-1 become 1..at.
  for (int age = at; age > 0; --age) order_[age] = order_[age - 1];
  order_[0] = static_cast<uint8_t>(i);
  if (at == kept_) ++kept_;
  const uint64_t number = taken_.load(std::memory_order_relaxed) + 1;
  info_[i] = req;
  info_[i].number = number;
  taken_.store(number, std::memory_order_release);
}

Snapshots::Ref Snapshots::get(int age) {
  Ref r;
  readers_.fetch_add(1, std::memory_order_acq_rel);
  r.owner_ = this;  // from here, ~Ref gives the reference back
  if (!allocated() || age < 0 || age >= ring_size()) return r;
  rb::RingBuffer::ControlGuard g(live_);
  // With none kept, age 0 is an empty spare (snapshot_raw reads it).
  if (age >= kept_ && age != 0) return r;
  const int i = order_[age];
  r.buffer_ = spares_[i].get();  // null if freed meanwhile: an empty Ref
  r.info_ = info_[i];
  return r;
}

}  // namespace usrtrace::instance
