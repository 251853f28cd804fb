// Private to src/ring_buffer: helpers shared by the control and reader code.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ring_buffer/ring_buffer.h"

namespace usrtrace::rb {

// What a closed gate points at (ring_buffer.cc).
extern WriterState g_closed;

// A consistent view of a CPU's tail, read without stopping writers.
struct Tail {
  uint64_t seq = 0;  // 0: nothing written since the last reset
  uint64_t slot = 0;
  uint32_t len = 0;          // data bytes in the tail page
  uint32_t entries = 0;      // data entries in the tail page
  uint64_t last_ts = 0;      // running time at `len`
  uint64_t first_index = 0;  // of the tail page
};
// Context: any thread; lock-free (retries while a commit lands between reads).
// Empty when the tail is below the floor of a clear_detached().
Tail read_tail(const CpuBuffer* cb, const PagesView& v);
inline Tail read_tail(const CpuBuffer* cb) { return read_tail(cb, own_view(cb)); }
// The same, ignoring the floor.
Tail read_tail_raw(const CpuBuffer* cb, const PagesView& v);
inline Tail read_tail_raw(const CpuBuffer* cb) { return read_tail_raw(cb, own_view(cb)); }
// The state of a CPU with nothing written. `metas_zero`: the PageMetas are
// known to be zero (fresh from the store), and are not written (a sparse
// store's untouched metas then cost no memory). Context: no writer targets
// `cb` (control lock held and the CPU sealed, or `cb` detached).
void init_state(CpuBuffer* cb, bool metas_zero = false);
// RingBuffer::clear_detached() for one CpuBuffer no writer targets.
// Context: async-signal-safe.
void clear_detached_cpu_buffer(CpuBuffer* cb);
// A reader that finds the buffer cleared (clear_detached) since it last
// looked drops its position and counts. Context: reader_mu held.
void sync_clear(CpuBuffer* cb);

// The oldest seq that can still be in the ring when `t` is the tail.
inline uint64_t oldest_seq(const CpuBuffer* cb, const PagesView& v, const Tail& t) {
  const uint64_t ring = t.seq > v.nr_pages ? t.seq - v.nr_pages + 1 : 1;
  return std::max(ring, cb->floor_seq.load(std::memory_order_acquire));
}
inline uint64_t oldest_seq(const CpuBuffer* cb, const Tail& t) { return oldest_seq(cb, own_view(cb), t); }

enum class CopyResult { kOk, kGone, kNotYet };
// Copies page `seq` into `out` with seqlock checks. Context: reader.
CopyResult copy_page(const CpuBuffer* cb, const PagesView& v, uint64_t seq, PageCopy* out);

}  // namespace usrtrace::rb
