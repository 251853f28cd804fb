// The built-in ftrace events, with the kernel's ids and record layouts
// (kernel/trace/trace_entries.h), so that trace-cmd and libtraceevent read
// them as they read the kernel's: print, raw_data, function,
// funcgraph_entry, funcgraph_exit and user_stack.
//
// Each is defined once, here: its record, a plain struct (the common
// header, then the members as the kernel lays them out), and its event:
//
//   struct FunctionEvent {
//     using Record = FunctionRecord;
//     static constexpr uint16_t kId = 1;                 // the kernel's TRACE_FN
//     static constexpr const char* kName = "function";
//     static constexpr const char* kPrintFmt = "...";    // after "print fmt: "
//     static constexpr internal::FieldDesc kFields[] = {
//         USRTRACE_BUILTIN_FIELD(ip, "unsigned long", kInteger), ...};
//   };
//
// The field table is generated from the struct: USRTRACE_BUILTIN_FIELD
// takes a member's offset, size, array extent and signedness from Record,
// and only the kernel's C type (the struct's u64 is "unsigned long" for ip
// but "unsigned long long" for calltime) and the field kind are written.
// USRTRACE_BUILTIN_TAIL is a trailing `char buf[]`: the bytes after the
// fixed part (ISO C++ has no flexible array member). builtin_desc<E>()
// makes the EventDesc the registry holds; the writers fill the struct and
// the printers copy it out. A static_assert per event pins the generated
// layout to the kernel's format file (tests/events/builtin_test.cc checks
// the format text itself).
//
// Why not USRTRACE_EVENT: its types come from FieldTraits ("u64"), its
// printer from the print fmt and its id from a hash; these events need the
// kernel's type names, printers that resolve symbols, padding members and
// trailing data, and fixed ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "usrtrace/internal/event_impl.h"

// The FieldDesc of member `member` of the enclosing event's Record; `ctype`
// is its C type as the kernel's format file prints it, `kind` a FieldKind.
#define USRTRACE_BUILTIN_FIELD(member, ctype, kind)                                \
  ::usrtrace::internal::FieldDesc {                                                \
#member, ctype, static_cast < uint16_t>(offsetof(Record, member)),             \
        static_cast < uint16_t>(sizeof(Record::member)),                           \
        static_cast < uint16_t>(std::extent_v <decltype(Record::member)>),         \
        std::is_signed_v < std::remove_all_extents_t < decltype(Record::member)>>, \
        ::usrtrace::internal::FieldKind::kind                                      \
  }

// A trailing array of `elem` (`ctype name[]`, size 0): whatever follows
// the fixed part of the record, which is where it starts.
#define USRTRACE_BUILTIN_TAIL(name, elem, ctype, kind)                                     \
  ::usrtrace::internal::FieldDesc {                                                        \
#name, ctype, static_cast < uint16_t>(sizeof(Record)), 0, 0, std::is_signed_v < elem>, \
        ::usrtrace::internal::FieldKind::kind                                              \
  }

namespace usrtrace::events {

// ---- ftrace:print: trace_marker writes and printk-style writes.

struct PrintRecord {
  internal::CommonHeader common;
  uint64_t ip;  // the caller, 0 for trace_marker (printed as tracing_mark_write)
  // char buf[]: the text, a newline and a NUL
};

struct PrintEvent {
  using Record = PrintRecord;
  static constexpr uint16_t kId = 5;  // TRACE_PRINT
  static constexpr const char* kName = "print";
  static constexpr const char* kPrintFmt = "\"%ps: %s\", (void *)REC->ip, REC->buf";
  static constexpr internal::FieldDesc kFields[] = {
      USRTRACE_BUILTIN_FIELD(ip, "unsigned long", kInteger),
      USRTRACE_BUILTIN_TAIL(buf, char, "char", kCharArray),
  };
};

// ---- ftrace:raw_data: trace_marker_raw writes (a u32 id, then binary data).

struct RawDataRecord {
  internal::CommonHeader common;
  uint32_t id;
  // char buf[]: the data
};

struct RawDataEvent {
  using Record = RawDataRecord;
  // Ours from the start: the kernel's TRACE_RAW_DATA moves between versions
  // (19 on 6.18); readers take the id from the format file.
  static constexpr uint16_t kId = 12;
  static constexpr const char* kName = "raw_data";
  static constexpr const char* kPrintFmt = "\"id:%04x %08x\", REC->id, (int)REC->buf[0]";
  static constexpr internal::FieldDesc kFields[] = {
      USRTRACE_BUILTIN_FIELD(id, "unsigned int", kInteger),
      USRTRACE_BUILTIN_TAIL(buf, char, "char", kCharArray),
  };
};

// ---- ftrace:function, funcgraph_entry, funcgraph_exit: the function
// tracers' (src/function); trace-cmd's function graph display pairs the
// entries and exits.

struct FunctionRecord {
  internal::CommonHeader common;
  uint64_t ip;
  uint64_t parent_ip;
};

struct FunctionEvent {
  using Record = FunctionRecord;
  static constexpr uint16_t kId = 1;  // TRACE_FN
  static constexpr const char* kName = "function";
  static constexpr const char* kPrintFmt = "\" %ps <-- %ps\", (void *)REC->ip, (void *)REC->parent_ip";
  static constexpr internal::FieldDesc kFields[] = {
      USRTRACE_BUILTIN_FIELD(ip, "unsigned long", kInteger),
      USRTRACE_BUILTIN_FIELD(parent_ip, "unsigned long", kInteger),
  };
};

struct GraphEntryRecord {
  internal::CommonHeader common;
  uint64_t func;
  uint32_t depth;
  uint32_t pad;  // not a field: zeroed, so that no stack bytes reach the trace
};

struct GraphEntryEvent {
  using Record = GraphEntryRecord;
  static constexpr uint16_t kId = 11;  // TRACE_GRAPH_ENT
  static constexpr const char* kName = "funcgraph_entry";
  static constexpr const char* kPrintFmt = "\"--> %ps (%u)\", (void *)REC->func, REC->depth";
  static constexpr internal::FieldDesc kFields[] = {
      USRTRACE_BUILTIN_FIELD(func, "unsigned long", kInteger),
      USRTRACE_BUILTIN_FIELD(depth, "unsigned int", kInteger),
  };
};

struct GraphExitRecord {
  internal::CommonHeader common;
  uint64_t func;
  uint32_t depth;
  uint32_t overrun;
  uint64_t calltime;
  uint64_t rettime;
};

struct GraphExitEvent {
  using Record = GraphExitRecord;
  static constexpr uint16_t kId = 10;  // TRACE_GRAPH_RET
  static constexpr const char* kName = "funcgraph_exit";
  static constexpr const char* kPrintFmt =
      "\"<-- %ps (%u) (start: %llx  end: %llx) over: %u\", (void *)REC->func, REC->depth, "
      "REC->calltime, REC->rettime, REC->depth";
  static constexpr internal::FieldDesc kFields[] = {
      USRTRACE_BUILTIN_FIELD(func, "unsigned long", kInteger),
      USRTRACE_BUILTIN_FIELD(depth, "unsigned int", kInteger),
      USRTRACE_BUILTIN_FIELD(overrun, "unsigned int", kInteger),
      USRTRACE_BUILTIN_FIELD(calltime, "unsigned long long", kInteger),
      USRTRACE_BUILTIN_FIELD(rettime, "unsigned long long", kInteger),
  };
};

// ---- ftrace:user_stack: the stacktrace trigger's and func_stack_trace's
// backtraces (src/trigger/stacktrace.cc).

inline constexpr int kUserStackEntries = 8;  // the kernel's FTRACE_STACK_ENTRIES

struct UserStackRecord {
  internal::CommonHeader common;
  uint32_t tgid;
  uint32_t pad;                        // not a field: the kernel's alignment of caller
  uint64_t caller[kUserStackEntries];  // return addresses, innermost first, 0 after the last
};

struct UserStackEvent {
  using Record = UserStackRecord;
  static constexpr uint16_t kId = 13;  // TRACE_USER_STACK
  static constexpr const char* kName = "user_stack";
  static constexpr const char* kPrintFmt =
      "\"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" \"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" "
      "\"\\t=> %ps\\n\\t=> %ps\\n\", (void *)REC->caller[0], (void *)REC->caller[1], "
      "(void *)REC->caller[2], (void *)REC->caller[3], (void *)REC->caller[4], "
      "(void *)REC->caller[5], (void *)REC->caller[6], (void *)REC->caller[7]";
  // kByteArray: the format file declares "unsigned long caller[8]", and
  // filters and hist keys refuse it (an array, not a number).
  static constexpr internal::FieldDesc kFields[] = {
      USRTRACE_BUILTIN_FIELD(tgid, "unsigned int", kInteger),
      USRTRACE_BUILTIN_FIELD(caller, "unsigned long", kByteArray),
  };
};

// The ids by the names the rest of the code uses.
inline constexpr uint16_t kPrintId = PrintEvent::kId;
inline constexpr uint16_t kRawDataId = RawDataEvent::kId;

// The descriptor the registry holds for built-in event E, printed by
// `print`. Constant-initialized: it is complete before any constructor
// registers it.
template <class E>
constexpr internal::EventDesc builtin_desc(internal::PrintFn print) {
  return {.system = "ftrace",
          .name = E::kName,
          .print_fmt = E::kPrintFmt,
          .fields = E::kFields,
          .nfields = static_cast<uint16_t>(std::size(E::kFields)),
          .fixed_size = static_cast<uint16_t>(sizeof(typename E::Record)),
          .print = print,
          .id = E::kId};
}

// ---- The layouts, as the kernel's events/ftrace/NAME/format files show
// them (offset and size of each field, in order) and the record's size.
// These are the ABI trace-cmd and libtraceevent read: they must not move.

struct KernelField {
  uint16_t offset;
  uint16_t size;
};

template <class E, size_t N>
constexpr bool kernel_layout(size_t record_size, const KernelField (&want)[N]) {
  if (sizeof(typename E::Record) != record_size || std::size(E::kFields) != N) return false;
  for (size_t i = 0; i < N; ++i)
    if (E::kFields[i].offset != want[i].offset || E::kFields[i].size != want[i].size) return false;
  return true;
}

static_assert(kernel_layout<PrintEvent>(16, {{8, 8}, {16, 0}}));
static_assert(kernel_layout<RawDataEvent>(12, {{8, 4}, {12, 0}}));
static_assert(kernel_layout<FunctionEvent>(24, {{8, 8}, {16, 8}}));
static_assert(kernel_layout<GraphEntryEvent>(24, {{8, 8}, {16, 4}}));
static_assert(kernel_layout<GraphExitEvent>(40, {{8, 8}, {16, 4}, {20, 4}, {24, 8}, {32, 8}}));
static_assert(kernel_layout<UserStackEvent>(80, {{8, 4}, {16, 64}}));

}  // namespace usrtrace::events
