// Typed trace events: the user-space TRACE_EVENT.
//
//   USRTRACE_EVENT(demo, request,
//       (uint64_t, id)(uint32_t, bytes)(char[16], name)(const char*, path),
//       "id=%llu bytes=%u name=%s path=%s", REC->id, REC->bytes, REC->name, __get_str(path))
//
//   trace_demo_request(42, 512, "alpha", "/index.html");   // the call site
//
// One definition gives the record layout (the kernel's common fields, then
// the fields in order), the format file (events/demo/request/format, which
// libtraceevent parses), a printer compiled from the print fmt, an id, and
// the inline call site trace_<system>_<name>(), whose cost while the event is
// disabled everywhere is one relaxed load and one predicted branch.
//
// Field types and their format-file types:
//   integers (u8..u64, s8..s64, char), bool, enums (as their underlying
//   integer), pointers (void *), char[N] (a string of at most N-1 bytes, NUL
//   terminated), uint8_t[N] (N bytes, from a std::span<const uint8_t, N>),
//   const char* (__data_loc char[]: a dynamic string, passed as
//   std::string_view), usrtrace::Bytes (__data_loc u8[]).
// The print fmt is the kernel's: a printf format and C expressions over
// REC->field; __get_str(field) reads a dynamic string. Records are at most
// 2 KiB; longer dynamic data is truncated.
//
// Define an event once in a header and include it where it is used; the
// event registers itself when the program (or shared object) is loaded and
// unregisters when it is unloaded. (g++ marks the event's inline statics
// STB_GNU_UNIQUE, which keeps a shared object loaded after dlclose unless it
// is built with -fno-gnu-unique; its events then simply stay.)
// Context of a call site: any thread, signal handlers included; no lock, no
// allocation, no system call (except a thread's very first event, which
// registers the thread and reads its name).
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdint>

#include "usrtrace/internal/event_impl.h"

namespace usrtrace::internal {

struct ArgsEnd {};

struct Registrar {
  explicit Registrar(EventDesc* d) : desc(d) { register_event(d); }
  ~Registrar() { unregister_event(desc); }
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;
  EventDesc* desc;
};

// printf into `buf` without the compiler's format checks: the print fmt is
// the kernel's, where %llu is a u64 (unsigned long here, same ABI).
USRTRACE_EXPORT int print_record(char* buf, size_t size, const char* fmt, ...);

}  // namespace usrtrace::internal

// In a print fmt: a dynamic string field of the record being printed.
#define __get_str(field) ::usrtrace::internal::get_str(usrtrace_rec_, usrtrace_len_, REC->field)

#define USRTRACE_EVENT(system, name, fields, ...)                                                            \
  struct usrtrace_record_##system##_##name {                                                                 \
    ::usrtrace::internal::CommonHeader common;                                                               \
    USRTRACE_PP_SEQ_(MEMBER, fields)                                                                         \
  };                                                                                                         \
  struct usrtrace_event_##system##_##name {                                                                  \
    using Record = usrtrace_record_##system##_##name;                                                        \
    static constexpr bool kDynamic =                                                                         \
        ::usrtrace::internal::kAnyDynamic<void USRTRACE_PP_SEQ_(TYPES, fields)>;                             \
    static constexpr ::usrtrace::internal::FieldDesc kFields[] = {USRTRACE_PP_SEQ_(FDESC, fields)};          \
    static int print(const void* usrtrace_src_, uint32_t usrtrace_len_, char* usrtrace_out_,                 \
                     size_t usrtrace_size_) {                                                                \
      alignas(8) char usrtrace_rec_[::usrtrace::internal::kMaxRecord];                                       \
      if (usrtrace_len_ > sizeof usrtrace_rec_) usrtrace_len_ = sizeof usrtrace_rec_;                        \
      std::memset(usrtrace_rec_, 0, sizeof(Record));                                                         \
      std::memcpy(usrtrace_rec_, usrtrace_src_, usrtrace_len_);                                              \
      const Record* REC = reinterpret_cast<const Record*>(usrtrace_rec_);                                    \
      (void)REC;                                                                                             \
      return ::usrtrace::internal::print_record(usrtrace_out_, usrtrace_size_, __VA_ARGS__);                 \
    }                                                                                                        \
    static inline ::usrtrace::internal::EventDesc desc{                                                      \
        #system,                                                                                             \
        #name,                                                                                               \
        #__VA_ARGS__,                                                                                        \
        kFields,                                                                                             \
        static_cast<uint16_t>(sizeof kFields / sizeof kFields[0]),                                           \
        static_cast<uint16_t>(sizeof(Record)),                                                               \
        &print};                                                                                             \
    static inline ::usrtrace::internal::Registrar registrar{&desc};                                          \
    [[gnu::noinline]] static void emit_dynamic(USRTRACE_PP_SEQ_(PARAM,                                       \
                                                                fields)::usrtrace::internal::ArgsEnd = {}) { \
      alignas(8) char buf_[::usrtrace::internal::kMaxRecord + 4];                                            \
      auto* r_ = reinterpret_cast<Record*>(buf_);                                                            \
      uint32_t end_ = sizeof(Record);                                                                        \
      r_->common.type = desc.id;                                                                             \
      USRTRACE_PP_SEQ_(ASSIGN, fields)                                                                       \
      ::usrtrace::internal::write_event(&desc, buf_, ::usrtrace::internal::pad_record(buf_, end_));          \
    }                                                                                                        \
  };                                                                                                         \
  template <class = void>                                                                                    \
  [[gnu::always_inline]] inline void trace_##system##_##name(                                                \
      USRTRACE_PP_SEQ_(PARAM, fields)::usrtrace::internal::ArgsEnd = {}) {                                   \
    using E_ = usrtrace_event_##system##_##name;                                                             \
    (void)&E_::registrar;                                                                                    \
    /* order: relaxed is enough; enabling is a soft switch, as in the kernel. */                             \
    if (__builtin_expect(E_::desc.enabled.load(std::memory_order_relaxed) != 0, 0)) {                        \
      if constexpr (E_::kDynamic) {                                                                          \
        E_::emit_dynamic(USRTRACE_PP_SEQ_(NAMES, fields)::usrtrace::internal::ArgsEnd{});                    \
      } else {                                                                                               \
        alignas(8) char buf_[sizeof(typename E_::Record)];                                                   \
        auto* r_ = reinterpret_cast<typename E_::Record*>(buf_);                                             \
        uint32_t end_ = sizeof(typename E_::Record);                                                         \
        r_->common.type = E_::desc.id;                                                                       \
        USRTRACE_PP_SEQ_(ASSIGN, fields)                                                                     \
        ::usrtrace::internal::write_event(&E_::desc, buf_, end_);                                            \
      }                                                                                                      \
    }                                                                                                        \
  }
