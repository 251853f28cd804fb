// The fetch programs' interpreter and the probe events' shape (record.h).
//
// The record, as the kernel's trace_uprobe writes it: the common header;
// `unsigned long __probe_ip` (entry) or `__probe_func, __probe_ret_ip`
// (return); each arg packed at parse.h's offset with no alignment; then the
// strings' bytes, each field a __data_loc (length << 16 | offset).
#include "probe/record.h"

#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "base/safe_copy.h"
#include "events/registry.h"

namespace usrtrace::probe {
namespace {

uint64_t reg(const patch::Regs* r, int64_t i) {
  uint64_t v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(r) + i * 8, 8);
  return v;
}

// The SysV ABI's argument N (1-based): six registers, then the stack above
// the return address (at a function's entry).
bool arg_value(const ProbeDef& d, const HitContext& c, int64_t n, uint64_t* v) {
  static constexpr int kRegs[6] = {14 /*di*/, 13 /*si*/, 12 /*dx*/, 11 /*cx*/, 9 /*r8*/, 8 /*r9*/};
  if (n <= 6) {
    if (d.is_return && c.entry_args != nullptr) {
      *v = c.entry_args[n - 1];
      return true;
    }
    *v = reg(c.regs, kRegs[n - 1]);
    return true;
  }
  if (d.is_return) return false;  // the entry's stack is gone
  return base::safe_copy(v, reinterpret_cast<const void*>(c.regs->sp + static_cast<uint64_t>(n - 6) * 8),
                         8) == 0;
}

// The base value of a fetch, then its dereferences. false: a read faulted.
bool fetch_value(const ProbeDef& d, const ProbeArg& a, const HitContext& c, uint64_t* v) {
  uint64_t x = 0;
  switch (a.base) {
    case FetchBase::kReg:
      x = reg(c.regs, a.value);
      break;
    case FetchBase::kStack:
      x = c.regs->sp;
      break;
    case FetchBase::kStackN:
      if (base::safe_copy(&x, reinterpret_cast<const void*>(c.regs->sp + static_cast<uint64_t>(a.value) * 8),
                          8) != 0)
        return false;
      break;
    case FetchBase::kRetval:
      x = c.regs->ax;
      break;
    case FetchBase::kArg:
      if (!arg_value(d, c, a.value, &x)) return false;
      break;
    case FetchBase::kImm:
      x = static_cast<uint64_t>(a.value);
      break;
    case FetchBase::kAddr:
      x = static_cast<uint64_t>(a.value);
      break;
    case FetchBase::kFileOffs:
      x = c.bias + static_cast<uint64_t>(a.value);
      break;
    case FetchBase::kComm:
    case FetchBase::kImmStr:
      return false;  // strings: not here
  }
  // @ADDR and @+OFFS name memory: their value is what is there (a string
  // reads from the address itself).
  const bool memory = a.base == FetchBase::kAddr || a.base == FetchBase::kFileOffs;
  for (int i = 0; i < a.nderefs; ++i) {
    if (memory && i == 0) {
      if (base::safe_copy(&x, reinterpret_cast<const void*>(x), 8) != 0) return false;
    }
    const uint64_t at = x + static_cast<uint64_t>(a.deref_off[i]);
    if (i + 1 == a.nderefs) {
      *v = at;  // the last: the address of the value
      return true;
    }
    if (base::safe_copy(&x, reinterpret_cast<const void*>(at), 8) != 0) return false;
  }
  *v = x;
  return true;
}

// The address the arg's value (or string) is read at, when it is memory.
bool is_memory(const ProbeArg& a) {
  return a.nderefs > 0 || a.base == FetchBase::kAddr || a.base == FetchBase::kFileOffs;
}

void store_scalar(const ProbeArg& a, uint64_t raw, uint8_t* at) {
  if (a.bit_width != 0) {
    raw >>= a.bit_offset;
    raw &= a.bit_width >= 64 ? ~uint64_t{0} : (uint64_t{1} << a.bit_width) - 1;
  }
  std::memcpy(at, &raw, a.size);  // little-endian: the low bytes
}

}  // namespace

uint32_t write_fields(const ProbeDef& d, uint16_t id, const HitContext& c, uint8_t* rec, uint32_t cap) {
  if (cap < d.fixed_size) return 0;
  internal::CommonHeader h{};
  h.type = id;
  std::memcpy(rec, &h, sizeof h);
  if (d.is_return) {
    std::memcpy(rec + 8, &c.func, 8);
    std::memcpy(rec + 16, &c.regs->ip, 8);
  } else {
    std::memcpy(rec + 8, &c.regs->ip, 8);
  }
  uint32_t dyn = d.fixed_size;
  for (const ProbeArg& a : d.args) {
    uint8_t* field = rec + a.offset;
    const uint16_t n = a.array_len ? a.array_len : 1;
    if (a.is_string()) {
      for (uint16_t k = 0; k < n; ++k) {
        const uint32_t room = cap - dyn;
        long len = -1;
        if (a.base == FetchBase::kComm) {
          const char* comm = c.comm != nullptr ? c.comm : "";
          const size_t l = strnlen(comm, 15);
          if (room >= l + 1) {
            std::memcpy(rec + dyn, comm, l);
            rec[dyn + l] = 0;
            len = static_cast<long>(l + 1);
          }
        } else if (a.base == FetchBase::kImmStr) {
          const size_t l = a.imm_str.size();
          if (room >= l + 1) {
            std::memcpy(rec + dyn, a.imm_str.c_str(), l + 1);
            len = static_cast<long>(l + 1);
          }
        } else {
          uint64_t addr = 0;
          if (fetch_value(d, a, c, &addr)) {
            // An array of strings: N pointers, each to a string.
            if (a.array_len != 0 &&
                base::safe_copy(&addr, reinterpret_cast<const void*>(addr + k * 8ull), 8) != 0)
              addr = 0;
            if (a.array_len == 0 || addr != 0)
              len = room > 0 ? base::safe_strncpy(reinterpret_cast<char*>(rec + dyn),
                                                  reinterpret_cast<const char*>(addr), room)
                             : -1;
            if (len > 0 && rec[dyn + static_cast<uint32_t>(len) - 1] != 0)
              rec[dyn + static_cast<uint32_t>(len) - 1] = 0;
          }
        }
        if (len < 0) {
          static constexpr char kFault[] = "(fault)";
          if (room >= sizeof kFault) {
            std::memcpy(rec + dyn, kFault, sizeof kFault);
            len = sizeof kFault;
          } else {
            len = 0;
          }
        }
        const uint32_t loc = (static_cast<uint32_t>(len) << 16) | dyn;
        std::memcpy(field + k * 4, &loc, 4);
        dyn += static_cast<uint32_t>(len);
      }
      continue;
    }
    uint64_t v = 0;
    const bool ok = fetch_value(d, a, c, &v);
    if (!is_memory(a)) {
      store_scalar(a, ok ? v : 0, field);
      continue;
    }
    for (uint16_t k = 0; k < n; ++k) {
      uint64_t raw = 0;
      if (!ok || base::safe_copy(&raw, reinterpret_cast<const void*>(v + uint64_t{k} * a.size), a.size) != 0)
        raw = 0;
      store_scalar(a, raw, field + k * a.size);
    }
  }
  return dyn;
}

namespace {

const char* field_type(const ProbeArg& a) {
  if (a.is_string()) return a.array_len ? "__data_loc char[][]" : "__data_loc char[]";
  const bool s = a.kind == FetchKind::kSigned;
  switch (a.size) {
    case 1:
      return s ? "s8" : "u8";
    case 2:
      return s ? "s16" : "u16";
    case 4:
      return s ? "s32" : "u32";
    default:
      return s ? "s64" : "u64";
  }
}

const char* conv(const ProbeArg& a) {
  switch (a.kind) {
    case FetchKind::kString:
    case FetchKind::kUString:
    case FetchKind::kSymstr:
      return "\\\"%s\\\"";
    case FetchKind::kChar:
      return "'%c'";
    case FetchKind::kSymbol:
      return "%pS";
    case FetchKind::kSigned:
      return a.size == 8 ? "%Ld" : "%d";
    case FetchKind::kUnsigned:
      return a.size == 8 ? "%Lu" : "%u";
    case FetchKind::kHex:
      return a.size == 8 ? "0x%Lx" : "0x%x";
  }
  return "%u";
}

int print_probe(const void* rec, uint32_t len, char* buf, size_t size);

}  // namespace

ProbeShape::ProbeShape(const ProbeDef& d) : def_(d) {
  const size_t n = def_.args.size() + (def_.is_return ? 2 : 1);
  names_.reserve(n);
  types_.reserve(n);
  fields_.reserve(n);
  auto add = [this](std::string name, std::string type, uint16_t offset, uint16_t size, bool is_signed,
                    internal::FieldKind kind) {
    names_.push_back(std::move(name));
    types_.push_back(std::move(type));
    fields_.push_back({nullptr, nullptr, offset, size, 0, is_signed, kind});
  };
  if (def_.is_return) {
    add("__probe_func", "unsigned long", 8, 8, false, internal::FieldKind::kInteger);
    add("__probe_ret_ip", "unsigned long", 16, 8, false, internal::FieldKind::kInteger);
    print_fmt_ = "\"(%lx <- %lx)";
  } else {
    add("__probe_ip", "unsigned long", 8, 8, false, internal::FieldKind::kInteger);
    print_fmt_ = "\"(%lx)";
  }
  std::string args = def_.is_return ? ", REC->__probe_func, REC->__probe_ret_ip" : ", REC->__probe_ip";
  for (const ProbeArg& a : def_.args) {
    const uint16_t count = a.array_len ? a.array_len : 1;
    if (a.is_string()) {
      // __data_loc char[] NAME (size 4, signed 1), or char[][N] for arrays:
      // the kernel prints "__data_loc char[][2] sa".
      std::string type =
          a.array_len ? "__data_loc char[][" + std::to_string(a.array_len) + "]" : "__data_loc char[]";
      add(a.name, type, a.offset, static_cast<uint16_t>(4 * count), true, internal::FieldKind::kString);
    } else if (a.array_len) {
      add(a.name, field_type(a), a.offset, static_cast<uint16_t>(a.size * count),
          a.kind == FetchKind::kSigned, internal::FieldKind::kByteArray);
    } else {
      add(a.name, field_type(a), a.offset, a.size, a.kind == FetchKind::kSigned,
          internal::FieldKind::kInteger);
    }
    print_fmt_ += " " + a.name + "=";
    if (a.array_len) {
      print_fmt_ += "{";
      for (uint16_t k = 0; k < count; ++k) {
        print_fmt_ += std::string(k ? "," : "") + conv(a);
        args += a.is_string() ? ", __get_str(" + a.name + "[" + std::to_string(k) + "])"
                              : ", REC->" + a.name + "[" + std::to_string(k) + "]";
      }
      print_fmt_ += "}";
    } else {
      print_fmt_ += conv(a);
      args += a.is_string() ? ", __get_str(" + a.name + ")" : ", REC->" + a.name;
    }
  }
  print_fmt_ += "\"" + args;
  for (size_t i = 0; i < fields_.size(); ++i) {
    fields_[i].name = names_[i].c_str();
    fields_[i].type = types_[i].c_str();
  }
  desc_.system = def_.group.c_str();
  desc_.name = def_.event.c_str();
  desc_.print_fmt = print_fmt_.c_str();
  desc_.fields = fields_.data();
  desc_.nfields = static_cast<uint16_t>(fields_.size());
  desc_.fixed_size = def_.fixed_size;
  desc_.print = print_probe;
}

namespace {
// snprintf at the end of what is there, counting what did not fit.
struct Out {
  char* buf;
  size_t size;
  size_t len = 0;
  __attribute__((format(printf, 2, 3))) void operator()(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf + std::min(len, size), len < size ? size - len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) len += static_cast<size_t>(n);
  }
};
}  // namespace

int print_record(const ProbeDef& d, const void* recv, uint32_t len, char* buf, size_t size) {
  const auto* rec = static_cast<const uint8_t*>(recv);
  Out o{buf, size};
  size_t& out = o.len;
  auto& put = o;
  auto u64_at = [&](uint32_t off) {
    uint64_t v = 0;
    if (off + 8 <= len) std::memcpy(&v, rec + off, 8);
    return v;
  };
  // The kernel's trace text (print_uprobe_event): "(0xIP)", and for a
  // return "(0xRET_IP <- 0xFUNC)" (its format file's print fmt, which
  // trace.dat readers follow, says FUNC <- RET_IP without 0x).
  if (d.is_return)
    put("(0x%" PRIx64 " <- 0x%" PRIx64 ")", u64_at(16), u64_at(8));
  else
    put("(0x%" PRIx64 ")", u64_at(8));
  for (const ProbeArg& a : d.args) {
    put(" %s=", a.name.c_str());
    const uint16_t count = a.array_len ? a.array_len : 1;
    if (a.array_len) put("{");
    for (uint16_t k = 0; k < count; ++k) {
      if (k) put(",");
      if (a.is_string()) {
        uint32_t loc = 0;
        const uint32_t at = a.offset + k * 4u;
        if (at + 4 <= len) std::memcpy(&loc, rec + at, 4);
        const uint32_t off = loc & 0xffff, l = loc >> 16;
        if (l == 0 || off + l > len)
          put("\"\"");
        else
          put("\"%.*s\"", static_cast<int>(strnlen(reinterpret_cast<const char*>(rec + off), l)),
              reinterpret_cast<const char*>(rec + off));
        continue;
      }
      const uint32_t at = a.offset + k * uint32_t{a.size};
      uint64_t raw = 0;
      if (at + a.size <= len) std::memcpy(&raw, rec + at, a.size);
      int64_t sv = 0;
      switch (a.size) {
        case 1:
          sv = static_cast<int8_t>(raw);
          break;
        case 2:
          sv = static_cast<int16_t>(raw);
          break;
        case 4:
          sv = static_cast<int32_t>(raw);
          break;
        default:
          sv = static_cast<int64_t>(raw);
      }
      switch (a.kind) {
        case FetchKind::kSigned:
          put("%" PRId64, sv);
          break;
        case FetchKind::kHex:
        case FetchKind::kSymbol:
          put("0x%" PRIx64, raw);
          break;
        case FetchKind::kChar:
          put("'%c'", static_cast<char>(raw));
          break;
        default:
          put("%" PRIu64, raw);
      }
    }
    if (a.array_len) put("}");
  }
  return static_cast<int>(out);
}

namespace {

// The shapes by event id, for print_probe (a PrintFn has no context).
// Set after the event is registered, cleared before it is removed.
std::atomic<const ProbeShape*> g_shapes[65536];

int print_probe(const void* rec, uint32_t len, char* buf, size_t size) {
  internal::CommonHeader h;
  if (len < sizeof h) return 0;
  std::memcpy(&h, rec, sizeof h);
  // order: acquire pairs with publish_shape's release.
  const ProbeShape* shape = g_shapes[h.type].load(std::memory_order_acquire);
  if (shape == nullptr) return 0;
  return print_record(shape->def(), rec, len, buf, size);
}

}  // namespace

void publish_shape(uint16_t id, const ProbeShape* shape) {
  g_shapes[id].store(shape, std::memory_order_release);
}

}  // namespace usrtrace::probe
