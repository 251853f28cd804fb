// The fetch args of a uprobe_events line (parse.h): NAME=, the type, and
// the fetch program the kernel would compile (trace_probe.c
// traceprobe_parse_probe_arg() and what it calls), with its checks, carets
// and errnos in its order. The command, the target and the names are
// parse.cc's; what both use, parse_internal.h.
#include <cctype>
#include <cstdio>
#include <cstring>

#include "probe/parse_internal.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::probe::parse_detail {
namespace {

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

}  // namespace

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

}  // namespace usrtrace::probe::parse_detail
