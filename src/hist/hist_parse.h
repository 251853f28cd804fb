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
  kGraph = 512,
  kStacktrace = 1024,
};
struct FlagName {
  const char* name;
  Flag flag;
};
inline constexpr FlagName kFlagNames[] = {
    {"hex", kHex},
    {"sym", kSym},
    {"sym-offset", kSymOffset},
    {"execname", kExecname},
    {"syscall", kSyscall},
    {"log2", kLog2},
    {"usecs", kUsecs},
    {"percent", kPercent},
    {"graph", kGraph},
    {"stacktrace", kStacktrace},
};

// Where a key or value reads from. kExpr: an expression (HistSpec::exprs),
// for expression values and keys that name a variable ($var).
// kStack: the writing thread's stack (common_stacktrace); kDynStack: a
// stack field of the record (a synthetic event's `unsigned long[]`).
enum class Src : uint8_t { kInt, kChars, kDynStr, kCpu, kTimestamp, kHitcount, kExpr, kStack, kDynStack };

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
  int expr = -1;            // kExpr: the expression (HistSpec::exprs)
  std::string text;         // kExpr: as the trigger file prints it
  bool is_string() const { return src == Src::kChars || src == Src::kDynStr; }
  bool is_stack() const { return src == Src::kStack || src == Src::kDynStack; }
  // "name.flag" as the trigger file prints it.
  std::string spec() const {
    if (src == Src::kExpr) return text;
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

inline constexpr size_t kMaxVars = 16;    // TRACING_MAP_VARS_MAX
inline constexpr size_t kMaxRefs = 16;    // variable references of one histogram
inline constexpr size_t kMaxExprs = 64;   // expression nodes of one histogram
inline constexpr size_t kMaxParams = 32;  // SYNTH_FIELDS_MAX: an action's params
inline constexpr size_t kMaxActions = 8;
inline constexpr uint32_t kStackDepth = 16;    // HIST_STACKTRACE_DEPTH
inline constexpr uint32_t kSavedString = 64;   // bytes of a string save() keeps, or trace() passes
inline constexpr size_t kMaxStringParams = 4;  // strings of one trace()

// Units of a time stamp in an expression: common_timestamp and its
// .usecs may not be mixed (Kernel: "Timestamp units in expression don't
// match").
enum class Units : uint8_t { kNone, kNs, kUs };

// One node of an expression: a field (Field, numeric), a constant, a
// variable reference (own variable or another histogram's, by key), or an
// operator over two nodes. Evaluated in u64 arithmetic, as the kernel's.
struct Expr {
  enum Op : uint8_t { kField, kConst, kSelfVar, kRef, kAdd, kSub, kMul, kDiv, kNeg } op = kConst;
  Field field;            // kField
  uint64_t constant = 0;  // kConst
  int index = -1;         // kSelfVar: HistSpec::vars; kRef: HistSpec::refs
  int a = -1, b = -1;     // operands (kNeg: a only)
  Units units = Units::kNone;
};

// A variable: name=expr. Kept per entry of the table (TracingMap::Elt::vars)
// and readable by other events' histograms that have the same key.
struct Var {
  std::string name;
  int expr = -1;
  std::string text;  // the expression as written
  Units units = Units::kNone;
};

// A reference to another histogram's variable ($name or SYS.EVENT.$name):
// resolved when the histogram is created; read (once) from that
// histogram's entry with this record's key.
struct Ref {
  std::string name;  // the variable's name
  std::string system, event;
  int table = -1;  // index into HistSpec::ref_tables
  uint32_t var = 0;
  Units units = Units::kNone;
  size_t pos = 0;  // its caret in the command
};

// A value an action passes or saves: an expression, or a string field of
// the record (strings are never operands).
struct Param {
  int expr = -1;       // numeric
  Field string;        // is_string(): a string field of this event
  bool stack = false;  // common_stacktrace: the writing thread's stack, for a stack field
  std::string text;
};

struct Action {
  enum Handler : uint8_t { kOnMatch, kOnMax, kOnChange } handler = kOnMatch;
  enum Kind : uint8_t { kTrace, kSave, kSnapshot } kind = kTrace;
  std::string match_system, match_event;  // onmatch(SYS.EVENT)
  int track_var = -1;                     // onmax/onchange: HistSpec::vars
  std::string synth_name;                 // trace
  std::vector<Param> params;              // trace: one per field; save: the fields kept
  // save: where the kept values are in an entry's aux words (a number one
  // word, a string kSavedString / 8 words), and the track value's word.
  uint32_t aux = 0;
  std::string text;  // as the trigger file prints it
  size_t pos = 0;    // its caret in the command
  size_t synth_pos = 0;
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
  bool needs_stack = false;
  // Variables, expressions and actions (histogram.rst section 2.2).
  std::vector<Var> vars;
  std::vector<Expr> exprs;
  std::vector<Ref> refs;
  // The other histograms' variables this one reads: their name (SYS.EVENT,
  // for the trigger text) and, once resolved, their tables
  // (Histogram::Impl keeps those).
  std::vector<std::pair<std::string, std::string>> ref_tables;
  std::vector<Action> actions;
  // Words of per-entry action state: a track value and saved values.
  uint32_t aux_words = 0;
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
