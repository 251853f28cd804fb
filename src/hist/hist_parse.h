// Private to src/hist: a hist command in parsed form (HistSpec), made by
// parse_hist_command() (hist_parse.cc) and used by the histogram that
// records and prints it (hist.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hist/hist.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::hist {

inline constexpr unsigned kMinBits = 7, kMaxBits = 17;  // the kernel's TRACING_MAP_BITS_MIN/MAX
inline constexpr size_t kMaxKeys = 3;                   // TRACING_MAP_KEYS_MAX
inline constexpr size_t kMaxVals = 8;
inline constexpr uint32_t kDynStringKey = 64;  // bytes of a __data_loc string kept in a key

enum Flag : uint32_t {
  kHex = 1,
  kSym = 2,
  kSymOffset = 4,
  kExecname = 8,
  kSyscall = 16,
  kLog2 = 32,
  kBuckets = 64,
  kUsecs = 128,
  kPercent = 256,
};
struct FlagName {
  const char* name;
  Flag flag;
};
inline constexpr FlagName kFlagNames[] = {
    {"hex", kHex},         {"sym", kSym},   {"sym-offset", kSymOffset}, {"execname", kExecname},
    {"syscall", kSyscall}, {"log2", kLog2}, {"usecs", kUsecs},          {"percent", kPercent},
};

enum class Src : uint8_t { kInt, kChars, kDynStr, kCpu, kTimestamp, kHitcount };

// One key or value of a histogram on one event.
struct Field {
  std::string name;  // as the event names it ("common_timestamp", "cpu", ...)
  uint32_t flags = 0;
  uint64_t buckets = 0;
  Src src = Src::kInt;
  uint16_t offset = 0;  // in the record
  uint16_t size = 0;    // in the record (ints), or the string bytes kept (keys)
  bool is_signed = false;
  uint32_t key_offset = 0;  // keys: where in the compound key
  bool is_string() const { return src == Src::kChars || src == Src::kDynStr; }
  // "name.flag" as the trigger file prints it.
  std::string spec() const {
    std::string s = name;
    for (const FlagName& f : kFlagNames) {
      if (!(flags & f.flag)) continue;
      s += '.';
      s += f.name;
    }
    if (flags & kBuckets) {
      s += ".buckets=";
      s += std::to_string(buckets);
    }
    return s;
  }
};

struct SortKey {
  int val = 0;  // index into vals (0 is hitcount), or -1 - key index
  bool descending = false;
};

// What a command asks for. Written once by parse_hist_command(), read-only
// after (Histogram::Impl extends it with the live state).
struct HistSpec {
  std::vector<Field> keys;  // key_offset set: the compound key's layout
  std::vector<Field> vals;  // vals[0] is hitcount
  std::vector<SortKey> sort;
  uint32_t bits = 11;
  std::string name;
  bool want_pause = false, want_cont = false, want_clear = false;
  bool needs_ts = false;
  // The table this spec aggregates into: bytes of the compound key, and the
  // keys and values as text, which a name= table is shared on.
  uint32_t key_size = 0;
  std::string signature;
  // Where the command starts in the text given (after leading blanks): the
  // caret of an error about the whole command.
  size_t cmd_pos = 0;
};

// Parses "hist:keys=...[:vals=...][:sort=...][:size=N][:name=NAME]
// [:pause|:cont|:continue|:clear]" (no " if FILTER") into *spec. On a bad
// command returns false with *err set: the kernel's message and the byte
// of `cmd` where the caret goes. Does not look at named tables.
// Context: control plane; allocates.
bool parse_hist_command(const internal::EventDesc& ev, std::string_view cmd, HistSpec* spec, Error* err);

}  // namespace usrtrace::hist
