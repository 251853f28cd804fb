// Driving a traced process from outside it: a client of the process's
// control socket (the usrtrace command and the FUSE mount are built on
// this). Each process using usrtrace serves its tree of control files on
// a Unix socket named by its pid, in $XDG_RUNTIME_DIR/usrtrace or
// /tmp/usrtrace-UID; only its user and root may connect.
//
//   std::string err;
//   auto c = usrtrace::control::Client::connect(pid, &err);
//   if (!c) { fprintf(stderr, "%s\n", err.c_str()); ... }
//   c->write_file("events/app/enable", "1");
//   std::string text;
//   c->read_file("trace", &text);
//
// Errors are -errno, the kernel's for the same mistake on its tracefs
// (-ENOENT, -EINVAL, -EACCES, ...), and -EPIPE once the process is gone.
// A Client is one connection: use it from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "usrtrace/usrtrace.h"

namespace usrtrace::control {

struct Process {
  int pid = 0;
  std::string comm;    // the process's name
  std::string socket;  // its control socket
};

// The processes of this user that serve a control socket. Sockets left by
// processes that died are removed on the way. Context: any thread.
USRTRACE_EXPORT std::vector<Process> list_processes();

class USRTRACE_EXPORT Client {
 public:
  // Connects to process `pid`. nullptr with *err saying why in one line:
  // no such process, a process that does not serve (not using usrtrace, or
  // USRTRACE_CONTROL=0), another user's process, a process that does not
  // answer.
  static std::unique_ptr<Client> connect(int pid, std::string* err);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int pid() const;
  const std::string& comm() const;
  // Whether the last answer said the process is exiting.
  bool exiting() const;

  int stat(const std::string& path, bool* is_dir, unsigned* mode);
  int list(const std::string& dir, std::vector<std::string>* names);
  int mkdir(const std::string& path);  // instances/NAME
  int rmdir(const std::string& path);

  // The whole file (trace_pipe: what is there now, without waiting).
  // Bytes read or -errno.
  long read_file(const std::string& path, std::string* out);
  // `echo -n TEXT > PATH` (>> with append). Bytes taken or -errno.
  long write_file(const std::string& path, const std::string& text, bool append = false);

  // A control file kept open, as open(2)/read(2)/write(2)/close(2).
  // Flags: O_RDONLY/O_WRONLY/O_RDWR, O_TRUNC, O_APPEND. A read of a pipe
  // (trace_pipe, trace_pipe_raw) that finds nothing waits up to wait_ms
  // (at most 10000) for data, then gives -EAGAIN.
  int open(const std::string& path, int flags);  // a handle, or -errno
  long read(int handle, char* buf, size_t size, int wait_ms = 0);
  long write(int handle, const char* buf, size_t size);
  int close(int handle);

  struct Impl;
  Impl* impl() { return impl_.get(); }

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace usrtrace::control
