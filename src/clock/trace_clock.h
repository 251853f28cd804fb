// trace_clock: the clocks ftrace offers, by their tracefs names.
//
// The ring buffer stores raw clock values and converts at read time where the
// clock allows. TSC clocks (local, global, perf, x86-tsc) are read with one
// rdtsc inside the write path's critical section; local/global/perf convert
// TSC to nanoseconds with a calibration taken against CLOCK_MONOTONIC_RAW, so
// their values read like the kernel's sched_clock (ns since boot). The other
// clocks are read through the vDSO (mono, mono_raw, boot, tai), a shared
// counter (counter) or the coarse tick (uptime), on the slow path.
#pragma once

#include <x86intrin.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace usrtrace::clock {

enum class ClockId : uint8_t {
  kLocal,
  kGlobal,
  kCounter,
  kUptime,
  kPerf,
  kMono,
  kMonoRaw,
  kBoot,
  kTai,
  kX86Tsc,
};

struct ClockDesc {
  ClockId id;
  const char* name;  // as in the trace_clock file
  bool tsc;          // raw value is a TSC reading
  bool in_ns;        // converted values are nanoseconds (else counts)
};

// In the order of the kernel's trace_clock file.
std::span<const ClockDesc> all_clocks();
const ClockDesc& describe(ClockId id);
std::optional<ClockId> clock_from_name(std::string_view name);

inline uint64_t rdtsc() { return __rdtsc(); }
// The clocks whose raw value is a TSC reading (describe(id).tsc), inline for
// the write path.
constexpr bool is_tsc(ClockId id) {
  return id == ClockId::kLocal || id == ClockId::kGlobal || id == ClockId::kPerf || id == ClockId::kX86Tsc;
}

// Reads the clock's raw value, what the ring buffer stores.
// Context: any thread; async-signal-safe; no lock, no allocation.
uint64_t read_raw(ClockId id);

// Converts a raw value to the clock's printed unit: nanoseconds for ns
// clocks, the raw count otherwise. The first call for a TSC clock may spend
// up to 20 ms calibrating. Context: reader side; the write path too once
// tsc_calibration() has run (hist triggers with common_timestamp call it
// when they are written).
uint64_t raw_to_ns(ClockId id, uint64_t raw);

// TSC to ns: ns = ns0 + ((tsc - tsc0) * mult) >> 32.
struct TscCalibration {
  uint64_t tsc0;
  uint64_t ns0;
  uint64_t mult;
};
const TscCalibration& tsc_calibration();
// One (TSC, CLOCK_MONOTONIC_RAW ns) pair, the narrowest of 16 readings.
// Two of them far apart give a TSC rate that the calibration's 20 ms
// cannot (record refines a file's conversion with them).
struct TscSample {
  uint64_t tsc = 0;
  uint64_t ns = 0;
};
TscSample sample_tsc();
// Takes the calibration's first sample now (buffer creation calls it).
void start_calibration();

}  // namespace usrtrace::clock
