// The filter compiler and evaluator (see filter.h and docs/design/filters.md).
//
// Parsing is recursive descent over the kernel's grammar:
//
//   expr    := and ( "||" and )*
//   and     := unary ( "&&" unary )*
//   unary   := "!" unary | "(" expr ")" | pred
//   pred    := FIELD OP VALUE
//
// The tree is then flattened into a branch program: each instruction is one
// predicate and the two instructions to go to when it is true or false (or
// accept / reject). && and || become jumps (short-circuit), ! swaps the two
// targets, so evaluation is a loop over predicates with no recursion, no
// stack and no allocation.
#include "filter/filter.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "events/record.h"
#include "events/registry.h"

namespace usrtrace::filter {
namespace {

using internal::EventDesc;
using internal::FieldDesc;
using internal::FieldKind;

constexpr size_t kMaxPreds = 16384;      // the kernel's MAX_FILTER_PRED
constexpr size_t kMaxStringValue = 256;  // MAX_FILTER_STR_VAL
constexpr int kMaxDepth = 200;           // nested ( and !: bounds the parser's recursion
constexpr int32_t kAccept = -1;
constexpr int32_t kReject = -2;

enum class Op : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kBand, kGlob };

// Where a predicate's operand comes from.
enum class Source : uint8_t {
  kInt,     // an integer field of the record (bool, enum, pointer too)
  kChars,   // char name[N]
  kDynStr,  // __data_loc char[]
  kCpu,     // Context::cpu
  kComm,    // Context::comm
};

// How a string is compared (the kernel's filter_parse_regex kinds).
enum class Match : uint8_t { kFull, kFront, kEnd, kMiddle, kGlob };

struct Pred {
  Source src;
  Op op;
  bool is_signed = false;
  uint8_t size = 0;  // integer fields: 1, 2, 4, 8
  uint16_t offset = 0;
  uint16_t max_len = 0;  // char arrays: N
  Match match = Match::kFull;
  uint64_t val = 0;     // integers: already truncated to the field's width
  std::string pattern;  // strings: without the * of front/end/middle matches
  int32_t on_true = kAccept;
  int32_t on_false = kReject;
};

// ---- The tree the parser builds.

struct Node {
  enum Kind : uint8_t { kPred, kAnd, kOr, kNot } kind;
  int pred = -1;  // index into the parser's preds
  int a = -1, b = -1;
};

struct Special {
  const char* name;
  Source src;
};
constexpr Special kSpecial[] = {
    {"CPU", Source::kCpu},   {"cpu", Source::kCpu},   {"common_cpu", Source::kCpu},
    {"COMM", Source::kComm}, {"comm", Source::kComm}, {"common_comm", Source::kComm},
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(const EventDesc& ev, std::string_view s) : ev_(ev), s_(s) {}

  // Returns the root node, or -1 with err_ set.
  int parse() {
    skip();
    if (i_ == s_.size()) return fail(ErrorCode::kNoFilter, i_);
    const int root = parse_or(0);
    if (root < 0) return -1;
    skip();
    if (i_ < s_.size()) {
      if (s_[i_] == ')') return fail(ErrorCode::kTooManyClose, i_);
      return fail(ErrorCode::kTooManyPreds, i_);
    }
    return root;
  }

  Error err_;
  std::vector<Node> nodes_;
  std::vector<Pred> preds_;

 private:
  int fail(ErrorCode code, size_t pos) {
    if (!failed_) {
      err_ = Error{code, pos};
      failed_ = true;
    }
    return -1;
  }
  void skip() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }
  bool eat(std::string_view tok) {
    skip();
    if (s_.substr(i_, tok.size()) != tok) return false;
    i_ += tok.size();
    return true;
  }
  int node(Node::Kind k, int a, int b, int pred = -1) {
    nodes_.push_back(Node{k, pred, a, b});
    return static_cast<int>(nodes_.size() - 1);
  }

  int parse_or(int depth) {
    int left = parse_and(depth);
    while (left >= 0 && eat("||")) {
      const int right = parse_and(depth);
      if (right < 0) return -1;
      left = node(Node::kOr, left, right);
    }
    return left;
  }

  int parse_and(int depth) {
    int left = parse_unary(depth);
    while (left >= 0 && eat("&&")) {
      const int right = parse_unary(depth);
      if (right < 0) return -1;
      left = node(Node::kAnd, left, right);
    }
    return left;
  }

  int parse_unary(int depth) {
    skip();
    if (depth > kMaxDepth) return fail(ErrorCode::kTooManyOpen, i_);
    if (i_ == s_.size()) return fail(ErrorCode::kInvalidFilter, 0);  // "a &&": an operand missing
    if (s_[i_] == '!' && (i_ + 1 >= s_.size() || s_[i_ + 1] != '=')) {
      ++i_;
      skip();
      if (i_ == s_.size()) return fail(ErrorCode::kNoFilter, i_);
      const int a = parse_unary(depth + 1);
      return a < 0 ? -1 : node(Node::kNot, a, -1);
    }
    if (s_[i_] == '(') {
      const size_t open = i_++;
      const int a = parse_or(depth + 1);
      if (a < 0) return -1;
      skip();
      if (i_ == s_.size() || s_[i_] != ')') {
        // An unclosed '(' is the kernel's "Too many '('" at the '('; other
        // junk after a complete predicate is "Too many terms".
        if (i_ == s_.size()) return fail(ErrorCode::kTooManyOpen, open);
        return fail(ErrorCode::kTooManyPreds, i_);
      }
      ++i_;
      return a;
    }
    if (!is_word(s_[i_])) return fail(ErrorCode::kInvalidFilter, 0);  // "&& a", "()", "|| ||"
    return parse_pred();
  }

  const FieldDesc* find_field(std::string_view name, Source* src) {
    for (uint16_t k = 0; k < ev_.nfields; ++k) {
      if (name == ev_.fields[k].name) {
        *src = Source::kInt;
        return &ev_.fields[k];
      }
    }
    for (const Special& sp : kSpecial) {
      if (name == sp.name) {
        *src = sp.src;
        return nullptr;
      }
    }
    for (const FieldDesc& f : events::kCommonFields) {
      if (name == f.name) {
        *src = Source::kInt;
        return &f;
      }
    }
    *src = Source::kInt;
    return nullptr;
  }

  int parse_pred() {
    if (preds_.size() >= kMaxPreds) return fail(ErrorCode::kTooManyPreds, i_);
    const size_t name_start = i_;
    while (i_ < s_.size() && is_word(s_[i_])) ++i_;
    const std::string_view name = s_.substr(name_start, i_ - name_start);
    const size_t name_end = i_;
    Pred p{};
    const FieldDesc* f = find_field(name, &p.src);
    const bool special = p.src == Source::kCpu || p.src == Source::kComm;
    if (!f && !special) return fail(ErrorCode::kFieldNotFound, name_end + 1);

    // The operator.
    skip();
    const size_t op_pos = i_;
    static constexpr struct {
      const char* text;
      Op op;
    } kOps[] = {{"==", Op::kEq}, {"!=", Op::kNe}, {"<=", Op::kLe},  {">=", Op::kGe},
                {"<", Op::kLt},  {">", Op::kGt},  {"&", Op::kBand}, {"~", Op::kGlob}};
    bool have_op = false;
    for (const auto& o : kOps) {
      const std::string_view t(o.text);
      if (s_.substr(i_, t.size()) == t && !(t == "&" && s_.substr(i_, 2) == "&&")) {
        p.op = o.op;
        i_ += t.size();
        have_op = true;
        break;
      }
    }
    if (!have_op) return fail(ErrorCode::kInvalidOp, i_ < s_.size() ? op_pos + 1 : name_end + 1);

    // The value.
    skip();
    const size_t vpos = i_;
    const bool quoted = i_ < s_.size() && (s_[i_] == '"' || s_[i_] == '\'');
    const bool is_string =
        special ? p.src == Source::kComm : f->kind == FieldKind::kCharArray || f->kind == FieldKind::kString;
    if (!special && (f->kind == FieldKind::kByteArray || f->kind == FieldKind::kDynBytes))
      return fail(ErrorCode::kIllegalFieldOp, vpos + 1);
    if (is_string) {
      if (!quoted) {
        const bool numeric = i_ < s_.size() && (is_digit(s_[i_]) || s_[i_] == '-');
        return fail(numeric ? ErrorCode::kExpectString : ErrorCode::kInvalidValue, vpos + 1);
      }
      const char q = s_[i_++];
      const size_t start = i_;
      while (i_ < s_.size() && s_[i_] != q) ++i_;
      if (i_ == s_.size()) return fail(ErrorCode::kMissingQuote, vpos);  // the kernel's: at the quote
      const std::string_view val = s_.substr(start, i_ - start);
      ++i_;
      if (val.size() >= kMaxStringValue) return fail(ErrorCode::kOperandTooLong, vpos + 1);
      if (p.op != Op::kEq && p.op != Op::kNe && p.op != Op::kGlob)
        return fail(ErrorCode::kIllegalFieldOp, vpos + 1);
      if (!special) {
        p.src = f->kind == FieldKind::kString ? Source::kDynStr : Source::kChars;
        p.offset = f->offset;
        // A tail `char buf[]` (ftrace:print's) has size 0: the rest of the
        // record, up to its NUL.
        p.max_len = f->size != 0 ? f->size : UINT16_MAX;  // records are shorter
      }
      set_pattern(&p, val);
    } else {
      if (p.op == Op::kGlob) return fail(ErrorCode::kIllegalFieldOp, vpos + 1);
      if (quoted) return fail(ErrorCode::kExpectDigit, vpos + 1);
      if (i_ == s_.size() || !(is_digit(s_[i_]) || s_[i_] == '-'))
        return fail(ErrorCode::kInvalidValue, vpos + 1);
      const size_t start = i_;
      ++i_;
      while (i_ < s_.size() && (is_word(s_[i_]) || s_[i_] == '-')) ++i_;
      const std::string token(s_.substr(start, i_ - start));
      if (!parse_number(token, special || f->is_signed, &p.val))
        return fail(ErrorCode::kIllegalIntval, vpos + 1);
      if (special) {
        p.size = 4;
        p.is_signed = true;
      } else {
        p.src = Source::kInt;
        p.offset = f->offset;
        p.size = static_cast<uint8_t>(f->size);
        p.is_signed = f->is_signed;
        if (f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8)
          return fail(ErrorCode::kIllegalFieldOp, vpos + 1);
      }
      p.val = truncate(p.val, p.size, p.is_signed);
    }
    preds_.push_back(std::move(p));
    return node(Node::kPred, -1, -1, static_cast<int>(preds_.size() - 1));
  }

  // kstrtoll / kstrtoull with base 0, the whole token: a negative number
  // for an unsigned field is an error, as in the kernel.
  static bool parse_number(const std::string& t, bool as_signed, uint64_t* out) {
    errno = 0;
    char* end = nullptr;
    if (as_signed && t[0] == '-') {
      const long long v = std::strtoll(t.c_str(), &end, 0);
      if (errno != 0 || end != t.c_str() + t.size() || t.size() == 1) return false;
      *out = static_cast<uint64_t>(v);
      return true;
    }
    if (t[0] == '-') return false;
    const unsigned long long v = std::strtoull(t.c_str(), &end, 0);
    if (errno != 0 || end != t.c_str() + t.size()) return false;
    // "0x" alone: strtoull parses the 0 and stops at x.
    *out = v;
    return true;
  }

  // The value as the field's own type (the kernel's predicates compare in
  // the field's width and signedness), widened back to 64 bits.
  static uint64_t truncate(uint64_t v, uint8_t size, bool is_signed) {
    if (size >= 8) return v;
    const unsigned bits = size * 8u;
    const uint64_t mask = (uint64_t{1} << bits) - 1;
    v &= mask;
    if (is_signed && (v >> (bits - 1)) & 1) v |= ~mask;
    return v;
  }

  static void set_pattern(Pred* p, std::string_view v) {
    p->match = Match::kFull;
    if (p->op != Op::kGlob) {
      p->pattern = std::string(v);
      return;
    }
    // The kernel's filter_parse_regex: a leading and/or trailing * alone is
    // a front / end / middle match; any other wildcard makes it a glob.
    const bool lead = !v.empty() && v.front() == '*';
    const bool trail = v.size() > 1 && v.back() == '*';
    std::string_view core = v.substr(lead ? 1 : 0, v.size() - (lead ? 1 : 0) - (trail ? 1 : 0));
    if (core.find_first_of("*?[") != std::string_view::npos || (v.size() == 1 && lead)) {
      p->match = Match::kGlob;
      p->pattern = std::string(v);
      return;
    }
    p->match = lead && trail ? Match::kMiddle : lead ? Match::kEnd : trail ? Match::kFront : Match::kFull;
    p->pattern = std::string(core);
  }

  const EventDesc& ev_;
  std::string_view s_;
  size_t i_ = 0;
  bool failed_ = false;
};

// The branch program: node `n` evaluated, going to `on_true` / `on_false`.
// Returns the index of its first instruction.
int32_t flatten(const Parser& ps, int n, int32_t on_true, int32_t on_false, std::vector<Pred>* out) {
  const Node& nd = ps.nodes_[static_cast<size_t>(n)];
  switch (nd.kind) {
    case Node::kPred: {
      Pred p = ps.preds_[static_cast<size_t>(nd.pred)];
      p.on_true = on_true;
      p.on_false = on_false;
      out->push_back(std::move(p));
      return static_cast<int32_t>(out->size() - 1);
    }
    case Node::kAnd: {
      const int32_t b = flatten(ps, nd.b, on_true, on_false, out);
      return flatten(ps, nd.a, b, on_false, out);
    }
    case Node::kOr: {
      const int32_t b = flatten(ps, nd.b, on_true, on_false, out);
      return flatten(ps, nd.a, on_true, b, out);
    }
    case Node::kNot:
      return flatten(ps, nd.a, on_false, on_true, out);
  }
  return kReject;
}

// ---- Evaluation. Nothing below allocates, locks or calls the system.

bool compare(uint64_t a, const Pred& p) {
  const uint64_t b = p.val;
  if (p.op == Op::kBand) return (a & b) != 0;
  if (p.op == Op::kEq) return a == b;
  if (p.op == Op::kNe) return a != b;
  if (p.is_signed) {
    const auto sa = static_cast<int64_t>(a), sb = static_cast<int64_t>(b);
    switch (p.op) {
      case Op::kLt:
        return sa < sb;
      case Op::kLe:
        return sa <= sb;
      case Op::kGt:
        return sa > sb;
      default:
        return sa >= sb;
    }
  }
  switch (p.op) {
    case Op::kLt:
      return a < b;
    case Op::kLe:
      return a <= b;
    case Op::kGt:
      return a > b;
    default:
      return a >= b;
  }
}

std::string_view string_of(const uint8_t* rec, uint32_t len, const Pred& p, const Context& ctx) {
  switch (p.src) {
    case Source::kComm:
      return std::string_view(ctx.comm, strnlen(ctx.comm, 16));
    case Source::kChars: {
      if (p.offset >= len) return {};
      const uint32_t room = len - p.offset < p.max_len ? len - p.offset : p.max_len;
      const char* s = reinterpret_cast<const char*>(rec + p.offset);
      return std::string_view(s, strnlen(s, room));
    }
    default: {  // kDynStr
      if (static_cast<uint32_t>(p.offset) + 4 > len) return {};
      internal::DataLoc loc;
      std::memcpy(&loc, rec + p.offset, sizeof loc);
      const uint32_t off = loc & 0xffff, n = loc >> 16;
      if (n == 0 || off + n > len) return {};
      const char* s = reinterpret_cast<const char*>(rec + off);
      return std::string_view(s, strnlen(s, n));
    }
  }
}

bool string_match(std::string_view s, const Pred& p) {
  const std::string_view pat = p.pattern;
  bool hit;
  switch (p.match) {
    case Match::kFull:
      hit = s == pat;
      break;
    case Match::kFront:
      hit = s.substr(0, pat.size()) == pat;
      break;
    case Match::kEnd:
      hit = s.size() >= pat.size() && s.substr(s.size() - pat.size()) == pat;
      break;
    case Match::kMiddle:
      hit = s.find(pat) != std::string_view::npos;
      break;
    default:
      hit = events::glob_match(pat, s);
      break;
  }
  return p.op == Op::kNe ? !hit : hit;
}

}  // namespace

struct Program::Impl {
  std::vector<Pred> prog;
  int32_t entry = kReject;
  std::string text;
};

Program::Program() : impl_(std::make_unique<Impl>()) {}
Program::~Program() = default;

const char* message(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidOp:
      return "Invalid operator";
    case ErrorCode::kTooManyOpen:
      return "Too many '('";
    case ErrorCode::kTooManyClose:
      return "Too few '('";
    case ErrorCode::kMissingQuote:
      return "Missing matching quote";
    case ErrorCode::kOperandTooLong:
      return "Operand too long";
    case ErrorCode::kExpectString:
      return "Expecting string field";
    case ErrorCode::kExpectDigit:
      return "Expecting numeric field";
    case ErrorCode::kIllegalFieldOp:
      return "Illegal operation for field type";
    case ErrorCode::kFieldNotFound:
      return "Field not found";
    case ErrorCode::kIllegalIntval:
      return "Illegal integer value";
    case ErrorCode::kTooManyPreds:
      return "Too many terms in predicate expression";
    case ErrorCode::kInvalidFilter:
      return "Meaningless filter expression";
    case ErrorCode::kInvalidValue:
      return "Invalid value (did you forget quotes)?";
    case ErrorCode::kNoFilter:
      return "No filter found";
  }
  return "Error";
}

std::unique_ptr<Program> Program::compile(const EventDesc& ev, std::string_view expr, Error* err) {
  while (!expr.empty() && is_space(expr.front())) expr.remove_prefix(1);
  while (!expr.empty() && is_space(expr.back())) expr.remove_suffix(1);
  Parser ps(ev, expr);
  const int root = ps.parse();
  if (root < 0) {
    *err = ps.err_;
    return nullptr;
  }
  std::unique_ptr<Program> p(new Program());
  p->impl_->prog.reserve(ps.preds_.size());
  p->impl_->entry = flatten(ps, root, kAccept, kReject, &p->impl_->prog);
  p->impl_->text = std::string(expr);
  return p;
}

bool Program::match(const void* rec_v, uint32_t len, const Context& ctx) const {
  const auto* rec = static_cast<const uint8_t*>(rec_v);
  const Pred* prog = impl_->prog.data();
  int32_t i = impl_->entry;
  // Every jump goes to an instruction emitted earlier (flatten emits the
  // targets first) or to accept/reject: the loop ends within prog.size() steps.
  while (i >= 0) {
    const Pred& p = prog[i];
    bool r;
    switch (p.src) {
      case Source::kInt:
        r = compare(events::read_int_field(rec, len, p.offset, p.size, p.is_signed), p);
        break;
      case Source::kCpu:
        r = ctx.cpu >= 0 && compare(static_cast<uint64_t>(static_cast<int64_t>(ctx.cpu)), p);
        break;
      default:
        r = string_match(string_of(rec, len, p, ctx), p);
        break;
    }
    i = r ? p.on_true : p.on_false;
  }
  return i == kAccept;
}

const std::string& Program::text() const { return impl_->text; }

std::string error_text(std::string_view expr, const Error& err) {
  std::string out(expr);
  out += "\n";
  out += std::string(err.pos, ' ');
  out += "^\nparse_error: ";
  out += message(err.code);
  out += "\n";
  return out;
}

}  // namespace usrtrace::filter
