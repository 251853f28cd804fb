// The exit handshake and the deferred signals (exit_handshake.h): how a
// traced process's end waits for its recorders, whether it exits or a
// signal ends it. Apart from the server's poll loop (server.cc), which only
// calls check_signal() each round, and from the server's start and stop
// (lifecycle.cc), which install the handler and run the atexit wait.
#include "server/exit_handshake.h"

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/files.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::control {
namespace {

using Clock = std::chrono::steady_clock;

// Set by the handler, read by the server thread (check_signal()).
volatile sig_atomic_t g_pending_signal = 0;
std::atomic<int> g_wake_fd{-1};

// Context: signal handler; async-signal-safe (one store, one write; or, the
// second time, the default action at once).
void on_terminating_signal(int sig) {
  if (g_pending_signal != 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_pending_signal = sig;
  const uint64_t one = 1;
  // order: relaxed; the fd was published before the handler was installed.
  [[maybe_unused]] ssize_t w = ::write(g_wake_fd.load(std::memory_order_relaxed), &one, sizeof one);
}

}  // namespace

int exit_wait_ms() {
  const char* e = base::env("USRTRACE_EXIT_WAIT_MS");
  if (!e || !*e) return 5000;
  char* end = nullptr;
  const long v = strtol(e, &end, 10);
  return (*end || v < 0 || v > 600000) ? 5000 : static_cast<int>(v);
}

void defer_terminating_signals(int wake_fd) {
  // order: relaxed; sigaction() below orders it before any handler runs.
  g_wake_fd.store(wake_fd, std::memory_order_relaxed);
  const char* e = base::env("USRTRACE_DEFER_SIGNALS");
  if (!e || std::strcmp(e, "1") != 0) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_terminating_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

void ExitHandshake::add_recorders(int delta) {
  {
    base::MutexLock l(&mu_);
    const bool had = recorders_ > 0;
    recorders_ += delta;
    // The buffers grow for a recorder (ring_buffer/grow.cc); once the last
    // one left (released us, or its connection closed: a killed recorder),
    // they overwrite again instead of growing for nobody.
    if (had != (recorders_ > 0)) rb::RingBuffer::pause_growth(recorders_ == 0);
  }
  cv_.notify_all();
}

bool ExitHandshake::no_recorders() {
  base::MutexLock l(&mu_);
  return recorders_ == 0;
}

void ExitHandshake::wait_for_recorders(std::chrono::milliseconds wait) {
  const Clock::time_point until = Clock::now() + wait;
  base::MutexLock l(&mu_);
  while (recorders_ != 0)
    if (cv_.wait_until(mu_, until) == std::cv_status::timeout) break;
}

void ExitHandshake::check_signal() {
  const int sig = g_pending_signal;
  if (sig == 0 || killed_) return;
  if (!signalled_) die_at_ = Clock::now() + std::chrono::milliseconds(exit_wait_ms());
  signalled_ = true;
  set_exiting();
  if (no_recorders() || Clock::now() >= die_at_) {
    killed_ = true;
    signal(sig, SIG_DFL);
    ::kill(getpid(), sig);  // blocked here: one of the program's threads takes it
  }
}

bool ExitHandshake::signal_waiting() const { return g_pending_signal != 0 && !killed_; }

}  // namespace usrtrace::control
