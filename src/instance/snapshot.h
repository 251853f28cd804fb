// Snapshots: an instance's spare buffers, swapped with the live one in O(1)
// when a program hits an error, so that the events that led to it are kept
// while tracing goes on (the kernel's `snapshot` file and
// tracing_snapshot()). docs/design/snapshots.md has the long form.
//
// A ring of N spares (snapshot_ring_size, default 1) keeps N snapshots. A
// swap gives up one spare, which is first emptied in O(1)
// (RingBuffer::clear_detached), so the live buffer goes on from empty pages:
//
//   1. a spare that holds no snapshot (since allocation, clear or a clock
//      change), if there is one; otherwise
//   2. take(), take_max(): the oldest kept snapshot (the ring keeps the
//      last N);
//   3. take_scored(): the lowest-ranked of the kept snapshots and the new
//      one, where rank is (scored, score, number): an unscored snapshot
//      ranks below every scored one, then the lower score, then the older.
//      If that is the new one (every kept snapshot is scored, with a higher
//      score), nothing is swapped: the request is dropped and its events
//      stay live. So scored takes alone keep the N worst cases, ties going
//      to the newer; a plain take among them still gives up the oldest,
//      whatever its score.
//
// get(age) still reads by recency (age 0: the most recently taken), through
// order_, which maps age -> spare:
//
//   order_: [ 2 | 0 | 1 ]   kept_ = 2: ages 0 and 1 are spares 2 and 0;
//             age0 age1 .    order_[kept_..N) are the empty spares.
//
// A swap that gives up order_[p] moves it to the front (ages 0..p-1 become
// 1..p); one that fills an empty spare also grows kept_ by one.
//
// Taking a snapshot is lock-free and async-signal-safe. The swap needs the
// live buffer's control lock (a resize or a clock change must not move the
// pages under it); take() records the request and asks the ring buffer to
// run it with the lock held: at once if the lock is free, otherwise by the
// holder when it unlocks (RingBuffer::run_deferred), which may be the very
// thread the calling signal handler interrupted. Requests that meet one not
// yet run are merged into it (the snapshot says how many); a scored one
// raises the pending request's score to the larger of the two, and makes an
// unscored one scored (then ranked, and perhaps dropped, as 3 says).
//
// Everything that changes the spares, order_ and kept_ (allocation,
// freeing, ring size, resize, clock, clear) holds the live buffer's control
// lock, so the deferred swap never sees them half-changed and never needs a
// spare's own lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/mutex.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::instance {

inline constexpr int kMaxSnapshotRing = 16;
inline constexpr size_t kSnapshotReasonMax = 128;

// What the head of a snapshot's text says about it.
struct SnapshotInfo {
  uint64_t number = 0;  // 1, 2, ... since the spares were allocated; 0: none here
  uint64_t ts = 0;      // raw clock value of the request
  int tid = 0;          // the requesting thread
  int cpu = -1;         // -1: all CPUs were swapped, else only that one
  uint64_t merged = 0;  // further requests served by this snapshot
  // take_scored(): how bad the case was, the largest score of the requests
  // served. take() and take_max() leave it unscored.
  bool scored = false;
  uint64_t score = 0;
  char reason[kSnapshotReasonMax] = {};
  // A latency tracer's max trace (latency/latency.h): the measured window
  // in raw clock values (window_end 0: not a max trace), where it began and
  // ended, the CPU it ended on and the task, as the kernel's max_data.
  uint64_t window_start = 0, window_end = 0;
  uint64_t latency_ticks = 0;  // what was measured (the window may end later)
  uintptr_t start_ip = 0, end_ip = 0;
  int end_cpu = -1;
  int uid = 0, nice = 0, policy = 0, rt_prio = 0;
};

class Snapshots {
 public:
  // `slot` is the instance's (for the "not allocated" markers).
  Snapshots(rb::RingBuffer& live, int slot);
  ~Snapshots();
  Snapshots(const Snapshots&) = delete;
  Snapshots& operator=(const Snapshots&) = delete;

  // echo 1 > snapshot_enabled: allocates the spares, sized like the live
  // buffer, if they are not. 0 or -ENOMEM. Context: control plane.
  int allocate();
  // echo 0 > snapshot: frees them. -EBUSY while a snapshot is being read.
  int release();
  // echo 2 > snapshot: empties every kept snapshot (cpu >= 0: that CPU of
  // the newest), keeping the memory.
  void clear(int cpu);
  bool allocated() const { return allocated_.load(std::memory_order_acquire); }

  // snapshot_ring_size: how many snapshots are kept (1..kMaxSnapshotRing).
  // Reallocates when allocated (the kept snapshots are dropped). 0, -EINVAL,
  // -ENOMEM or -EBUSY.
  int set_ring_size(int n);
  int ring_size() const { return ring_.load(std::memory_order_relaxed); }

  // tracing_snapshot(): swaps the live buffer (cpu >= 0: one CPU's pages)
  // with the next spare, recording `reason` (cut to kSnapshotReasonMax - 1
  // bytes). If no spare is allocated, does what the kernel does: writes two
  // marker lines saying so into the live buffer and turns tracing off, so
  // the events before the error stay there; returns -ENOENT then, else 0.
  // Context: any thread, signal handlers included; lock-free.
  int take(std::string_view reason, int cpu = -1);
  // take() for a latency tracer's new max: `info` says everything (ts and
  // tid are filled in when 0); all CPUs are swapped. -ENOENT without a
  // spare, and then nothing else happens. Context: as take().
  int take_max(const SnapshotInfo& info);
  // take() of all CPUs, for keeping the worst cases: the snapshot is ranked
  // by `score` (higher: worse) and gives up the lowest-ranked kept one, or
  // is dropped if it ranks below them all (rule 3 at the top). Returns as
  // take(), and does the same without a spare. Context: as take().
  int take_scored(std::string_view reason, uint64_t score);
  // Snapshots taken since allocation (swaps made: a dropped scored request
  // is not counted).
  uint64_t taken() const { return taken_.load(std::memory_order_acquire); }

  // The live buffer's resize and clock, applied to the spares too (they
  // must stay swappable). Context: control plane.
  int resize(int cpu, uint64_t bytes);
  void set_clock(clock::ClockId id);

  // A reference to kept snapshot `age` (0: the most recently taken, whatever
  // the scores) for reading: its buffer and what its head says. While one
  // is held, release() and set_ring_size() fail with EBUSY. A snapshot
  // taken meanwhile may recycle the buffer: the reader then sees it
  // emptied, never freed.
  class Ref {
   public:
    Ref() = default;
    Ref(Ref&& o) noexcept : owner_(o.owner_), buffer_(o.buffer_), info_(o.info_) { o.owner_ = nullptr; }
    Ref& operator=(Ref&&) = delete;
    ~Ref() {
      if (owner_) owner_->readers_.fetch_sub(1, std::memory_order_acq_rel);
    }
    explicit operator bool() const { return buffer_ != nullptr; }
    rb::RingBuffer& buffer() const { return *buffer_; }
    const SnapshotInfo& info() const { return info_; }

   private:
    friend class Snapshots;
    Snapshots* owner_ = nullptr;
    rb::RingBuffer* buffer_ = nullptr;
    SnapshotInfo info_;
  };
  // An empty Ref when nothing is allocated or fewer than age + 1 snapshots
  // are kept; age 0 with none kept is an empty spare (no number).
  Ref get(int age);

 private:
  int request(std::string_view reason, int cpu, bool scored, uint64_t score);
  static void run_requests(void* self, const rb::RingBuffer::Locked& held);
  void take_locked(const rb::RingBuffer::Locked& held, const SnapshotInfo& req);
  // No snapshot kept: order_ is the identity. Context: live_'s control lock
  // held, or the constructor.
  void forget_kept();
  // New spares for a ring of n, sized like the live buffer; installs them
  // in place of the old ones, which it frees. 0 or -ENOMEM.
  int reallocate(int n);

  rb::RingBuffer& live_;
  const int slot_;
  base::Mutex mu_;  // serializes the control-plane calls; never taken by take()

  // Changed only with live_'s control lock held (read by take_locked, which
  // holds it too).
  std::unique_ptr<rb::RingBuffer> spares_[kMaxSnapshotRing];
  SnapshotInfo info_[kMaxSnapshotRing];
  std::atomic<bool> allocated_{false};
  // Written under live_'s control lock too while allocated (reallocate).
  std::atomic<int> ring_{1};
  // order_[age]: the spare holding the kept snapshot of that age, for age <
  // kept_ (kept_ <= ring size); the rest are the empty spares.
  uint8_t order_[kMaxSnapshotRing] = {};
  int kept_ = 0;
  std::atomic<uint64_t> taken_{0};
  std::atomic<int> readers_{0};

  // The pending request. request_state_: 0 free, 1 being filled by a
  // requester, 2 filled and waiting for the swap. A request that finds it
  // taken is merged into it: merged_ counts it and, for a scored one,
  // merged_score_ keeps the largest merged score + 1 (0: no scored merge;
  // a score of UINT64_MAX counts as UINT64_MAX - 1 there), one word so a
  // merge is folded in whole. run_requests takes both when it runs the
  // request; a merge that lands just after that is folded into the next
  // request instead.
  std::atomic<uint32_t> request_state_{0};
  std::atomic<uint64_t> merged_{0};
  std::atomic<uint64_t> merged_score_{0};
  SnapshotInfo request_;
};

}  // namespace usrtrace::instance
