#include "tep_session.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// LeakSanitizer's built-in suppressions for this program (read only by an
// ASan build). libtraceevent 1.7.1 (Debian 12) loses a 2-byte strdup inside
// tep_parse_event() on some of the kernel 6.18 event formats that trace-cmd
// saves in every file it writes; the allocation is libtraceevent's own, and
// without this every report of such a file under ASan exits 1. Only stacks
// through tep_parse_event are silenced: a tep handle we forget to free is still
// reported from tep_alloc().
extern "C" const char* __lsan_default_suppressions();  // NOLINT(bugprone-reserved-identifier)
extern "C" __attribute__((used)) const char*
__lsan_default_suppressions() {  // NOLINT(bugprone-reserved-identifier)
  return "leak:tep_parse_event\n";
}
// ... and without the "Suppressions used" table on stderr at every exit.
extern "C" const char* __lsan_default_options();  // NOLINT(bugprone-reserved-identifier)
extern "C" __attribute__((used)) const char*
__lsan_default_options() {  // NOLINT(bugprone-reserved-identifier)
  return "print_suppressions=0";
}

namespace usrtrace::tool {

namespace {

// The printk_formats lines ("ADDR : FORMAT") that libtraceevent 1.7 reads
// within them: tep_parse_printk_formats() takes the format from two bytes
// past the line's first ':', wherever the line ends, and read past its own
// copy of the text on a last line without one (report_fuzzer found it).
std::string printk_lines(const std::string& all) {
  const std::string text = all.substr(0, all.find('\0'));  // as libtraceevent sees it
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const size_t colon = text.find(':', pos);
    if (text[pos] != ':' && colon < nl && colon + 1 < nl) out.append(text, pos, nl - pos).push_back('\n');
    pos = nl + 1;
  }
  return out;
}

// What an event's print format computes from a record, libtraceevent 1.7
// uses unchecked: a divisor (SIGFPE at 0: report_fuzzer found it), the
// length of __print_hex or __print_array, an index into a field (a read
// anywhere). print_safe() accepts divisors that are non-zero constants,
// and lengths and indexes that are at most kMaxCount whatever the record
// (a constant, a u8 or u16 field, a dynamic array's length, such a value
// over a constant), so that every read stays within make_record's copy;
// another format prints raw. Of a 6.18 kernel's 2323 formats, two do
// (ras:non_standard_event and ras:arm_event: __print_hex with a u32 length).
constexpr uint64_t kMaxCount = 0xffff;
constexpr int kMaxArgDepth = 64;  // deeper than any format's expression

bool constant(const tep_print_arg* a, uint64_t* v, int depth) {
  if (a == nullptr || depth > kMaxArgDepth) return false;
  uint64_t l, r;
  switch (a->type) {
    case TEP_PRINT_ATOM:
      if (a->atom.atom == nullptr) return false;
      *v = std::strtoull(a->atom.atom, nullptr, 0);  // as libtraceevent evaluates it
      return true;
    case TEP_PRINT_TYPE:
      return constant(a->typecast.item, v, depth + 1);
    case TEP_PRINT_OP:
      if (a->op.op == nullptr || !constant(a->op.left, &l, depth + 1) ||
          !constant(a->op.right, &r, depth + 1))
        return false;
      if (std::strcmp(a->op.op, "*") == 0) {
        *v = l * r;
      } else if (std::strcmp(a->op.op, "+") == 0) {
        *v = l + r;
      } else if (std::strcmp(a->op.op, "-") == 0) {
        *v = l - r;
      } else {
        return false;
      }
      return true;
    default:
      return false;
  }
}

// Whether `a` (of event `ev`) is at most `limit` whatever the record.
bool bounded(tep_event* ev, const tep_print_arg* a, uint64_t limit, int depth) {
  uint64_t v;
  if (constant(a, &v, depth)) return v <= limit;
  if (a == nullptr || depth > kMaxArgDepth) return false;
  switch (a->type) {
    case TEP_PRINT_DYNAMIC_ARRAY_LEN:
      return 0xffff <= limit;  // the high half of a __data_loc word
    case TEP_PRINT_FIELD: {    // a u8 or u16 (kvm_emulate_insn's __print_hex(REC->insn, REC->len))
      const tep_format_field* fl = a->field.field;
      if (fl == nullptr && a->field.name != nullptr) fl = tep_find_any_field(ev, a->field.name);
      return fl != nullptr && !(fl->flags & TEP_FIELD_IS_DYNAMIC) && fl->size >= 0 && fl->size <= 2 &&
             (uint64_t{1} << (8 * fl->size)) - 1 <= limit;
    }
    case TEP_PRINT_TYPE:
      return bounded(ev, a->typecast.item, limit, depth + 1);
    case TEP_PRINT_OP:
      return a->op.op != nullptr && std::strcmp(a->op.op, "/") == 0 && constant(a->op.right, &v, depth + 1) &&
             v != 0 && bounded(ev, a->op.left, limit, depth + 1);
    default:
      return false;
  }
}

bool print_safe(tep_event* ev, const tep_print_arg* a, int depth) {
  for (; a != nullptr; a = a->next) {
    if (depth > kMaxArgDepth) return false;
    uint64_t v;
    switch (a->type) {
      case TEP_PRINT_OP: {
        const char* op = a->op.op ? a->op.op : "";
        if ((std::strcmp(op, "/") == 0 || std::strcmp(op, "%") == 0) &&
            !(constant(a->op.right, &v, depth + 1) && v != 0))
          return false;
        if (std::strcmp(op, "[") == 0 && !bounded(ev, a->op.right, kMaxCount, depth + 1)) return false;
        if (!print_safe(ev, a->op.left, depth + 1) || !print_safe(ev, a->op.right, depth + 1)) return false;
        break;
      }
      case TEP_PRINT_TYPE:
        if (!print_safe(ev, a->typecast.item, depth + 1)) return false;
        break;
      case TEP_PRINT_FLAGS:
        if (!print_safe(ev, a->flags.field, depth + 1)) return false;
        break;
      case TEP_PRINT_SYMBOL:
        if (!print_safe(ev, a->symbol.field, depth + 1)) return false;
        break;
      case TEP_PRINT_HEX:
      case TEP_PRINT_HEX_STR:
        if (!print_safe(ev, a->hex.field, depth + 1) || !bounded(ev, a->hex.size, kMaxCount, depth + 1))
          return false;
        break;
      case TEP_PRINT_INT_ARRAY:
        if (!print_safe(ev, a->int_array.field, depth + 1) ||
            !bounded(ev, a->int_array.count, kMaxCount, depth + 1) ||
            !bounded(ev, a->int_array.el_size, 8, depth + 1))
          return false;
        break;
      case TEP_PRINT_DYNAMIC_ARRAY:
        if (a->dynarray.index != nullptr && !bounded(ev, a->dynarray.index, kMaxCount, depth + 1))
          return false;
        break;
      case TEP_PRINT_FUNC:
        if (!print_safe(ev, a->func.args, depth + 1)) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

// Where libtraceevent 1.7 folds an operation on two constants while it
// parses (consolidate_op_arg), it divides unchecked: `1 / 0`, and also
// `R % s` (a name is the constant 0) or `REC->x / 2 * 0` (it takes that as
// x / (2 * 0)), raise SIGFPE inside tep_parse_event, before print_safe()
// can look (report_fuzzer found it). So the text is checked first: the
// right operand of each `/` and `%` outside a string must be a field
// (REC->, or a parenthesized group holding one), sizeof, or a constant in
// [1, INT64_MAX] that no `*`, `/` or `%` follows. Every divisor of a 6.18
// kernel's formats is one of these (`/ 1000L`, `% 64`, `) / sizeof(u64)`).
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The end of the string or character literal that opens at `i`.
size_t skip_literal(const std::string& t, size_t i) {
  const char q = t[i];
  for (++i; i < t.size() && t[i] != q; ++i)
    if (t[i] == '\\') ++i;
  return std::min(i + 1, t.size());
}

bool divisor_safe(const std::string& t, size_t i) {
  while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
  if (i >= t.size()) return false;
  const auto word = [&](const char* w) {
    const size_t n = std::strlen(w);
    return t.compare(i, n, w) == 0 && (i + n == t.size() || !ident_char(t[i + n]));
  };
  if (word("REC") || word("sizeof")) return true;
  if (t[i] == '(') {
    int nest = 0;
    for (size_t j = i; j < t.size(); ++j) {
      if (t[j] == '"' || t[j] == '\'') {
        j = skip_literal(t, j) - 1;
      } else if (t[j] == '(') {
        ++nest;
      } else if (t[j] == ')' && --nest == 0) {
        return t.substr(i, j - i).find("REC") != std::string::npos;
      }
    }
    return false;
  }
  if (!std::isdigit(static_cast<unsigned char>(t[i]))) return false;
  const std::string tail = t.substr(i, 32);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(tail.c_str(), &end, 0);
  if (errno != 0 || v == 0 || v > static_cast<unsigned long long>(INT64_MAX)) return false;
  i += static_cast<size_t>(end - tail.c_str());
  while (i < t.size() && std::strchr("uUlL", t[i]) != nullptr) ++i;
  if (i < t.size() && (ident_char(t[i]) || t[i] == '.')) return false;
  while (i < t.size() && std::isspace(static_cast<unsigned char>(t[i]))) ++i;
  return i >= t.size() || std::strchr("*/%", t[i]) == nullptr;
}

// Whether `text`'s print fmt can be handed to libtraceevent's parser.
bool parse_safe(const std::string& text) {
  const size_t at = text.find("print fmt:");
  if (at == std::string::npos) return true;
  for (size_t i = at + 10; i < text.size(); ++i) {
    if (text[i] == '"' || text[i] == '\'') {
      i = skip_literal(text, i) - 1;
    } else if ((text[i] == '/' || text[i] == '%') && !divisor_safe(text, i + 1)) {
      return false;
    }
  }
  return true;
}

}  // namespace

void TepSession::add_format(const std::string& system, const std::string& text, std::string* warnings) {
  const char* id = std::strstr(text.c_str(), "\nID: ");
  if (id) formats_[std::atoi(id + 5)] = text;
  // A format file is text: libtraceevent 1.7's tokenizer takes a NUL for
  // a token it then compares (a NULL strcmp, report_fuzzer found it).
  if (text.find('\0') != std::string::npos) {
    if (warnings) *warnings += "an event format of system " + system + " holds a NUL byte; left out\n";
    return;
  }
  if (!parse_safe(text)) {
    // The fields are kept; its records print as libtraceevent prints a
    // format it cannot parse: "[FAILED TO PARSE]" and the fields.
    if (warnings)
      *warnings += "an event format of system " + system +
                   " divides by what may be zero; its print fmt is left out, its fields are kept\n";
    const std::string fields = text.substr(0, text.find("print fmt:"));
    tep_parse_event(tep_, fields.data(), fields.size(), system.c_str());
    return;
  }
  if (tep_parse_event(tep_, text.data(), text.size(), system.c_str()) != 0 && warnings) {
    *warnings += "cannot parse an event format of system " + system + "\n";
  }
}

std::unique_ptr<TepSession> TepSession::from_formats(
    const std::vector<std::pair<std::string, std::string>>& formats, uint32_t page_size, int nr_cpus,
    std::string* warnings) {
  auto s = std::make_unique<TepSession>();
  s->tep_ = tep_alloc();
  if (!s->tep_) return nullptr;
  tep_set_file_bigendian(s->tep_, TEP_LITTLE_ENDIAN);
  tep_set_local_bigendian(s->tep_, TEP_LITTLE_ENDIAN);
  tep_set_long_size(s->tep_, 8);
  tep_set_page_size(s->tep_, static_cast<int>(page_size));
  tep_set_cpus(s->tep_, nr_cpus);
  for (const auto& [system, text] : formats) s->add_format(system, text, warnings);
  s->fence_fields(page_size, warnings);
  return s;
}

std::unique_ptr<TepSession> TepSession::load(const TraceFile& f, std::string* warnings) {
  auto s = std::make_unique<TepSession>();
  s->tep_ = tep_alloc();
  if (!s->tep_) return nullptr;
  tep_handle* tep = s->tep_;
  // The event plugins trace-cmd loads (sched_switch's print handler, ...).
  s->plugins_ = tep_load_plugins(tep);
  tep_set_file_bigendian(tep, TEP_LITTLE_ENDIAN);
  tep_set_local_bigendian(tep, TEP_LITTLE_ENDIAN);
  tep_set_long_size(tep, f.long_size());
  tep_set_page_size(tep, static_cast<int>(f.page_size()));
  tep_set_cpus(tep, f.nr_cpus());
  std::string hp = f.header_page();
  if (!hp.empty()) tep_parse_header_page(tep, hp.data(), hp.size(), f.long_size());
  for (const TraceFile::Format& fmt : f.formats()) s->add_format(fmt.system, fmt.text, warnings);
  int64_t page = f.page_size();
  for (const TraceFile::Buffer& b : f.buffers()) page = std::max<int64_t>(page, b.page_size);
  s->fence_fields(page, warnings);
  if (!f.kallsyms().empty()) {
    tep_parse_kallsyms(tep, f.kallsyms().c_str());
  }
  if (const std::string printk = printk_lines(f.printk_formats()); !printk.empty())
    tep_parse_printk_formats(tep, printk.c_str());
  // saved_cmdlines: "PID COMM" lines.
  const std::string& c = f.cmdlines();
  size_t pos = 0;
  while (pos < c.size()) {
    size_t nl = c.find('\n', pos);
    if (nl == std::string::npos) nl = c.size();
    const std::string line = c.substr(pos, nl - pos);
    pos = nl + 1;
    char* end = nullptr;
    const long pid = std::strtol(line.c_str(), &end, 10);
    if (end == line.c_str() || *end != ' ') continue;
    tep_register_comm(tep, end + 1, static_cast<int>(pid));
  }
  return s;
}

// A record is at most a page: a field the formats put past the largest
// page of the file, or before the record (an offset libtraceevent made an
// int from 4294967294: -2), is in no record. Such fields are made empty
// (offset 0, size 0: read as absent by the exports, printed as 0 or ""
// by libtraceevent), so that no read reaches past make_record's copy.
void TepSession::fence_fields(int64_t page, std::string* warnings) {
  int64_t reach = 0;
  uint64_t fenced = 0;
  std::string first;
  const int n = tep_get_events_count(tep_);
  for (int i = 0; i < n; ++i) {
    tep_event* ev = tep_get_event(tep_, i);
    const auto flags = static_cast<unsigned>(ev->flags);
    if (!(flags & TEP_EVENT_FL_FAILED) && !print_safe(ev, ev->print_fmt.args, 0)) {
      // Printed as libtraceevent prints a format it could not parse:
      // "[FAILED TO PARSE]" and the fields. No warning: every kernel file
      // trace-cmd writes holds the two ras formats, which print so only
      // where the file has their records.
      ev->flags = static_cast<int>(flags | TEP_EVENT_FL_FAILED);
    }
    for (tep_format_field* fl : {ev->format.common_fields, ev->format.fields}) {
      for (; fl != nullptr; fl = fl->next) {
        if (fl->offset < 0 || fl->size < 0 || static_cast<int64_t>(fl->offset) + fl->size > page) {
          if (fenced++ == 0)
            first = std::string(ev->system) + ":" + ev->name + " " + fl->name + " at offset " +
                    std::to_string(fl->offset) + ", size " + std::to_string(fl->size);
          fl->offset = 0;
          fl->size = 0;
          fl->arraylen = 0;
          fl->flags &= ~static_cast<unsigned long>(TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC |
                                                   TEP_FIELD_IS_RELATIVE | TEP_FIELD_IS_STRING);
        }
        reach = std::max<int64_t>(reach, static_cast<int64_t>(fl->offset) + fl->size);
      }
    }
  }
  // Past the farthest field: a __data_loc's data (64 KiB at up to 64 KiB
  // past its word), an index or an array of 64 Ki elements of 8 bytes.
  reach_ = static_cast<size_t>(reach) + 65536 + 8 * 65536 + 8;
  if (fenced != 0 && warnings)
    *warnings += std::to_string(fenced) + " field(s) of the event formats lie outside any record (" + first +
                 "); read as absent\n";
}

TepSession::~TepSession() {
  if (plugins_) tep_unload_plugins(plugins_, tep_);
  if (tep_) tep_free(tep_);
}

const std::string& TepSession::format_of(int id) const {
  static const std::string kNone;
  auto it = formats_.find(id);
  return it == formats_.end() ? kNone : it->second;
}

tep_record TepSession::make_record(const TraceFile::Record& r) const {
  tep_record rec = make_record(r.data, r.len, r.ts, r.cpu);
  rec.missed_events = r.missed;
  return rec;
}

tep_record TepSession::make_record(const uint8_t* data, uint32_t len, uint64_t ts, int cpu) const {
  tep_record rec{};
  rec.ts = ts;
  rec.cpu = cpu;
  rec.size = static_cast<int>(len);
  if (scratch_.size() < len + reach_) scratch_.resize(len + reach_, 0);
  std::memcpy(scratch_.data(), data, len);
  if (dirty_ > len) std::memset(scratch_.data() + len, 0, dirty_ - len);
  dirty_ = len;
  rec.data = scratch_.data();
  return rec;
}

bool clock_in_ns(const std::string& clock) {
  // trace-cmd's list (tracecmd_parse_trace_clock): not "boot", "counter" or "x86-tsc".
  static const char* const kNs[] = {"local", "global", "uptime", "perf", "tsc2nsec", "tai"};
  if (clock.empty() || clock.rfind("mono", 0) == 0) return true;
  for (const char* n : kNs)
    if (clock == n) return true;
  return false;
}

}  // namespace usrtrace::tool
