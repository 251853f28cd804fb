// Event filters: the kernel's filter expression language (events/SYS/EVENT/
// filter, Documentation/trace/events.rst section 5), compiled once on the
// control plane into a program that the write path evaluates on the record
// before it is written.
//
//   prev_pid == 1 && (comm ~ "worker*" || bytes > 0x1000) && !(flags & 4)
//
// Operands: the event's fields (integers, bool, enums, pointers, char[N],
// __data_loc strings), the common fields (common_pid, common_type,
// common_flags, common_preempt_count), and two values that are not in the
// record: `comm` / `COMM` (the writing thread's name) and `cpu` / `CPU` (the
// CPU it runs on), as the kernel allows them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "usrtrace/internal/event_impl.h"

namespace usrtrace::filter {

// What a filter can test besides the record's own bytes.
struct Context {
  int cpu = -1;           // CPU of the write (-1: unknown, matches no CPU test)
  const char* comm = "";  // the writing thread's name, NUL-terminated, < 16 bytes
};

// The kernel's filter error kinds (trace_events_filter.c err_text), in its
// words; message() gives the text.
enum class ErrorCode : uint8_t {
  kInvalidOp,       // "Invalid operator"
  kTooManyOpen,     // "Too many '('"
  kTooManyClose,    // "Too few '('"
  kMissingQuote,    // "Missing matching quote"
  kOperandTooLong,  // "Operand too long"
  kExpectString,    // "Expecting string field"
  kExpectDigit,     // "Expecting numeric field"
  kIllegalFieldOp,  // "Illegal operation for field type"
  kFieldNotFound,   // "Field not found"
  kIllegalIntval,   // "Illegal integer value"
  kTooManyPreds,    // "Too many terms in predicate expression"
  kInvalidFilter,   // "Meaningless filter expression"
  kInvalidValue,    // "Invalid value (did you forget quotes)?"
  kNoFilter,        // "No filter found" (empty expression)
};
const char* message(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInvalidFilter;
  size_t pos = 0;  // byte offset in the expression where the caret goes
};

// A compiled filter. Immutable once built; shared by every thread writing
// the event.
class Program {
 public:
  // Compiles `expr` against `ev`'s fields. Returns nullptr with *err set if
  // the expression is invalid. The caller handles "0" (clear) itself.
  // Context: control plane; allocates.
  static std::unique_ptr<Program> compile(const internal::EventDesc& ev, std::string_view expr, Error* err);

  // Whether the record passes the filter. `rec` is a record as written:
  // `len` bytes, the common header first. Never reads outside
  // [rec, rec + len) (a __data_loc that points outside reads as "").
  // Context: any thread, signal handlers included; no lock, no allocation,
  // no system call; time bounded by the program's size.
  bool match(const void* rec, uint32_t len, const Context& ctx) const;

  // The expression as written (surrounding blanks and newline removed), as
  // the filter file shows it.
  const std::string& text() const;

  ~Program();

 private:
  Program();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The text a filter file shows after a failed write, as the kernel's does:
//   "<expr>\n<spaces>^\nparse_error: <message>\n"
std::string error_text(std::string_view expr, const Error& err);

}  // namespace usrtrace::filter
