// The client side of the control socket (protocol.h): one connection, one
// exchange at a time. usrtrace::control::Client (usrtrace/control.h) and the
// out-of-process recorder are built on it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "control/meta.h"
#include "control/protocol.h"

namespace usrtrace::control {

class Connection {
 public:
  // Connects to process `pid` and says hello. nullptr with *err (one line)
  // and errno EPERM when the socket is not to be trusted (paths.h: a
  // directory or socket of another user, or served by another process) or
  // EUSERS when the server is serving its limit of clients.
  static std::unique_ptr<Connection> open(pid_t pid, std::string* err);
  // A connection over `fd`, a socket already connected to a peer taken to
  // be process `pid` (no hello, no check of who serves it): for the fuzzer
  // and tests that play the server. Takes `fd`.
  static std::unique_ptr<Connection> adopt(int fd, pid_t pid);
  ~Connection();

  // One exchange. The response's status (>= 0 or -errno), or a transport
  // error: -EPIPE (the process is gone), -ETIMEDOUT (the request not sent
  // and its whole answer not received within wait_ms + answer_ms(), one
  // deadline for the exchange, however the bytes trickle in), -EPROTO (a
  // malformed answer). After a transport error the connection is closed.
  int call(const Request& req, std::string* payload, uint32_t wait_ms = 0);
  // Whether the last call's request failed to reach the server (its send
  // failed: the server had closed the connection, or shut its reading side
  // as it closes an idle one). Nothing of it was done then, so it may be
  // sent again on a new connection.
  bool request_unsent() const { return unsent_; }
  uint32_t flags() const { return flags_; }
  pid_t pid() const { return pid_; }
  // When the process started (/proc/PID/stat), so that a pid reused by
  // another process is told apart; 0 when unknown.
  uint64_t start_time() const { return start_time_; }
  const std::string& comm() const { return comm_; }

  // kPages: up to max_bytes of whole pages of `instance` (see protocol.h).
  struct Pages {
    uint32_t page_size = 0;
    int nr_cpus = 0;
    std::vector<int> cpus;  // the CPU of each page
    std::string data;       // the pages, page_size bytes each, in order
  };
  int pages(const std::string& instance, uint32_t max_bytes, uint32_t wait_ms, bool flush, Pages* out);
  int meta(const std::vector<std::string>& instances, RemoteMeta* out);
  // kShare: *fd gets the descriptor number of the instance's shared buffer
  // in the process. 0 or -errno (-ENOTSUP: not in shared memory).
  int share(const std::string& instance, int* fd);

  // A server that does not answer within this (beyond a request's own
  // wait) is taken as hung.
  static constexpr int kAnswerMs = 30000;
  // The deadline of one exchange beyond its wait (kAnswerMs unless set:
  // tests shorten it).
  int answer_ms() const { return answer_ms_; }
  void set_answer_ms(int ms) { answer_ms_ = ms; }

 private:
  Connection() = default;
  int fd_ = -1;
  pid_t pid_ = 0;
  uint64_t start_time_ = 0;
  uint32_t flags_ = 0;
  bool unsent_ = false;
  int answer_ms_ = kAnswerMs;
  std::string comm_;
  std::string buf_;
};

}  // namespace usrtrace::control
