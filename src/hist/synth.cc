// Synthetic events (synth.h). Kernel: trace_events_synth.c
// (create_or_delete_synth_event(), __create_synth_event(),
// parse_synth_field(), synth_field_size(), __set_synth_event_print_fmt(),
// print_synth_event(), trace_string(), trace_stack(), synth_event_show()).
//
// A definition, worked (the numbers are the steps in the code):
//
//   "wakeup_latency  u64 lat; pid_t pid;int prio;"
//   [1] check_command(): the first ';'-segment has >= 3 words
//       ("wakeup_latency", "u64", "lat"), or the line starts with '!'
//   [2] the name is up to the first blank: "wakeup_latency" (a good name,
//       not defined yet: the caret of those errors is under it)
//   [3] the rest is cut at each ';' and each piece into words; empty
//       pieces are skipped (a trailing ';' is fine); a piece may hold more
//       than one TYPE NAME pair, the kernel's old syntax
//   [4] a field is TYPE NAME, or `unsigned` TYPE NAME; an array suffix on
//       the name moves to the type ("char comm[16]" is "char[16] comm")
//   [5] the type is sized (synth_field_size()): a number, char[N] (N <= 256;
//       char[] and char[0]: a dynamic string), long[] / unsigned long[] (a
//       stack); the layout and print fmt follow from the sizes
//
// Lifetime: an Event is created and registered under the module's lock,
// its printer published by its id. Removal unlinks it and unpublishes the
// printer under the lock, then unregisters the desc outside it (the
// registry's remove hooks take the trigger lock, and the hist engine calls
// find_and_hold() with that lock held). The Event is freed with its last
// shared_ptr; a printer that loaded its pointer just before the unpublish
// may still read it (the same window as a probe's, probe/fetch.cc).
#include "hist/synth.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/compiler.h"
#include "base/mutex.h"
#include "events/registry.h"

namespace usrtrace::hist::synth {
namespace {

// ---- Errors: the kernel's SYNTH_ERRORS, in its order.

enum class Err : uint8_t {
  kBadName,
  kInvalidCmd,
  kInvalidDynCmd,
  kEventExists,
  kTooManyFields,
  kIncompleteType,
  kInvalidType,
  kInvalidField,
  kInvalidArraySpec,
};

constexpr const char* kErrText[] = {
    "Illegal name",
    "Command must be of the form: <name> field[;field] ...",
    "Command must be of the form: s or -:[synthetic/]<name> field[;field] ...",
    "Event already exists",
    "Too many fields",
    "Incomplete type",
    "Invalid type",
    "Invalid field",
    "Invalid array specification",
};
static_assert(sizeof kErrText / sizeof kErrText[0] == static_cast<size_t>(Err::kInvalidArraySpec) + 1);

int fail(Error* e, Err err, size_t pos, int errnum = EINVAL) {
  e->text = kErrText[static_cast<size_t>(err)];
  e->pos = pos;
  return -errnum;
}

// A failure the kernel does not log (no such event, busy).
int fail_quiet(Error* e, int errnum) {
  e->text.clear();
  e->pos = 0;
  return -errnum;
}

// ---- Words.

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// trace_probe.h's is_good_name(): [A-Za-z_][A-Za-z0-9_]*.
bool good_name(std::string_view s) {
  if (s.empty() || !(is_alpha(s[0]) || s[0] == '_')) return false;
  for (char c : s)
    if (!(is_alpha(c) || is_digit(c) || c == '_')) return false;
  return true;
}

struct Word {
  std::string_view s;
  size_t pos;  // in the command
};

// argv_split(): the blank-separated words of cmd[from, to).
std::vector<Word> words(std::string_view cmd, size_t from, size_t to) {
  std::vector<Word> out;
  size_t i = from;
  while (i < to) {
    while (i < to && is_blank(cmd[i])) ++i;
    if (i == to) break;
    const size_t start = i;
    while (i < to && !is_blank(cmd[i])) ++i;
    out.push_back({cmd.substr(start, i - start), start});
  }
  return out;
}

size_t skip_blanks(std::string_view s, size_t i) {
  while (i < s.size() && is_blank(s[i])) ++i;
  return i;
}

// ---- Types.

enum class Kind : uint8_t { kNumber, kChars, kString, kStack };
enum class Fmt : uint8_t { kU64, kS64, kU32, kS32, kStr, kArray };

struct Numeric {
  const char* type;
  uint16_t size;
  Fmt fmt;
};

// synth_field_size() and synth_field_fmt(), for the types we take: the
// kernel's but gfp_t (its flag names are the kernel's). long is 8 bytes
// here as there; its %ld prints what %lld does.
constexpr Numeric kNumerics[] = {
    {"s64", 8, Fmt::kS64},  {"u64", 8, Fmt::kU64},
    {"s32", 4, Fmt::kS32},  {"u32", 4, Fmt::kU32},
    {"s16", 2, Fmt::kS32},  {"u16", 2, Fmt::kU32},
    {"s8", 1, Fmt::kS32},   {"u8", 1, Fmt::kU32},
    {"char", 1, Fmt::kS32}, {"unsigned char", 1, Fmt::kU32},
    {"int", 4, Fmt::kS32},  {"unsigned int", 4, Fmt::kU32},
    {"long", 8, Fmt::kS64}, {"unsigned long", 8, Fmt::kU64},
    {"bool", 1, Fmt::kU32}, {"pid_t", 4, Fmt::kS32},
};

const char* fmt_text(Fmt f) {
  switch (f) {
    case Fmt::kU64:
      return "%llu";
    case Fmt::kS64:
      return "%lld";
    case Fmt::kU32:
      return "%u";
    case Fmt::kS32:
      return "%d";
    default:
      return "%s";
  }
}

// kstrtouint(s, 0): an optional '+', then 0x-hex, 0-octal or decimal
// digits, all of them. false if not a number or too large.
bool parse_uint(std::string_view s, unsigned* out) {
  size_t i = 0;
  if (i < s.size() && s[i] == '+') ++i;
  unsigned base = 10;
  if (i < s.size() && s[i] == '0') {
    base = 8;
    if (i + 2 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X') &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      base = 16;
      i += 2;
    }
  }
  if (i == s.size()) return false;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    unsigned d;
    if (is_digit(c))
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<unsigned>(c - 'A' + 10);
    else
      return false;
    if (d >= base) return false;
    v = v * base + d;
    if (v > 0xffffffffu) return false;
  }
  *out = static_cast<unsigned>(v);
  return true;
}

// A field as parsed, with what the layout needs.
struct Field {
  FieldSpec spec;
  Kind kind = Kind::kNumber;
  Fmt fmt = Fmt::kU64;
};

// [5] The type `t` (prefix, type word and array suffix put together),
// sized. 0 and *f filled, or <0: -1 a bad array specification, -2 an
// invalid type.
int size_type(const std::string& t, Field* f) {
  FieldSpec& s = f->spec;
  for (const Numeric& n : kNumerics) {
    if (t != n.type) continue;
    s.type = t;
    s.size = n.size;
    f->kind = Kind::kNumber;
    f->fmt = n.fmt;
    return 0;
  }
  const size_t open = t.find('[');
  if (open == std::string::npos) return -2;
  const std::string_view base = std::string_view(t).substr(0, open);
  const size_t close = t.find(']', open);
  if (close == std::string::npos || close + 1 != t.size()) return -1;  // synth_field_string_size()'s check
  const std::string_view inside = std::string_view(t).substr(open + 1, close - open - 1);
  if (base == "char" || base == "unsigned char") {
    // synth_field_string_size(): at most 3 characters, kstrtouint, <= 256.
    unsigned n = 0;
    if (inside.size() > 3 || (!inside.empty() && (!parse_uint(inside, &n) || n > kMaxStringLen))) return -1;
    s.is_string = true;
    f->fmt = Fmt::kStr;
    if (n == 0) {  // char[] and char[0]: a dynamic string
      s.type = std::string(base) + "[]";
      s.size = 0;
      f->kind = Kind::kString;
    } else {
      s.type = std::string(base) + "[" + std::to_string(n) + "]";
      s.size = static_cast<uint16_t>(n);
      f->kind = Kind::kChars;
    }
    return 0;
  }
  if (base == "long" || base == "unsigned long") {
    // synth_field_is_stack(); the kernel takes anything in the brackets.
    if (!inside.empty()) return -1;
    s.type = t;
    s.size = 0;
    s.is_stack = true;
    f->kind = Kind::kStack;
    f->fmt = Fmt::kArray;
    return 0;
  }
  return -2;
}

// The type as the format file gives it: "__data_loc " before a dynamic one.
std::string format_type(const Field& f) {
  return f.kind == Kind::kString || f.kind == Kind::kStack ? "__data_loc " + f.spec.type : f.spec.type;
}

// [4] parse_synth_field(): the field at w[i], *used the words it took.
int parse_field(const std::vector<Word>& w, size_t i, size_t* used, Field* f, Error* e) {
  const size_t left = w.size() - i;
  Word type = w[i], name{};
  bool is_unsigned = false;
  if (type.s == "unsigned") {
    if (left < 3) return fail(e, Err::kIncompleteType, type.pos);
    is_unsigned = true;
    type = w[i + 1];
    name = w[i + 2];
    *used = 3;
  } else {
    if (left < 2) return fail(e, Err::kInvalidField, type.pos);
    name = w[i + 1];
    *used = 2;
  }
  const size_t bracket = name.s.find('[');
  const std::string_view array =
      bracket == std::string_view::npos ? std::string_view() : name.s.substr(bracket);
  const std::string_view fname = name.s.substr(0, bracket);
  if (!good_name(fname)) return fail(e, Err::kBadName, name.pos);
  std::string full = is_unsigned ? "unsigned " : "";
  full.append(type.s).append(array);
  f->spec.name = std::string(fname);
  const int rc = size_type(full, f);
  if (rc == -1 && !array.empty()) return fail(e, Err::kInvalidArraySpec, name.pos);
  if (rc < 0) return fail(e, Err::kInvalidType, type.pos);
  // synth_field_signed(): the kernel's type text does not start with 'u'.
  f->spec.is_signed = format_type(*f)[0] != 'u';
  return 0;
}

// [3] The fields of cmd[from, end): 0, or -errno with *e.
int parse_fields(std::string_view cmd, size_t from, std::vector<Field>* out, Error* e) {
  size_t at = from;
  while (at <= cmd.size()) {
    size_t semi = cmd.find(';', at);
    if (semi == std::string_view::npos) semi = cmd.size();
    const std::vector<Word> w = words(cmd, at, semi);
    for (size_t i = 0; i < w.size();) {
      Field f;
      size_t used = 0;
      if (int rc = parse_field(w, i, &used, &f, e); rc < 0) return rc;
      if (out->size() == kMaxFields) return fail(e, Err::kTooManyFields, 0);
      out->push_back(std::move(f));
      i += used;
    }
    at = semi + 1;
  }
  if (out->empty()) return fail(e, Err::kInvalidCmd, 0);
  return 0;
}

// The module's lock: the list of events, their hold counts.
base::Mutex& mu() {
  static base::Mutex* m = new base::Mutex();
  return *m;
}

}  // namespace

// ---- The event.

class Event {
 public:
  Event(std::string name, std::vector<Field> fields);
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  struct Slot {
    uint16_t offset;  // in the record
    uint16_t size;    // a number's bytes, char[N]'s N
    Kind kind;
    Fmt fmt;
  };

  std::string name_;
  std::vector<FieldSpec> specs_;
  // What trace() and the printer read: a fixed array, no allocation.
  Slot slots_[kMaxFields] = {};
  size_t nfields_ = 0;
  uint16_t fixed_size_ = 0;
  std::vector<std::string> types_;  // the FieldDescs' type texts
  std::vector<internal::FieldDesc> descs_;
  std::string print_fmt_;
  internal::EventDesc desc_{};
  int held_ USRTRACE_GUARDED_BY(mu()) = 0;  // hold()'s count
  // In the list of defined events. order: written under mu(), read by
  // defined() without it (relaxed: a hint).
  std::atomic<bool> defined_{false};
};

namespace {

constexpr uint32_t kHeader = sizeof(internal::CommonHeader);

uint16_t round8(uint32_t n) { return static_cast<uint16_t>((n + 7) & ~7u); }

// Whether the fixed part of a record of these fields fits a record.
uint32_t fixed_size_of(const std::vector<Field>& fields) {
  uint32_t size = kHeader;
  for (const Field& f : fields) size += f.kind == Kind::kChars ? uint32_t{round8(f.spec.size)} : 8u;
  return size;
}

// The PrintFn of every synthetic event (below).
int print_event(const void* rec, uint32_t len, char* buf, size_t size);

}  // namespace

Event::Event(std::string name, std::vector<Field> fields) : name_(std::move(name)) {
  nfields_ = fields.size();
  types_.reserve(nfields_);
  descs_.reserve(nfields_);
  specs_.reserve(nfields_);
  uint32_t off = kHeader;
  std::string fmt = "\"", args;
  for (size_t i = 0; i < nfields_; ++i) {
    const Field& f = fields[i];
    specs_.push_back(f.spec);
    const std::string& n = f.spec.name;
    Slot& s = slots_[i];
    s.offset = static_cast<uint16_t>(off);
    s.size = f.spec.size;
    s.kind = f.kind;
    s.fmt = f.fmt;
    internal::FieldDesc d{
        nullptr, nullptr, s.offset, f.spec.size, 0, f.spec.is_signed, internal::FieldKind::kInteger};
    switch (f.kind) {
      case Kind::kNumber:
        types_.push_back(f.spec.type);
        if (f.spec.type == "bool") d.kind = internal::FieldKind::kBool;
        args += ", REC->" + n;
        off += 8;
        break;
      case Kind::kChars:
        // "char comm[16]": the kernel's format says "char[16] comm", which
        // libtraceevent reads too but our trace.dat filter does not.
        types_.push_back(f.spec.type.substr(0, f.spec.type.find('[')));
        d.kind = internal::FieldKind::kCharArray;
        d.array_len = f.spec.size;
        args += ", REC->" + n;
        off += round8(f.spec.size);
        break;
      case Kind::kString:
        types_.push_back(format_type(f));
        d.size = 8;  // the kernel's: the slot
        d.kind = internal::FieldKind::kString;
        args += ", __get_str(" + n + ")";
        off += 8;
        break;
      case Kind::kStack:
        types_.push_back(format_type(f));
        d.size = 8;
        d.kind = internal::FieldKind::kDynBytes;
        // The kernel's "%s" of __get_stacktrace() is not known to
        // libtraceevent (the event would not parse); __print_array() is,
        // and prints the addresses in decimal, one space apart.
        args += ", __print_array(__get_dynamic_array(" + n + "), __get_dynamic_array_len(" + n + ") / 8, 8)";
        off += 8;
        break;
    }
    descs_.push_back(d);
    // __set_synth_event_print_fmt(), the fields one space apart as
    // print_synth_event() prints them (the kernel's print fmt has ", ").
    fmt += (i ? " " : "") + n + "=" + fmt_text(f.fmt);
  }
  print_fmt_ = fmt + "\"" + args;
  fixed_size_ = static_cast<uint16_t>(off);
  for (size_t i = 0; i < nfields_; ++i) {
    descs_[i].name = specs_[i].name.c_str();
    descs_[i].type = types_[i].c_str();
  }
  desc_.system = kSystem;
  desc_.name = name_.c_str();
  desc_.print_fmt = print_fmt_.c_str();
  desc_.fields = descs_.data();
  desc_.nfields = static_cast<uint16_t>(nfields_);
  desc_.fixed_size = fixed_size_;
  desc_.print = print_event;
}

namespace {

// The defined events, oldest first (the kernel's dyn_event list order).
std::vector<std::shared_ptr<Event>>& defined_events() USRTRACE_REQUIRES(mu()) {
  static auto* v = new std::vector<std::shared_ptr<Event>>();
  return *v;
}

// The printer finds its event here by the record's type (a PrintFn has no
// context): set once the registry gave the event its id, cleared before
// it is unregistered.
std::atomic<const Event*> g_by_id[65536];

std::atomic<BusyHook> g_busy_hook{nullptr};

Event* find_locked(std::string_view name) USRTRACE_REQUIRES(mu()) {
  for (const auto& e : defined_events())
    if (e->name_ == name) return e.get();
  return nullptr;
}

// Busy by what this module and the instances know: held by a hist
// trigger, or enabled in an instance (the control bit is filters and
// triggers on the event itself, which go with it).
bool busy_locked(const Event& e) USRTRACE_REQUIRES(mu()) {
  const uint64_t instances =
      e.desc_.enabled.load(std::memory_order_relaxed) & ~(uint64_t{1} << internal::kControlBit);
  return e.held_ > 0 || instances != 0;
}

// The level above's view (an enable_event trigger names it). Called
// without mu(): the hook takes the trigger lock.
bool busy_above(const Event& e) {
  // order: acquire pairs with set_busy_hook's release.
  BusyHook hook = g_busy_hook.load(std::memory_order_acquire);
  return hook != nullptr && hook(e.desc_);
}

// Unlinks defined_events()[i]; its printer is unpublished. The caller
// unregisters it (finish()) after letting mu() go.
std::shared_ptr<Event> unlink_at(size_t i) USRTRACE_REQUIRES(mu()) {
  auto& v = defined_events();
  std::shared_ptr<Event> e = std::move(v[i]);
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
  // order: relaxed; a hint for holders (trace() checks the enable word).
  e->defined_.store(false, std::memory_order_relaxed);
  // order: release pairs with print_event()'s acquire.
  g_by_id[e->desc_.id].store(nullptr, std::memory_order_release);
  return e;
}

// Unregisters an unlinked event: its files go, its filters and triggers
// (and those naming it) with them, its enable bits are cleared.
// Context: control plane; not under mu().
void finish(const std::shared_ptr<Event>& e) { events::Registry::get().remove(&e->desc_); }

bool same_fields(const std::vector<FieldSpec>& a, const std::vector<Field>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].spec.name || a[i].type != b[i].spec.type) return false;
  return true;
}

// A definition: `name` at name_pos of cmd, its fields from fields_at.
int create(std::string_view cmd, std::string_view name, size_t name_pos, size_t fields_at, Error* e) {
  if (name.empty()) return fail(e, Err::kInvalidCmd, 0);
  if (!good_name(name)) return fail(e, Err::kBadName, name_pos);  // [2]
  base::MutexLock l(&mu());
  // An event of another kind may have taken the name (a probe's
  // synthetic/NAME): the kernel refuses one event name twice in a system.
  if (find_locked(name) != nullptr || events::Registry::get().find(kSystem, name) != nullptr)
    return fail(e, Err::kEventExists, name_pos, EEXIST);
  std::vector<Field> fields;
  if (int rc = parse_fields(cmd, fields_at, &fields, e); rc < 0) return rc;
  // Ours: the fixed part must fit a record (32 char[256] would not).
  if (fixed_size_of(fields) > internal::kMaxRecord) return fail(e, Err::kTooManyFields, 0);
  auto ev = std::make_shared<Event>(std::string(name), std::move(fields));
  events::Registry::get().add(&ev->desc_);
  // order: release publishes the event's contents to print_event().
  g_by_id[ev->desc_.id].store(ev.get(), std::memory_order_release);
  ev->defined_.store(true, std::memory_order_relaxed);
  defined_events().push_back(std::move(ev));
  return 0;
}

// A removal: `name`, and the fields from fields_at if any are given.
int remove(std::string_view cmd, std::string_view name, size_t fields_at, Error* e) {
  if (skip_blanks(cmd, fields_at) < cmd.size()) {
    std::vector<Field> want;
    if (int rc = parse_fields(cmd, fields_at, &want, e); rc < 0) return rc;
    std::shared_ptr<Event> ev = find(name);
    if (ev == nullptr || !same_fields(ev->specs_, want)) return fail_quiet(e, ENOENT);
  }
  std::shared_ptr<Event> ev = find(name);
  if (ev == nullptr) return fail_quiet(e, ENOENT);
  if (busy_above(*ev)) return fail_quiet(e, EBUSY);
  std::shared_ptr<Event> gone;
  {
    base::MutexLock l(&mu());
    auto& v = defined_events();
    size_t i = 0;
    while (i < v.size() && v[i] != ev) ++i;
    if (i == v.size()) return fail_quiet(e, ENOENT);  // removed meanwhile
    if (busy_locked(*ev)) return fail_quiet(e, EBUSY);
    gone = unlink_at(i);
  }
  finish(gone);
  return 0;
}

// create_or_delete_synth_event(): one synthetic_events command, its
// leading blanks and comment gone.
int run_command(std::string_view cmd, Error* e) {
  e->command = std::string(cmd);
  if (cmd.empty()) return 0;
  // [1] check_command().
  if (cmd[0] != '!' && words(cmd, 0, std::min(cmd.find(';'), cmd.size())).size() < 3)
    return fail(e, Err::kInvalidCmd, 0);
  size_t name_end = 0;
  while (name_end < cmd.size() && !is_blank(cmd[name_end])) ++name_end;
  const std::string_view name = cmd.substr(0, name_end);
  if (name[0] == '!') return remove(cmd, name.substr(1), name_end, e);
  return create(cmd, name, 0, skip_blanks(cmd, name_end), e);
}

// The listing of one event's fields (__synth_event_show()): "u64 lat; pid_t pid".
std::string fields_text(const Event& ev) {
  std::string out;
  for (size_t i = 0; i < ev.specs_.size(); ++i) {
    if (i) out += "; ";
    out += ev.specs_[i].type + " " + ev.specs_[i].name;
  }
  return out;
}

// ---- The `trace` text (print_synth_event()).

class Out {
 public:
  Out(char* buf, size_t size) : buf_(buf), size_(size) {
    if (size_ > 0) buf_[0] = '\0';
  }
  void put(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf_ + std::min(len_, size_), len_ < size_ ? size_ - len_ : 0, fmt, ap);
    va_end(ap);
    if (n > 0) len_ += static_cast<size_t>(n);
  }
  int len() const { return static_cast<int>(len_); }

 private:
  char* buf_;
  size_t size_;
  size_t len_ = 0;
};

// A __data_loc's bytes, or nullptr when it points outside the record (a
// record is never trusted).
const uint8_t* data_at(const uint8_t* rec, uint32_t len, const uint8_t* slot, uint32_t* n) {
  uint32_t loc;
  std::memcpy(&loc, slot, 4);
  const uint32_t off = loc & 0xffff;
  *n = loc >> 16;
  return off + *n <= len ? rec + off : nullptr;
}

int print_fields(const Event& ev, const uint8_t* rec, uint32_t len, char* buf, size_t size) {
  Out o(buf, size);
  for (size_t i = 0; i < ev.nfields_; ++i) {
    const Event::Slot& s = ev.slots_[i];
    const uint32_t slot_len = s.kind == Kind::kNumber || s.kind == Kind::kChars ? s.size : 4u;
    if (uint32_t{s.offset} + slot_len > len) break;
    const uint8_t* p = rec + s.offset;
    o.put("%s%s=", i ? " " : "", ev.specs_[i].name.c_str());
    switch (s.kind) {
      case Kind::kNumber: {
        // The value as its size's unsigned, printed with the field's
        // format, as the kernel (print_synth_event_num_val()) and
        // libtraceevent print it: an s8 of -5 is 251 with %d in both.
        uint64_t v = 0;
        std::memcpy(&v, p, s.size);
        switch (s.fmt) {
          case Fmt::kU64:
            o.put("%llu", static_cast<unsigned long long>(v));
            break;
          case Fmt::kS64:
            o.put("%lld", static_cast<long long>(v));
            break;
          case Fmt::kU32:
            o.put("%u", static_cast<unsigned>(v));
            break;
          default:
            o.put("%d", static_cast<int>(static_cast<uint32_t>(v)));
            break;
        }
        break;
      }
      case Kind::kChars: {
        const char* c = reinterpret_cast<const char*>(p);
        o.put("%.*s", static_cast<int>(strnlen(c, s.size)), c);
        break;
      }
      case Kind::kString: {
        uint32_t n = 0;
        const uint8_t* d = data_at(rec, len, p, &n);
        if (d != nullptr && n > 0) {
          const char* c = reinterpret_cast<const char*>(d);
          o.put("%.*s", static_cast<int>(strnlen(c, n)), c);
        }
        break;
      }
      case Kind::kStack: {
        uint32_t n = 0;
        const uint8_t* d = data_at(rec, len, p, &n);
        for (uint32_t k = 0; d != nullptr && k + 8 <= n; k += 8) {
          uint64_t a;
          std::memcpy(&a, d + k, 8);
          o.put("%s%" PRIu64, k ? " " : "", a);
        }
        break;
      }
    }
  }
  return o.len();
}

int print_event(const void* rec, uint32_t len, char* buf, size_t size) {
  internal::CommonHeader hdr;
  if (len < sizeof hdr) return 0;
  std::memcpy(&hdr, rec, sizeof hdr);
  // order: acquire pairs with create()'s release: the event is built.
  const Event* ev = g_by_id[hdr.type].load(std::memory_order_acquire);
  if (ev == nullptr) {
    if (size > 0) buf[0] = '\0';
    return 0;
  }
  return print_fields(*ev, static_cast<const uint8_t*>(rec), len, buf, size);
}

}  // namespace

// ---- The interface.

std::shared_ptr<Event> find(std::string_view name) {
  base::MutexLock l(&mu());
  for (const auto& e : defined_events())
    if (e->name_ == name) return e;
  return nullptr;
}

std::shared_ptr<Event> find_and_hold(std::string_view name) {
  base::MutexLock l(&mu());
  for (const auto& e : defined_events()) {
    if (e->name_ != name) continue;
    ++e->held_;
    return e;
  }
  return nullptr;
}

const std::vector<FieldSpec>& fields(const Event& e) { return e.specs_; }
const std::string& name(const Event& e) { return e.name_; }
internal::EventDesc& desc(Event& e) { return e.desc_; }
bool defined(const Event& e) { return e.defined_.load(std::memory_order_relaxed); }

void hold(Event& e, int delta) {
  base::MutexLock l(&mu());
  e.held_ += delta;
  USRTRACE_CHECK(e.held_ >= 0);
}

void trace(const Event& e, const uint64_t* vals, size_t n) {
  const internal::EventDesc& d = e.desc_;
  if (n != e.nfields_) return;
  // order: relaxed is enough; the enabled word is a soft switch, as at
  // every call site (the upper half of a typed event).
  if (USRTRACE_LIKELY(d.enabled.load(std::memory_order_relaxed) == 0)) return;
  alignas(8) char rec[internal::kMaxRecord];
  static_assert(internal::kMaxRecord % 4 == 0, "pad_record() stays inside rec");
  std::memset(rec, 0, e.fixed_size_);
  const uint64_t hdr = d.id;  // the type; write_event fills the rest
  std::memcpy(rec, &hdr, sizeof hdr);
  uint32_t end = e.fixed_size_;
  static constexpr char kFault[] = "(fault)";
  for (size_t i = 0; i < n; ++i) {
    const Event::Slot& s = e.slots_[i];
    char* dst = rec + s.offset;
    switch (s.kind) {
      case Kind::kNumber:
        std::memcpy(dst, &vals[i], s.size);  // little-endian: the low bytes
        break;
      case Kind::kChars: {
        // At most N-1 bytes: the slot was zeroed, so the string ends in it.
        const char* str = reinterpret_cast<const char*>(vals[i]);
        if (str == nullptr) str = kFault;
        std::memcpy(dst, str, strnlen(str, s.size - 1u));
        break;
      }
      case Kind::kString: {
        const char* str = reinterpret_cast<const char*>(vals[i]);
        if (str == nullptr) str = kFault;
        const uint32_t room = internal::kMaxRecord - end;
        uint32_t loc = end;  // length 0 when nothing fits
        if (room > 0) {
          const size_t len = strnlen(str, std::min<size_t>(kMaxStringLen - 1, room - 1));
          std::memcpy(rec + end, str, len);
          rec[end + len] = '\0';
          const auto stored = static_cast<uint32_t>(len + 1);
          loc = (stored << 16) | end;
          end += stored;
        }
        std::memcpy(dst, &loc, sizeof loc);
        break;
      }
      case Kind::kStack: {
        const auto* frames = reinterpret_cast<const uint64_t*>(vals[i]);
        uint64_t count = frames != nullptr ? std::min<uint64_t>(frames[0], kMaxStackDepth) : 0;
        count = std::min<uint64_t>(count, (internal::kMaxRecord - end) / 8);
        const auto bytes = static_cast<uint32_t>(count * 8);
        if (bytes > 0) std::memcpy(rec + end, frames + 1, bytes);
        const uint32_t loc = (bytes << 16) | end;
        end += bytes;
        std::memcpy(dst, &loc, sizeof loc);
        break;
      }
    }
  }
  const uint32_t len = internal::pad_record(rec, end);
  internal::write_event(&d, rec, len);
}

int write_text(std::string_view text, Error* e, size_t* line_at) {
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(at, nl - at);
    // trace_parse_run_command(): the comment goes; create_or_delete_synth_event()
    // skips the leading blanks.
    line = line.substr(0, line.find('#'));
    const size_t lead = skip_blanks(line, 0);
    if (int rc = run_command(line.substr(lead), e); rc < 0) {
      if (line_at != nullptr) *line_at = at + lead;
      return rc;
    }
    at = nl + 1;
  }
  return 0;
}

std::string events_text() {
  base::MutexLock l(&mu());
  std::string out;
  for (const auto& ev : defined_events()) out += ev->name_ + "\t" + fields_text(*ev) + "\n";
  return out;
}

int write_dynamic(std::string_view line, Error* e) {
  line = line.substr(0, line.find('#'));
  const std::string_view cmd = line.substr(skip_blanks(line, 0));
  e->command = std::string(cmd);
  if (cmd.empty()) return 0;
  if (cmd.size() < 2 || (cmd[0] != 's' && cmd[0] != '-') || cmd[1] != ':')
    return fail(e, Err::kInvalidDynCmd, 0);
  // create_synth_event() / dyn_event_release(): "s:[synthetic/]NAME FIELDS".
  size_t name_end = 2;
  while (name_end < cmd.size() && !is_blank(cmd[name_end])) ++name_end;
  if (cmd[0] == 's' && name_end == cmd.size()) return fail(e, Err::kInvalidCmd, 0);
  size_t name_at = 2;
  const std::string_view full = cmd.substr(2, name_end - 2);
  if (const size_t slash = full.find('/'); slash != std::string_view::npos) {
    if (full.substr(0, slash) != kSystem) return fail(e, Err::kInvalidDynCmd, 0);
    name_at += slash + 1;
  }
  const std::string_view name = cmd.substr(name_at, name_end - name_at);
  if (cmd[0] == '-') {
    if (name.empty()) return fail_quiet(e, EINVAL);
    return remove(cmd, name, name_end, e);
  }
  if (words(cmd, name_at, std::min(cmd.find(';'), cmd.size())).size() < 3)
    return fail(e, Err::kInvalidCmd, 0);
  return create(cmd, name, name_at, skip_blanks(cmd, name_end), e);
}

std::string dynamic_text() {
  base::MutexLock l(&mu());
  std::string out;
  for (const auto& ev : defined_events())
    out += std::string("s:") + kSystem + "/" + ev->name_ + "\t" + fields_text(*ev) + "\n";
  return out;
}

bool any_busy() {
  std::vector<std::shared_ptr<Event>> all;
  {
    base::MutexLock l(&mu());
    for (const auto& ev : defined_events())
      if (busy_locked(*ev)) return true;
    all = defined_events();
  }
  for (const auto& ev : all)
    if (busy_above(*ev)) return true;
  return false;
}

int clear_all() {
  if (any_busy()) return -EBUSY;
  std::vector<std::shared_ptr<Event>> gone;
  {
    base::MutexLock l(&mu());
    for (const auto& ev : defined_events())
      if (busy_locked(*ev)) return -EBUSY;
    while (!defined_events().empty()) gone.push_back(unlink_at(defined_events().size() - 1));
  }
  for (const auto& ev : gone) finish(ev);
  return 0;
}

size_t count() {
  base::MutexLock l(&mu());
  return defined_events().size();
}

void set_busy_hook(BusyHook hook) {
  // order: release pairs with busy_above()'s acquire.
  g_busy_hook.store(hook, std::memory_order_release);
}

}  // namespace usrtrace::hist::synth
