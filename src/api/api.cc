// The C API (usrtrace/usrtrace.h): trace_array_* on top of instance::Instance.
// A struct usrtrace_array* is an instance::Instance* holding one reference
// (Instance::get_reader()), which is what keeps rmdir from freeing it.
#include <cerrno>
#include <cstdarg>
#include <cstdio>

#include "api/api_internal.h"
#include "base/compiler.h"
#include "events/builtin.h"
#include "instance/instance.h"
#include "usrtrace/instance.h"
#include "usrtrace/internal/event_impl.h"
#include "usrtrace/usrtrace.h"

using usrtrace::instance::Instance;

// The ftrace:print record holds kMaxRecord bytes: its fixed part (common
// fields + ip, events/builtin.h), the text, its newline and NUL
// (instance/slot_write.cc).
static_assert(usrtrace::Instance::kMaxPrint ==
              usrtrace::internal::kMaxRecord - sizeof(usrtrace::events::PrintRecord) - 2);

namespace {

Instance* to_instance(usrtrace_array* tr) { return reinterpret_cast<Instance*>(tr); }
const Instance* to_instance(const usrtrace_array* tr) { return reinterpret_cast<const Instance*>(tr); }
usrtrace_array* to_array(Instance* inst) { return reinterpret_cast<usrtrace_array*>(inst); }

usrtrace_array* get(const char* name, Instance::GetMode mode) {
  int err = 0;
  Instance* inst = Instance::get(name ? name : "", mode, &err);
  if (!inst) errno = err;
  return to_array(inst);
}

// NULL is the top instance where the kernel's call takes no instance.
Instance* or_top(usrtrace_array* tr) { return tr ? to_instance(tr) : Instance::top(); }

}  // namespace

// Formats on the stack and records an ftrace:print event whose ip is the
// caller's, which the trace shows as its function.
int usrtrace::api::printk_ap(usrtrace_array* tr, void* ip, const char* fmt, va_list ap) {
  if (!tr) return -ENOENT;
  if (!fmt) return -EINVAL;
  char buf[usrtrace::Instance::kMaxPrint + 1];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
#pragma GCC diagnostic pop
  if (n < 0) return -EINVAL;
  size_t len = static_cast<size_t>(n) < sizeof buf ? static_cast<size_t>(n) : sizeof buf - 1;
  return static_cast<int>(
      to_instance(tr)->printk(std::string_view(buf, len), reinterpret_cast<uintptr_t>(ip)));
}

using usrtrace::api::printk_ap;

extern "C" {

usrtrace_array* usrtrace_array_get_by_name(const char* name) {
  return get(name, Instance::GetMode::kExistingOrNew);
}

usrtrace_array* usrtrace_array_create(const char* name) {
  if (!name || !*name) {  // the top instance exists already
    errno = EEXIST;
    return nullptr;
  }
  return get(name, Instance::GetMode::kNew);
}

usrtrace_array* usrtrace_array_lookup(const char* name) { return get(name, Instance::GetMode::kExisting); }

usrtrace_array* usrtrace_array_get(usrtrace_array* tr) {
  if (tr) to_instance(tr)->get_reader();
  return tr;
}

void usrtrace_array_put(usrtrace_array* tr) {
  if (tr) to_instance(tr)->put_reader();
}

int usrtrace_array_destroy(usrtrace_array* tr) {
  // The kernel's order is put, then destroy: the directory itself holds
  // the one reference its __remove_instance() allows, which we don't count.
  return Instance::destroy(to_instance(tr), 0);
}

const char* usrtrace_array_name(const usrtrace_array* tr) {
  return tr ? to_instance(tr)->name().c_str() : "";
}

int usrtrace_array_vprintk(usrtrace_array* tr, const char* fmt, va_list ap) {
  return printk_ap(tr, __builtin_return_address(0), fmt, ap);
}

int usrtrace_array_printk(usrtrace_array* tr, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = printk_ap(tr, __builtin_return_address(0), fmt, ap);
  va_end(ap);
  return r;
}

int usrtrace_array_set_clr_event(usrtrace_array* tr, const char* system, const char* event, bool enable) {
  if (!tr) return -ENOENT;
  std::string_view sys = system && *system ? system : "*";
  std::string_view ev = event && *event ? event : "*";
  const int n = to_instance(tr)->set_event(sys, ev, enable);
  if (n < 0) return n;  // a probe's site could not be armed
  return n > 0 ? 0 : -EINVAL;
}

void usrtrace_tracing_on(usrtrace_array* tr) {
  if (Instance* inst = or_top(tr)) inst->set_tracing_on(true);
}

void usrtrace_tracing_off(usrtrace_array* tr) {
  if (Instance* inst = or_top(tr)) inst->set_tracing_on(false);
}

bool usrtrace_tracing_is_on(usrtrace_array* tr) {
  Instance* inst = or_top(tr);
  return inst && inst->tracing_on();
}

int usrtrace_snapshot_alloc(usrtrace_array* tr) {
  Instance* inst = or_top(tr);
  return inst ? inst->snapshots().allocate() : -ENOENT;
}

int usrtrace_snapshot(usrtrace_array* tr, const char* reason) {
  Instance* inst = or_top(tr);
  if (!inst) return -ENOENT;
  return inst->snapshots().take(reason ? std::string_view(reason) : std::string_view());
}

}  // extern "C"
