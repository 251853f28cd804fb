// The fetch programs' interpreter and the probe events' shape (fetch.h).
// Kernel: trace_probe_tmpl.h process_fetch_insn_bottom(), store_trace_args();
// trace_uprobe.c process_fetch_insn(), fetch_store_string(),
// uprobe_event_define_fields(), print_uprobe_event(); trace_probe.c
// __set_print_fmt(), trace_probe_print_args().
//
// One pass per hit, in the hit's thread: the kernel sizes the strings
// first (__get_data_size) and then stores; here the record is a stack
// buffer of kMaxRecord bytes, so the strings are stored as they come and
// cut to what is left. Every read of the program's memory goes through
// base::safe_copy / safe_strncpy: a bad pointer costs a fault fixed up by
// the SIGSEGV handler, never a crash, and the good path makes no system
// call.
#include "probe/fetch.h"

#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "base/safe_copy.h"
#include "symbols/resolver.h"

namespace usrtrace::probe {
namespace {

constexpr uint32_t kEntryHeader = 16, kReturnHeader = 24;

uint64_t reg_at(const patch::Regs* r, uint32_t index) {
  uint64_t v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(r) + size_t{index} * 8, 8);
  return v;
}

// A word of the thread's memory; 0 if it cannot be read (the kernel's
// get_user_stack_nth()).
uint64_t read_word(uint64_t addr) {
  uint64_t v = 0;
  if (base::safe_copy(&v, reinterpret_cast<const void*>(addr), 8) != 0) return 0;
  return v;
}

// What one hit's fetches share: the context and the string area.
struct Hit {
  const Definition& d;
  const RunContext& ctx;
  uint8_t* rec;
  uint32_t cap;
  uint32_t dyn;   // the strings' end
  char comm[16];  // $comm, when the context has none
  bool comm_read = false;
};

// Stage 1 (process_fetch_insn()).
uint64_t load(const FetchInsn& c, const Arg& a, Hit& h) {
  const patch::Regs* r = h.ctx.regs;
  switch (c.op) {
    case FetchOp::kReg:
      return reg_at(r, c.param);
    case FetchOp::kStack:
      return read_word(r->sp + uint64_t{c.param} * 8);
    case FetchOp::kStackP:
      return r->sp;
    case FetchOp::kRetval:
      return r->ax;
    case FetchOp::kImm:
      return static_cast<uint64_t>(c.value);
    case FetchOp::kFoffs:
      return h.ctx.bias + static_cast<uint64_t>(c.value);
    case FetchOp::kArg: {
      // SysV: di si dx cx r8 r9, then the stack above the return address.
      static constexpr uint32_t kArgRegs[6] = {14, 13, 12, 11, 9, 8};
      if (h.d.is_return) return h.ctx.entry_args != nullptr && c.param < 6 ? h.ctx.entry_args[c.param] : 0;
      if (c.param < 6) return reg_at(r, kArgRegs[c.param]);
      return read_word(r->sp + (uint64_t{c.param} - 5) * 8);
    }
    case FetchOp::kComm:
      if (h.ctx.comm != nullptr) return reinterpret_cast<uint64_t>(h.ctx.comm);
      if (!h.comm_read) {
        std::memset(h.comm, 0, sizeof h.comm);
        prctl(PR_GET_NAME, h.comm);
        h.comm_read = true;
      }
      return reinterpret_cast<uint64_t>(h.comm);
    case FetchOp::kData:
      return reinterpret_cast<uint64_t>(a.data.c_str());
    default:
      return 0;
  }
}

void store_raw(uint64_t v, uint32_t size, uint8_t* dest) {
  std::memcpy(dest, &v, std::min<uint32_t>(size, 8));  // little-endian: the low bytes
}

// fetch_apply_bitfield(): shifts in the type's own width.
void apply_bitfield(const FetchInsn& c, uint8_t* dest) {
  switch (c.basesize) {
    case 1: {
      uint8_t v = dest[0];
      v = static_cast<uint8_t>(v << c.lshift);
      v = static_cast<uint8_t>(v >> c.rshift);
      dest[0] = v;
      break;
    }
    case 2: {
      uint16_t v;
      std::memcpy(&v, dest, 2);
      v = static_cast<uint16_t>(v << c.lshift);
      v = static_cast<uint16_t>(v >> c.rshift);
      std::memcpy(dest, &v, 2);
      break;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, dest, 4);
      v <<= c.lshift;
      v >>= c.rshift;
      std::memcpy(dest, &v, 4);
      break;
    }
    case 8: {
      uint64_t v;
      std::memcpy(&v, dest, 8);
      v <<= c.lshift;
      v >>= c.rshift;
      std::memcpy(dest, &v, 8);
      break;
    }
    default:
      break;
  }
}

void set_loc(uint8_t* dest, uint32_t len, uint32_t off) {
  const uint32_t loc = (len << 16) | (off & 0xffff);
  std::memcpy(dest, &loc, 4);
}

// fetch_store_string(): the string at addr after the fixed part, its
// __data_loc in dest. Returns the bytes used (NUL included), or < 0 when
// it faulted (its __data_loc then says length 0: "(fault)").
long store_string(uint64_t addr, uint8_t* dest, Hit& h) {
  const uint32_t room = h.cap - h.dyn;
  set_loc(dest, 0, h.dyn);
  if (room == 0) return -ENOMEM;
  char* dst = reinterpret_cast<char*>(h.rec + h.dyn);
  long n = base::safe_strncpy(dst, reinterpret_cast<const char*>(addr), room);
  if (n < 0) return n;
  if (static_cast<uint32_t>(n) == room) dst[n - 1] = '\0';  // cut: the kernel keeps maxlen bytes
  set_loc(dest, static_cast<uint32_t>(n), h.dyn);
  h.dyn += static_cast<uint32_t>(n);
  return n;
}

// Ours: symstr, the symbolizer's text (or the address) as a string.
long store_symstr(uint64_t addr, uint8_t* dest, Hit& h) {
  const uint32_t room = h.cap - h.dyn;
  set_loc(dest, 0, h.dyn);
  if (room < 2) return -ENOMEM;
  char* dst = reinterpret_cast<char*>(h.rec + h.dyn);
  int n = -1;
  if (h.ctx.symbolize != nullptr) n = h.ctx.symbolize(addr, dst, room, h.ctx.symbolize_arg);
  if (n < 0) {
    // 0x%lx by hand: snprintf is not async-signal-safe.
    char hex[19];
    int k = 0;
    for (int shift = 60; shift >= 0; shift -= 4) {
      const unsigned d = static_cast<unsigned>(addr >> shift) & 0xf;
      if (k == 0 && d == 0 && shift != 0) continue;
      hex[k++] = static_cast<char>(d < 10 ? '0' + d : 'a' + d - 10);
    }
    n = static_cast<int>(std::min<uint32_t>(static_cast<uint32_t>(k) + 2, room - 1));
    dst[0] = '0';
    if (n > 1) dst[1] = 'x';
    if (n > 2) std::memcpy(dst + 2, hex, static_cast<size_t>(n - 2));
  }
  n = static_cast<int>(std::min<uint32_t>(static_cast<uint32_t>(n), room - 1));
  dst[n] = '\0';
  set_loc(dest, static_cast<uint32_t>(n) + 1, h.dyn);
  h.dyn += static_cast<uint32_t>(n) + 1;
  return n + 1;
}

// The LP_ARRAY after the store at `s3` (and its bitfield), or nullptr.
const FetchInsn* array_at(const FetchInsn* s3) {
  const FetchInsn* c = s3 + 1;
  if (c->op == FetchOp::kModBf) ++c;
  return c->op == FetchOp::kLpArray ? c : nullptr;
}

// Stages 2 to 5 (process_fetch_insn_bottom()). Returns the string bytes
// used, or < 0 when a dereference faulted (the field keeps what run()
// preset: zeros, and strings of length 0).
long bottom(const FetchInsn* code, uint64_t val, uint8_t* dest, Hit& h) {
  const FetchInsn* s3 = nullptr;
  long total = 0, ret = 0;
  uint32_t i = 0;
  uint64_t lval = val;
stage2:
  while (code->op == FetchOp::kDeref || code->op == FetchOp::kUDeref) {
    lval = val;
    if (base::safe_copy(&val, reinterpret_cast<const void*>(val + static_cast<uint64_t>(code->value)), 8) !=
        0)
      return -EFAULT;
    ++code;
  }
  s3 = code;
  if ((s3->op == FetchOp::kStMem || s3->op == FetchOp::kStUMem) && array_at(s3) != nullptr) {
    // An array in memory: one read of all of it, element by element (as
    // the kernel reads it) only when that faults, so that the elements
    // before and after a hole keep their values.
    const FetchInsn* lp = array_at(s3);
    if (base::safe_copy(dest, reinterpret_cast<const void*>(val + static_cast<uint64_t>(s3->value)),
                        size_t{s3->param} * lp->param) == 0) {
      if (s3[1].op == FetchOp::kModBf)
        for (uint32_t k = 0; k < lp->param; ++k) apply_bitfield(s3[1], dest + size_t{k} * s3->param);
      return lp[1].op == FetchOp::kEnd ? 0 : -EILSEQ;
    }
  }
stage3:
  switch (code->op) {
    case FetchOp::kStRaw:
      store_raw(val, code->param, dest);
      break;
    case FetchOp::kStMem:
    case FetchOp::kStUMem:
      if (base::safe_copy(dest, reinterpret_cast<const void*>(val + static_cast<uint64_t>(code->value)),
                          code->param) != 0)
        std::memset(dest, 0, code->param);  // copy_from_user() zero-fills what it could not read
      break;
    case FetchOp::kStString:
    case FetchOp::kStUString:
      ret = store_string(val + static_cast<uint64_t>(code->value), dest, h);
      break;
    case FetchOp::kStSymstr:
      ret = store_symstr(val + static_cast<uint64_t>(code->value), dest, h);
      break;
    default:
      return -EILSEQ;
  }
  ++code;
  if (code->op == FetchOp::kModBf) {
    apply_bitfield(*code, dest);
    ++code;
  }
  if (code->op == FetchOp::kLpArray) {
    if (ret < 0) ret = 0;
    total += ret;
    if (++i < code->param) {
      code = s3;
      if (s3->op != FetchOp::kStString && s3->op != FetchOp::kStUString) {
        dest += s3->param;
        val += s3->param;
        goto stage3;
      }
      // An array of strings: the next pointer, read again from where the
      // last dereference read.
      --code;
      val = lval + sizeof(uint64_t);
      dest += 4;
      goto stage2;
    }
    ++code;
    ret = total;
  }
  return code->op == FetchOp::kEnd ? ret : -EILSEQ;
}

}  // namespace

uint32_t run(const Definition& d, uint16_t id, const RunContext& ctx, uint8_t* rec, uint32_t cap) {
  cap = std::min(cap, internal::kMaxRecord);
  // A definition smaller than its own header and probe fields has no record.
  if (cap < d.fixed_size || d.fixed_size < (d.is_return ? 24 : 16) || ctx.regs == nullptr) return 0;
  // The common header: the type, the rest 0 (the write path fills it). One
  // 8-byte store: a header built field by field on the stack and copied
  // stalled the load that forwards it (a third of a hit's cost).
  static_assert(sizeof(internal::CommonHeader) == 8);
  const uint64_t hdr = id;
  std::memcpy(rec, &hdr, 8);
  uint32_t fixed = 16;
  if (d.is_return) {
    std::memcpy(rec + 8, &ctx.func, 8);
    std::memcpy(rec + 16, &ctx.regs->ip, 8);
    fixed = 24;
  } else {
    std::memcpy(rec + 8, &ctx.regs->ip, 8);
  }
  if (d.regs_only) {
    // Registers only (the usual entry probe: %di, $arg1): nothing can
    // fault and every byte of the args is stored, so no program runs.
    for (const Arg& a : d.args) store_raw(reg_at(ctx.regs, a.fast_reg), a.type->size, rec + a.offset);
    return d.fixed_size;
  }
  // The args start zeroed: a fetch that faults leaves 0 and, for a string,
  // length 0 at the string area's start.
  if (d.fixed_size > fixed) std::memset(rec + fixed, 0, d.fixed_size - fixed);
  Hit h{d, ctx, rec, cap, d.fixed_size, {}};
  for (const Arg& a : d.args) {
    uint8_t* dest = rec + a.offset;
    if (a.type->is_string)
      for (uint32_t k = 0; k < (a.count ? a.count : 1u); ++k) set_loc(dest + 4 * k, 0, h.dyn);
    const uint64_t val = load(a.code[0], a, h);
    bottom(&a.code[1], val, dest, h);
  }
  return h.dyn;
}

// ---- The event's shape.
namespace {

// print_probe() finds its shape here by the record's type.
std::atomic<const EventShape*> g_shapes[65536];

int print_probe(const void* rec, uint32_t len, char* buf, size_t size) {
  internal::CommonHeader hdr;
  if (len < sizeof hdr) return 0;
  std::memcpy(&hdr, rec, sizeof hdr);
  // order: acquire pairs with publish_shape()'s release: the shape is built.
  const EventShape* shape = g_shapes[hdr.type].load(std::memory_order_acquire);
  if (shape == nullptr) return 0;
  return print_record(shape->def(), rec, len, buf, size);
}

}  // namespace

void publish_shape(uint16_t id, const EventShape* shape) {
  // order: release publishes the shape's contents to print_probe().
  g_shapes[id].store(shape, std::memory_order_release);
}

EventShape::EventShape(const Definition& d) : def_(d) {
  // A probe that may read bad memory needs the fault fixup before it can
  // run; installing it is cheap and idempotent.
  base::install_fault_fixup();
  using internal::FieldKind;
  const size_t n = def_.args.size() + (def_.is_return ? 2 : 1);
  names_.reserve(n);
  types_.reserve(n);
  fields_.reserve(n);
  auto add = [this](std::string name, std::string type, uint32_t offset, uint32_t size, bool is_signed,
                    FieldKind kind) {
    names_.push_back(std::move(name));
    types_.push_back(std::move(type));
    fields_.push_back(
        {nullptr, nullptr, static_cast<uint16_t>(offset), static_cast<uint16_t>(size), 0, is_signed, kind});
  };
  // uprobe_event_define_fields(), then traceprobe_define_arg_fields().
  std::string args;
  if (def_.is_return) {
    add("__probe_func", "unsigned long", 8, 8, false, FieldKind::kInteger);
    add("__probe_ret_ip", "unsigned long", 16, 8, false, FieldKind::kInteger);
    print_fmt_ = "\"(%lx <- %lx)";
    args = ", REC->__probe_func, REC->__probe_ret_ip";
  } else {
    add("__probe_ip", "unsigned long", 8, 8, false, FieldKind::kInteger);
    print_fmt_ = "\"(%lx)";
    args = ", REC->__probe_ip";
  }
  for (const Arg& a : def_.args) {
    const FetchType& t = *a.type;
    if (a.count == 0) {
      add(a.name, t.fmttype, a.offset, t.size, t.is_signed,
          t.is_string ? FieldKind::kString : FieldKind::kInteger);
    } else if (t.is_string) {
      // "__data_loc char[][N] NAME": the type as the kernel composes it.
      add(a.name, std::string(t.fmttype) + "[" + std::to_string(a.count) + "]", a.offset, a.size(),
          t.is_signed, FieldKind::kString);
    } else {
      // "u32 NAME[]", size N * 4: registry.cc prints an array of length 0
      // so, as the kernel prints the fields it defined without a length.
      add(a.name, t.fmttype, a.offset, a.size(), t.is_signed, FieldKind::kByteArray);
    }
    // __set_print_fmt().
    print_fmt_ += " " + a.name + "=";
    if (a.count) {
      print_fmt_ += "{";
      for (uint32_t j = 0; j < a.count; ++j) print_fmt_ += std::string(j ? "," : "") + t.fmt;
      print_fmt_ += "}";
      for (uint32_t j = 0; j < a.count; ++j)
        args += t.is_string ? ", __get_str(" + a.name + "[" + std::to_string(j) + "])"
                            : ", REC->" + a.name + "[" + std::to_string(j) + "]";
    } else {
      print_fmt_ += t.fmt;
      args += t.is_string ? ", __get_str(" + a.name + ")" : ", REC->" + a.name;
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

// ---- The `trace` text (print_uprobe_event(), trace_probe_print_args()).
namespace {

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

// One element of type t at p (its bytes checked to be in the record).
void print_value(Out& o, const FetchType& t, const uint8_t* p) {
  uint64_t u = 0;
  std::memcpy(&u, p, t.size);
  const std::string_view name = t.name;
  if (name == "symbol") {
    o.put("%s", symbols::Resolver::name(u, true).c_str());
    return;
  }
  if (name == "char") {
    o.put("'%c'", static_cast<char>(u));
    return;
  }
  if (name[0] == 'x') {
    o.put("0x%" PRIx64, u);
    return;
  }
  if (t.is_signed) {
    // Sign-extended from the type's width (an arithmetic shift in C++20).
    const unsigned shift = 64u - 8u * t.size;
    o.put("%" PRId64, static_cast<int64_t>(u << shift) >> shift);
    return;
  }
  o.put("%" PRIu64, u);
}

// The string of the __data_loc at p; "(fault)" for length 0 (and for a
// location outside the record: records are not trusted).
void print_string(Out& o, const uint8_t* rec, uint32_t len, const uint8_t* p) {
  uint32_t loc;
  std::memcpy(&loc, p, 4);
  const uint32_t off = loc & 0xffff, n = loc >> 16;
  if (n == 0 || off + n > len) {
    o.put("(fault)");
    return;
  }
  const char* s = reinterpret_cast<const char*>(rec + off);
  o.put("\"%.*s\"", static_cast<int>(strnlen(s, n)), s);
}

}  // namespace

int print_record(const Definition& d, const void* recv, uint32_t len, char* buf, size_t size) {
  const auto* rec = static_cast<const uint8_t*>(recv);
  Out o(buf, size);
  const uint32_t header = d.is_return ? kReturnHeader : kEntryHeader;
  if (len < header) return 0;
  uint64_t v0, v1 = 0;
  std::memcpy(&v0, rec + 8, 8);
  if (d.is_return) {
    std::memcpy(&v1, rec + 16, 8);
    o.put("(0x%" PRIx64 " <- 0x%" PRIx64 ")", v1, v0);
  } else {
    o.put("(0x%" PRIx64 ")", v0);
  }
  for (const Arg& a : d.args) {
    o.put(" %s=", a.name.c_str());
    if (a.offset + a.size() > len) break;
    const uint32_t elem = a.type->size;
    const uint32_t n = a.count ? a.count : 1;
    if (a.count) o.put("{");
    for (uint32_t j = 0; j < n; ++j) {
      const uint8_t* p = rec + a.offset + j * elem;
      if (a.type->is_string)
        print_string(o, rec, len, p);
      else
        print_value(o, *a.type, p);
      if (a.count) o.put(j == n - 1 ? "}" : ",");
    }
  }
  return o.len();
}

}  // namespace usrtrace::probe
