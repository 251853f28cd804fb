// The uprobe_events parser (lang.h). The grammar, as the kernel's
// trace_uprobe.c and trace_probe.c take it:
//   p[:[GRP/][EVENT]] TARGET [ARG...]     r[:[GRP/][EVENT]] TARGET [ARG...]
//   -:[GRP/]EVENT
//   TARGET: PATH:OFFSET[%return] | PATH:SYMBOL[+OFFS][%return] | SYMBOL[+OFFS][%return]
//   ARG:    [NAME=]FETCH[:TYPE]
//   FETCH:  %REG | @ADDR | @+FILEOFFS | $stackN | $stack | $retval | $argN | $comm
//           | \IMM | \"STR" | +|-[u]OFFS(FETCH)
//   TYPE:   u8..u64 s8..s64 x8..x64 char string ustring symbol symstr
//           | b<width>@<offset>/<container-bits> | T[N]
// The line is one blank between words (write_text makes it so), so byte
// positions are the kernel's caret positions.
#include "probe/lang.h"

#include "usrtrace/internal/event_impl.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace usrtrace::probe {
namespace {

constexpr size_t kMaxNameLen = 64;  // MAX_EVENT_NAME_LEN, MAX_ARG_NAME_LEN

int fail(Error* e, const char* text, size_t pos, int errnum = EINVAL) {
  *e = {text, pos, errnum};
  return -errnum;
}

bool c_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// kstrtoull/kstrtoll with base 0 over the whole of s.
bool parse_int(std::string_view s, int64_t* v) {
  if (s.empty()) return false;
  bool neg = false;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
  }
  uint64_t u = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), u, base);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  *v = neg ? -static_cast<int64_t>(u) : static_cast<int64_t>(u);
  return true;
}

// The x86-64 register names uprobe_events takes (regs_query_register_offset).
int reg_index(std::string_view r) {
  static const char* const kNames[] = {"r15", "r14",     "r13", "r12", "bp",    "bx", "r11",
                                       "r10", "r9",      "r8",  "ax",  "cx",    "dx", "si",
                                       "di",  "orig_ax", "ip",  "cs",  "flags", "sp", "ss"};
  for (int i = 0; i < static_cast<int>(std::size(kNames)); ++i)
    if (r == kNames[i]) return i;
  return -1;
}

// One fetch arg's body (no name, no type) into *a; `pos` is its first
// byte in the line.
int parse_fetch(std::string_view s, size_t pos, bool is_return, ProbeArg* a, Error* e, int depth = 0) {
  if (s.empty()) return fail(e, "No argument expression", pos);
  switch (s[0]) {
    case '%': {
      const int r = reg_index(s.substr(1));
      if (r < 0) return fail(e, "Invalid register name", pos);
      a->base = FetchBase::kReg;
      a->value = r;
      return 0;
    }
    case '@': {
      if (s.size() > 1 && s[1] == '+') {
        int64_t off;
        if (!parse_int(s.substr(2), &off) || off < 0) return fail(e, "Invalid file offset value", pos);
        a->base = FetchBase::kFileOffs;
        a->value = off;
        return 0;
      }
      int64_t addr;
      // @SYMBOL is kprobe syntax; the kernel refuses it for uprobes.
      if (s.size() > 1 && !std::isdigit(static_cast<unsigned char>(s[1])))
        return fail(e, "Symbol is not available with uprobe", pos);
      if (!parse_int(s.substr(1), &addr)) return fail(e, "Invalid memory address", pos);
      a->base = FetchBase::kAddr;
      a->value = addr;
      return 0;
    }
    case '$': {
      const std::string_view v = s.substr(1);
      if (v == "retval") {
        if (!is_return) return fail(e, "$retval is not available on probe", pos);
        a->base = FetchBase::kRetval;
        return 0;
      }
      if (v == "stack") {
        a->base = FetchBase::kStack;
        return 0;
      }
      if (v == "comm" || v == "COMM") {
        if (depth > 0) return fail(e, "$comm can not be dereferenced", pos);
        a->base = FetchBase::kComm;
        return 0;
      }
      if (v.starts_with("stack")) {
        if (!std::isdigit(static_cast<unsigned char>(v.size() > 5 ? v[5] : 'x')))
          return fail(e, "Invalid $-variable specified", pos);
        int64_t n;
        if (!parse_int(v.substr(5), &n) || n < 0 || n > 4096) return fail(e, "Invalid stack number", pos);
        a->base = FetchBase::kStackN;
        a->value = n;
        return 0;
      }
      if (v.starts_with("arg")) {
        if (!std::isdigit(static_cast<unsigned char>(v.size() > 3 ? v[3] : 'x')))
          return fail(e, "Invalid $-variable specified", pos);
        int64_t n;
        if (!parse_int(v.substr(3), &n) || n < 1 || n > 64) return fail(e, "Invalid argument number", pos);
        a->base = FetchBase::kArg;
        a->value = n;
        return 0;
      }
      return fail(e, "Invalid $-variable specified", pos);
    }
    case '\\': {
      if (s.size() > 1 && s[1] == '"') {
        if (s.size() < 3 || s.back() != '"') return fail(e, "String is not closed with '\"'", pos + s.size());
        a->base = FetchBase::kImmStr;
        a->imm_str = std::string(s.substr(2, s.size() - 3));
        return 0;
      }
      int64_t v;
      if (!parse_int(s.substr(1), &v)) return fail(e, "Invalid immediate value", pos + 1);
      a->base = FetchBase::kImm;
      a->value = v;
      return 0;
    }
    case '+':
    case '-': {
      // +|-[u]OFFS(FETCH)
      const size_t open = s.find('(');
      if (open == std::string_view::npos) return fail(e, "Dereference needs a brace", pos);
      if (s.back() != ')') return fail(e, "Dereference brace is not closed", pos + s.size());
      std::string_view off = s.substr(0, open);
      bool user = false;
      if (off.size() > 1 && off[1] == 'u') user = true;
      std::string offtext(off);
      if (user) offtext.erase(1, 1);
      int64_t o;
      if (!parse_int(offtext, &o)) return fail(e, "Invalid dereference offset", pos);
      if (depth + 1 > kMaxDerefs) return fail(e, "Dereference is too much nested", pos);
      const std::string_view inner = s.substr(open + 1, s.size() - open - 2);
      if (int rc = parse_fetch(inner, pos + open + 1, is_return, a, e, depth + 1); rc < 0) return rc;
      if (a->base == FetchBase::kImmStr) return fail(e, "Invalid fetch argument", pos + open + 1);
      if (a->nderefs >= kMaxDerefs) return fail(e, "Dereference is too much nested", pos);
      a->deref_off[a->nderefs] = o;
      a->deref_user[a->nderefs] = user;
      ++a->nderefs;
      return 0;
    }
    default:
      // A bare name: the kernel looks it up in BTF, which user programs
      // do not carry.
      if (c_ident(s)) return fail(e, "BTF is not available or not supported", pos);
      return fail(e, "Invalid fetch argument", pos);
  }
}

// The type, after ':' at `pos`.
int parse_type(std::string_view t, size_t pos, ProbeArg* a, Error* e) {
  std::string_view base = t;
  const size_t br = t.find('[');
  if (br != std::string_view::npos) {
    if (t.back() != ']') return fail(e, "Array is not closed", pos + t.size());
    int64_t n;
    if (!parse_int(t.substr(br + 1, t.size() - br - 2), &n) || n <= 0)
      return fail(e, "Invalid array size", pos + br + 1);
    if (n > kMaxArrayLen) return fail(e, "Array number is too big", pos + br + 1);
    a->array_len = static_cast<uint16_t>(n);
    base = t.substr(0, br);
  }
  if (base == "string" || base == "ustring" || base == "symstr") {
    a->kind = base == "string"    ? FetchKind::kString
              : base == "ustring" ? FetchKind::kUString
                                  : FetchKind::kSymstr;
    a->size = 4;
    return 0;
  }
  if (base == "symbol") {
    a->kind = FetchKind::kSymbol;
    a->size = 8;
    return 0;
  }
  if (base == "char") {
    a->kind = FetchKind::kChar;
    a->size = 1;
    return 0;
  }
  if (!base.empty() && base[0] == 'b') {
    // b<width>@<offset>/<container bits>
    const size_t at = base.find('@'), slash = base.find('/');
    int64_t w, o, c;
    if (at == std::string_view::npos || slash == std::string_view::npos || slash < at ||
        !parse_int(base.substr(1, at - 1), &w) || !parse_int(base.substr(at + 1, slash - at - 1), &o) ||
        !parse_int(base.substr(slash + 1), &c) || (c != 8 && c != 16 && c != 32 && c != 64) || w <= 0 ||
        o < 0 || w + o > c)
      // The kernel's caret: at the offset when width + offset overflow the
      // container, else at the part it could not read.
      return fail(e, "Invalid bitfield", pos + (at == std::string_view::npos ? 1 : at + 1));
    a->kind = FetchKind::kUnsigned;
    a->size = static_cast<uint8_t>(c / 8);
    a->bit_width = static_cast<uint8_t>(w);
    a->bit_offset = static_cast<uint8_t>(o);
    return 0;
  }
  if (base.size() >= 2 && (base[0] == 'u' || base[0] == 's' || base[0] == 'x')) {
    const std::string_view bits = base.substr(1);
    if (bits == "8" || bits == "16" || bits == "32" || bits == "64") {
      a->kind = base[0] == 'u' ? FetchKind::kUnsigned : base[0] == 's' ? FetchKind::kSigned : FetchKind::kHex;
      a->size = static_cast<uint8_t>(std::atoi(std::string(bits).c_str()) / 8);
      return 0;
    }
  }
  return fail(e, "Unknown type is specified", pos);
}

}  // namespace

int parse_line(std::string_view line, ProbeDef* d, Error* e) {
  *d = ProbeDef();
  // The command word: p, r, - (and r<maxactive>, which uprobes refuse).
  const size_t sp = line.find(' ');
  const std::string_view head = line.substr(0, sp);
  if (head.empty() || (head[0] != 'p' && head[0] != 'r' && head[0] != '-')) return -ECANCELED;
  d->kind = head[0];
  d->is_return = head[0] == 'r';
  std::string_view name;
  if (head.size() > 1) {
    if (head[1] != ':') return fail(e, "Maxactive is not for uprobe", 1);
    name = head.substr(2);
  } else if (d->kind == '-') {
    return fail(e, "Event name is not specified", 1);
  }
  if (!name.empty()) {
    const size_t slash = name.find('/');
    if (slash != std::string_view::npos) {
      const std::string_view g = name.substr(0, slash);
      if (g.empty()) return fail(e, "Group name is not specified", 2);
      if (g.size() >= kMaxNameLen) return fail(e, "Group name is too long", 2);
      if (!c_ident(g)) return fail(e, "Group name must follow the same rules as C identifiers", 2);
      d->group = std::string(g);
      name = name.substr(slash + 1);
    }
    const size_t epos = 2 + (head.size() - 2 - name.size());
    if (!name.empty()) {
      if (name.size() >= kMaxNameLen) return fail(e, "Event name is too long", epos);
      if (!c_ident(name)) return fail(e, "Event name must follow the same rules as C identifiers", epos);
      d->event = std::string(name);
    }
  }
  if (d->kind == '-') {
    if (d->event.empty()) return fail(e, "Event name is not specified", 2);
    if (sp != std::string_view::npos) return fail(e, "Invalid fetch argument", sp + 1);
    return 0;
  }
  if (sp == std::string_view::npos) return fail(e, "Failed to parse address", head.size(), EINVAL);
  // The target.
  size_t at = sp + 1;
  size_t end = line.find(' ', at);
  if (end == std::string_view::npos) end = line.size();
  std::string_view target = line.substr(at, end - at);
  d->target_pos = at;
  if (target.ends_with("%return")) {
    d->is_return = true;
    target.remove_suffix(7);
  }
  const size_t colon = target.rfind(':');
  std::string_view place = target;
  if (colon != std::string_view::npos) {
    d->target.path = std::string(target.substr(0, colon));
    place = target.substr(colon + 1);
    if (d->target.path.empty()) return fail(e, "Failed to find the given file", at, ENOENT);
  }
  if (place.empty()) return fail(e, "Failed to parse address", at + target.size());
  int64_t off;
  if (std::isdigit(static_cast<unsigned char>(place[0]))) {
    if (d->target.path.empty()) return fail(e, "Failed to parse address", at);
    if (place.find('(') != std::string_view::npos)
      return fail(e, "Reference counter offset is not supported", at + colon + 1 + place.find('('));
    if (!parse_int(place, &off) || off < 0) return fail(e, "Invalid uprobe offset", at + colon + 1);
    d->target.offset = static_cast<uint64_t>(off);
  } else {
    // SYMBOL[+OFFS], ours: the kprobe form, resolved in the process.
    const size_t plus = place.find('+');
    const std::string_view sym = place.substr(0, plus);
    if (sym.empty()) return fail(e, "Failed to parse address", at);
    d->target.symbol = std::string(sym);
    if (plus != std::string_view::npos) {
      if (!parse_int(place.substr(plus + 1), &off) || off < 0)
        return fail(e, "Invalid probed address suffix",
                    at + (colon == std::string_view::npos ? 0 : colon + 1) + plus + 1);
      d->target.offset = static_cast<uint64_t>(off);
    }
  }
  if (d->event.empty()) {
    // The kernel's defaults: p_BASENAME_0xOFFSET; for symbols, kprobe's
    // p_SYMBOL_OFFSET. Characters no C identifier has become '_'.
    char buf[256];
    if (d->target.symbol.empty()) {
      std::string base = d->target.path.substr(d->target.path.rfind('/') + 1);
      snprintf(buf, sizeof buf, "%c_%s_0x%llx", d->is_return ? 'r' : 'p', base.c_str(),
               static_cast<unsigned long long>(d->target.offset));
    } else {
      snprintf(buf, sizeof buf, "%c_%s_%llu", d->is_return ? 'r' : 'p', d->target.symbol.c_str(),
               static_cast<unsigned long long>(d->target.offset));
    }
    d->event = buf;
    for (char& c : d->event)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) c = '_';
    if (d->event.size() >= kMaxNameLen) d->event.resize(kMaxNameLen - 1);
  }
  // The args, packed after the probe's own fields.
  uint32_t offset = d->is_return ? 24 : 16;
  at = end;
  int n = 0;
  while (at < line.size()) {
    ++at;  // the blank
    end = line.find(' ', at);
    if (end == std::string_view::npos) end = line.size();
    std::string_view word = line.substr(at, end - at);
    if (++n > kMaxArgs) return fail(e, "Too many arguments are specified", at);
    ProbeArg a;
    size_t body_pos = at;
    const size_t eq = word.find('=');
    // '=' inside a string immediate is not a name's.
    if (eq != std::string_view::npos && word.substr(0, eq).find_first_of("\\\"(") == std::string_view::npos) {
      const std::string_view nm = word.substr(0, eq);
      if (nm.empty()) return fail(e, "Argument name is not specified", at);
      if (nm.size() >= kMaxNameLen) return fail(e, "Argument name is too long", at);
      if (!c_ident(nm)) return fail(e, "Argument name must follow the same rules as C identifiers", at);
      a.name = std::string(nm);
      word = word.substr(eq + 1);
      body_pos = at + eq + 1;
    } else {
      a.name = "arg" + std::to_string(n);
    }
    for (const ProbeArg& other : d->args)
      if (other.name == a.name) return fail(e, "This argument name is already used", at);
    // The type: after the last ':' outside a string immediate.
    std::string_view body = word, type;
    if (!(word.size() > 1 && word[0] == '\\' && word[1] == '"')) {
      const size_t tc = word.rfind(':');
      if (tc != std::string_view::npos) {
        body = word.substr(0, tc);
        type = word.substr(tc + 1);
      }
    }
    if (body.size() > 128) return fail(e, "Argument expression is too long", body_pos);
    if (int rc = parse_fetch(body, body_pos, d->is_return, &a, e); rc < 0) return rc;
    a.body = std::string(body);
    a.type_text = std::string(type);
    const size_t type_pos = body_pos + body.size() + 1;
    if (!type.empty()) {
      if (int rc = parse_type(type, type_pos, &a, e); rc < 0) return rc;
    } else if (a.base == FetchBase::kComm || a.base == FetchBase::kImmStr) {
      a.kind = FetchKind::kString;
      a.size = 4;
    }
    if (a.is_string() && a.kind != FetchKind::kSymstr && a.nderefs == 0 && a.base != FetchBase::kComm &&
        a.base != FetchBase::kImmStr && a.base != FetchBase::kAddr && a.base != FetchBase::kFileOffs)
      return fail(e, "String accepts only memory argument", type_pos);
    if ((a.base == FetchBase::kComm || a.base == FetchBase::kImmStr) && !a.is_string())
      return fail(e, "Invalid fetch argument", body_pos);
    a.offset = static_cast<uint16_t>(offset);
    offset += static_cast<uint32_t>(a.size) * (a.array_len ? a.array_len : 1);
    if (offset > internal::kMaxRecord / 2) return fail(e, "Too many arguments are specified", at);
    d->args.push_back(std::move(a));
    at = end;
  }
  d->fixed_size = static_cast<uint16_t>(offset);
  return 0;
}

std::string ProbeDef::text() const {
  std::string out;
  out += kind;
  out += ":" + group + "/" + event + " ";
  char buf[64];
  if (target.symbol.empty()) {
    snprintf(buf, sizeof buf, ":0x%016llx", static_cast<unsigned long long>(target.offset));
    out += target.path + buf;
  } else {
    if (!target.path.empty()) out += target.path + ":";
    out += target.symbol;
    if (target.offset != 0) out += "+" + std::to_string(target.offset);
  }
  for (const ProbeArg& a : args) {
    out += " " + a.name + "=" + a.body;
    if (!a.type_text.empty()) out += ":" + a.type_text;
  }
  return out;
}

std::string ProbeDef::target_path() const { return target.path.empty() ? target.symbol : target.path; }

}  // namespace usrtrace::probe
