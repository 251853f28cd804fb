#include "events/thread_events.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/sys.h"
#include "instance/writers.h"

namespace usrtrace::events {

void on_thread_exit(int tid) {
  char comm[16] = {};
  if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) comm[0] = 0;
  trace_usrtrace_thread_exit(comm, tid);
}

}  // namespace usrtrace::events

// pthread_setname_np is interposed (this definition comes before libc's in
// symbol lookup) so that a thread's new name reaches saved_cmdlines and the
// thread_rename event. Renaming another thread is passed through without an
// event: its thread id is not known here.
extern "C" USRTRACE_EXPORT int pthread_setname_np(pthread_t thread, const char* name) {
  using Fn = int (*)(pthread_t, const char*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_setname_np"));
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
