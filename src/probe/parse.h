// The uprobe_events language (Documentation/trace/uprobetracer.rst), as the
// kernel parses it (kernel/trace/trace_uprobe.c, trace_probe.c): one line
// into a Definition, each fetch arg compiled into a small program of the
// kernel's FETCH_OP_* shape, which fetch.h runs on every hit. Errors carry
// the kernel's texts (trace_probe.h's ERRORS) and the caret's byte in the
// command as the kernel's error_log shows it. docs/design/probes.md.
//
// A fetch arg's program, for `s=+8(+16(%di)):string` (the kernel's):
//
//   [0] REG     param=di      stage 1: a value from the context
//   [1] DEREF   offset=16     stage 2: val = *(u64 *)(val + offset), zero or more
//   [2] ST_STRING offset=8    stage 3: store: the last DEREF becomes ST_MEM or
//   [3] END                            ST_STRING; else ST_RAW of the value
//                             stage 4: MOD_BF (bitfield), stage 5: LP_ARRAY
//
// Every program has at most kFetchInsnMax instructions, END included, so
// deep nesting is refused as the kernel refuses it ("Dereference is too
// much nested").
#pragma once
#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "probe/probes.h"   // Error
#include "probe/targets.h"  // Target

namespace usrtrace::probe {

// ---- The fetch program (the kernel's enum fetch_op).
enum class FetchOp : uint8_t {
  kNop = 0,
  // Stage 1: load.
  kReg,     // param: the register's index in patch::Regs (pt_regs order)
  kStack,   // $stackN: param = N
  kStackP,  // $stack
  kRetval,  // $retval (ax)
  kImm,     // \IMM, and @ADDR's address: value
  kComm,    // $comm
  kArg,     // $argN: param = N - 1 (ours: uprobes refuse it)
  kFoffs,   // @+FILEOFFS: value = the file offset
  kData,    // \"STR": the arg's data string
  // Stage 2: dereference.
  kDeref,   // val = *(u64 *)(val + value)
  kUDeref,  // the same in user space
  // Stage 3: store.
  kStRaw,      // size bytes of val
  kStMem,      // size bytes at val + value
  kStUMem,     // the same
  kStString,   // the string at val + value, after the fixed part
  kStUString,  // the same
  kStSymstr,   // the symbol holding val + value, as text (ours: uprobes refuse it)
  // Stage 4: modify.
  kModBf,  // bitfield: lshift, rshift in basesize bytes
  // Stage 5: loop.
  kLpArray,  // param: the element count
  kEnd,
};

struct FetchInsn {
  FetchOp op = FetchOp::kNop;
  uint8_t basesize = 0, lshift = 0, rshift = 0;  // kModBf
  uint32_t param = 0;                            // register index, N, size or count
  int64_t value = 0;                             // an offset or an immediate
};

inline constexpr int kFetchInsnMax = 16;     // FETCH_INSN_MAX
inline constexpr int kMaxTraceArgs = 128;    // MAX_TRACE_ARGS
inline constexpr int kMaxArgStrLen = 63;     // MAX_ARGSTR_LEN
inline constexpr int kMaxArrayLen = 64;      // MAX_ARRAY_LEN
inline constexpr int kMaxArgNameLen = 32;    // MAX_ARG_NAME_LEN
inline constexpr int kMaxEventNameLen = 64;  // MAX_EVENT_NAME_LEN

// A fetch type (the kernel's probe_fetch_types[]): name as written, size of
// one element, signedness, the format file's type and the print fmt's
// conversion.
struct FetchType {
  const char* name;
  uint8_t size;
  bool is_signed;
  bool is_string;  // string, ustring, symstr: a __data_loc (size 4)
  const char* fmttype;
  const char* fmt;
};

struct Arg {
  std::string name;
  std::string comm;  // the fetch arg as written after NAME=, type included (the listing prints it back)
  const FetchType* type = nullptr;
  uint16_t count = 0;   // T[N]: N; 0 for a scalar
  uint16_t offset = 0;  // the field's offset in the record
  std::string data;     // \"STR"'s text
  FetchInsn code[kFetchInsnMax];
  uint8_t fast_reg = 0;  // Definition::regs_only: the register's index in patch::Regs
  // The field's size in the record.
  uint32_t size() const { return uint32_t{type->size} * (count ? count : 1u); }
};

// What a line defines (kind 'p' or 'r'), or removes ('-').
struct Definition {
  char kind = 'p';  // 'p', 'r' (a return probe, also by %return) or '-'
  std::string group = "uprobes", event;
  // The target, left to the caller to resolve: {path, "", offset} for
  // PATH:OFFSET (a file offset), {path, symbol, offset} for ours
  // PATH:SYMBOL[+OFFS], {"", symbol, offset} for ours SYMBOL[+OFFS].
  Target target;
  uint64_t ref_ctr_offset = 0;  // PATH:OFFSET(REF_CTR_OFFSET); 0 if none
  bool is_return = false;
  bool uses_args = false;  // some fetch arg is $argN: the site must be a function's entry
  size_t target_pos = 0;   // the target's first byte in the command (for the caller's errors)
  std::vector<Arg> args;
  // Ours: `%PROVIDER:NAME [NAMES...]`, a USDT probe: no target or args of
  // its own; each site's come from its note (probes.cc).
  bool sdt = false;
  std::string sdt_provider, sdt_name;
  std::vector<std::string> sdt_names;
  uint16_t fixed_size = 0;  // the record's fixed part, common header included
  // Every arg is a register stored raw (%REG, $retval, an entry's $argN up
  // to 6): run() copies them without running the programs.
  bool regs_only = false;
  // Removal ('-'): "" group or event match any (dyn_event_release); the
  // words after the name must match the probe's own listing, in order.
  std::vector<std::string> removal_args;

  // The definition as uprobe_events lists it back (trace_uprobe_show()).
  std::string text() const;
  // The target's object as uprobe_profile names it.
  std::string target_path() const;
};

// Parses one command of uprobe_events or dynamic_events (no comment, no
// newline; words separated by any blanks). Returns 0, or -errno with *e:
// e->text the kernel's error text and e->pos the caret's byte in
// command_text(line); e->text is "" when the kernel logs nothing (a line
// that is not a uprobe's, a removal it cannot parse). A PATH is checked as
// the kernel does (it must name a regular file); nothing is resolved.
// Context: control plane; allocates, stat()s the path; installs the fault
// fixup (base/safe_copy.h) the programs need.
int parse(std::string_view line, Definition* d, Error* e);

// The command as the kernel logs it: the line's words joined by one blank.
std::string command_text(std::string_view line);

// Whether the removal `rm` (parse()d from `-:...`) names `probe`, as
// dyn_event_release() matches: group and event (either may be ""), then
// its words against "PATH:0x%016lx" and "NAME=COMM" of the probe.
bool removal_matches(const Definition& rm, const Definition& probe);

// The fetch types: for the print side and the tests.
const FetchType* find_fetch_type(std::string_view name);

}  // namespace usrtrace::probe
