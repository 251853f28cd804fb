// The uprobe_events parser (parse.h). Kernel: trace_uprobe.c
// __trace_uprobe_create(), trace_probe.c traceprobe_parse_probe_arg() and
// what they call; the order of the checks, the caret positions and the
// errnos are theirs, quirks included (each one named where it is), because
// the kernel's error_log is the oracle (tests/probe/probe_kernel_test.cc).
//
// Worked example: `p:g/e /bin/x:0x10 v=+8(%di):u32` is the words
//   [0] "p:g/e"  [1] "/bin/x:0x10"  [2] "v=+8(%di):u32"
// at command bytes 0, 6 and 18. An error is logged at (word, offset): the
// caret is at the word's byte plus the offset.
//   (1) The command: p or r (return), and an event name after ':'.
//   (2) The target (word 1): the file must exist and be regular, then
//       (REF_CTR_OFFSET), then %return, then the offset (kstrtoul, base 0).
//   (3) The event name (word 0, offset 2): [GROUP/ or GROUP.]EVENT.
//   (4) Each arg (word 2...): NAME= (or argN), then the type after the
//       first ':' (with [N]), then the fetch program: here REG(di),
//       DEREF(8) -> ST_MEM(8, 4 bytes), END; its field is at 16 (after
//       common header and __probe_ip), 4 bytes.
#include "probe/parse.h"

#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstring>

#include "base/safe_copy.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::probe {
namespace {

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

constexpr const char* kErrText[] = {
    "Failed to find the given file",
    "Not a regular file",
    "Invalid reference counter offset",
    "Reference counter brace is not closed",
    "Reference counter has wrong suffix",
    "Invalid uprobe offset",
    "Invalid probed address or symbol",
    "Retprobe address must be an function entry",
    "Invalid probed address suffix",
    "Group name is not specified",
    "Group name is too long",
    "Group name must follow the same rules as C identifiers",
    "Event name is not specified",
    "Event name is too long",
    "Event name must follow the same rules as C identifiers",
    "$retval is not available on probe",
    "Invalid argument number",
    "Invalid $-variable specified",
    "Invalid register name",
    "Invalid memory address",
    "Invalid immediate value",
    "String is not closed with '\"'",
    "Invalid file offset value",
    "Symbol is not available with uprobe",
    "Dereference is too much nested",
    "Dereference needs a brace",
    "Invalid dereference offset",
    "Dereference brace is not closed",
    "$comm can not be dereferenced",
    "Invalid fetch argument",
    "Array is not closed",
    "Array has wrong suffix",
    "Invalid array size",
    "Array number is too big",
    "Unknown type is specified",
    "String accepts only memory argument",
    "Symbol String doesn't accept data/userdata",
    "Invalid bitfield",
    "Argument name is too long",
    "Argument name is not specified",
    "Argument name must follow the same rules as C identifiers",
    "This argument name is already used",
    "Argument expression is too long",
    "No argument expression",
    "BTF is not available or not supported",
    "$argN index is too big",
    "$comm and immediate-string only accepts string type",
    "Too many arguments are specified",
    "SDT probe must be %PROVIDER:NAME, both C identifiers",
    "SDT probe cannot be a return probe",
    "SDT probe arguments are NAME or NAME:TYPE (arg1..argN by default)",
};
static_assert(std::size(kErrText) == static_cast<size_t>(Err::kSdtArgName) + 1);

// ---- The fetch types (probe_fetch_types[]). x64 is the default; symbol
// and symstr are ours (uprobes refuse them: no kallsyms for user space).
constexpr FetchType kTypes[] = {
    {"string", 4, true, true, "__data_loc char[]", "\\\"%s\\\""},
    {"ustring", 4, true, true, "__data_loc char[]", "\\\"%s\\\""},
    {"symstr", 4, true, true, "__data_loc char[]", "\\\"%s\\\""},
    {"u8", 1, false, false, "u8", "%u"},
    {"u16", 2, false, false, "u16", "%u"},
    {"u32", 4, false, false, "u32", "%u"},
    {"u64", 8, false, false, "u64", "%Lu"},
    {"s8", 1, true, false, "s8", "%d"},
    {"s16", 2, true, false, "s16", "%d"},
    {"s32", 4, true, false, "s32", "%d"},
    {"s64", 8, true, false, "s64", "%Ld"},
    {"x8", 1, false, false, "u8", "0x%x"},
    {"x16", 2, false, false, "u16", "0x%x"},
    {"x32", 4, false, false, "u32", "0x%x"},
    {"x64", 8, false, false, "u64", "0x%Lx"},
    {"char", 1, false, false, "u8", "'%c'"},
    {"symbol", 8, false, false, "u64", "%pS"},
};

// The x86-64 names regs_query_register_offset() takes, in pt_regs (and
// patch::Regs) order: no 32-bit or other spellings.
constexpr const char* kRegNames[] = {"r15", "r14",     "r13", "r12", "bp",    "bx", "r11",
                                     "r10", "r9",      "r8",  "ax",  "cx",    "dx", "si",
                                     "di",  "orig_ax", "ip",  "cs",  "flags", "sp", "ss"};

constexpr uint32_t kParamMaxStack = 16384 / 8;  // PARAM_MAX_STACK: THREAD_SIZE / sizeof(long)

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_xdigit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// is_good_name(): a C identifier; is_good_system_name() (groups) also
// takes '-', anywhere.
bool is_good_name(std::string_view s, bool hyphen_ok = false) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!(is_alpha(c) || c == '_' || (hyphen_ok && c == '-') || (i > 0 && is_digit(c)))) return false;
  }
  return true;
}

// lib/kstrtox.c, on a whole word: base 0 takes 0x (when a hex digit
// follows) and 0; a leading '+' is taken; -ERANGE on overflow.
unsigned fixup_radix(std::string_view* s, unsigned base) {
  if (base == 0) {
    if (!s->empty() && (*s)[0] == '0') {
      base = s->size() > 2 && lower((*s)[1]) == 'x' && is_xdigit((*s)[2]) ? 16 : 8;
    } else {
      base = 10;
    }
  }
  if (base == 16 && s->size() >= 2 && (*s)[0] == '0' && lower((*s)[1]) == 'x') s->remove_prefix(2);
  return base;
}

// _parse_integer(): digits of `base` from the start; the count, and
// *overflow when the value does not fit 64 bits.
size_t parse_digits(std::string_view s, unsigned base, uint64_t* res, bool* overflow) {
  uint64_t v = 0;
  size_t n = 0;
  *overflow = false;
  for (; n < s.size(); ++n) {
    const char c = lower(s[n]);
    unsigned d;
    if (is_digit(c))
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else
      break;
    if (d >= base) break;
    if (v > (~uint64_t{0} - d) / base) *overflow = true;
    v = v * base + d;
  }
  *res = v;
  return n;
}

int kstrtoull(std::string_view s, unsigned base, uint64_t* res) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  base = fixup_radix(&s, base);
  bool overflow;
  uint64_t v;
  const size_t n = parse_digits(s, base, &v, &overflow);
  if (overflow) return -ERANGE;
  if (n == 0) return -EINVAL;
  s.remove_prefix(n);
  if (!s.empty() && s[0] == '\n') s.remove_prefix(1);
  if (!s.empty()) return -EINVAL;
  *res = v;
  return 0;
}

int kstrtoll(std::string_view s, unsigned base, int64_t* res) {
  uint64_t v;
  if (!s.empty() && s[0] == '-') {
    const int rc = kstrtoull(s.substr(1), base, &v);
    if (rc < 0) return rc;
    if (static_cast<int64_t>(0 - v) > 0) return -ERANGE;
    *res = static_cast<int64_t>(0 - v);
    return 0;
  }
  const int rc = kstrtoull(s, base, &v);
  if (rc < 0) return rc;
  if (static_cast<int64_t>(v) < 0) return -ERANGE;
  *res = static_cast<int64_t>(v);
  return 0;
}

int kstrtouint(std::string_view s, unsigned base, uint32_t* res) {
  uint64_t v;
  const int rc = kstrtoull(s, base, &v);
  if (rc < 0) return rc;
  if (v > 0xffffffffu) return -ERANGE;
  *res = static_cast<uint32_t>(v);
  return 0;
}

// simple_strtoul(): as far as digits go; *end after them.
uint64_t simple_strtoul(std::string_view s, size_t* end) {
  const size_t len = s.size();
  const unsigned base = fixup_radix(&s, 0);
  bool overflow;
  uint64_t v;
  const size_t n = parse_digits(s, base, &v, &overflow);
  *end = len - s.size() + n;
  return v;
}

// str_to_immediate().
int str_to_immediate(std::string_view s, uint64_t* imm) {
  if (s.empty()) return -EINVAL;
  int64_t v;
  int rc;
  if (is_digit(s[0])) return kstrtoull(s, 0, imm);
  if (s[0] == '-')
    rc = kstrtoll(s, 0, &v);
  else if (s[0] == '+')
    rc = kstrtoll(s.substr(1), 0, &v);
  else
    return -EINVAL;
  if (rc == 0) *imm = static_cast<uint64_t>(v);
  return rc;
}

// ---- The log: the caret is at words_pos[index] + offset.
struct Log {
  const std::vector<size_t>* word_pos;
  size_t nwords;
  int index = 0;  // trace_probe_log_set_index()
  Error* e;
  // trace_probe_log_err(). Past the last word (never, for the errors here):
  // one byte after the command, as the kernel does.
  int err(int offset, Err code, int errnum = EINVAL) {
    size_t pos;
    if (static_cast<size_t>(index) >= nwords) {
      const size_t last = nwords - 1;
      pos = (*word_pos)[last] + ((*word_pos)[last + 1] - (*word_pos)[last]);
    } else {
      pos = (*word_pos)[static_cast<size_t>(index)] + static_cast<size_t>(offset);
    }
    *e = Error{kErrText[static_cast<int>(code)], pos, errnum};
    return -errnum;
  }
};

// A failure the kernel does not log (-ECANCELED turned -EINVAL, a removal
// it cannot parse).
int quiet(Error* e, int errnum = EINVAL) {
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

const FetchType* type_named(std::string_view name) {
  for (const FetchType& t : kTypes)
    if (name == t.name) return &t;
  return nullptr;
}

// find_fetch_type(): nullptr is the default (x64); b<w>@<o>/<bits> is the
// unsigned type of <bits>.
const FetchType* fetch_type(const std::string* name) {
  if (name == nullptr) return type_named("x64");
  std::string_view t = *name;
  if (!t.empty() && t[0] == 'b') {
    const size_t slash = t.find('/');
    uint64_t bs;
    if (slash == std::string_view::npos || kstrtoull(t.substr(slash + 1), 0, &bs) != 0) return nullptr;
    switch (bs) {
      case 8:
        return type_named("u8");
      case 16:
        return type_named("u16");
      case 32:
        return type_named("u32");
      case 64:
        return type_named("u64");
      default:
        return nullptr;
    }
  }
  return type_named(t);
}

int parse_probe_vars(const std::string& orig, FetchInsn** pcode, Ctx& ctx) {
  FetchInsn* code = *pcode;
  Err err = Err::kBadVar;
  const std::string_view arg = std::string_view(orig).substr(1);
  uint64_t param;
  // Quirk: a prefix, so "$retvalx" is $retval.
  if (arg.starts_with("retval")) {
    if (!ctx.is_return) return ctx.err(ctx.offset, Err::kRetvalOnProbe);
    code->op = FetchOp::kRetval;
    return 0;
  }
  if (arg.starts_with("stack")) {
    const std::string_view n = arg.substr(5);
    if (n.empty()) {
      code->op = FetchOp::kStackP;
      return 0;
    }
    if (is_digit(n[0]) && kstrtoull(n, 10, &param) == 0) {
      code->op = FetchOp::kStack;
      code->param = static_cast<uint32_t>(param);  // quirk: (unsigned int)
      return 0;
    }
    return ctx.err(ctx.offset, err);
  }
  if (arg == "comm" || arg == "COMM") {
    code->op = FetchOp::kComm;
    return 0;
  }
  // Ours: the kernel takes $argN at function entries and exits only, which
  // a uprobe is not ("$arg* can be used only on function entry or exit").
  // Here it is the SysV ABI's argument N at the probed address (a
  // function's entry: the caller checks), and at a return probe the value
  // it had at the entry, as kernels >= 6.9 give fprobes.
  if (arg.starts_with("arg")) {
    if (kstrtoull(arg.substr(3), 10, &param) != 0) return ctx.err(ctx.offset, err);
    if (param == 0 || param > kParamMaxStack) return ctx.err(ctx.offset, Err::kBadArgNum);
    if (ctx.is_return && param > 6) return ctx.err(ctx.offset, Err::kArgidx2big);
    code->op = FetchOp::kArg;
    code->param = static_cast<uint32_t>(param - 1);
    ctx.d->uses_args = true;
    return 0;
  }
  return ctx.err(ctx.offset, err);
}

int reg_index(std::string_view name) {
  for (size_t i = 0; i < std::size(kRegNames); ++i)
    if (name == kRegNames[i]) return static_cast<int>(i);
  return -1;
}

// parse_probe_arg(): recursive on dereferences. *pcode is the instruction
// to fill; on return it is the last one filled.
int parse_probe_arg(const std::string& arg, FetchInsn** pcode, FetchInsn* end, Ctx& ctx) {
  FetchInsn* code = *pcode;
  int ret = 0;
  const char c0 = arg.empty() ? '\0' : arg[0];
  const char c1 = arg.size() > 1 ? arg[1] : '\0';
  switch (c0) {
    case '$':
      ret = parse_probe_vars(arg, pcode, ctx);
      break;
    case '%': {
      const int r = reg_index(std::string_view(arg).substr(1));
      if (r >= 0) {
        code->op = FetchOp::kReg;
        code->param = static_cast<uint32_t>(r);
      } else {
        ret = ctx.err(ctx.offset, Err::kBadRegName);
      }
      break;
    }
    case '@': {
      if (is_digit(c1)) {
        uint64_t addr;
        ret = kstrtoull(std::string_view(arg).substr(1), 0, &addr);
        if (ret) {
          ctx.err(ctx.offset, Err::kBadMemAddr, -ret);
          break;
        }
        code->op = FetchOp::kImm;
        code->value = static_cast<int64_t>(addr);
      } else if (c1 == '+') {
        int64_t off;
        ret = kstrtoll(std::string_view(arg).substr(2), 0, &off);
        if (ret) {
          ctx.err(ctx.offset, Err::kBadFileOffs, -ret);
          break;
        }
        code->op = FetchOp::kFoffs;
        code->value = off;
      } else {
        return ctx.err(ctx.offset, Err::kSymOnUprobe);
      }
      if (++code == end) return ctx.err(ctx.offset, Err::kTooManyOps);
      *pcode = code;
      code->op = FetchOp::kDeref;
      code->value = 0;
      break;
    }
    case '+':
    case '-': {
      std::string s = arg;
      FetchOp deref = FetchOp::kDeref;
      if (c1 == 'u') {
        deref = FetchOp::kUDeref;
        s.erase(1, 1);
      }
      if (s[0] == '+') s.erase(0, 1);
      const size_t open = s.find('(');
      if (open == std::string::npos) return ctx.err(ctx.offset, Err::kDerefNeedBrace);
      int64_t offset;
      ret = kstrtoll(std::string_view(s).substr(0, open), 0, &offset);
      if (ret) {
        ctx.err(ctx.offset, Err::kBadDerefOffs, -ret);
        break;
      }
      // Quirk: the offset counts the '+' but not a 'u', so an error inside
      // `+u8(...)` is logged one byte to the left.
      ctx.offset += static_cast<int>(open + 1) + (s[0] != '-' ? 1 : 0);
      std::string inner = s.substr(open + 1);
      const size_t close = inner.rfind(')');  // quirk: what follows it is ignored
      if (close == std::string::npos)
        return ctx.err(ctx.offset + static_cast<int>(inner.size()), Err::kDerefOpenBrace);
      inner.resize(close);
      const int cur = ctx.offset;
      ret = parse_probe_arg(inner, &code, end, ctx);
      if (ret) break;
      ctx.offset = cur;
      if (code->op == FetchOp::kComm || code->op == FetchOp::kData)
        return ctx.err(ctx.offset, Err::kCommCantDeref);
      if (++code == end) return ctx.err(ctx.offset, Err::kTooManyOps);
      *pcode = code;
      code->op = deref;
      code->value = offset;
      break;
    }
    case '\\':
      if (c1 == '"') {
        // Quirk: `\"` alone is the empty string (the kernel reads the
        // opening quote as the closing one).
        const std::string str = arg.substr(2);
        if (!str.empty() && str.back() != '"')
          return ctx.err(ctx.offset + 2 + static_cast<int>(str.size()), Err::kImmstrNoClose);
        code->op = FetchOp::kData;
        ctx.parg->data = str.empty() ? str : str.substr(0, str.size() - 1);
      } else {
        uint64_t imm;
        ret = str_to_immediate(std::string_view(arg).substr(1), &imm);
        if (ret)
          ctx.err(ctx.offset + 1, Err::kBadImm, -ret);
        else {
          code->op = FetchOp::kImm;
          code->value = static_cast<int64_t>(imm);
        }
      }
      break;
    default:
      // A bare name: a BTF variable, which user programs do not have.
      if (is_alpha(c0) || c0 == '_') return ctx.err(ctx.offset, Err::kNosupBtfarg);
      break;
  }
  if (!ret && code->op == FetchOp::kNop) ret = ctx.err(ctx.offset, Err::kBadFetchArg);
  return ret;
}

// __parse_bitfield_probe_arg(): b<width>@<offset>/<bits>, after the store.
int parse_bitfield(std::string_view bf, const FetchType* t, FetchInsn** pcode) {
  if (bf.empty() || bf[0] != 'b') return 0;
  size_t n;
  const uint64_t bw = simple_strtoul(bf.substr(1), &n);
  bf.remove_prefix(1 + n);
  if (bw == 0 || bf.empty() || bf[0] != '@') return -EINVAL;
  bf.remove_prefix(1);
  const uint64_t bo = simple_strtoul(bf, &n);
  if (n == 0 || n >= bf.size() || bf[n] != '/') return -EINVAL;
  FetchInsn* code = *pcode + 1;
  if (code->op != FetchOp::kNop) return -EINVAL;
  *pcode = code;
  const uint64_t bits = uint64_t{t->size} * 8;
  code->op = FetchOp::kModBf;
  code->lshift = static_cast<uint8_t>(bits - (bw + bo));
  code->rshift = static_cast<uint8_t>(bits - bw);
  code->basesize = t->size;
  return bits < bw + bo ? -EINVAL : 0;
}

bool op_in(FetchOp op, std::initializer_list<FetchOp> ops) {
  for (FetchOp o : ops)
    if (op == o) return true;
  return false;
}

// finalize_fetch_insn(): the store, the bitfield, the loop, the end.
int finalize(FetchInsn* code, Arg* parg, const std::string* type, int type_offset, Ctx& ctx) {
  const std::string_view tname = parg->type->name;
  if (parg->type->is_string) {
    if (tname == "symstr") {
      if (!op_in(code->op,
                 {FetchOp::kReg, FetchOp::kStack, FetchOp::kRetval, FetchOp::kArg, FetchOp::kDeref}))
        return ctx.err(ctx.offset + type_offset, Err::kBadSymstring);
    } else if (!op_in(code->op,
                      {FetchOp::kDeref, FetchOp::kUDeref, FetchOp::kImm, FetchOp::kComm, FetchOp::kData})) {
      return ctx.err(ctx.offset + type_offset, Err::kBadString);
    }
    // IMM, COMM and DATA are the string's address; an array's elements are
    // pointers; symstr takes the value: keep the op, store after it.
    if (tname == "symstr" || op_in(code->op, {FetchOp::kImm, FetchOp::kComm, FetchOp::kData}) ||
        parg->count) {
      ++code;
      if (code->op != FetchOp::kNop) return ctx.err(ctx.offset, Err::kTooManyOps);
    }
    if (tname == "ustring" || code->op == FetchOp::kUDeref)
      code->op = FetchOp::kStUString;
    else if (tname == "symstr")
      code->op = FetchOp::kStSymstr;
    else
      code->op = FetchOp::kStString;
    code->param = parg->type->size;
  } else if (code->op == FetchOp::kDeref) {
    code->op = FetchOp::kStMem;
    code->param = parg->type->size;
  } else if (code->op == FetchOp::kUDeref) {
    code->op = FetchOp::kStUMem;
    code->param = parg->type->size;
  } else {
    ++code;
    if (code->op != FetchOp::kNop) return ctx.err(ctx.offset, Err::kTooManyOps, E2BIG);
    code->op = FetchOp::kStRaw;
    code->param = parg->type->size;
  }
  FetchInsn* scode = code;
  if (type != nullptr && parse_bitfield(*type, parg->type, &code) != 0)
    return ctx.err(ctx.offset + type_offset, Err::kBadBitfield);
  if (parg->count) {
    if (!op_in(scode->op, {FetchOp::kStMem, FetchOp::kStString, FetchOp::kStUString}))
      return ctx.err(ctx.offset + type_offset, Err::kBadString);
    ++code;
    if (code->op != FetchOp::kNop) return ctx.err(ctx.offset, Err::kTooManyOps, E2BIG);
    code->op = FetchOp::kLpArray;
    code->param = parg->count;
  }
  ++code;
  code->op = FetchOp::kEnd;
  return 0;
}

// traceprobe_parse_probe_arg_body(): type, program, offset.
int parse_arg_body(const std::string& argv, uint32_t* size, Arg* parg, Ctx& ctx) {
  if (argv.size() > static_cast<size_t>(kMaxArgStrLen)) return ctx.err(ctx.offset, Err::kArgTooLong, E2BIG);
  if (argv.empty()) return ctx.err(ctx.offset, Err::kNoArgBody);
  parg->comm = argv;
  // parse_probe_arg_type(): the type is after the first ':' (quirk: even
  // inside \"...\"), an array after its '['.
  std::string arg = argv;
  std::string type_text;
  const std::string* type = nullptr;
  int offs = 0;
  const size_t colon = arg.find(':');
  if (colon != std::string::npos) {
    type_text = arg.substr(colon + 1);
    arg.resize(colon);
    const size_t t0 = colon + 1;  // the type's byte in argv
    const size_t br = type_text.find('[');
    if (br != std::string::npos) {
      const std::string num_and_rest = type_text.substr(br + 1);
      const size_t t2 = t0 + br + 1;  // the count's byte in argv
      type_text.resize(br);
      const size_t close = num_and_rest.find(']');
      if (close == std::string::npos)
        return ctx.err(ctx.offset + static_cast<int>(t2 + num_and_rest.size()), Err::kArrayNoClose);
      if (close + 1 != num_and_rest.size())
        return ctx.err(ctx.offset + static_cast<int>(t2 + close + 1), Err::kBadArraySuffix);
      uint32_t count;
      if (kstrtouint(std::string_view(num_and_rest).substr(0, close), 0, &count) != 0 || count == 0)
        return ctx.err(ctx.offset + static_cast<int>(t2), Err::kBadArrayNum);
      if (count > static_cast<uint32_t>(kMaxArrayLen))
        return ctx.err(ctx.offset + static_cast<int>(t2), Err::kArrayTooBig);
      parg->count = static_cast<uint16_t>(count);
    }
    type = &type_text;
    offs = static_cast<int>(t0);
  }
  if (arg == "$comm" || arg == "$COMM" || arg.starts_with("\\\"")) {
    // $comm and \"STR" are strings, never arrays.
    if (parg->count || (type != nullptr && *type != "string"))
      return ctx.err(ctx.offset + offs, Err::kNeedStringType);
    parg->type = type_named("string");
  } else {
    parg->type = fetch_type(type);
  }
  if (parg->type == nullptr) return ctx.err(ctx.offset + offs, Err::kBadType);

  FetchInsn* code = parg->code;
  for (FetchInsn& i : parg->code) i = FetchInsn{};
  parg->code[kFetchInsnMax - 1].op = FetchOp::kEnd;
  if (int rc = parse_probe_arg(arg, &code, &parg->code[kFetchInsnMax - 1], ctx); rc < 0) return rc;
  parg->offset = static_cast<uint16_t>(*size);
  *size += parg->size();
  return finalize(code, parg, type, type ? offs : 0, ctx);
}

// traceprobe_parse_probe_arg(): NAME=, then the body.
int parse_arg(std::string_view word, int i, uint32_t* size, Ctx& ctx) {
  Arg& parg = *ctx.parg;
  const size_t eq = word.find('=');  // quirk: the first, even inside \"...\"
  std::string_view body = word;
  if (eq != std::string_view::npos) {
    if (eq > static_cast<size_t>(kMaxArgNameLen)) return ctx.err(0, Err::kArgNameTooLong);
    if (eq == 0) return ctx.err(0, Err::kNoArgName);
    parg.name = std::string(word.substr(0, eq));
    body = word.substr(eq + 1);
  } else {
    parg.name = "arg" + std::to_string(i + 1);
  }
  if (!is_good_name(parg.name)) return ctx.err(0, Err::kBadArgName);
  static constexpr const char* kReserved[] = {"common_type",    "common_flags", "common_preempt_count",
                                              "common_pid",     "common_tgid",  "__probe_ip",
                                              "__probe_ret_ip", "__probe_func"};
  for (const char* r : kReserved)
    if (parg.name == r) return ctx.err(0, Err::kUsedArgName);
  for (int k = 0; k < i; ++k)
    if (ctx.d->args[static_cast<size_t>(k)].name == parg.name) return ctx.err(0, Err::kUsedArgName);
  ctx.offset = static_cast<int>(word.size() - body.size());
  return parse_arg_body(std::string(body), size, &parg, ctx);
}

// traceprobe_parse_event_name(): [GROUP/]EVENT or GROUP.EVENT at `offset`
// of word 0. *event_set is false when GROUP/ leaves the event to the default.
int parse_event_name(std::string_view name, int offset, Definition* d, bool* event_set, Log* log) {
  *event_set = true;
  size_t slash = name.find('/');
  if (slash == std::string_view::npos) slash = name.find('.');
  if (slash != std::string_view::npos) {
    if (slash == 0) return log->err(offset, Err::kNoGroupName);
    if (slash + 1 > static_cast<size_t>(kMaxEventNameLen)) return log->err(offset, Err::kGroupTooLong);
    if (!is_good_name(name.substr(0, slash), /*hyphen_ok=*/true)) return log->err(offset, Err::kBadGroupName);
    d->group = std::string(name.substr(0, slash));
    offset += static_cast<int>(slash + 1);
    name.remove_prefix(slash + 1);
  }
  if (name.empty()) {
    if (slash != std::string_view::npos) {
      *event_set = false;
      return 0;
    }
    return log->err(offset, Err::kNoEventName);
  }
  if (name.size() >= static_cast<size_t>(kMaxEventNameLen)) return log->err(offset, Err::kEventTooLong);
  if (!is_good_name(name)) return log->err(offset, Err::kBadEventName);
  d->event = std::string(name);
  return 0;
}

// kern_path() + d_is_reg(), as the kernel checks a uprobe's file.
int check_file(const std::string& path, Log* log) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return log->err(0, Err::kFileNotFound, errno);
  if (!S_ISREG(st.st_mode)) return log->err(0, Err::kNoRegularFile);
  return 0;
}

// Ours: SYMBOL[+OFFS][%return], after PATH: or alone, as kprobes take it
// (trace_kprobe_create()'s checks and texts); its first byte at `at` of
// word 1.
int parse_symbol(std::string_view s, int at, Definition* d, Log* log) {
  const size_t pct = s.find('%');
  if (pct != std::string_view::npos) {
    if (s.substr(pct) != "%return") return log->err(at + static_cast<int>(pct), Err::kBadAddrSuffix);
    d->is_return = true;
    s = s.substr(0, pct);
  }
  // The offset after the last '+' ("operator+" stays a name).
  const size_t plus = s.rfind('+');
  uint64_t off = 0;
  if (plus == 0) return log->err(0, Err::kBadProbeAddr);
  if (plus != std::string_view::npos && kstrtoull(s.substr(plus + 1), 0, &off) == 0) s = s.substr(0, plus);
  if (s.empty() || off > 0xffffffffu) return log->err(0, Err::kBadProbeAddr);
  if (d->is_return && off != 0) return log->err(0, Err::kBadRetprobe);
  d->target.symbol = std::string(s);
  d->target.offset = off;
  return 0;
}

// The kernel's default names: p_BASENAME_0xOFFSET for uprobes (BASENAME
// cut at its first '.', '-' or '_'; 'p' for return probes too), and
// kprobes' p_SYMBOL_OFFSET / r_SYMBOL_OFFSET for the symbol forms (ours),
// made a C identifier. At most MAX_EVENT_NAME_LEN - 1 bytes.
std::string default_event(const Definition& d) {
  char buf[kMaxEventNameLen];
  if (d.target.symbol.empty()) {
    std::string tail = d.target.path.substr(d.target.path.rfind('/') + 1);
    const size_t cut = tail.find_first_of(".-_");
    if (cut != std::string::npos) tail.resize(cut);
    snprintf(buf, sizeof buf, "p_%s_0x%llx", tail.c_str(), static_cast<unsigned long long>(d.target.offset));
    return buf;
  }
  snprintf(buf, sizeof buf, "%c_%s_%llu", d.is_return ? 'r' : 'p', d.target.symbol.c_str(),
           static_cast<unsigned long long>(d.target.offset));
  std::string name = buf;
  for (char& c : name)
    if (!(is_alpha(c) || is_digit(c) || c == '_')) c = '_';
  return name;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

// dyn_event_release()'s parse of `-:[GROUP/]EVENT [PATH:OFFS ARGS...]`.
int parse_removal(const std::vector<std::string_view>& words, Definition* d, Error* e) {
  const std::string_view head = words[0];
  if (head.size() < 2 || head[1] != ':') return quiet(e);
  d->kind = '-';
  d->group.clear();
  std::string_view name = head.substr(2);
  const size_t slash = name.find('/');
  if (slash != std::string_view::npos) {
    d->group = std::string(name.substr(0, slash));
    name.remove_prefix(slash + 1);
  } else if (name.empty()) {
    return quiet(e);
  }
  d->event = std::string(name);
  for (size_t i = 1; i < words.size(); ++i) d->removal_args.emplace_back(words[i]);
  return 0;
}

std::string target_word(const Definition& d) {
  if (d.sdt) return d.target_path();
  std::string out;
  char buf[64];
  if (d.target.symbol.empty()) {
    snprintf(buf, sizeof buf, ":0x%016llx", static_cast<unsigned long long>(d.target.offset));
    out = d.target.path + buf;
    if (d.ref_ctr_offset != 0) {
      snprintf(buf, sizeof buf, "(0x%llx)", static_cast<unsigned long long>(d.ref_ctr_offset));
      out += buf;
    }
    return out;
  }
  if (!d.target.path.empty()) out = d.target.path + ":";
  out += d.target.symbol;
  if (d.target.offset != 0) out += "+" + std::to_string(d.target.offset);
  return out;
}

}  // namespace

const FetchType* find_fetch_type(std::string_view name) { return type_named(name); }

std::string command_text(std::string_view line) {
  line = line.substr(0, line.find('\0'));
  std::string out;
  for (std::string_view w : split_words(line)) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

int parse(std::string_view line, Definition* d, Error* e) {
  *d = Definition();
  *e = Error{};
  line = line.substr(0, line.find('\0'));  // the kernel's lines are C strings
  const std::vector<std::string_view> words = split_words(line);
  if (words.empty()) return quiet(e);
  std::vector<size_t> pos(words.size() + 1);
  for (size_t i = 0; i < words.size(); ++i) pos[i + 1] = pos[i] + words[i].size() + 1;
  if (words[0][0] == '-') return parse_removal(words, d, e);

  // (1) The command.
  switch (words[0][0]) {
    case 'r':
      d->is_return = true;
      break;
    case 'p':
      break;
    default:
      return quiet(e);  // -ECANCELED: not a uprobe
  }
  if (words.size() < 2) return quiet(e);
  // Quirk: anything after p or r but ':' is ignored ("px", "r5").
  const bool has_name = words[0].size() > 1 && words[0][1] == ':';
  Log log{&pos, words.size(), 1, e};

  // (2) The target.
  const std::string_view tw = words[1];
  d->target_pos = pos[1];
  if (tw[0] == '%') {
    // Ours: %PROVIDER:NAME, a USDT probe (sdt.h): its sites and argument
    // locations come from the notes when it is defined (probes.cc).
    const size_t colon = tw.find(':');
    if (colon == std::string_view::npos || !is_good_name(tw.substr(1, colon - 1)) ||
        !is_good_name(tw.substr(colon + 1)))
      return log.err(0, Err::kBadSdtName);
    if (d->is_return) return log.err(0, Err::kSdtRetprobe);
    d->sdt = true;
    d->sdt_provider = std::string(tw.substr(1, colon - 1));
    d->sdt_name = std::string(tw.substr(colon + 1));
  } else if (tw.find('/') == std::string_view::npos) {
    if (int rc = parse_symbol(tw, 0, d, &log); rc < 0) return rc;  // ours: SYMBOL
  } else {
    const size_t colon = tw.rfind(':');
    if (colon == std::string_view::npos) return quiet(e);
    if (colon + 1 < tw.size() && is_digit(tw[colon + 1])) {
      // PATH:OFFSET[%return][(REF_CTR_OFFSET)], the kernel's.
      d->target.path = std::string(tw.substr(0, colon));
      if (int rc = check_file(d->target.path, &log); rc < 0) return rc;
      std::string_view rest = tw.substr(colon + 1);
      const int at = static_cast<int>(colon + 1);
      const size_t rctr = rest.find('(');
      if (rctr != std::string_view::npos) {
        const size_t rend = rest.find(')', rctr);
        if (rend == std::string_view::npos)
          return log.err(static_cast<int>(tw.size()), Err::kRefcntOpenBrace);
        if (rend + 1 != rest.size()) return log.err(at + static_cast<int>(rend + 1), Err::kBadRefcntSuffix);
        uint64_t ref;
        if (int rc = kstrtoull(rest.substr(rctr + 1, rend - rctr - 1), 0, &ref); rc < 0)
          return log.err(at + static_cast<int>(rctr + 1), Err::kBadRefcnt, -rc);
        d->ref_ctr_offset = ref;
        rest = rest.substr(0, rctr);
      }
      const size_t pct = rest.find('%');
      if (pct != std::string_view::npos) {
        if (rest.substr(pct) != "%return") return log.err(at + static_cast<int>(pct), Err::kBadAddrSuffix);
        d->is_return = true;
        rest = rest.substr(0, pct);
      }
      uint64_t off;
      if (int rc = kstrtoull(rest, 0, &off); rc < 0) return log.err(at, Err::kBadUprobeOffs, -rc);
      d->target.offset = off;
    } else {
      // Ours: PATH:SYMBOL[+OFFS][%return], split at the first ':' of the
      // base name (C++ names have "::").
      const size_t c = tw.find(':', tw.rfind('/'));
      if (c == std::string_view::npos) return quiet(e);
      d->target.path = std::string(tw.substr(0, c));
      if (int rc = check_file(d->target.path, &log); rc < 0) return rc;
      if (int rc = parse_symbol(tw.substr(c + 1), static_cast<int>(c + 1), d, &log); rc < 0) return rc;
    }
  }
  d->kind = d->is_return ? 'r' : 'p';

  // (3) The event name.
  log.index = 0;
  bool event_set = false;
  if (has_name) {
    if (int rc = parse_event_name(words[0].substr(2), 2, d, &event_set, &log); rc < 0) return rc;
  }
  if (!event_set) d->event = d->sdt ? d->sdt_name : default_event(*d);
  if (d->sdt) {
    // Names for the note's arguments, in order; the types and locations
    // are each site's.
    for (size_t i = 2; i < words.size(); ++i) {
      log.index = static_cast<int>(i);
      const std::string_view name = words[i].substr(0, words[i].find(':'));
      const std::string_view type = name.size() < words[i].size() ? words[i].substr(name.size() + 1) : "";
      if (name.size() >= static_cast<size_t>(kMaxArgNameLen)) return log.err(0, Err::kArgNameTooLong);
      if (!is_good_name(name) || (name.size() < words[i].size() && type_named(type) == nullptr))
        return log.err(0, Err::kSdtArgName);
      for (const std::string& n : d->sdt_names)
        if (n.substr(0, n.find(':')) == name) return log.err(0, Err::kUsedArgName);
      d->sdt_names.emplace_back(words[i]);
    }
    return 0;
  }

  // (4) The args, packed after the common header and the probe's fields.
  const size_t nargs = words.size() - 2;
  if (nargs > static_cast<size_t>(kMaxTraceArgs)) {
    log.index = 2;
    return log.err(0, Err::kTooManyArgs, E2BIG);
  }
  uint32_t size = d->is_return ? 24 : 16;
  d->args.resize(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    log.index = static_cast<int>(i + 2);
    Ctx ctx{&log, d->is_return, 0, d, &d->args[i]};
    if (int rc = parse_arg(words[i + 2], static_cast<int>(i), &size, ctx); rc < 0) return rc;
    // Ours: the record must fit one (the kernel's would not fit its page).
    if (size > internal::kMaxRecord) return log.err(0, Err::kTooManyArgs, E2BIG);
  }
  d->fixed_size = static_cast<uint16_t>(size);
  // Its programs may read memory that is not there: the fixup must be in
  // place before they can run.
  base::install_fault_fixup();
  return 0;
}

std::string Definition::text() const {
  std::string out;
  out += is_return ? 'r' : 'p';
  out += ":" + group + "/" + event + " " + target_word(*this);
  for (const Arg& a : args) out += " " + a.name + "=" + a.comm;
  for (const std::string& n : sdt_names) out += " " + n;
  return out;
}

std::string Definition::target_path() const {
  if (sdt) return "%" + sdt_provider + ":" + sdt_name;
  return target.path.empty() ? target.symbol : target.path;
}

bool removal_matches(const Definition& rm, const Definition& probe) {
  if (!rm.event.empty() && rm.event != probe.event) return false;
  if (!rm.group.empty() && rm.group != probe.group) return false;
  if (rm.removal_args.empty()) return true;
  if (rm.removal_args[0] != target_word(probe)) return false;
  if (rm.removal_args.size() - 1 > probe.args.size()) return false;
  for (size_t i = 1; i < rm.removal_args.size(); ++i) {
    const Arg& a = probe.args[i - 1];
    if (rm.removal_args[i] != a.name + "=" + a.comm) return false;
  }
  return true;
}

}  // namespace usrtrace::probe
