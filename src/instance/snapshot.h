// Snapshots: an instance's spare buffers, swapped with the live one in O(1)
// when a program hits an error, so that the events that led to it are kept
// while tracing goes on (the kernel's `snapshot` file and
// tracing_snapshot()). docs/design/snapshots.md has the long form.
//
// A ring of N spares (snapshot_ring_size, default 1) keeps the last N
// snapshots: snapshot k swaps the live buffer with spare k % N, which is
// first emptied in O(1) (RingBuffer::clear_detached), so the live buffer
// goes on from empty pages and the oldest kept snapshot is the one given up.
//
// Taking a snapshot is lock-free and async-signal-safe. The swap needs the
// live buffer's control lock (a resize or a clock change must not move the
// pages under it); take() records the request and asks the ring buffer to
// run it with the lock held: at once if the lock is free, otherwise by the
// holder when it unlocks (RingBuffer::run_deferred), which may be the very
// thread the calling signal handler interrupted. Requests that meet one not
// yet run are merged into it (the snapshot says how many).
//
// Everything that changes the spares (allocation, freeing, ring size,
// resize, clock) holds the live buffer's control lock, so the deferred swap
// never sees them half-changed and never needs a spare's own lock.
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
  // Snapshots taken since allocation.
  uint64_t taken() const { return taken_.load(std::memory_order_acquire); }

  // The live buffer's resize and clock, applied to the spares too (they
  // must stay swappable). Context: control plane.
  int resize(int cpu, uint64_t bytes);
  void set_clock(clock::ClockId id);

  // A reference to kept snapshot `age` (0: the newest) for reading: its
  // buffer and what its head says. While one is held, release() and
  // set_ring_size() fail with EBUSY. A snapshot taken meanwhile may recycle
  // the buffer: the reader then sees it emptied, never freed.
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
  // An empty Ref when nothing is allocated or `age` >= ring size.
  Ref get(int age);

 private:
  static void run_requests(void* self, const rb::RingBuffer::Locked& held);
  void take_locked(const rb::RingBuffer::Locked& held, const SnapshotInfo& req);
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
  std::atomic<int> ring_{1};
  std::atomic<uint64_t> taken_{0};
  std::atomic<int> readers_{0};

  // The pending request. request_state_: 0 free, 1 being filled by a
  // requester, 2 filled and waiting for the swap. A request that finds it
  // taken is merged into it (merged_).
  std::atomic<uint32_t> request_state_{0};
  std::atomic<uint64_t> merged_{0};
  SnapshotInfo request_;
};

}  // namespace usrtrace::instance
