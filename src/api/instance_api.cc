// The C++ API (usrtrace/instance.h). A handle is a usrtrace_array* holding
// one reference, so copies, moves and destruction are the C API's get/put.
// fmt is compiled into the library (FMT_HEADER_ONLY, set in
// src/CMakeLists.txt) so that it needs no libfmt.so and no symbol of one.
#include "usrtrace/instance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "api/api_internal.h"
#include "instance/instance.h"

namespace usrtrace {
namespace {

instance::Instance* impl(usrtrace_array* tr) { return reinterpret_cast<instance::Instance*>(tr); }

// The C API reports failures in errno.
int last_error() { return errno != 0 ? errno : EINVAL; }

}  // namespace

Instance Instance::top() {
  errno = 0;
  return Instance(usrtrace_array_get_by_name(nullptr));
}

Result<Instance> Instance::get_by_name(std::string_view name) {
  std::string n(name);
  usrtrace_array* tr = usrtrace_array_get_by_name(n.c_str());
  if (!tr) return Result<Instance>::error(last_error());
  return Instance(tr);
}

Result<Instance> Instance::create(std::string_view name) {
  std::string n(name);
  usrtrace_array* tr = usrtrace_array_create(n.c_str());
  if (!tr) return Result<Instance>::error(last_error());
  return Instance(tr);
}

Result<Instance> Instance::lookup(std::string_view name) {
  std::string n(name);
  usrtrace_array* tr = usrtrace_array_lookup(n.c_str());
  if (!tr) return Result<Instance>::error(last_error());
  return Instance(tr);
}

Instance::Instance(const Instance& o) : tr_(usrtrace_array_get(o.tr_)) {}

Instance& Instance::operator=(const Instance& o) {
  if (this != &o) {
    usrtrace_array* old = tr_;
    tr_ = usrtrace_array_get(o.tr_);
    usrtrace_array_put(old);
  }
  return *this;
}

Instance& Instance::operator=(Instance&& o) noexcept {
  if (this != &o) {
    usrtrace_array_put(tr_);
    tr_ = std::exchange(o.tr_, nullptr);
  }
  return *this;
}

Instance::~Instance() { usrtrace_array_put(tr_); }

std::string_view Instance::name() const { return tr_ ? impl(tr_)->name() : std::string_view(); }

int Instance::snapshot_alloc() { return tr_ ? usrtrace_snapshot_alloc(tr_) : -ENOENT; }

int Instance::snapshot(std::string_view reason) {
  if (!tr_) return -ENOENT;
  // A NUL-terminated copy without allocating: reasons are cut to 127 bytes.
  char buf[instance::kSnapshotReasonMax];
  const size_t n = std::min(reason.size(), sizeof buf - 1);
  if (n != 0) std::memcpy(buf, reason.data(), n);  // data() may be null when empty
  buf[n] = '\0';
  return usrtrace_snapshot(tr_, buf);
}

int Instance::destroy() {
  if (!tr_) return -EINVAL;
  // This handle's own reference is the one allowed: removing the instance
  // and dropping it are one step, so no lookup can slip in between.
  int r = instance::Instance::destroy(impl(tr_), 1);
  if (r == 0) tr_ = nullptr;  // the reference went with the instance
  return r;
}

int Instance::printk(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = api::printk_ap(tr_, __builtin_return_address(0), fmt, ap);
  va_end(ap);
  return r;
}

int Instance::vprintk(const char* fmt, va_list ap) {
  return api::printk_ap(tr_, __builtin_return_address(0), fmt, ap);
}

int Instance::vprint(fmt::string_view format, fmt::format_args args) {
  if (!tr_) return -ENOENT;
  char buf[kMaxPrint];
  size_t n = 0;
  try {
    n = fmt::vformat_to_n(buf, sizeof buf, format, args).size;
  } catch (...) {  // a user formatter's exception never leaves the library
    return -EINVAL;
  }
  return static_cast<int>(impl(tr_)->printk(std::string_view(buf, n < sizeof buf ? n : sizeof buf),
                                            reinterpret_cast<uintptr_t>(__builtin_return_address(0))));
}

int Instance::puts(std::string_view text) {
  if (!tr_) return -ENOENT;
  return static_cast<int>(impl(tr_)->printk(text, reinterpret_cast<uintptr_t>(__builtin_return_address(0))));
}

int Instance::set_event(std::string_view system, std::string_view event, bool enable) {
  if (!tr_) return -ENOENT;
  int n = impl(tr_)->set_event(system.empty() ? "*" : system, event.empty() ? "*" : event, enable);
  if (n < 0) return n;  // a probe's site could not be armed
  return n > 0 ? n : -EINVAL;
}

void Instance::tracing_on() {
  if (tr_) impl(tr_)->set_tracing_on(true);
}

void Instance::tracing_off() {
  if (tr_) impl(tr_)->set_tracing_on(false);
}

bool Instance::is_tracing_on() const { return tr_ && impl(tr_)->tracing_on(); }

std::string Instance::dir() const {
  if (!tr_ || impl(tr_)->is_top()) return "";
  return "instances/" + impl(tr_)->name() + "/";
}

}  // namespace usrtrace
