// What the inline half of a typed event needs: the record's common header,
// the field and event descriptors, the type-to-field mapping and the macro
// machinery behind USRTRACE_EVENT (event.h). Nothing here is API: names may
// change. Context of everything called from a call site: any thread, signal
// handlers included; no lock, no allocation, no system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

#ifndef USRTRACE_EXPORT
#define USRTRACE_EXPORT __attribute__((visibility("default")))
#endif

namespace usrtrace {

// A dynamic byte array field (__data_loc u8[]).
using Bytes = std::span<const uint8_t>;

namespace internal {

// ABI: the kernel's common fields (8 bytes on current kernels).
struct CommonHeader {
  uint16_t type;          // the event id
  uint8_t flags;          // see src/events/flags.h for their user-space meaning
  uint8_t preempt_count;  // low nibble: write nesting depth (signal handlers)
  int32_t pid;            // thread id
};
static_assert(sizeof(CommonHeader) == 8);

// __data_loc: (length << 16) | offset from the record's start; length
// includes a string's NUL.
using DataLoc = uint32_t;

enum class FieldKind : uint8_t {
  kInteger,  // signed or unsigned, 1/2/4/8 bytes
  kBool,
  kEnum,  // printed as its underlying integer
  kPointer,
  kCharArray,  // char name[N], NUL-terminated when written
  kByteArray,  // u8 name[N]
  kString,     // __data_loc char[] name
  kDynBytes,   // __data_loc u8[] name
};

struct FieldDesc {
  const char* name;
  const char* type;    // C type as the format file prints it ("u64", "char", "__data_loc char[]")
  uint16_t offset;     // in the record
  uint16_t size;       // 4 for __data_loc fields
  uint16_t array_len;  // fixed arrays: element count; else 0
  bool is_signed;
  FieldKind kind;
};

// Formats one record as the event's print fmt says. `len` is the record's
// stored length (dynamic fields are bounds-checked against it). Returns the
// length printed (snprintf's convention).
using PrintFn = int (*)(const void* rec, uint32_t len, char* buf, size_t size);

// Filters and triggers of one event in every instance (src/trigger);
// opaque here.
struct EventControl;

// Bit kControlBit of EventDesc::enabled: the event has a filter or a
// trigger in some instance, so writes take the controlled path
// (src/trigger). Instances use bits 0..kControlBit-1.
inline constexpr int kControlBit = 63;

// One per event per program. Registered by a static constructor of the
// object that defines it, unregistered when that object is unloaded.
struct EventDesc {
  const char* system;
  const char* name;
  const char* print_fmt;  // the text after "print fmt: " in the format file
  const FieldDesc* fields;
  uint16_t nfields;
  uint16_t fixed_size;  // sizeof the record, common header included
  PrintFn print;
  // Bit i set: the event is written into the instance in slot i; bit
  // kControlBit: see there. Changed with atomic or/and (by the control plane,
  // and by enable_event/disable_event triggers on the write path), read by
  // every call site: nonzero means the call site calls write_event().
  std::atomic<uint64_t> enabled{0};
  uint16_t id = 0;            // assigned at registration
  EventDesc* next = nullptr;  // registry list, under the registry lock
  bool registered = false;
  // Set with kControlBit, before it; freed only after the event is
  // unregistered and a grace period has passed.
  std::atomic<EventControl*> control{nullptr};
};

USRTRACE_EXPORT void register_event(EventDesc* ev);
USRTRACE_EXPORT void unregister_event(EventDesc* ev);

// The out-of-line lower half: fills the common header's flags, nesting
// depth and pid, and writes the `len`-byte record into every instance
// enabled in ev->enabled. `rec` starts with a CommonHeader whose type is set.
// Context: any thread, signal handlers included; no lock, no allocation.
USRTRACE_EXPORT void write_event(const EventDesc* ev, void* rec, uint32_t len);

// Records are at most this long; dynamic fields beyond it are truncated.
inline constexpr uint32_t kMaxRecord = 2048;

// ---- Type to field mapping.

// No mapping: the type is not a valid field type. Defined (not only
// declared) so that the error names the types a field may have, where an
// incomplete type would leave the user reading template internals.
template <class T>
struct FieldTraits {
  static_assert(sizeof(T*) == 0,
                "USRTRACE_EVENT: not a field type; fields are integers, bool, enums, pointers, "
                "const char* (a string), usrtrace::Bytes, char[N] and uint8_t[N]");
};

template <class T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) struct FieldTraits<T> {
  using Storage = T;
  using Param = T;
  static constexpr FieldKind kind = FieldKind::kInteger;
  static constexpr uint16_t array_len = 0;
  static constexpr const char* type_name() {
    constexpr bool s = std::is_signed_v<T> && !std::is_same_v<T, char>;
    if constexpr (std::is_same_v<T, char>)
      return "char";
    else if constexpr (sizeof(T) == 1)
      return s ? "s8" : "u8";
    else if constexpr (sizeof(T) == 2)
      return s ? "s16" : "u16";
    else if constexpr (sizeof(T) == 4)
      return s ? "s32" : "u32";
    else
      return s ? "s64" : "u64";
  }
  static constexpr bool is_signed = std::is_signed_v<T>;
  static void assign(Storage& dst, Param v, char*, uint32_t&) { dst = v; }
};

template <>
struct FieldTraits<bool> {
  using Storage = bool;
  using Param = bool;
  static constexpr FieldKind kind = FieldKind::kBool;
  static constexpr uint16_t array_len = 0;
  static constexpr const char* type_name() { return "bool"; }
  static constexpr bool is_signed = false;
  static void assign(Storage& dst, Param v, char*, uint32_t&) { dst = v; }
};

template <class T>
requires std::is_enum_v<T>
struct FieldTraits<T> {
  using U = std::underlying_type_t<T>;
  using Storage = U;
  using Param = T;
  static constexpr FieldKind kind = FieldKind::kEnum;
  static constexpr uint16_t array_len = 0;
  static constexpr const char* type_name() { return FieldTraits<U>::type_name(); }
  static constexpr bool is_signed = std::is_signed_v<U>;
  static void assign(Storage& dst, Param v, char*, uint32_t&) { dst = static_cast<U>(v); }
};

template <class T>
requires(std::is_pointer_v<T> && !std::is_same_v<T, const char*>) struct FieldTraits<T> {
  using Storage = uint64_t;
  using Param = T;
  static constexpr FieldKind kind = FieldKind::kPointer;
  static constexpr uint16_t array_len = 0;
  static constexpr const char* type_name() { return "void *"; }
  static constexpr bool is_signed = false;
  static void assign(Storage& dst, Param v, char*, uint32_t&) { dst = reinterpret_cast<uint64_t>(v); }
};

// char name[N]: copies at most N-1 bytes and NUL-fills the rest, as the
// kernel's strscpy-based assignments do, so that %s prints stay inside.
template <size_t N>
struct FieldTraits<char[N]> {
  static_assert(N >= 1 && N <= 1024, "char array fields hold 1..1024 bytes");
  using Storage = char[N];
  using Param = std::string_view;
  static constexpr FieldKind kind = FieldKind::kCharArray;
  static constexpr uint16_t array_len = N;
  static constexpr const char* type_name() { return "char"; }
  static constexpr bool is_signed = true;
  static void assign(Storage& dst, Param v, char*, uint32_t&) {
    size_t n = v.size() < N - 1 ? v.size() : N - 1;
    std::memcpy(dst, v.data(), n);
    std::memset(dst + n, 0, N - n);
  }
};

template <size_t N>
struct FieldTraits<uint8_t[N]> {
  static_assert(N >= 1 && N <= 1024, "byte array fields hold 1..1024 bytes");
  using Storage = uint8_t[N];
  using Param = std::span<const uint8_t, N>;
  static constexpr FieldKind kind = FieldKind::kByteArray;
  static constexpr uint16_t array_len = N;
  static constexpr const char* type_name() { return "u8"; }
  static constexpr bool is_signed = false;
  static void assign(Storage& dst, Param v, char*, uint32_t&) { std::memcpy(dst, v.data(), N); }
};

// Appends `n` bytes (+ a NUL when `nul`) after the fixed part; `end` is the
// record's current length. Truncates at kMaxRecord.
inline DataLoc append_dynamic(char* rec, uint32_t& end, const void* p, size_t n, bool nul) {
  uint32_t room = kMaxRecord - end - (nul ? 1 : 0);
  uint32_t len = n < room ? static_cast<uint32_t>(n) : room;
  std::memcpy(rec + end, p, len);
  if (nul) rec[end + len] = 0;
  uint32_t stored = len + (nul ? 1 : 0);
  DataLoc loc = (stored << 16) | end;
  end += stored;
  return loc;
}

template <>
struct FieldTraits<const char*> {
  using Storage = DataLoc;
  using Param = std::string_view;
  static constexpr FieldKind kind = FieldKind::kString;
  static constexpr uint16_t array_len = 0;
  static constexpr const char* type_name() { return "__data_loc char[]"; }
  static constexpr bool is_signed = true;
  static constexpr bool dynamic = true;
  static void assign(Storage& dst, Param v, char* rec, uint32_t& end) {
    dst = append_dynamic(rec, end, v.data(), v.size(), true);
  }
};

template <>
struct FieldTraits<Bytes> {
  using Storage = DataLoc;
  using Param = Bytes;
  static constexpr FieldKind kind = FieldKind::kDynBytes;
  static constexpr uint16_t array_len = 0;
  static constexpr const char* type_name() { return "__data_loc u8[]"; }
  static constexpr bool is_signed = false;
  static constexpr bool dynamic = true;
  static void assign(Storage& dst, Param v, char* rec, uint32_t& end) {
    dst = append_dynamic(rec, end, v.data(), v.size(), false);
  }
};

template <class T>
concept DynamicField = !std::is_void_v<T> && requires {
  FieldTraits<T>::dynamic;
};  // void: kAnyDynamic's lead

template <class... T>
inline constexpr bool kAnyDynamic = (DynamicField<T> || ...);

// For the printer: a __data_loc field's bytes, or "" if it points outside
// the record (a record is never trusted to be well formed).
inline const char* get_str(const void* rec, uint32_t len, DataLoc loc) {
  uint32_t off = loc & 0xffff, n = loc >> 16;
  if (n == 0 || off + n > len) return "";
  const char* s = static_cast<const char*>(rec) + off;
  return s[n - 1] == 0 ? s : "";
}

// Rounds a record length up to the ring buffer's 4-byte granule, zeroing
// the padding so no stack bytes reach the trace.
inline uint32_t pad_record(char* rec, uint32_t len) {
  uint32_t padded = (len + 3) & ~3u;
  std::memset(rec + len, 0, padded - len);
  return padded;
}

}  // namespace internal
}  // namespace usrtrace

// ---- Preprocessor machinery: iterate a sequence of (type, name) pairs.
// (a)(b)(c) is walked by two macros that expand to each other; the
// trailing _END of the last one is pasted into a no-op.

#define USRTRACE_PP_SEQ_(m, seq) USRTRACE_PP_SEQ_END(USRTRACE_PP_SEQ_##m##_A seq)
#define USRTRACE_PP_SEQ_END(...) USRTRACE_PP_SEQ_END_(__VA_ARGS__)
#define USRTRACE_PP_SEQ_END_(...) __VA_ARGS__##_END

// Record members: `Storage name;`
#define USRTRACE_PP_SEQ_MEMBER_A(t, n)             \
  ::usrtrace::internal::FieldTraits<t>::Storage n; \
  USRTRACE_PP_SEQ_MEMBER_B
#define USRTRACE_PP_SEQ_MEMBER_B(t, n)             \
  ::usrtrace::internal::FieldTraits<t>::Storage n; \
  USRTRACE_PP_SEQ_MEMBER_A
#define USRTRACE_PP_SEQ_MEMBER_A_END
#define USRTRACE_PP_SEQ_MEMBER_B_END

// Field descriptors.
#define USRTRACE_PP_FD_(R, t, n)                                                     \
  ::usrtrace::internal::FieldDesc{#n,                                                \
                                  ::usrtrace::internal::FieldTraits<t>::type_name(), \
                                  static_cast<uint16_t>(offsetof(R, n)),             \
                                  static_cast<uint16_t>(sizeof(R::n)),               \
                                  ::usrtrace::internal::FieldTraits<t>::array_len,   \
                                  ::usrtrace::internal::FieldTraits<t>::is_signed,   \
                                  ::usrtrace::internal::FieldTraits<t>::kind},
#define USRTRACE_PP_SEQ_FDESC_A(t, n) USRTRACE_PP_FD_(Record, t, n) USRTRACE_PP_SEQ_FDESC_B
#define USRTRACE_PP_SEQ_FDESC_B(t, n) USRTRACE_PP_FD_(Record, t, n) USRTRACE_PP_SEQ_FDESC_A
#define USRTRACE_PP_SEQ_FDESC_A_END
#define USRTRACE_PP_SEQ_FDESC_B_END

// Parameters: `Param name,` (the list ends with a defaulted tag).
#define USRTRACE_PP_SEQ_PARAM_A(t, n) ::usrtrace::internal::FieldTraits<t>::Param n, USRTRACE_PP_SEQ_PARAM_B
#define USRTRACE_PP_SEQ_PARAM_B(t, n) ::usrtrace::internal::FieldTraits<t>::Param n, USRTRACE_PP_SEQ_PARAM_A
#define USRTRACE_PP_SEQ_PARAM_A_END
#define USRTRACE_PP_SEQ_PARAM_B_END

// Assignments into the record `r_` with dynamic data appended at `end_`.
#define USRTRACE_PP_SEQ_ASSIGN_A(t, n)                                \
  ::usrtrace::internal::FieldTraits<t>::assign(r_->n, n, buf_, end_); \
  USRTRACE_PP_SEQ_ASSIGN_B
#define USRTRACE_PP_SEQ_ASSIGN_B(t, n)                                \
  ::usrtrace::internal::FieldTraits<t>::assign(r_->n, n, buf_, end_); \
  USRTRACE_PP_SEQ_ASSIGN_A
#define USRTRACE_PP_SEQ_ASSIGN_A_END
#define USRTRACE_PP_SEQ_ASSIGN_B_END

// Field types, comma-separated with a leading comma.
#define USRTRACE_PP_SEQ_TYPES_A(t, n) , t USRTRACE_PP_SEQ_TYPES_B
#define USRTRACE_PP_SEQ_TYPES_B(t, n) , t USRTRACE_PP_SEQ_TYPES_A
#define USRTRACE_PP_SEQ_TYPES_A_END
#define USRTRACE_PP_SEQ_TYPES_B_END

// Argument names, each followed by a comma.
#define USRTRACE_PP_SEQ_NAMES_A(t, n) n, USRTRACE_PP_SEQ_NAMES_B
#define USRTRACE_PP_SEQ_NAMES_B(t, n) n, USRTRACE_PP_SEQ_NAMES_A
#define USRTRACE_PP_SEQ_NAMES_A_END
#define USRTRACE_PP_SEQ_NAMES_B_END
