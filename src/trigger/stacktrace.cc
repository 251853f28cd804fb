// The stacktrace trigger: the writing thread's user-space backtrace as an
// ftrace:user_stack record (kernel id 13, same layout: events/builtin.h, so
// trace-cmd and libtraceevent print it as they print the kernel's user
// stacks).
//
// Unwinding uses libgcc's _Unwind_Backtrace, which walks the DWARF CFI of
// each frame (no frame pointers needed) and, with glibc >= 2.35, finds the
// object of each address with _dl_find_object, which takes no lock; it
// works across signal frames. It does not allocate. So it may run on the
// write path, in a signal handler too.
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "events/builtin.h"
#include "events/registry.h"
#include "instance/slot_write.h"
#include "symbols/resolver.h"
#include "trigger/internal.h"

namespace usrtrace::trigger {
namespace {

using events::kUserStackEntries;
using events::UserStackRecord;

// Kernel: trace_user_stack_print(): a head line, then " => " and each
// address until the first zero. The kernel names a frame only by its
// object (the sym-userobj option: "/lib/libc.so.6[+0x271ca]"); a process
// knows its own symbols, so each frame is named as the function tracers
// name functions (symbols::Resolver: .symtab where the object has one,
// else .dynsym; the name trace.dat's kallsyms carries), then by its
// object and offset as sym-userobj prints it, then by address alone.
int print_user_stack(const void* rec, uint32_t len, char* out, size_t size) {
  if (len < sizeof(UserStackRecord)) return snprintf(out, size, "<bad user_stack record>");
  UserStackRecord r;
  std::memcpy(&r, rec, sizeof r);
  int n = snprintf(out, size, "<user stack trace>\n");
  std::string name;
  for (int i = 0; i < kUserStackEntries && r.caller[i] != 0 && n >= 0 && static_cast<size_t>(n) < size; ++i) {
    const size_t room = size - static_cast<size_t>(n);
    const auto ip = static_cast<unsigned long>(r.caller[i]);
    // A return address points after the call: look up the byte before it
    // (a call that ends its function returns to the next one's first byte).
    uint64_t off = 0;
    Dl_info info;
    if (symbols::Resolver::lookup(r.caller[i] - 1, &name, &off)) {
      n += snprintf(out + n, room, " => %s+0x%lx <%016lx>\n", name.c_str(),
                    static_cast<unsigned long>(off + 1), ip);
    } else if (dladdr(reinterpret_cast<void*>(r.caller[i] - 1), &info) && info.dli_fname &&
               info.dli_fname[0]) {
      n += snprintf(out + n, room, " => %s[+0x%lx] <%016lx>\n", info.dli_fname,
                    ip - reinterpret_cast<uintptr_t>(info.dli_fbase), ip);
    } else {
      n += snprintf(out + n, room, " =>  <%016lx>\n", ip);
    }
  }
  return n;
}

constinit internal::EventDesc g_user_stack_desc =
    events::builtin_desc<events::UserStackEvent>(&print_user_stack);

// getpid() is a system call: the write path reads a copy, kept current in
// forked children.
std::atomic<pid_t> g_tgid{0};
void refresh_tgid() { g_tgid.store(getpid(), std::memory_order_relaxed); }

struct RegisterUserStack {
  RegisterUserStack() {
    events::Registry::get().add(&g_user_stack_desc);
    refresh_tgid();
    pthread_atfork(nullptr, nullptr, &refresh_tgid);
  }
};
__attribute__((init_priority(102))) RegisterUserStack g_register_user_stack;

struct Walk {
  uintptr_t ours;  // the return address into write_event_generic: frames up to it are ours
  bool past;       // seen it: the next frames are the program's...
  int skip;        // ...after this many more (an event's emit_dynamic)
  bool from;       // the frame of `ours` is the program's first (write_user_stack_from)
  int n;
  uint64_t* out;
  int max = kUserStackEntries;
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  const uintptr_t ip = _Unwind_GetIP(ctx);
  if (!w->past) {
    w->past = ip == w->ours;
    if (!w->past || !w->from) return _URC_NO_REASON;
  }
  if (w->skip > 0) {
    --w->skip;
    return _URC_NO_REASON;
  }
  if (ip == 0) return _URC_END_OF_STACK;
  w->out[w->n++] = ip;
  return w->n == w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

}  // namespace

const internal::EventDesc& user_stack_event() { return g_user_stack_desc; }

bool has_dynamic_fields(const internal::EventDesc& ev) {
  for (uint16_t i = 0; i < ev.nfields; ++i)
    if (ev.fields[i].kind == internal::FieldKind::kString ||
        ev.fields[i].kind == internal::FieldKind::kDynBytes)
      return true;
  return false;
}

void write_user_stack(int slot, const internal::CommonHeader& common, const void* caller_ip, bool dynamic) {
  UserStackRecord r{};
  r.common = common;
  r.common.type = g_user_stack_desc.id;
  r.tgid = static_cast<uint32_t>(g_tgid.load(std::memory_order_relaxed));
  // `caller_ip` returns into write_event_generic; write_event's frame
  // follows (write/write.cc), then an event's emit_dynamic if it has one.
  Walk w{reinterpret_cast<uintptr_t>(caller_ip), false, dynamic ? 2 : 1, false, 0, r.caller};
  _Unwind_Backtrace(&on_frame, &w);
  events::write_to_slot(slot, &r, sizeof r, common.pid);
}

int user_stack(const void* caller_ip, bool dynamic, uint64_t* out, int max) {
  if (max <= 0) return 0;
  Walk w{reinterpret_cast<uintptr_t>(caller_ip), false, dynamic ? 2 : 1, false, 0, out, max};
  _Unwind_Backtrace(&on_frame, &w);
  return w.n;
}

void write_user_stack_from(int slot, const internal::CommonHeader& common, uint64_t first_ip) {
  UserStackRecord r{};
  r.common = common;
  r.common.type = g_user_stack_desc.id;
  r.tgid = static_cast<uint32_t>(g_tgid.load(std::memory_order_relaxed));
  Walk w{static_cast<uintptr_t>(first_ip), false, 0, true, 0, r.caller};
  _Unwind_Backtrace(&on_frame, &w);
  // Not found (no unwind tables on the way): the first address at least.
  if (w.n == 0) r.caller[0] = first_ip;
  events::write_to_slot(slot, &r, sizeof r, common.pid);
}

}  // namespace usrtrace::trigger
