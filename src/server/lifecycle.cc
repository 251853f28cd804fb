// The control server's lifetime (server.h, "Lifetime"): start_server()
// makes the socket and the thread (server_impl.h), stop_server() ends them
// and removes the socket, the atexit hook lets recorders take the last
// pages first (exit_handshake.h), a forked child forgets its parent's
// server, and the library's load starts serving (autostart) unless
// USRTRACE_CONTROL=0. Also the C API's usrtrace_control_start()/stop().
//
// Load order: this file is the last source of the last library of
// libusrtrace.so (src/CMakeLists.txt), so the autostart constructor at its
// end runs after every other initializer of the library: a client that
// connects at once finds the library whole. Keep it last.
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/compiler.h"
#include "base/files.h"
#include "base/mutex.h"
#include "control/paths.h"
#include "function/function.h"
#include "server/exit_handshake.h"
#include "server/server.h"
#include "server/server_impl.h"
#include "usrtrace/usrtrace.h"

namespace usrtrace::control {
namespace {

base::Mutex g_mu;
Server* g_server USRTRACE_GUARDED_BY(g_mu) = nullptr;

void stop_locked() USRTRACE_REQUIRES(g_mu) {
  Server* s = g_server;
  if (!s) return;
  g_server = nullptr;
  if (s->pid != getpid()) {
    // A forked child: the parent's socket and thread are not ours. Close
    // our copies of the descriptors; the object is left (its std::thread
    // names a thread that does not exist here).
    ::close(s->listen_fd);
    ::close(s->wake_fd);
    return;
  }
  s->stop.store(true, std::memory_order_release);
  s->wake();
  if (s->thread.joinable()) s->thread.join();
  ::unlink(s->path.c_str());
  ::close(s->listen_fd);
  ::close(s->wake_fd);
  delete s;
}

// At exit: recorders take the last pages before the socket goes
// (exit_handshake.h). Context: the exiting thread, from atexit().
void exit_hook() {
  base::MutexLock l(&g_mu);
  Server* s = g_server;
  if (!s || s->pid != getpid()) return;
  s->exit.set_exiting();
  s->wake();
  s->exit.wait_for_recorders(std::chrono::milliseconds(exit_wait_ms()));
  stop_locked();
}

// Said once per process: a program whose server cannot start (its socket
// directory taken by another user, a bind that fails) is not traceable
// from outside, and its user should know why; a retry does not say it
// again.
void say_not_started(const std::string& why) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr, "usrtrace: control socket not started: %s\n", why.c_str());
}

int start(std::string* err) {
  base::MutexLock l(&g_mu);
  if (g_server && g_server->pid == getpid()) return 0;
  if (g_server) stop_locked();  // inherited through fork: forget it
  std::string dir;
  if (int rc = socket_dir(true, &dir, err); rc < 0) return rc;
  auto s = std::make_unique<Server>();
  s->pid = getpid();
  s->path = socket_path(dir, s->pid);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (s->path.size() >= sizeof addr.sun_path) {
    *err = s->path + ": path too long for a Unix socket";
    return -ENAMETOOLONG;
  }
  std::memcpy(addr.sun_path, s->path.c_str(), s->path.size() + 1);
  s->idle = idle_time();
  s->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd < 0) {
    const int e = errno;
    *err = std::string("socket: ") + std::strerror(e);
    return -e;
  }
  // A socket with our pid is a dead process's: ours is the only live one.
  ::unlink(s->path.c_str());
  const char* failed = nullptr;
  if (::bind(s->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    failed = "bind";
  else if (::chmod(s->path.c_str(), 0600) != 0)
    failed = "chmod";
  else if (::listen(s->listen_fd, kMaxClients) != 0)
    failed = "listen on";
  if (failed) {
    const int e = errno;
    *err = std::string("cannot ") + failed + " " + s->path + ": " + std::strerror(e);
    ::close(s->listen_fd);
    if (std::strcmp(failed, "bind") != 0) ::unlink(s->path.c_str());  // ours only once bound
    return -e;
  }
  s->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd < 0) {
    const int e = errno;
    *err = std::string("eventfd: ") + std::strerror(e);
    ::close(s->listen_fd);
    ::unlink(s->path.c_str());
    return -e;
  }
  // The thread takes no signal: the program's handlers run in its threads.
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, function::patch::sweep_signal());  // the patcher's sweep (function/function.h)
  pthread_sigmask(SIG_SETMASK, &all, &old);
  defer_terminating_signals(s->wake_fd);
  Server* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  g_server = s.release();
  static std::once_flag once;
  std::call_once(once, [] { atexit(exit_hook); });
  return 0;
}

}  // namespace

int start_server(std::string* err) {
  std::string why;
  const int rc = start(&why);
  if (rc < 0) {
    if (err)
      *err = why;
    else
      say_not_started(why);  // autostart, usrtrace_control_start(): no other way to tell
  }
  return rc;
}

void stop_server() {
  base::MutexLock l(&g_mu);
  stop_locked();
}

std::string server_socket() {
  base::MutexLock l(&g_mu);
  return g_server && g_server->pid == getpid() ? g_server->path : std::string();
}

}  // namespace usrtrace::control

// The C API (usrtrace/usrtrace.h).
extern "C" {

int usrtrace_control_start(void) { return usrtrace::control::start_server(nullptr); }

void usrtrace_control_stop(void) { usrtrace::control::stop_server(); }

}  // extern "C"

namespace {

// Serving starts when the library loads, unless USRTRACE_CONTROL=0. This
// file's object is the last of the library (src/CMakeLists.txt), so its
// constructor runs after every other initializer of the library: a client
// that connects at once finds the library whole.
__attribute__((constructor)) void usrtrace_control_autostart() {
  const char* e = usrtrace::base::env("USRTRACE_CONTROL");
  if (e && std::strcmp(e, "0") == 0) return;
  usrtrace::control::start_server(nullptr);
}

}  // namespace
