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
        ok = !is_key && numeric;
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
    key_size += k.is_string() ? (k.size + 7u) & ~7u : 8u;
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

  const EventDesc& ev_;
  HistSpec& spec_;
  Error* const err_;
  bool have_keys_ = false;
  // sort= items and their positions, kept for create_sort_keys(): a sort key
  // may name a value that a later vals= adds.
  std::vector<std::pair<std::string_view, size_t>> sort_items_;
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
    if (spec_.vals.size() == kMaxVals) return fail("Too many values", p);
    Field f;
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
      case FieldKind::kByteArray:
      case FieldKind::kDynBytes:
        return false;
      default:
        f->src = Src::kInt;
        f->offset = fd->offset;
        f->size = fd->size;
        f->is_signed = fd->is_signed;
    }
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

}  // namespace

bool parse_hist_command(const EventDesc& ev, std::string_view cmd, HistSpec* spec, Error* err) {
  return HistParser(ev, spec, err).parse(cmd);
}

}  // namespace usrtrace::hist
