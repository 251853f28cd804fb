// The hist command parser, in the steps of the kernel's
// kernel/trace/trace_events_hist.c; each function names its counterpart.
//
// Worked example, on kmem:kmalloc:
//
//   hist:keys=common_pid.execname,bytes_req:vals=bytes_alloc:sort=bytes_alloc.descending:size=256
//
//   [1] parse(): the command is "hist", alone or followed by ':' (else "Not a
//       hist trigger"); hitcount becomes vals[0].
//   [2] parse_attrs() splits the rest at ':' into "keys=...", "vals=...",
//       "sort=...", "size=256", and parse_assignment() takes each in turn.
//   [3] keys= and vals= resolve their fields there and then
//       (create_key_fields(), create_val_fields(); parse_field():
//       "common_pid" is a common field, ".execname" its modifier); sort= only
//       keeps its items (add_sort_items()); size=256 is 2^8 entries.
//   [4] parse(): a command without keys= is "No keys given".
//   [5] create_sort_keys(): "bytes_alloc.descending" is vals[1], descending.
//   [6] layout_keys(): common_pid at byte 0 and bytes_req at byte 8 of a
//       16-byte compound key; table_signature(): the text a name= table is
//       shared on.
//   Histogram::create (hist.cc) then makes the table, or joins the named one.
//
// The first error stops the parse. Unlike the kernel, which reads every
// attribute before it creates a field, [3] resolves the fields of an
// attribute before it reads the next one: "hist:keys=nosuch:bogus" reports
// the field, not the attribute (HistMalformedTest.FirstErrorInCommandOrder).
#include "hist/hist_parse.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <utility>

#include "events/record.h"

namespace usrtrace::hist {
namespace {

using internal::EventDesc;
using internal::FieldDesc;
using internal::FieldKind;

constexpr size_t kMaxSortKeys = 2;  // TRACING_MAP_SORT_KEYS_MAX

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls fn(item, pos) on each item of the ','-separated `list`, which starts
// at byte `pos` of the command, with the item's own position; an empty list
// is one empty item. Stops at the first false.
template <typename Fn>
bool for_each_item(std::string_view list, size_t pos, Fn&& fn) {
  while (true) {
    const size_t c = list.find(',');
    if (!fn(list.substr(0, c), pos)) return false;
    if (c == std::string_view::npos) return true;
    pos += c + 1;
    list = list.substr(c + 1);
  }
}

// The N of ".buckets=N", or 0 when `digits` is not a decimal above 0. A
// number past 2^40 is refused before it can overflow.
uint64_t parse_buckets(std::string_view digits) {
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || n > (uint64_t{1} << 40)) return 0;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

// One ".modifier" of *f, or false when f cannot take it: what a field takes
// depends on what it reads (a number, a string, the timestamp) and on
// whether it is a key. Kernel: parse_field()'s modifier chain.
bool apply_field_modifier(std::string_view m, bool is_key, Field* f) {
  if (m.substr(0, 8) == "buckets=") {
    if (!is_key || f->is_string()) return false;
    const uint64_t n = parse_buckets(m.substr(8));
    if (n == 0) return false;
    f->flags |= kBuckets;
    f->buckets = n;
    return true;
  }
  for (const FlagName& fn : kFlagNames) {
    if (m != fn.name) continue;
    const bool numeric = !f->is_string();
    bool ok;
    switch (fn.flag) {
      case kExecname:
        ok = is_key && f->name == "common_pid";
        break;
      case kUsecs:
        ok = f->src == Src::kTimestamp;
        break;
      case kPercent:
      case kGraph:
        ok = !is_key && numeric;
        break;
      case kStacktrace:
        ok = is_key && f->is_stack();  // implied by the field; accepted, as the kernel's
        break;
      case kSyscall:
      case kSym:
      case kSymOffset:
      case kLog2:
        ok = is_key && numeric;
        break;
      default:
        ok = numeric;
        break;  // hex
    }
    if (ok) f->flags |= fn.flag;
    return ok;
  }
  return false;
}

// The compound key's layout: 8 bytes per number, a string's bytes rounded up
// to 8 (Kernel: create_key_fields()'s key_offset). Returns the key's size.
uint32_t layout_keys(std::vector<Field>& keys) {
  uint32_t key_size = 0;
  for (Field& k : keys) {
    k.key_offset = key_size;
    key_size += k.is_string() || k.is_stack() ? (k.size + 7u) & ~7u : 8u;
  }
  return key_size;
}

// The keys (string keys with the bytes they keep) and the values as text: a
// name= histogram may share a table only with one of the same signature.
std::string table_signature(const HistSpec& spec) {
  std::string sig;
  for (const Field& k : spec.keys) {
    sig += k.spec();
    if (k.is_string()) {
      sig += "/s";
      sig += std::to_string(k.size);
    }
    sig += ',';
  }
  sig += ":";
  for (const Field& v : spec.vals) {
    sig += v.spec();
    sig += ',';
  }
  // Variables are part of a table (the kernel's named-trigger check
  // "includes variables"), and so are the per-entry words of the actions.
  sig += ":";
  for (const Var& v : spec.vars) sig += v.name + "=" + v.text + ",";
  sig += ":" + std::to_string(spec.aux_words);
  return sig;
}

// One command's parse into a HistSpec: steps [1]..[6] above. Positions are
// bytes of the command as given; each error carries the one where its caret
// goes.
class HistParser {
 public:
  HistParser(const EventDesc& ev, HistSpec* spec, Error* err) : ev_(ev), spec_(*spec), err_(err) {}

  bool parse(std::string_view cmd);

 private:
  bool fail(std::string msg, size_t pos) {
    *err_ = Error{std::move(msg), pos};
    return false;
  }
  bool parse_attrs(std::string_view attrs, size_t pos);
  bool parse_assignment(std::string_view attr, size_t pos);
  bool create_key_fields(std::string_view list, size_t pos);
  bool create_val_fields(std::string_view list, size_t pos);
  bool add_sort_items(std::string_view list, size_t pos);
  bool parse_map_size(std::string_view val, size_t pos);
  bool parse_field(std::string_view text, size_t pos, bool is_key, Field* out);
  bool find_field(std::string_view name, bool is_key, Field* f);
  bool create_sort_keys();
  // Section 2.2: variables, expressions, actions.
  bool parse_vars(std::string_view list, size_t pos);
  int parse_expr(std::string_view text, size_t pos);
  int expr_sum(std::string_view& t, size_t& pos, int level);
  int expr_term(std::string_view& t, size_t& pos, int level);
  int expr_unary(std::string_view& t, size_t& pos, int level);
  int expr_operand(std::string_view tok, size_t pos);
  int add_expr(Expr e);
  int binary(Expr::Op op, int a, int b, size_t pos);
  bool parse_action(std::string_view attr, size_t pos);
  bool parse_params(std::string_view list, size_t pos, Action* a);
  bool resolve_names();
  int depth(int node) const;

  const EventDesc& ev_;
  HistSpec& spec_;
  Error* const err_;
  bool have_keys_ = false;
  // sort= items and their positions, kept for create_sort_keys(): a sort key
  // may name a value that a later vals= adds.
  std::vector<std::pair<std::string_view, size_t>> sort_items_;
  // $names met before every variable is known: expression nodes (kSelfVar
  // with index -1, resolved to an own variable or a Ref) and keys.
  struct Pending {
    int node;
    std::string system, event, name;
    size_t pos;
  };
  std::vector<Pending> pending_;
  std::vector<std::pair<size_t, size_t>> key_vars_;    // (key index, caret)
  std::vector<std::pair<size_t, size_t>> track_vars_;  // (action index, caret)
  bool have_save_ = false;
};

// Kernel: event_hist_trigger_parse()'s part before the map.
bool HistParser::parse(std::string_view cmd) {
  const size_t base = static_cast<size_t>(trim(cmd).data() - cmd.data());
  cmd = trim(cmd);
  spec_.cmd_pos = base;
  // [1]
  if (cmd.substr(0, 4) != "hist" || (cmd.size() > 4 && cmd[4] != ':'))
    return fail("Not a hist trigger", base);
  Field hitcount;
  hitcount.name = "hitcount";
  hitcount.src = Src::kHitcount;
  spec_.vals.push_back(hitcount);
  // [2], [3]
  if (cmd.size() > 4 && !parse_attrs(cmd.substr(5), base + 5)) return false;
  // [4]
  if (!have_keys_) return fail("No keys given", base);
  if (!resolve_names()) return false;
  // [5]
  if (!create_sort_keys()) return false;
  // [6]
  spec_.key_size = layout_keys(spec_.keys);
  spec_.signature = table_signature(spec_);
  return true;
}

// [2] Kernel: parse_hist_trigger_attrs(). `attrs` is what follows "hist:",
// at byte `pos`; every ':'-separated attribute, empty ones too, goes to
// parse_assignment().
bool HistParser::parse_attrs(std::string_view attrs, size_t pos) {
  while (true) {
    const size_t colon = attrs.find(':');
    if (!parse_assignment(attrs.substr(0, colon), pos)) return false;
    if (colon == std::string_view::npos) return true;
    pos += colon + 1;
    attrs = attrs.substr(colon + 1);
  }
}

// [2] Kernel: parse_assignment(), plus the bare words (pause, cont, clear)
// that parse_hist_trigger_attrs() takes itself. `attr` is at byte `pos`.
bool HistParser::parse_assignment(std::string_view attr, size_t pos) {
  const size_t eq = attr.find('=');
  const std::string_view key = attr.substr(0, eq);
  const std::string_view val = eq == std::string_view::npos ? std::string_view() : attr.substr(eq + 1);
  // Where the value starts: for a key without '=', one past its end.
  const size_t vpos = pos + key.size() + 1;
  if (attr.empty()) return fail("Empty assignment", pos);
  if (attr.substr(0, 8) == "onmatch(" || attr.substr(0, 6) == "onmax(" || attr.substr(0, 9) == "onchange(")
    return parse_action(attr, pos);
  if (key == "keys" || key == "key") {
    if (val.empty()) return fail("Empty assignment", pos);
    if (have_keys_) return fail("Keys already given", pos);
    have_keys_ = true;
    return create_key_fields(val, vpos);
  }
  if (key == "vals" || key == "values") {
    if (val.empty()) return fail("Empty assignment", pos);
    return create_val_fields(val, vpos);
  }
  if (key == "sort") {
    if (val.empty()) return fail("Empty sort field", vpos);
    return add_sort_items(val, vpos);
  }
  if (key == "size") return parse_map_size(val, vpos);
  if (key == "name") {
    if (val.empty()) return fail("Empty assignment", pos);
    spec_.name = std::string(val);
    return true;
  }
  if (eq != std::string_view::npos) return parse_vars(attr, pos);
  if (attr == "pause") {
    spec_.want_pause = true;
  } else if (attr == "cont" || attr == "continue") {
    spec_.want_cont = true;
  } else if (attr == "clear") {
    spec_.want_clear = true;
  } else {
    return fail("Invalid hist attribute", pos);
  }
  return true;
}

// [3] Kernel: create_key_fields(): up to kMaxKeys fields, numbers or strings,
// appended in order.
bool HistParser::create_key_fields(std::string_view list, size_t pos) {
  return for_each_item(list, pos, [&](std::string_view item, size_t p) {
    if (spec_.keys.size() == kMaxKeys) return fail("Too many keys (3 max)", p);
    Field f;
    if (!item.empty() && item[0] == '$') {
      // keys=$var: the key is the variable's value (histogram.rst's
      // keys=$saved_pid:saved_pid=pid), resolved once every variable is known.
      f.src = Src::kExpr;
      f.name = std::string(item.substr(1));
      f.text = std::string(item);
      key_vars_.emplace_back(spec_.keys.size(), p);
      spec_.keys.push_back(std::move(f));
      return true;
    }
    if (!parse_field(item, p, /*is_key=*/true, &f)) return false;
    spec_.keys.push_back(std::move(f));
    return true;
  });
}

// [3] Kernel: create_val_fields(): numbers only, up to kMaxVals with hitcount;
// naming hitcount adds nothing (it is vals[0] already).
bool HistParser::create_val_fields(std::string_view list, size_t pos) {
  return for_each_item(list, pos, [&](std::string_view item, size_t p) {
    if (item == "hitcount") return true;
    if (item.substr(0, 9) == "hitcount.") {
      // Kernel: create_val_fields(): hitcount's modifiers (.percent,
      // .graph) go to the hitcount every histogram has.
      Field f;
      if (!parse_field(item, p, /*is_key=*/false, &f)) return false;
      spec_.vals[0].flags |= f.flags;
      return true;
    }
    if (spec_.vals.size() == kMaxVals) return fail("Too many values", p);
    Field f;
    if (item.find_first_of("$+-*/()") != std::string_view::npos) {
      // An expression (or a variable) summed as a value: named by its text
      // without the '$'s, as the kernel names it.
      const int e = parse_expr(item, p);
      if (e < 0) return false;
      f.src = Src::kExpr;
      f.expr = e;
      f.text = std::string(item);
      for (char c : item)
        if (c != '$') f.name += c;
      spec_.vals.push_back(std::move(f));
      return true;
    }
    if (!parse_field(item, p, /*is_key=*/false, &f)) return false;
    if (f.is_string()) return fail("String type can not be a value", p);
    spec_.vals.push_back(std::move(f));
    return true;
  });
}

// [3] sort=: counts its items and refuses empty ones now; create_sort_keys()
// resolves them once every key and value is known (the kernel likewise keeps
// sort_key_str until then).
bool HistParser::add_sort_items(std::string_view list, size_t pos) {
  return for_each_item(list, pos, [&](std::string_view item, size_t p) {
    if (sort_items_.size() == kMaxSortKeys) return fail("Too many sort fields (Max = 2)", p);
    if (item.empty()) return fail("Empty sort field", p);
    sort_items_.emplace_back(item, p);
    return true;
  });
}

// [3] Kernel: parse_map_size(): a decimal entry count, rounded up to a power
// of two between 2^kMinBits and 2^kMaxBits. `val` is at byte `pos`.
bool HistParser::parse_map_size(std::string_view val, size_t pos) {
  uint64_t n = 0;
  bool ok = !val.empty();
  for (char c : val) {
    if (c < '0' || c > '9' || n > (uint64_t{1} << 32)) ok = false;
    if (ok) n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  unsigned bits = 0;
  while (ok && (uint64_t{1} << bits) < n) ++bits;
  if (!ok || bits < kMinBits || bits > kMaxBits)
    return fail("Invalid size: 128..131072, rounded up to a power of 2", pos);
  spec_.bits = bits;
  return true;
}

// [3] Kernel: parse_field(): "name[.modifier...]" at byte `pos` into *out:
// the field by name (find_field()), then its modifiers in order, each with
// its own caret.
bool HistParser::parse_field(std::string_view text, size_t pos, bool is_key, Field* out) {
  const size_t dot = text.find('.');
  const std::string_view name = text.substr(0, dot);
  Field f;
  f.name = std::string(name);
  if (name.empty()) return fail("Empty field name", pos);
  if (!find_field(name, is_key, &f)) return fail("Couldn't find field", pos);
  std::string_view rest = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  size_t mpos = pos + name.size() + 1;
  while (!rest.empty()) {
    const size_t d = rest.find('.');
    const std::string_view m = rest.substr(0, d);
    if (!apply_field_modifier(m, is_key, &f)) return fail("Invalid field modifier", mpos);
    mpos += m.size() + 1;
    rest = d == std::string_view::npos ? std::string_view() : rest.substr(d + 1);
  }
  // One display modifier for a key.
  if (is_key && __builtin_popcount(f.flags & ~kUsecs) > 1) return fail("Invalid field modifier", pos);
  *out = std::move(f);
  return true;
}

// [3] Kernel: parse_field()'s name lookup (trace_find_event_field(),
// common_timestamp, common_cpu, hitcount): where *f reads from. The event's
// fields first, then the common fields, then common_timestamp, the cpu and
// (values only) hitcount. False for no such field, and for u8[] fields (no
// byte-array keys or values).
bool HistParser::find_field(std::string_view name, bool is_key, Field* f) {
  const FieldDesc* fd = nullptr;
  for (uint16_t k = 0; k < ev_.nfields && !fd; ++k)
    if (name == ev_.fields[k].name) fd = &ev_.fields[k];
  for (const FieldDesc& c : events::kCommonFields)
    if (!fd && name == c.name) fd = &c;
  if (fd) {
    switch (fd->kind) {
      case FieldKind::kCharArray:
        f->src = Src::kChars;
        f->offset = fd->offset;
        // A tail `char buf[]` (ftrace:print's) has size 0: its key keeps as
        // many bytes as a string's.
        f->size = fd->size != 0 ? fd->size : kDynStringKey;
        break;
      case FieldKind::kString:
        f->src = Src::kDynStr;
        f->offset = fd->offset;
        f->size = kDynStringKey;
        break;
      case FieldKind::kDynBytes: {
        // A synthetic event's stack (`unsigned long[]`, `long[]`): a key
        // (stack.stacktrace), of its first kStackDepth frames.
        const std::string_view type = fd->type;
        if (!is_key || type.size() < 6 || type.substr(type.size() - 6) != "long[]") return false;
        f->src = Src::kDynStack;
        f->offset = fd->offset;
        f->size = kStackDepth * 8;
        break;
      }
      case FieldKind::kByteArray:
        return false;
      default:
        f->src = Src::kInt;
        f->offset = fd->offset;
        f->size = fd->size;
        f->is_signed = fd->is_signed;
    }
  } else if (name == "common_stacktrace" || name == "stacktrace") {
    // The writing thread's call stack (kernel: HIST_FIELD_FL_STACKTRACE),
    // kStackDepth return addresses, a key only.
    if (!is_key) return false;
    f->src = Src::kStack;
    f->size = kStackDepth * 8;
    spec_.needs_stack = true;
  } else if (name == "common_timestamp") {
    f->src = Src::kTimestamp;
    spec_.needs_ts = true;
  } else if (name == "cpu" || name == "common_cpu" || name == "CPU") {
    f->src = Src::kCpu;
  } else if (name == "hitcount" && !is_key) {
    f->src = Src::kHitcount;
  } else {
    return false;
  }
  return true;
}

// [5] Kernel: create_sort_keys(): each sort= item is a value (hitcount
// included) or a key, by its name or as the trigger file prints it,
// optionally followed by .ascending or .descending. Without sort=, hitcount
// ascending.
bool HistParser::create_sort_keys() {
  for (auto [item, p] : sort_items_) {
    SortKey sk;
    std::string_view fname = item;
    const size_t dot = item.rfind('.');
    if (dot != std::string_view::npos) {
      const std::string_view mod = item.substr(dot + 1);
      if (mod == "descending")
        sk.descending = true;
      else if (mod != "ascending")
        return fail("Invalid sort modifier", p + dot + 1);
      fname = item.substr(0, dot);
    }
    bool found = false;
    for (size_t v = 0; v < spec_.vals.size() && !found; ++v)
      if (fname == spec_.vals[v].name || fname == spec_.vals[v].spec()) {
        sk.val = static_cast<int>(v);
        found = true;
      }
    for (size_t k = 0; k < spec_.keys.size() && !found; ++k)
      if (fname == spec_.keys[k].name || fname == spec_.keys[k].spec()) {
        sk.val = -1 - static_cast<int>(k);
        found = true;
      }
    if (!found) return fail("Sort field must be a key or a val", p);
    spec_.sort.push_back(sk);
  }
  if (spec_.sort.empty()) spec_.sort.push_back(SortKey{});
  return true;
}

// ---- Section 2.2: variables, expressions and actions.

bool is_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// Kernel: parse_var_defs(): "name=expr[,name=expr...]"; each variable is
// kept per entry. A name may not be given twice, nor be a keyword.
bool HistParser::parse_vars(std::string_view list, size_t pos) {
  return for_each_item(list, pos, [&](std::string_view item, size_t p) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return fail("Malformed assignment", p);
    const std::string_view name = item.substr(0, eq), text = item.substr(eq + 1);
    if (!is_ident(name)) return fail("Malformed assignment", p);
    if (text.empty()) return fail("Empty assignment", p);
    for (const Var& v : spec_.vars)
      if (v.name == name) return fail("Variable already defined", p);
    if (spec_.vars.size() == kMaxVars) return fail("Too many variables defined", p);
    Var v;
    v.name = std::string(name);
    v.text = std::string(text);
    // A bare string field cannot be kept (vars are numbers here).
    if (text.find_first_of("$+-*/()") == std::string_view::npos) {
      Field f;
      if (find_field(text.substr(0, text.find('.')), false, &f) && f.is_string())
        return fail("String type can not be an operand in expression", p + eq + 1);
    }
    v.expr = parse_expr(text, p + eq + 1);
    if (v.expr < 0) return false;
    v.units = spec_.exprs[static_cast<size_t>(v.expr)].units;
    spec_.vars.push_back(std::move(v));
    return true;
  });
}

int HistParser::add_expr(Expr e) {
  if (spec_.exprs.size() == kMaxExprs) {
    fail("Too many subexpressions (3 max)", spec_.cmd_pos);
    return -1;
  }
  spec_.exprs.push_back(std::move(e));
  return static_cast<int>(spec_.exprs.size() - 1);
}

// Operator levels under `node`: the kernel's parse_expr() refuses more than 3.
int HistParser::depth(int node) const {
  if (node < 0) return 0;
  const Expr& e = spec_.exprs[static_cast<size_t>(node)];
  if (e.op < Expr::kAdd) return 0;
  return 1 + std::max(depth(e.a), depth(e.b));
}

int HistParser::binary(Expr::Op op, int a, int b, size_t pos) {
  const Expr &x = spec_.exprs[static_cast<size_t>(a)], &y = spec_.exprs[static_cast<size_t>(b)];
  Expr e;
  e.op = op;
  e.a = a;
  e.b = b;
  if ((op == Expr::kAdd || op == Expr::kSub) && x.units != Units::kNone && y.units != Units::kNone &&
      x.units != y.units) {
    fail("Timestamp units in expression don't match", pos);
    return -1;
  }
  if (op == Expr::kDiv && y.op == Expr::kConst && y.constant == 0) {
    fail("Division by zero", pos);
    return -1;
  }
  e.units = x.units != Units::kNone ? x.units : y.units;
  return add_expr(std::move(e));
}

// Kernel: parse_expr(): + - * / over fields, constants, variables and
// parentheses, * and / first, left to right; unary minus at the head of
// the whole expression only; at most 3 levels of operators.
int HistParser::parse_expr(std::string_view text, size_t pos) {
  std::string_view t = text;
  size_t p = pos;
  const int e = expr_sum(t, p, 0);
  if (e < 0) return -1;
  if (!t.empty()) {
    fail(t[0] == ')' ? "Invalid hist attribute" : "Malformed assignment", p);
    return -1;
  }
  if (depth(e) > 3) {
    fail("Too many subexpressions (3 max)", pos);
    return -1;
  }
  return e;
}

int HistParser::expr_sum(std::string_view& t, size_t& pos, int level) {
  int a = expr_term(t, pos, level);
  while (a >= 0 && !t.empty() && (t[0] == '+' || t[0] == '-')) {
    const Expr::Op op = t[0] == '+' ? Expr::kAdd : Expr::kSub;
    const size_t at = pos;
    t.remove_prefix(1);
    ++pos;
    const int b = expr_term(t, pos, level + 1);
    if (b < 0) return -1;
    a = binary(op, a, b, at);
  }
  return a;
}

int HistParser::expr_term(std::string_view& t, size_t& pos, int level) {
  int a = expr_unary(t, pos, level);
  while (a >= 0 && !t.empty() && (t[0] == '*' || t[0] == '/')) {
    const Expr::Op op = t[0] == '*' ? Expr::kMul : Expr::kDiv;
    const size_t at = pos;
    t.remove_prefix(1);
    ++pos;
    const int b = expr_unary(t, pos, level + 1);
    if (b < 0) return -1;
    a = binary(op, a, b, at);
  }
  return a;
}

int HistParser::expr_unary(std::string_view& t, size_t& pos, int level) {
  if (!t.empty() && t[0] == '-') {
    if (level > 0) {
      fail("Unary minus not supported in sub-expressions", pos);
      return -1;
    }
    t.remove_prefix(1);
    ++pos;
    const int a = expr_unary(t, pos, level + 1);
    if (a < 0) return -1;
    Expr e;
    e.op = Expr::kNeg;
    e.a = a;
    e.units = spec_.exprs[static_cast<size_t>(a)].units;
    return add_expr(std::move(e));
  }
  if (!t.empty() && t[0] == '(') {
    const size_t open = pos;
    t.remove_prefix(1);
    ++pos;
    const int e = expr_sum(t, pos, level + 1);
    if (e < 0) return -1;
    if (t.empty() || t[0] != ')') {
      fail("No closing paren found", open);
      return -1;
    }
    t.remove_prefix(1);
    ++pos;
    return e;
  }
  size_t n = 0;
  while (n < t.size() &&
         (std::isalnum(static_cast<unsigned char>(t[n])) || t[n] == '_' || t[n] == '.' || t[n] == '$'))
    ++n;
  const std::string_view tok = t.substr(0, n);
  const int e = expr_operand(tok, pos);
  t.remove_prefix(n);
  pos += n;
  return e;
}

// One operand: $var, SYS.EVENT.$var, a number, or a numeric field with its
// modifiers (common_timestamp.usecs).
int HistParser::expr_operand(std::string_view tok, size_t pos) {
  if (tok.empty()) {
    fail("Empty field name", pos);
    return -1;
  }
  const size_t dollar = tok.find('$');
  if (dollar != std::string_view::npos) {
    Pending pd{-1, "", "", std::string(tok.substr(dollar + 1)), pos};
    if (dollar > 0) {
      // SYS.EVENT.$var
      const std::string_view qual = tok.substr(0, dollar);
      const size_t dot = qual.find('.');
      if (qual.back() != '.' || dot == std::string_view::npos || dot == 0 || dot + 2 > qual.size()) {
        fail("Invalid subsystem or event name", pos);
        return -1;
      }
      pd.system = std::string(qual.substr(0, dot));
      pd.event = std::string(qual.substr(dot + 1, qual.size() - dot - 2));
    }
    if (!is_ident(pd.name)) {
      fail("Couldn't find variable", pos);
      return -1;
    }
    Expr e;
    e.op = Expr::kSelfVar;  // resolve_names() decides
    pd.node = add_expr(std::move(e));
    if (pd.node < 0) return -1;
    pending_.push_back(std::move(pd));
    return pending_.back().node;
  }
  if (std::isdigit(static_cast<unsigned char>(tok[0]))) {
    uint64_t v = 0;
    int base = 10;
    std::string_view d = tok;
    if (d.size() > 2 && d[0] == '0' && (d[1] == 'x' || d[1] == 'X')) {
      base = 16;
      d.remove_prefix(2);
    }
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), v, base);
    if (ec != std::errc() || end != d.data() + d.size()) {
      fail("Expecting numeric literal", pos);
      return -1;
    }
    Expr e;
    e.op = Expr::kConst;
    e.constant = v;
    return add_expr(std::move(e));
  }
  Expr e;
  e.op = Expr::kField;
  if (!parse_field(tok, pos, /*is_key=*/false, &e.field)) return -1;
  if (e.field.is_string()) {
    fail("String type can not be an operand in expression", pos);
    return -1;
  }
  if (e.field.src == Src::kHitcount || e.field.is_stack()) {
    fail("Couldn't find field", pos);
    return -1;
  }
  if (e.field.src == Src::kTimestamp) e.units = (e.field.flags & kUsecs) ? Units::kUs : Units::kNs;
  return add_expr(std::move(e));
}

// Kernel: parse_actions(): HANDLER(ARG).ACTION(PARAMS), HANDLER one of
// onmatch(SYS.EVENT), onmax($var), onchange($var); ACTION one of
// trace(SYNTH,params), save(fields), snapshot(), or onmatch's SYNTH(params).
bool HistParser::parse_action(std::string_view attr, size_t pos) {
  if (spec_.actions.size() == kMaxActions) return fail("Too many actions", pos);
  Action a;
  a.pos = pos;
  a.text = std::string(attr);
  const size_t open = attr.find('(');
  const std::string_view handler = attr.substr(0, open);
  const size_t close = attr.find(')', open);
  if (close == std::string_view::npos) return fail("No closing paren found", pos + open);
  const std::string_view arg = attr.substr(open + 1, close - open - 1);
  const size_t arg_pos = pos + open + 1;
  if (arg.find('(') != std::string_view::npos) return fail("No closing paren found", pos + open);
  if (handler == "onmatch") {
    a.handler = Action::kOnMatch;
    const size_t dot = arg.find('.');
    if (dot == std::string_view::npos) return fail("Missing subsystem", arg_pos);
    a.match_system = std::string(arg.substr(0, dot));
    a.match_event = std::string(arg.substr(dot + 1));
    if (!is_ident(a.match_system) || !is_ident(a.match_event))
      return fail("Invalid subsystem or event name", arg_pos);
  } else {
    a.handler = handler == "onmax" ? Action::kOnMax : Action::kOnChange;
    if (arg.empty() || arg[0] != '$')
      return fail("For onmax(x) or onchange(x), x must be a variable", arg_pos);
    track_vars_.emplace_back(spec_.actions.size(), arg_pos);
    a.synth_name = std::string(arg.substr(1));  // the variable's name until resolve_names()
  }
  std::string_view rest = attr.substr(close + 1);
  size_t rpos = pos + close + 1;
  if (rest.empty() || rest[0] != '.') return fail("No action found", rpos);
  rest.remove_prefix(1);
  ++rpos;
  const size_t aopen = rest.find('(');
  if (aopen == std::string_view::npos) return fail("No action found", rpos);
  if (rest.back() != ')') return fail("No closing paren found", rpos + aopen);
  const std::string_view name = rest.substr(0, aopen);
  std::string_view params = rest.substr(aopen + 1, rest.size() - aopen - 2);
  size_t ppos = rpos + aopen + 1;
  if (name == "save") {
    if (a.handler == Action::kOnMatch) return fail("Handler doesn't support action", rpos);
    if (have_save_) return fail("Can't have more than one save() action per hist", rpos);
    have_save_ = true;
    a.kind = Action::kSave;
    if (params.empty()) return fail("No params found for save()", ppos);
  } else if (name == "snapshot") {
    if (a.handler == Action::kOnMatch) return fail("Handler doesn't support action", rpos);
    a.kind = Action::kSnapshot;
    if (!params.empty()) return fail("Invalid action param", ppos);
  } else {
    a.kind = Action::kTrace;
    if (name == "trace") {
      const size_t comma = params.find(',');
      a.synth_pos = ppos;
      const std::string_view synth = params.substr(0, comma);
      if (a.handler != Action::kOnMatch) a.text += "";  // keep the var name in synth_name below
      if (synth.empty()) return fail("Couldn't find synthetic event", ppos);
      if (a.handler == Action::kOnMatch)
        a.synth_name = std::string(synth);
      else
        a.synth_name += "\n" + std::string(synth);  // "var\nsynth": split in resolve_names()
      params = comma == std::string_view::npos ? std::string_view() : params.substr(comma + 1);
      ppos += comma == std::string_view::npos ? synth.size() : comma + 1;
    } else {
      if (a.handler != Action::kOnMatch || !is_ident(name)) return fail("No action found", rpos);
      a.synth_pos = rpos;
      a.synth_name = std::string(name);
    }
  }
  if (!params.empty() && !parse_params(params, ppos, &a)) return false;
  spec_.actions.push_back(std::move(a));
  return true;
}

// An action's params: numeric expressions ($var, fields, constants) or,
// for trace() and save(), string fields of this event.
bool HistParser::parse_params(std::string_view list, size_t pos, Action* a) {
  return for_each_item(list, pos, [&](std::string_view item, size_t p) {
    if (a->params.size() == kMaxParams) return fail("Too many action params", p);
    if (item.empty()) return fail("Invalid action param", p);
    Param pr;
    pr.text = std::string(item);
    if (item == "common_stacktrace" || item == "stacktrace") {
      // The thread's stack when the action runs, for a stack field.
      if (a->kind != Action::kTrace) return fail("Invalid action param", p);
      pr.stack = true;
      spec_.needs_stack = true;
      a->params.push_back(std::move(pr));
      return true;
    }
    if (item.find_first_of("$+-*/()") == std::string_view::npos &&
        !std::isdigit(static_cast<unsigned char>(item[0]))) {
      Field f;
      if (!find_field(item.substr(0, item.find('.')), false, &f)) return fail("Couldn't find param", p);
      if (f.is_string()) {
        size_t strings = 0;
        for (const Param& q : a->params) strings += q.string.is_string() ? 1u : 0u;
        // trace() copies its strings onto the writer's stack.
        if (a->kind == Action::kTrace && strings == kMaxStringParams)
          return fail("Too many string params (4 max)", p);
        if (!parse_field(item, p, false, &pr.string)) return false;
        a->params.push_back(std::move(pr));
        return true;
      }
    }
    if (a->kind == Action::kSave && item.find_first_of("$+-*/()") != std::string_view::npos)
      return fail("Invalid action param", p);
    pr.expr = parse_expr(item, p);
    if (pr.expr < 0) return false;
    a->params.push_back(std::move(pr));
    return true;
  });
}

// After every attribute: $names become own variables or references to
// other histograms' (Histogram::create resolves those), keys=$var take the
// variable's expression, onmax/onchange name an own variable; and the
// per-entry words of the actions are laid out.
bool HistParser::resolve_names() {
  auto own = [&](std::string_view name) -> int {
    for (size_t i = 0; i < spec_.vars.size(); ++i)
      if (spec_.vars[i].name == name) return static_cast<int>(i);
    return -1;
  };
  for (const Pending& pd : pending_) {
    Expr& e = spec_.exprs[static_cast<size_t>(pd.node)];
    const int v = pd.system.empty() ? own(pd.name) : -1;
    if (v >= 0) {
      e.op = Expr::kSelfVar;
      e.index = v;
      e.units = spec_.vars[static_cast<size_t>(v)].units;
      continue;
    }
    if (spec_.refs.size() == kMaxRefs) return fail("Too many variables defined", pd.pos);
    Ref r;
    r.name = pd.name;
    r.system = pd.system;
    r.event = pd.event;
    r.pos = pd.pos;
    e.op = Expr::kRef;
    e.index = static_cast<int>(spec_.refs.size());
    spec_.refs.push_back(std::move(r));
  }
  // Units flow up from variables resolved just now.
  for (Expr& e : spec_.exprs)
    if ((e.op == Expr::kAdd || e.op == Expr::kSub) && e.units == Units::kNone) {
      const Units a = spec_.exprs[static_cast<size_t>(e.a)].units,
                  b = spec_.exprs[static_cast<size_t>(e.b)].units;
      if (a != Units::kNone && b != Units::kNone && a != b)
        return fail("Timestamp units in expression don't match", spec_.cmd_pos);
    }
  // A variable may use another only if that one does not use it back.
  for (size_t i = 0; i < spec_.vars.size(); ++i) {
    std::vector<int> stack{spec_.vars[i].expr};
    size_t steps = 0;
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      if (n < 0) continue;
      if (++steps > kMaxExprs * kMaxVars) return fail("Variable references itself", spec_.cmd_pos);
      const Expr& e = spec_.exprs[static_cast<size_t>(n)];
      if (e.op == Expr::kSelfVar) {
        if (static_cast<size_t>(e.index) == i) return fail("Variable references itself", spec_.cmd_pos);
        stack.push_back(spec_.vars[static_cast<size_t>(e.index)].expr);
      }
      stack.push_back(e.a);
      stack.push_back(e.b);
    }
  }
  for (auto [k, p] : key_vars_) {
    Field& f = spec_.keys[k];
    const int v = own(f.name);
    if (v < 0) return fail("Couldn't find variable", p);
    // The key is computed before any variable: it may read fields only.
    std::vector<int> stack{spec_.vars[static_cast<size_t>(v)].expr};
    while (!stack.empty()) {
      const int n = stack.back();
      stack.pop_back();
      if (n < 0) continue;
      const Expr& e = spec_.exprs[static_cast<size_t>(n)];
      if (e.op == Expr::kSelfVar || e.op == Expr::kRef)
        return fail("Using variable references in keys not supported", p);
      stack.push_back(e.a);
      stack.push_back(e.b);
    }
    f.expr = spec_.vars[static_cast<size_t>(v)].expr;
  }
  for (auto [ai, p] : track_vars_) {
    Action& a = spec_.actions[ai];
    std::string var = a.synth_name, synth;
    if (const size_t nl = var.find('\n'); nl != std::string::npos) {
      synth = var.substr(nl + 1);
      var = var.substr(0, nl);
    }
    a.track_var = own(var);
    if (a.track_var < 0) return fail("Couldn't find onmax or onchange variable", p);
    a.synth_name = synth;
  }
  // Per-entry words: each onmax/onchange keeps its value and a flag word
  // (bit 0: set; bit 1: a writer is updating it), then what save() keeps.
  uint32_t words = 0;
  for (Action& a : spec_.actions) {
    if (a.handler == Action::kOnMatch) continue;
    a.aux = words;
    words += 2;
    if (a.kind == Action::kSave)
      for (const Param& pr : a.params) words += pr.string.is_string() ? kSavedString / 8 : 1;
  }
  spec_.aux_words = words;
  return true;
}

}  // namespace

bool parse_hist_command(const EventDesc& ev, std::string_view cmd, HistSpec* spec, Error* err) {
  return HistParser(ev, spec, err).parse(cmd);
}

}  // namespace usrtrace::hist
