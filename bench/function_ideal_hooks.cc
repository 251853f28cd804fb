// The ideal function hooks: what recording a function's entry or exit cannot
// cost less than. Each does rdtsc and one 16-byte store {ts, fn} (the exit's
// fn with bit 0 set) into the next slot of a per-thread array, index
// wrapping: no CPU lookup, no header, no filter, no depth. The workload of
// case "ideal" calls them through -finstrument-functions, its
// __cyg_profile_func_enter/exit renamed by objcopy (bench/CMakeLists.txt) so
// that they do not clash with libusrtrace's hooks in the same program.
#include <emmintrin.h>
#include <x86intrin.h>

#include <cstdint>

#include "function_workload.h"

namespace {
constexpr uint64_t kSlots = 4096;  // 64 KiB, fits L2; as BM_IdealWrite's
alignas(64) thread_local __m128i t_slots[kSlots];
thread_local uint64_t t_next;
}  // namespace

extern "C" FB_NOTRACE void fb_ideal_enter(void* fn, void*) {
  const uint64_t i = t_next++;
  _mm_store_si128(&t_slots[i & (kSlots - 1)],
                  _mm_set_epi64x(static_cast<long long>(reinterpret_cast<uintptr_t>(fn)),
                                 static_cast<long long>(__rdtsc())));
}

extern "C" FB_NOTRACE void fb_ideal_exit(void* fn, void*) {
  const uint64_t i = t_next++;
  _mm_store_si128(&t_slots[i & (kSlots - 1)],
                  _mm_set_epi64x(static_cast<long long>(reinterpret_cast<uintptr_t>(fn) | 1),
                                 static_cast<long long>(__rdtsc())));
}
