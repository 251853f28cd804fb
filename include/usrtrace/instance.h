// usrtrace::Instance: a handle to a trace instance (the kernel's
// trace_array), the C++ face of usrtrace.h.
//
//   auto app = usrtrace::Instance::get_by_name("myapp");   // instances/myapp
//   if (!app) return app.error();
//   app->set_event("myapp", "*", true);
//   app->print("request {} took {} us", id, us);
//   std::string text = app->read("trace").value();
//
// A handle holds a reference: while one exists the instance cannot be
// removed (rmdir gives EBUSY). Copies take another reference; destruction
// drops it. Errors are returned, never thrown: int -errno, or a Result<T>
// holding a positive errno.
//
// Context of every member, unless it says otherwise: any thread but not a
// signal handler; may allocate and take locks. One handle object may be
// used from many threads at once through its const and printing members.
#pragma once

#include <fmt/core.h>

#include <cstdarg>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "usrtrace/status.h"
#include "usrtrace/usrtrace.h"

namespace usrtrace {

class USRTRACE_EXPORT Instance {
 public:
  // Text longer than this is cut by printk() and print().
  static constexpr size_t kMaxPrint = 2030;

  // The top instance (the root of the tree); always there. The handle is
  // empty (valid() false) only when the system cannot trace at all (no rseq).
  static Instance top();
  // instances/NAME, created if missing (trace_array_get_by_name()). "" is
  // the top instance. Errors: EINVAL (bad name), ENOSPC, ENOMEM, ENOSYS.
  static Result<Instance> get_by_name(std::string_view name);
  // Creates instances/NAME (mkdir). Errors: EEXIST, and get_by_name()'s.
  static Result<Instance> create(std::string_view name);
  // instances/NAME if it exists. Errors: ENOENT, EINVAL.
  static Result<Instance> lookup(std::string_view name);

  // An empty handle: every call on it fails with -ENOENT or does nothing.
  Instance() = default;
  Instance(const Instance& o);
  Instance& operator=(const Instance& o);
  Instance(Instance&& o) noexcept : tr_(std::exchange(o.tr_, nullptr)) {}
  Instance& operator=(Instance&& o) noexcept;
  ~Instance();

  // Whether the handle refers to an instance. Context: any thread.
  bool valid() const { return tr_ != nullptr; }
  // "" for the top instance. Context: any thread.
  std::string_view name() const;
  bool is_top() const { return valid() && name().empty(); }

  // Removes the instance (rmdir) if this handle holds its only reference;
  // the handle is then empty. Returns 0, -EBUSY (other handles or readers
  // hold it), -EINVAL (the top instance or an empty handle).
  int destroy();

  // printf-style text recorded as an ftrace:print event, shown as
  // "calling_function: text" (trace_array_printk(); the function is found
  // from the return address, so a tail call shows the caller's caller). A
  // newline is added if missing; text past kMaxPrint is cut. Returns the
  // bytes of text recorded, 0 when the trace_printk option is off, -ENOENT
  // on an empty handle.
  // Context: any thread, not a signal handler (vsnprintf); no lock.
  int printk(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  int vprintk(const char* fmt, va_list ap) __attribute__((format(printf, 2, 0)));

  // fmt-style printk: print("{} of {}", i, n), checked at compile time.
  // Context: any thread, not a signal handler; no lock or allocation of
  // usrtrace's own (formatting user types is fmt's and theirs).
  template <class... Args>
  [[gnu::always_inline]] inline int print(fmt::format_string<Args...> format, Args&&... args) {
    return vprint(format, fmt::make_format_args(args...));
  }
  // print() with type-erased arguments (fmt::vformat's shape). The
  // formatting runs inside the library, which carries its own header-only
  // copy of fmt: programs need fmt's headers, not its library, and g++ and
  // clang++ programs alike can call it (they mangle some of libfmt's
  // template symbols differently). Returns as printk(); -EINVAL if a
  // formatter fails. Context: as print().
  int vprint(fmt::string_view format, fmt::format_args args);
  // Records TEXT as printk() would, without formatting.
  // Context: any thread, signal handlers included; no lock, no allocation.
  int puts(std::string_view text);

  // Enables or disables the events whose system and name match the globs
  // ("" matches anything; set_event's "system:event" semantics). Returns
  // how many events matched (> 0), -EINVAL if none, -ENOENT on an empty
  // handle, or the errno of a dynamic probe whose site could not be armed
  // (that event stays disabled; error_log has no line for it here).
  int set_event(std::string_view system, std::string_view event, bool enable);

  // Snapshots: usrtrace_snapshot_alloc() and usrtrace_snapshot() (see
  // usrtrace.h). snapshot() is lock-free and async-signal-safe.
  int snapshot_alloc();
  int snapshot(std::string_view reason = {});

  // tracing_on in the instance's directory: start and stop recording.
  // Context: any thread.
  void tracing_on();
  void tracing_off();
  bool is_tracing_on() const;

  // A control file of this instance, PATH relative to its directory
  // ("trace", "events/myapp/enable", "options/overwrite"): read whole, or
  // written as `echo -n TEXT > PATH` (write) or `>> PATH` (append).
  // read's errors: ENOENT, EISDIR, EACCES; write's: -errno, with an
  // error_log line where the kernel writes one. write returns the bytes
  // taken.
  Result<std::string> read(std::string_view path) const;
  long write(std::string_view path, std::string_view text);
  long append(std::string_view path, std::string_view text);
  // The path of this instance's directory from the root: "" or
  // "instances/NAME/".
  std::string dir() const;

  // The C handle this one wraps, borrowed (no reference is taken).
  // Context: any thread.
  usrtrace_array* c_array() const { return tr_; }

 private:
  explicit Instance(usrtrace_array* tr) : tr_(tr) {}
  usrtrace_array* tr_ = nullptr;
};

}  // namespace usrtrace
