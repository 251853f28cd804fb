// The FUSE mount's connections to the traced process. FUSE requests come on
// several threads and a control::Client serves one thread at a time, so the
// mount keeps a few connections and lends each to one request at a time,
// in the order asked (a ticket queue per connection: a reader that gives a
// connection back and asks again goes behind those already waiting).
// A file opened through the mount stays on the connection that opened it
// (server handles are per connection).
//
// Two roles, so that a blocking read never holds up an ls:
//
//   general  stat, list, mkdir, rmdir, and every file but the pipes: one
//            connection (the server answers one request at a time anyway),
//            more only when its kFilesPerConn files are open
//   pipe     trace_pipe and trace_pipe_raw opened for reading, whose reads
//            wait on the server in rounds: a connection of their own while
//            there are fewer than kMaxPipeConns, then shared
//
// At most kMaxConns connections in all: the server takes kMaxClients = 16,
// and the usrtrace command and recorders need some.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/compiler.h"
#include "base/mutex.h"
#include "usrtrace/control.h"

namespace usrtrace::fusefs {

inline constexpr int kMaxConns = 4;
inline constexpr int kMaxPipeConns = kMaxConns - 1;  // one is left for the rest
inline constexpr int kFilesPerConn = 64;             // the server's kMaxFilesPerClient

enum class Role { kGeneral, kPipe };

struct Conn {
  // Used only by the thread whose turn it is.
  std::unique_ptr<control::Client> client;
  Role role = Role::kGeneral;
  // The rest: Pool::mu_.
  bool dead = false;         // its socket failed (the process is gone): no new work
  int files = 0;             // handles open on it
  uint64_t next_ticket = 0;  // tickets handed out; idle when == serving
  uint64_t serving = 0;      // the ticket whose turn it is
};

class Pool {
 public:
  Pool(int pid, std::unique_ptr<control::Client> first);

  // A connection of `role` for a new request (with room for one more file
  // if `for_open`), once it is this request's turn: see the roles above;
  // a new connection when the role wants one and kMaxConns allows. 0, or
  // -ENODEV (the process is gone), -EMFILE (every connection full), -EUSERS
  // (the process serves too many clients to take one more).
  // Context: a FUSE thread; may block.
  int acquire(Role role, bool for_open, Conn** out);
  // Waits for this request's turn on `c`.
  void acquire(Conn* c);
  // Ends the turn; `failed`: its socket broke (the answer was -EPIPE).
  void release(Conn* c, bool failed);
  // A file opened (+1) or closed (-1) on `c`.
  void add_files(Conn* c, int delta);

 private:
  void wait_turn(Conn* c) USRTRACE_REQUIRES(mu_);
  void drop_if_unused(Conn* c) USRTRACE_REQUIRES(mu_);

  const int pid_;
  base::Mutex mu_;
  std::condition_variable_any turn_;  // a turn ended, or a connection was made or dropped
  std::vector<std::unique_ptr<Conn>> conns_ USRTRACE_GUARDED_BY(mu_);
  int connecting_ USRTRACE_GUARDED_BY(mu_) = 0;
  int max_conns_ USRTRACE_GUARDED_BY(mu_) = kMaxConns;  // lowered when the server is full
};

// A connection lent to one request; released (idle again) when it ends.
class Lease {
 public:
  explicit Lease(Pool* pool) : pool_(pool) {}
  ~Lease() { reset(); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  int acquire(Role role, bool for_open) { return pool_->acquire(role, for_open, &conn_); }
  void acquire(Conn* c) {
    pool_->acquire(c);
    conn_ = c;
  }
  Conn* conn() const { return conn_; }
  control::Client& client() const { return *conn_->client; }
  // Looks at an answer: -EPIPE means the connection is dead.
  long note(long rc) {
    if (rc == -EPIPE) failed_ = true;
    return rc;
  }
  void reset() {
    if (conn_) pool_->release(conn_, failed_);
    conn_ = nullptr;
    failed_ = false;
  }

 private:
  Pool* pool_;
  Conn* conn_ = nullptr;
  bool failed_ = false;
};

}  // namespace usrtrace::fusefs
