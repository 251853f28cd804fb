// libusrtrace-preload.so: what `usrtrace record -- COMMAND` preloads into a
// program. It brings libusrtrace.so (whose control server starts as it
// loads) and holds the program before main() until the recorder has set
// tracing up, so that nothing the program does is missed and the events its
// constructors registered can be enabled.
//
// The hold: __libc_start_main is wrapped (the program's own startup calls
// it; only this preloaded object defines it besides libc) and calls main
// through hold_then_main(), which runs after every constructor. The
// recorder's end of USRTRACE_GATE_FD (a socketpair) gets "R"; the program
// goes on when "G" comes or the recorder goes away (EOF): it can never hang
// on a recorder that died. USRTRACE_GATE_FD is removed so that children the
// program starts do not wait on a gate that is not theirs; with `record -c`,
// USRTRACE_FOLLOW stays, and each descendant announces itself instead
// (follow() below).
//
// It also defines pthread_setname_np, for thread names in programs that do
// not link usrtrace (see the definition).
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "usrtrace/usrtrace.h"

namespace {

using MainFn = int (*)(int, char**, char**);
using StartMainFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);

MainFn g_main = nullptr;

// A program that `usrtrace record -c -- COMMAND` follows (COMMAND's
// descendants, which inherit USRTRACE_FOLLOW): it sends its pid to the
// recorder's socket and waits until the recorder has set it up and records
// it ("G"), at most kFollowWaitMs, so that a process is never held by a
// recorder that hangs; a recorder that is gone (refused, EOF) lets it go at
// once.
constexpr int kFollowWaitMs = 10000;

void follow(const char* path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = strlen(path);
  if (len >= sizeof addr.sun_path) return;
  memcpy(addr.sun_path, path, len + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    usrtrace_control_start();
    const int32_t pid = getpid();
    if (write(fd, &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid)) {
      pollfd p{fd, POLLIN, 0};
      while (poll(&p, 1, kFollowWaitMs) < 0 && errno == EINTR) {
      }
    }
  }
  close(fd);
}

void hold() {
  const char* v = getenv("USRTRACE_GATE_FD");
  if (!v || !*v) {
    if (const char* f = getenv("USRTRACE_FOLLOW"); f && *f) follow(f);
    return;
  }
  char* end = nullptr;
  const long fd = strtol(v, &end, 10);
  unsetenv("USRTRACE_GATE_FD");
  if (*end || fd < 0 || fd > 1 << 20) return;
  const int gate = static_cast<int>(fd);
  // The recorder connects once it reads "R": the socket must be up. (This
  // call is also what makes libusrtrace.so a dependency that the linker's
  // --as-needed keeps.)
  usrtrace_control_start();
  if (write(gate, "R", 1) == 1) {
    char c;
    while (read(gate, &c, 1) < 0 && errno == EINTR) {
    }  // "G", or EOF when the recorder is gone
  }
  close(gate);
}

int hold_then_main(int argc, char** argv, char** envp) {
  hold();
  return g_main(argc, argv, envp);
}

}  // namespace

// Thread names (usrtrace:thread_rename, saved_cmdlines) for a program that
// does not link usrtrace: see src/events/thread_events.cc.
extern "C" int usrtrace_internal_setname(pthread_t thread, const char* name);
extern "C" __attribute__((visibility("default"))) int pthread_setname_np(pthread_t thread, const char* name) {
  return usrtrace_internal_setname(thread, name);
}

extern "C" __attribute__((visibility("default"))) int __libc_start_main(
    MainFn main, int argc, char** argv, void (*init)(), void (*fini)(), void (*rtld_fini)(),
    void* stack_end) {
  auto real = reinterpret_cast<StartMainFn>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_main = main;
  return real(hold_then_main, argc, argv, init, fini, rtld_fini, stack_end);
}

// -finstrument-functions hooks: glibc defines empty ones, which come before
// libusrtrace.so (this object's dependency) in the lookup order.
extern "C" {
void usrtrace_internal_func_enter(void* fn, void* site);
void usrtrace_internal_func_exit(void* fn, void* site);
__attribute__((visibility("default"), no_instrument_function)) void __cyg_profile_func_enter(void* fn, void* site) {
  usrtrace_internal_func_enter(fn, site);
}
__attribute__((visibility("default"), no_instrument_function)) void __cyg_profile_func_exit(void* fn, void* site) {
  usrtrace_internal_func_exit(fn, site);
}
// The real definitions of what is interposed, as seen from this object,
// which comes before their owners (libc, libgcc_s) in the lookup order;
// libusrtrace.so comes after them, so its own RTLD_NEXT finds nothing.
__attribute__((visibility("default"))) void* usrtrace_preload_next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  // Not a tail call: RTLD_NEXT is relative to the object dlsym returns to.
  asm volatile("" : "+r"(f));
  return f;
}
}

#if defined(USRTRACE_PRELOAD_FUNCTION_HOOKS)
// Function tracing (src/function/interpose.cc): the same shells as
// libusrtrace.so's, found first here, around the same bodies.
#include <unwind.h>
extern "C" {
_Unwind_Reason_Code usrtrace_internal_unwind_raise(_Unwind_Exception* e);
_Unwind_Reason_Code usrtrace_internal_unwind_forced(_Unwind_Exception* e, _Unwind_Stop_Fn stop, void* arg);
_Unwind_Reason_Code usrtrace_internal_unwind_rethrow(_Unwind_Exception* e);
void usrtrace_internal_unwind_resume(_Unwind_Exception* e);
void* usrtrace_internal_begin_catch(void* exc, uint64_t sp);
void* usrtrace_internal_dlopen(const char* file, int mode);
int usrtrace_internal_dlclose(void* handle);

__attribute__((visibility("default"))) _Unwind_Reason_Code _Unwind_RaiseException(_Unwind_Exception* e) {
  return usrtrace_internal_unwind_raise(e);
}
__attribute__((visibility("default"))) _Unwind_Reason_Code _Unwind_ForcedUnwind(_Unwind_Exception* e,
                                                                                _Unwind_Stop_Fn stop, void* arg) {
  return usrtrace_internal_unwind_forced(e, stop, arg);
}
__attribute__((visibility("default"))) _Unwind_Reason_Code _Unwind_Resume_or_Rethrow(_Unwind_Exception* e) {
  return usrtrace_internal_unwind_rethrow(e);
}
__attribute__((visibility("default"))) void _Unwind_Resume(_Unwind_Exception* e) {
  usrtrace_internal_unwind_resume(e);
}
// The catching frame's stack pointer is this shell's CFA (see interpose.cc).
__attribute__((visibility("default"))) void* __cxa_begin_catch(void* exc) noexcept {
  return usrtrace_internal_begin_catch(exc, reinterpret_cast<uint64_t>(__builtin_dwarf_cfa()));
}
__attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  return usrtrace_internal_dlopen(file, mode);
}
__attribute__((visibility("default"))) int dlclose(void* handle) { return usrtrace_internal_dlclose(handle); }
}
#endif
