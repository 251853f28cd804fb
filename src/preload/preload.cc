// libusrtrace-preload.so: what `usrtrace record -- COMMAND` preloads into a
// program. It brings libusrtrace.so (whose control server starts as it
// loads) and holds the program before main() until the recorder has set
// tracing up, so that nothing the program does is missed and the events its
// constructors registered can be enabled.
//
// The hold, in two steps: __libc_start_main is wrapped (the program's own
// startup calls it; only this preloaded object defines it besides libc).
//  1. In the wrapper, before the real one runs the program's constructors
//     (glibc >= 2.34 runs the executable's init_array there; the shared
//     objects' ran before, in ld.so): the recorder's end of
//     USRTRACE_GATE_FD (a socketpair) gets "E", and the recorder sets up
//     everything but events (buffers, tracers, function filters), then
//     answers "G". So the function tracers see the program's static
//     constructors, as uftrace does; their calls wait in the buffers.
//  2. main is called through hold_then_main(), after every constructor:
//     "R", and the recorder enables the events (the program's constructors
//     registered its own) and starts recording, then "G".
// At each step the program goes on when "G" comes or the recorder goes away
// (EOF): it can never hang on a recorder that died. USRTRACE_GATE_FD is
// removed at step 1 (and the descriptor closed on exec) so that children
// the program starts do not wait on a gate that is not theirs; with
// `record -c`, USRTRACE_FOLLOW stays, and each descendant announces itself
// instead (follow() below).
//
// It also defines pthread_setname_np, for thread names in programs that do
// not link usrtrace (see the definition), and hooks what the latency
// tracers measure: pthread_sigmask/sigprocmask (sigsoff) and the
// notifications and waits of condition variables, semaphores and eventfds
// (wakeup, wakeup_rt; usrtrace/latency.h).
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "usrtrace/latency.h"
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

int g_gate = -1;  // USRTRACE_GATE_FD, from step 1 until step 2

// Says `what` on the gate and waits for "G" or EOF.
void gate_step(const char* what) {
  if (write(g_gate, what, 1) == 1) {
    char c;
    while (read(g_gate, &c, 1) < 0 && errno == EINTR) {
    }  // "G", or EOF when the recorder is gone
  }
}

// Takes NAME out of the process's environment array itself. Not
// unsetenv(): a program that defines its own (bash does, and keeps its own
// table of variables) would take the call, and then export the variable
// again to every child it starts.
void drop_env(const char* name) {
  const size_t n = strlen(name);
  char** out = environ;
  for (char** e = environ; e && *e; ++e)
    if (!(strncmp(*e, name, n) == 0 && (*e)[n] == '=')) *out++ = *e;
  if (out) *out = nullptr;
}

// Step 1, before the program's constructors. USRTRACE_GATE_FD is
// "FD:PID": the gate is for the process record started (PID) and no other.
// A child that inherits the variable anyway (a program that put it back in
// its environment) leaves the descriptor alone: it is then the child's own,
// whatever it holds (a file opened as `3<>data.txt`, a socket), and taking
// it for the gate wrote "E" into it and closed it.
void early_hold() {
  const char* v = getenv("USRTRACE_GATE_FD");
  if (!v || !*v) return;
  char* end = nullptr;
  const long fd = strtol(v, &end, 10);
  const bool mine = *end == ':' && strtol(end + 1, &end, 10) == static_cast<long>(getpid()) && *end == '\0';
  drop_env("USRTRACE_GATE_FD");
  if (!mine || fd < 0 || fd > 1 << 20) return;
  // And it must be what record made: a stream socket.
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return;
  g_gate = static_cast<int>(fd);
  fcntl(g_gate, F_SETFD, FD_CLOEXEC);
  // The recorder connects once it reads "E": the socket must be up. (This
  // call is also what makes libusrtrace.so a dependency that the linker's
  // --as-needed keeps.)
  usrtrace_control_start();
  gate_step("E");
}

// Step 2, before main().
void hold() {
  if (g_gate < 0) {
    if (const char* f = getenv("USRTRACE_FOLLOW"); f && *f) follow(f);
    return;
  }
  gate_step("R");
  close(g_gate);
  g_gate = -1;
}

// main may be defined with none, two or three parameters; libc calls it with
// three, and so do we (clang's -fsanitize=function would call that a type
// mismatch).
#if defined(__clang__)
__attribute__((no_sanitize("function")))
#endif
int hold_then_main(int argc, char** argv, char** envp) {
  hold();
  return g_main(argc, argv, envp);
}

}  // namespace

// Thread names (usrtrace:thread_rename, saved_cmdlines) for a program that
// does not link usrtrace: see src/write/thread_events.cc.
extern "C" int usrtrace_internal_setname(pthread_t thread, const char* name);
extern "C" __attribute__((visibility("default"))) int pthread_setname_np(pthread_t thread, const char* name) {
  return usrtrace_internal_setname(thread, name);
}

// ---- The latency tracers' hooks.
namespace {

// The next definition of `name` (libc's), looked up once.
template <class Fn>
Fn next_fn(std::atomic<void*>& cache, const char* name) {
  void* f = cache.load(std::memory_order_relaxed);
  if (f == nullptr) {
    f = dlsym(RTLD_NEXT, name);
    cache.store(f, std::memory_order_relaxed);
  }
  return reinterpret_cast<Fn>(f);
}
#define USRTRACE_NEXT(name)                          \
  ([]() {                                            \
    static std::atomic<void*> cache{nullptr};        \
    return next_fn<decltype(&::name)>(cache, #name); \
  }())

// Signals 1..64 as a mask, without those no mask can hold (SIGKILL,
// SIGSTOP) and glibc's own (32, 33), which its wrappers keep unblocked.
uint64_t mask_bits(const sigset_t* set) {
  uint64_t w = 0;
  memcpy(&w, set, sizeof w);
  return w & ~((uint64_t{1} << (SIGKILL - 1)) | (uint64_t{1} << (SIGSTOP - 1)) | (uint64_t{3} << 31));
}

uint64_t after_change(int how, uint64_t before, const sigset_t* set) {
  const uint64_t s = mask_bits(set);
  switch (how) {
    case SIG_BLOCK:
      return before | s;
    case SIG_UNBLOCK:
      return before & ~s;
    default:
      return s;
  }
}

}  // namespace

extern "C" {
void usrtrace_internal_sigmask_changed(uint64_t before, uint64_t after, uintptr_t ip);

}  // extern "C"

namespace {
// Either call, with the change it made reported (`ip`: the program's call).
int change_mask(int (*real)(int, const sigset_t*, sigset_t*), int how, const sigset_t* set, sigset_t* old,
                uintptr_t ip) {
  sigset_t mine;
  sigset_t* o = old != nullptr ? old : &mine;
  const int rc = real(how, set, o);
  if (rc == 0 && set != nullptr)
    usrtrace_internal_sigmask_changed(mask_bits(o), after_change(how, mask_bits(o), set), ip);
  return rc;
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  return change_mask(USRTRACE_NEXT(pthread_sigmask), how, set, old,
                     reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

__attribute__((visibility("default"))) int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  return change_mask(USRTRACE_NEXT(sigprocmask), how, set, old,
                     reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

__attribute__((visibility("default"))) int pthread_cond_signal(pthread_cond_t* c) {
  usrtrace_wake(c);
  return USRTRACE_NEXT(pthread_cond_signal)(c);
}
__attribute__((visibility("default"))) int pthread_cond_broadcast(pthread_cond_t* c) {
  usrtrace_wake(c);
  return USRTRACE_NEXT(pthread_cond_broadcast)(c);
}
__attribute__((visibility("default"))) int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  const uint64_t t = usrtrace_wait_begin(c);
  const int rc = USRTRACE_NEXT(pthread_cond_wait)(c, m);
  usrtrace_wait_end(c, t);
  return rc;
}
__attribute__((visibility("default"))) int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m,
                                                                  const struct timespec* abstime) {
  const uint64_t t = usrtrace_wait_begin(c);
  const int rc = USRTRACE_NEXT(pthread_cond_timedwait)(c, m, abstime);
  usrtrace_wait_end(c, t);
  return rc;
}
__attribute__((visibility("default"))) int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m,
                                                                  clockid_t clk,
                                                                  const struct timespec* abstime) {
  const uint64_t t = usrtrace_wait_begin(c);
  const int rc = USRTRACE_NEXT(pthread_cond_clockwait)(c, m, clk, abstime);
  usrtrace_wait_end(c, t);
  return rc;
}

__attribute__((visibility("default"))) int sem_post(sem_t* s) {
  usrtrace_wake(s);
  return USRTRACE_NEXT(sem_post)(s);
}
__attribute__((visibility("default"))) int sem_wait(sem_t* s) {
  const uint64_t t = usrtrace_wait_begin(s);
  const int rc = USRTRACE_NEXT(sem_wait)(s);
  usrtrace_wait_end(s, t);
  return rc;
}
__attribute__((visibility("default"))) int sem_timedwait(sem_t* s, const struct timespec* abstime) {
  const uint64_t t = usrtrace_wait_begin(s);
  const int rc = USRTRACE_NEXT(sem_timedwait)(s, abstime);
  usrtrace_wait_end(s, t);
  return rc;
}
__attribute__((visibility("default"))) int sem_clockwait(sem_t* s, clockid_t clk,
                                                         const struct timespec* abstime) {
  const uint64_t t = usrtrace_wait_begin(s);
  const int rc = USRTRACE_NEXT(sem_clockwait)(s, clk, abstime);
  usrtrace_wait_end(s, t);
  return rc;
}

// An eventfd is known by its descriptor: the object is the number.
__attribute__((visibility("default"))) int eventfd_write(int fd, eventfd_t value) {
  usrtrace_wake(reinterpret_cast<const void*>(static_cast<uintptr_t>(fd) + 1));
  return USRTRACE_NEXT(eventfd_write)(fd, value);
}
__attribute__((visibility("default"))) int eventfd_read(int fd, eventfd_t* value) {
  const void* obj = reinterpret_cast<const void*>(static_cast<uintptr_t>(fd) + 1);
  const uint64_t t = usrtrace_wait_begin(obj);
  const int rc = USRTRACE_NEXT(eventfd_read)(fd, value);
  usrtrace_wait_end(obj, t);
  return rc;
}
}  // extern "C"

extern "C" __attribute__((visibility("default"))) int __libc_start_main(MainFn main, int argc, char** argv,
                                                                        void (*init)(), void (*fini)(),
                                                                        void (*rtld_fini)(),
                                                                        void* stack_end) {
  auto real = reinterpret_cast<StartMainFn>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_main = main;
  early_hold();
  return real(hold_then_main, argc, argv, init, fini, rtld_fini, stack_end);
}

// -finstrument-functions hooks: glibc defines empty ones, which come before
// libusrtrace.so (this object's dependency) in the lookup order.
extern "C" {
void usrtrace_internal_func_enter(void* fn, void* site);
void usrtrace_internal_func_exit(void* fn, void* site);
__attribute__((visibility("default"), no_instrument_function)) void __cyg_profile_func_enter(void* fn,
                                                                                             void* site) {
  usrtrace_internal_func_enter(fn, site);
}
__attribute__((visibility("default"), no_instrument_function)) void __cyg_profile_func_exit(void* fn,
                                                                                            void* site) {
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
                                                                                _Unwind_Stop_Fn stop,
                                                                                void* arg) {
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
