// The uprobe_events language (Documentation/trace/uprobetracer.rst), parsed
// into a ProbeDef whose fetch args are small programs (the kernel's
// FETCH_OP_* shape: a base, dereferences, a store of a type), compiled once
// here and run by record.h on every hit. Errors carry the kernel's texts
// (kernel/trace/trace_probe.h) and the caret's byte in the command as the
// kernel logs it (its words joined by one blank).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "probe/probes.h"
#include "probe/targets.h"

namespace usrtrace::probe {

// Where a fetch arg starts.
enum class FetchBase : uint8_t {
  kReg,       // value: the Regs field's index (pt_regs order)
  kStackN,    // $stackN: value = N
  kStack,     // $stack: the stack pointer
  kRetval,    // $retval (return probes)
  kArg,       // $argN: value = N (1-based)
  kComm,      // $comm (a string)
  kImm,       // \IMM
  kImmStr,    // \"STR" (a string)
  kAddr,      // @ADDR
  kFileOffs,  // @+OFFS: value = the file offset (the object's bias is added at run time)
};

enum class FetchKind : uint8_t { kUnsigned, kSigned, kHex, kChar, kString, kUString, kSymbol, kSymstr };

inline constexpr int kMaxDerefs = 8;  // the kernel's FETCH_INSN_MAX allows about this many
inline constexpr int kMaxArgs = 128;  // MAX_TRACE_ARGS
inline constexpr int kMaxArrayLen = 64;

struct ProbeArg {
  std::string name;
  std::string body;       // the fetch arg as written (the listing prints it back)
  std::string type_text;  // the type as written, "" when none was
  FetchBase base = FetchBase::kReg;
  int64_t value = 0;
  std::string imm_str;
  // Dereferences, innermost first: read at (value + offset).
  int nderefs = 0;
  int64_t deref_off[kMaxDerefs] = {};
  bool deref_user[kMaxDerefs] = {};
  FetchKind kind = FetchKind::kHex;  // untyped: u64 printed 0x%Lx, as the kernel does
  uint8_t size = 8;                  // bytes of one element (4 for a string's __data_loc)
  // b<width>@<offset>/<container>: a bitfield of the fetched container.
  uint8_t bit_width = 0, bit_offset = 0;
  uint16_t array_len = 0;  // T[N]: N; 0 for a scalar
  // Where its field is in the record (set by parse_line: packed, as the kernel).
  uint16_t offset = 0;
  bool is_string() const {
    return kind == FetchKind::kString || kind == FetchKind::kUString || kind == FetchKind::kSymstr;
  }
};

struct ProbeDef {
  char kind = 'p';  // 'p', 'r', '-'
  std::string group = "uprobes", event;
  Target target;
  bool is_return = false;
  size_t target_pos = 0;  // the caret's byte for a target error
  std::vector<ProbeArg> args;
  uint16_t fixed_size = 0;  // the record's fixed part, common header included

  // The definition as uprobe_events lists it back.
  std::string text() const;
  // The target's object as uprobe_profile names it.
  std::string target_path() const;
};

// Parses one line (no comments, no newline). -errno with *e on error.
int parse_line(std::string_view line, ProbeDef* d, Error* e);

}  // namespace usrtrace::probe
