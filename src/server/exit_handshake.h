// The exit handshake (server.h, "Lifetime"): a traced process that ends
// lets the recorders connected to it (kRecord) take its last pages first.
// It ends in one of two ways, and both wait the same way:
//
//   exit() (atexit hook, lifecycle.cc)    a deferred signal (server thread)
//   --------------------------------      --------------------------------
//   set_exiting(); wake the server        set_exiting(); the wait starts
//   wait_for_recorders(exit_wait_ms())    each round: no recorder left, or
//   then stop the server, remove the        the wait over -> the signal again,
//     socket                                at its default: it kills
//
// Once `exiting` is set, every response carries kExiting and no request
// parks (a parked one is answered at its next tick): a recorder takes what
// is left (kPages with flush) and leaves (kRecord off), which ends the wait
// early. USRTRACE_EXIT_WAIT_MS (default 5000, at most 600000) bounds it.
//
// Deferred signals (USRTRACE_DEFER_SIGNALS=1, set by `usrtrace record --
// COMMAND`): SIGINT, SIGTERM and SIGHUP, where the program left them at
// their default, do not kill the process at once: the handler (async-
// signal-safe: one store, one write) tells the server, which lets the
// recorders take the last pages (as at exit) and then lets the signal kill
// the process as it would have. A second one kills at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>

#include "base/compiler.h"
#include "base/mutex.h"

namespace usrtrace::control {

// USRTRACE_EXIT_WAIT_MS, or 5000 when unset or not a number of 0..600000.
// Read each time: at exit, or when a deferred signal comes.
int exit_wait_ms();

// Publishes the server's wake fd to the signal handler, then, with
// USRTRACE_DEFER_SIGNALS=1, takes SIGINT, SIGTERM and SIGHUP where they are
// at their default. Context: lifecycle.cc's start(), under its lock, with
// every signal blocked in the calling thread.
void defer_terminating_signals(int wake_fd);

// One server's side of the handshake. The atexit hook and the server thread
// share it; connections (recorder_service.h) count themselves in and out.
class ExitHandshake {
 public:
  // Context: any thread.
  bool exiting() const {
    // order: acquire pairs with set_exiting()'s release; nothing else is
    // published through the flag, but a reader that sees it also sees
    // what its setter did before (the wait's start, for instance).
    return exiting_.load(std::memory_order_acquire);
  }
  // Context: any thread; never cleared.
  void set_exiting() { exiting_.store(true, std::memory_order_release); }

  // A connection became a recorder (+1) or stopped being one (-1); wakes
  // wait_for_recorders(). Context: the server thread.
  void add_recorders(int delta);
  // Waits until no recorder is left or `wait` passes. Context: the
  // exiting thread (atexit); may sleep.
  void wait_for_recorders(std::chrono::milliseconds wait);

  // Acts on a deferred signal: starts its wait the first time, and once no
  // recorder is left or the wait is over, raises it again at its default.
  // Context: the server thread, at the top of each round.
  void check_signal();
  // A deferred signal waits on recorders: the poll loop must tick
  // (kTickMs) to look again. Context: the server thread.
  bool signal_waiting() const;

 private:
  bool no_recorders();

  std::atomic<bool> exiting_{false};
  base::Mutex mu_;
  std::condition_variable_any cv_;              // recorders_ changed
  int recorders_ USRTRACE_GUARDED_BY(mu_) = 0;  // connections in kRecord mode

  // The server thread only. The wait starts at the signal, even when the
  // process had already begun to exit (the atexit hook set `exiting`) as
  // it came.
  std::chrono::steady_clock::time_point die_at_{};
  bool signalled_ = false;  // die_at_ is set
  bool killed_ = false;     // the signal was raised again
};

}  // namespace usrtrace::control
