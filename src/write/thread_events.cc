#include "write/thread_events.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/sys.h"
#include "writers/writers.h"

namespace usrtrace::events {

void on_thread_exit(int tid) {
  char comm[16] = {};
  if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) comm[0] = 0;
  trace_usrtrace_thread_exit(comm, tid);
}

}  // namespace usrtrace::events

extern "C" USRTRACE_EXPORT int usrtrace_internal_setname(pthread_t thread, const char* name);

// pthread_setname_np is interposed (this definition comes before libc's in
// symbol lookup) so that a thread's new name reaches saved_cmdlines and the
// thread_rename event. Renaming another thread is passed through without an
// event: its thread id is not known here.
extern "C" USRTRACE_EXPORT int pthread_setname_np(pthread_t thread, const char* name) {
  return usrtrace_internal_setname(thread, name);
}

// The interposer's body, also called by libusrtrace-preload.so's own
// pthread_setname_np: a preloaded object's definition is found before
// libc's, whereas libusrtrace.so, loaded as its dependency, comes after
// libc in the lookup order of a program that does not link it.
extern "C" USRTRACE_EXPORT int usrtrace_internal_setname(pthread_t thread, const char* name) {
  using Fn = int (*)(pthread_t, const char*);
  static Fn real = [] {
    // After us in the lookup order when a program links us; before us when
    // we came in as the preloaded runtime's dependency: then ask libc.
    void* f = dlsym(RTLD_NEXT, "pthread_setname_np");
    if (!f)
      if (void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD)) f = dlsym(libc, "pthread_setname_np");
    return reinterpret_cast<Fn>(f);
  }();
  if (!real) return ENOSYS;
  const bool self = pthread_equal(thread, pthread_self()) != 0;
  char old[16] = {};
  if (self && prctl(PR_GET_NAME, old, 0, 0, 0) != 0) old[0] = 0;
  int rc = real(thread, name);
  if (rc == 0 && self) {
    const int tid = usrtrace::base::gettid_cached();
    usrtrace::writers::save_comm(tid, name);
    char* comm = usrtrace::writers::self().comm;
    std::memset(comm, 0, 16);
    std::memcpy(comm, name, strnlen(name, 15));
    trace_usrtrace_thread_rename(tid, old, name);
  }
  return rc;
}
