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
#include "probe/parse_internal.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::probe {
namespace parse_detail {
namespace {

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
    "SDT probe must be [PATH]%PROVIDER:NAME, both C identifiers",
    "SDT probe cannot be a return probe",
    "SDT probe arguments are NAME or NAME:TYPE (arg1..argN by default)",
};
static_assert(std::size(kErrText) == static_cast<size_t>(Err::kSdtArgName) + 1);

}  // namespace

// is_good_name(): a C identifier; is_good_system_name() (groups) also
// takes '-', anywhere.
bool is_good_name(std::string_view s, bool hyphen_ok) {
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

int Log::err(int offset, Err code, int errnum) {
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

}  // namespace parse_detail

namespace {
using namespace parse_detail;  // NOLINT(google-build-using-namespace): this file's own helpers

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
  // Ours: [PATH]%PROVIDER:NAME, a USDT probe (sdt.h): its sites and
  // argument locations come from the notes (probes.cc), of every loaded
  // object, or of PATH's alone (loaded now or later). A '%' followed by a
  // colon, and none before: the kernel's PATH:OFFSET%SUFFIX is not one.
  const size_t pct = tw.find('%');
  const bool sdt =
      pct == 0 || (pct != std::string_view::npos && tw.find(':', pct) != std::string_view::npos &&
                   tw.substr(0, pct).find(':') == std::string_view::npos);
  if (sdt) {
    const std::string_view pn = tw.substr(pct + 1);
    const size_t colon = pn.find(':');
    if (colon == std::string_view::npos || !is_good_name(pn.substr(0, colon)) ||
        !is_good_name(pn.substr(colon + 1)))
      return log.err(static_cast<int>(pct), Err::kBadSdtName);
    if (d->is_return) return log.err(0, Err::kSdtRetprobe);
    if (pct > 0) {
      d->target.path = std::string(tw.substr(0, pct));
      if (int rc = check_file(d->target.path, &log); rc < 0) return rc;
    }
    d->sdt = true;
    d->sdt_provider = std::string(pn.substr(0, colon));
    d->sdt_name = std::string(pn.substr(colon + 1));
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
      const size_t suffix = rest.find('%');
      if (suffix != std::string_view::npos) {
        if (rest.substr(suffix) != "%return")
          return log.err(at + static_cast<int>(suffix), Err::kBadAddrSuffix);
        d->is_return = true;
        rest = rest.substr(0, suffix);
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
    d->fixed_size = 16;  // its sites' fields come with them; the common header and __probe_ip here
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
  d->regs_only = true;
  for (Arg& a : d->args) {
    const FetchInsn* c = a.code;
    // SysV's argument registers, as fetch.cc's load() reads $argN.
    static constexpr uint8_t kArgRegs[6] = {14, 13, 12, 11, 9, 8};
    const bool raw = c[1].op == FetchOp::kStRaw && c[2].op == FetchOp::kEnd && a.count == 0;
    if (raw && c[0].op == FetchOp::kReg)
      a.fast_reg = static_cast<uint8_t>(c[0].param);
    else if (raw && c[0].op == FetchOp::kRetval)
      a.fast_reg = 10;  // ax
    else if (raw && c[0].op == FetchOp::kArg && !d->is_return && c[0].param < 6)
      a.fast_reg = kArgRegs[c[0].param];
    else
      d->regs_only = false;
  }
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
  if (sdt) return target.path + "%" + sdt_provider + ":" + sdt_name;
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
