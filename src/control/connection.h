// The client side of the control socket (protocol.h): one connection, one
// exchange at a time. usrtrace::control::Client (usrtrace/control.h) and the
// out-of-process recorder are built on it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "control/meta.h"
#include "control/protocol.h"

namespace usrtrace::control {

class Connection {
 public:
  // Connects to process `pid` and says hello. nullptr with *err (one line).
  static std::unique_ptr<Connection> open(pid_t pid, std::string* err);
  ~Connection();

  // One exchange. The response's status (>= 0 or -errno), or a transport
  // error: -EPIPE (the process is gone), -ETIMEDOUT (no answer in
  // wait_ms + kAnswerMs), -EPROTO (a malformed answer).
  int call(const Request& req, std::string* payload, uint32_t wait_ms = 0);
  uint32_t flags() const { return flags_; }
  pid_t pid() const { return pid_; }
  const std::string& comm() const { return comm_; }

  // kPages: up to max_bytes of whole pages of `instance` (see protocol.h).
  struct Pages {
    uint32_t page_size = 0;
    int nr_cpus = 0;
    std::vector<int> cpus;   // the CPU of each page
    std::string data;        // the pages, page_size bytes each, in order
  };
  int pages(const std::string& instance, uint32_t max_bytes, uint32_t wait_ms, bool flush, Pages* out);
  int meta(const std::vector<std::string>& instances, RemoteMeta* out);

  // A server that does not answer within this (beyond a request's own
  // wait) is taken as hung.
  static constexpr int kAnswerMs = 30000;

 private:
  Connection() = default;
  int fd_ = -1;
  pid_t pid_ = 0;
  uint32_t flags_ = 0;
  std::string comm_;
  std::string buf_;
};

}  // namespace usrtrace::control
