// The loop bodies shared by ring_buffer_bench.cc (timed) and instr_count.cc
// (counted under callgrind), so both programs measure the same code.
#pragma once

#include <emmintrin.h>
#include <x86intrin.h>

#include <cstddef>
#include <cstdint>

#include "base/compiler.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::bench {

// The benchmarked event: 3 integers and a 16-byte string, 28 bytes.
struct Event {
  int32_t a;
  int32_t b;
  int32_t c;
  char s[16];
};
static_assert(sizeof(Event) == 28, "the event is 28 bytes of payload");

inline constexpr char kEventName[16] = "usrtrace-bench";

// BM_IdealWrite's per-thread array: 4096 slots of 16 bytes (64 KiB, fits L2).
inline constexpr size_t kIdealSlots = 4096;
static_assert((kIdealSlots & (kIdealSlots - 1)) == 0, "index wraps with a mask");

// The floor: read the TSC and store 16 bytes {ts, i} into the next slot of a
// per-thread array. Nothing else: no CPU lookup, no header, no commit.
USRTRACE_ALWAYS_INLINE void ideal_write(__m128i* slots, uint64_t i) {
  const uint64_t ts = __rdtsc();
  _mm_store_si128(&slots[i & (kIdealSlots - 1)],
                  _mm_set_epi64x(static_cast<long long>(i), static_cast<long long>(ts)));
}

// Varies the payload every iteration so nothing is constant-folded; the
// string stays as initialised (write() reads it from memory every time).
USRTRACE_ALWAYS_INLINE void fill_event(Event* ev, uint32_t i) {
  ev->a = static_cast<int32_t>(i);
  ev->b = static_cast<int32_t>(i + 1000u);
  ev->c = static_cast<int32_t>(~i);
}

// One recorded event through the inline fast path.
USRTRACE_ALWAYS_INLINE bool usrtrace_write(rb::RingBuffer& rb, Event* ev, uint32_t i) {
  fill_event(ev, i);
  return rb.write<sizeof(Event)>(ev);
}

}  // namespace usrtrace::bench
