// Private to src/probe's parser: what parse.cc (the command, the target,
// the names, the listing) and parse_args.cc (the fetch args, compiled into
// programs) share: the kernel's error codes, the log that places the caret,
// the parse context, and the kernel's number and name routines.
#pragma once
#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "probe/parse.h"

namespace usrtrace::probe::parse_detail {

// ---- The kernel's error texts (trace_probe.h ERRORS, as 6.18 spells them).
enum class Err {
  kFileNotFound,
  kNoRegularFile,
  kBadRefcnt,
  kRefcntOpenBrace,
  kBadRefcntSuffix,
  kBadUprobeOffs,
  kBadProbeAddr,
  kBadRetprobe,
  kBadAddrSuffix,
  kNoGroupName,
  kGroupTooLong,
  kBadGroupName,
  kNoEventName,
  kEventTooLong,
  kBadEventName,
  kRetvalOnProbe,
  kBadArgNum,
  kBadVar,
  kBadRegName,
  kBadMemAddr,
  kBadImm,
  kImmstrNoClose,
  kBadFileOffs,
  kSymOnUprobe,
  kTooManyOps,
  kDerefNeedBrace,
  kBadDerefOffs,
  kDerefOpenBrace,
  kCommCantDeref,
  kBadFetchArg,
  kArrayNoClose,
  kBadArraySuffix,
  kBadArrayNum,
  kArrayTooBig,
  kBadType,
  kBadString,
  kBadSymstring,
  kBadBitfield,
  kArgNameTooLong,
  kNoArgName,
  kBadArgName,
  kUsedArgName,
  kArgTooLong,
  kNoArgBody,
  kNosupBtfarg,
  kArgidx2big,
  kNeedStringType,
  kTooManyArgs,
  // Ours: the SDT form.
  kBadSdtName,
  kSdtRetprobe,
  kSdtArgName,
};

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool is_xdigit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
inline char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// is_good_name(): a C identifier; is_good_system_name() (groups) also
// takes '-', anywhere.
bool is_good_name(std::string_view s, bool hyphen_ok = false);
// The kernel's kstrtoull(), kstrtoll(), kstrtouint() (0 or -EINVAL/-ERANGE,
// the whole string), simple_strtoul() (as far as it goes, *end after it)
// and str_to_immediate() (\IMM).
int kstrtoull(std::string_view s, unsigned base, uint64_t* res);
int kstrtoll(std::string_view s, unsigned base, int64_t* res);
int kstrtouint(std::string_view s, unsigned base, uint32_t* res);
uint64_t simple_strtoul(std::string_view s, size_t* end);
int str_to_immediate(std::string_view s, uint64_t* imm);

// ---- The log: the caret is at words_pos[index] + offset.
struct Log {
  const std::vector<size_t>* word_pos;
  size_t nwords;
  int index = 0;  // trace_probe_log_set_index()
  Error* e;
  // trace_probe_log_err(). Past the last word (never, for the errors here):
  // one byte after the command, as the kernel does.
  int err(int offset, Err code, int errnum = EINVAL);
};

// A failure the kernel does not log (-ECANCELED turned -EINVAL, a removal
// it cannot parse).
inline int quiet(Error* e, int errnum = EINVAL) {
  *e = Error{"", 0, errnum};
  return -errnum;
}

// traceprobe_parse_context, as far as uprobes use it.
struct Ctx {
  Log* log;
  bool is_return;
  int offset = 0;  // ctx->offset: moved by dereferences, see parse_probe_arg
  Definition* d;
  Arg* parg;
  int err(int offs, Err code, int errnum = EINVAL) { return log->err(offs, code, errnum); }
};

// The fetch types by name (nullptr: none such).
const FetchType* type_named(std::string_view name);
// traceprobe_parse_probe_arg(): word `i` of the args, NAME= then the body,
// into *ctx.parg; *size grows by the field. parse_args.cc.
int parse_arg(std::string_view word, int i, uint32_t* size, Ctx& ctx);

}  // namespace usrtrace::probe::parse_detail
