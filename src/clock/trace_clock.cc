#include "clock/trace_clock.h"

#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>

namespace usrtrace::clock {
namespace {

__extension__ typedef unsigned __int128 u128;

constexpr std::array<ClockDesc, 10> kClocks = {{
    {ClockId::kLocal, "local", true, true},
    {ClockId::kGlobal, "global", true, true},
    {ClockId::kCounter, "counter", false, false},
    {ClockId::kUptime, "uptime", false, false},
    {ClockId::kPerf, "perf", true, true},
    {ClockId::kMono, "mono", false, true},
    {ClockId::kMonoRaw, "mono_raw", false, true},
    {ClockId::kBoot, "boot", false, true},
    {ClockId::kTai, "tai", false, true},
    {ClockId::kX86Tsc, "x86-tsc", true, false},
}};

std::atomic<uint64_t> g_counter{0};

uint64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// One (tsc, ns) pair read as close together as the machine allows: the TSC
// read that sits in the shortest CLOCK_MONOTONIC_RAW window.
void sample(uint64_t* tsc, uint64_t* ns) {
  uint64_t best = ~0ull;
  *tsc = 0;
  *ns = 0;
  for (int i = 0; i < 16; ++i) {
    uint64_t a = clock_ns(CLOCK_MONOTONIC_RAW);
    uint64_t t = rdtsc();
    uint64_t b = clock_ns(CLOCK_MONOTONIC_RAW);
    if (b - a < best) {
      best = b - a;
      *tsc = t;
      *ns = a + (b - a) / 2;
    }
  }
}

// The first sample is taken when the first buffer is created, so that by the
// time anything is read the calibration interval is usually long already.
struct EarlySample {
  uint64_t tsc, ns;
  EarlySample() { sample(&tsc, &ns); }
};
const EarlySample& early() {
  static const EarlySample e;
  return e;
}

}  // namespace

std::span<const ClockDesc> all_clocks() { return kClocks; }

const ClockDesc& describe(ClockId id) { return kClocks[static_cast<size_t>(id)]; }

std::optional<ClockId> clock_from_name(std::string_view name) {
  for (const auto& c : kClocks)
    if (name == c.name) return c.id;
  return std::nullopt;
}

uint64_t read_raw(ClockId id) {
  switch (id) {
    case ClockId::kLocal:
    case ClockId::kGlobal:
    case ClockId::kPerf:
    case ClockId::kX86Tsc:
      return rdtsc();
    case ClockId::kCounter:
      // order: relaxed is enough; the counter only has to be unique and increasing.
      return g_counter.fetch_add(1, std::memory_order_relaxed) + 1;
    case ClockId::kUptime: {
      static const long hz = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
      return clock_ns(CLOCK_MONOTONIC_COARSE) / (1000000000ull / static_cast<uint64_t>(hz));
    }
    case ClockId::kMono:
      return clock_ns(CLOCK_MONOTONIC);
    case ClockId::kMonoRaw:
      return clock_ns(CLOCK_MONOTONIC_RAW);
    case ClockId::kBoot:
      return clock_ns(CLOCK_BOOTTIME);
    case ClockId::kTai:
      return clock_ns(CLOCK_TAI);
  }
  return 0;
}

void start_calibration() { (void)early(); }

TscSample sample_tsc() {
  TscSample s;
  sample(&s.tsc, &s.ns);
  return s;
}

const TscCalibration& tsc_calibration() {
  static const TscCalibration cal = [] {
    constexpr uint64_t kMinInterval = 20'000'000;  // 20 ms: ~5 ppm with ~100 ns jitter
    uint64_t tsc1 = 0, ns1 = 0;
    do {
      sample(&tsc1, &ns1);
    } while (ns1 - early().ns < kMinInterval || tsc1 <= early().tsc);
    u128 m = (static_cast<u128>(ns1 - early().ns) << 32) / (tsc1 - early().tsc);
    return TscCalibration{early().tsc, early().ns, static_cast<uint64_t>(m)};
  }();
  return cal;
}

uint64_t raw_to_ns(ClockId id, uint64_t raw) {
  const ClockDesc& d = describe(id);
  if (!d.tsc || !d.in_ns) return raw;
  const TscCalibration& c = tsc_calibration();
  if (raw >= c.tsc0) return c.ns0 + static_cast<uint64_t>((static_cast<u128>(raw - c.tsc0) * c.mult) >> 32);
  uint64_t back = static_cast<uint64_t>((static_cast<u128>(c.tsc0 - raw) * c.mult) >> 32);
  return back < c.ns0 ? c.ns0 - back : 0;
}

}  // namespace usrtrace::clock
