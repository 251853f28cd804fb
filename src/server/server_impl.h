// The server object (server.h), shared by the two files that see it whole:
// server.cc runs its thread (the poll loop, the connections, the dispatch
// of requests) and lifecycle.cc makes it, starts that thread, and ends it
// (stop, the atexit wait, a fork). Private to src/server/.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "control/protocol.h"
#include "server/exit_handshake.h"

namespace usrtrace::control {

struct Conn;  // one client connection (server.cc)

// How long a connection may send nothing before the server closes it
// (USRTRACE_CONTROL_IDLE_MS, default kIdleMs; 0: never). Read as the server
// starts.
std::chrono::milliseconds idle_time();

class Server {
 public:
  Server();
  ~Server();

  // Set by lifecycle.cc's start() before the thread starts; constant after.
  pid_t pid = 0;
  int listen_fd = -1;
  int wake_fd = -1;  // an eventfd: wake() ends the thread's poll()
  std::string path;
  std::chrono::milliseconds idle{0};  // idle_time(); 0: never
  std::thread thread;

  // Set by stop_locked() (lifecycle.cc), then wake(): the thread returns.
  // order: release there, acquire in run(); nothing else rides on it (the
  // join orders the rest).
  std::atomic<bool> stop{false};
  // Exiting, the recorders, a deferred signal (exit_handshake.h).
  ExitHandshake exit;

  // Context: any thread; one write(), async-signal-safe.
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_fd, &one, sizeof one);
  }

  // The thread's body: serves until `stop`. Context: the server thread.
  void run();

 private:
  std::vector<std::unique_ptr<Conn>> conns_;

  uint32_t flags(const Conn& c) const;
  void respond(Conn& c, int32_t status, std::string_view payload = {});
  void accept_all();
  void receive(Conn& c);
  void process(Conn& c);
  void flush(Conn& c);
  void close_idle(Conn& c);
  // False when the request was parked.
  bool handle(Conn& c, Request& r, bool may_park);
  bool read(Conn& c, Request& r, bool may_park);
  bool pages(Conn& c, Request& r, bool may_park);
  void park(Conn& c, Request& r);
};

}  // namespace usrtrace::control
