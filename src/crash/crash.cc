// Dump on crash: control (mode, file, environment) and the signal handler.
// The design is at the top of crash.h.
#include "crash/crash.h"
#include "function/core.h"

#include <execinfo.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include "base/files.h"
#include "base/mutex.h"
#include "base/safe_copy.h"
#include "base/sys.h"
#include "clock/trace_clock.h"
#include "crash/internal.h"
#include "instance/instance.h"

namespace usrtrace::crash {
namespace {

using detail::g_owner;
using detail::g_storage;
using detail::Storage;
using detail::Text;

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
// How long a thread that crashes while another dumps waits for that dump
// before it lets its own signal kill the process (and cut the dump short).
constexpr int kWaitMs = 30000;

base::Mutex g_mu;  // set_mode, set_file, prepare
std::string g_path USRTRACE_GUARDED_BY(g_mu);
bool g_installed USRTRACE_GUARDED_BY(g_mu) = false;
bool g_altstack_given USRTRACE_GUARDED_BY(g_mu) = false;  // set_altstack()
// Written under g_mu before the handlers are installed; read by handlers.
struct sigaction g_prev[NSIG];

// order: relaxed is enough for these two: the handler reads a value set
// before the crash by a control call, or the one before it; either is a
// valid choice of destination and mode.
std::atomic<uint8_t> g_mode{static_cast<uint8_t>(DumpMode::kOff)};
std::atomic<int> g_fd{-1};  // -1: stderr; else g_file_fd
// The descriptor of the dump file, kept open once opened (set_file).
int g_file_fd USRTRACE_GUARDED_BY(g_mu) = -1;

// The crash dump, once per process: the first fatal signal, the thread
// dumping it, and whether it is done.
std::atomic<int> g_crash_sig{0};
std::atomic<int> g_crash_tid{0};
std::atomic<bool> g_crash_done{false};

int raw_gettid() { return static_cast<int>(syscall(SYS_gettid)); }

void nap_ms(long ms) {
  timespec ts{0, ms * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "signal";
  }
}

// Gives the dump up and dies by `sig` now, by its default action (a fault
// inside the dump: the process still dies by the signal it crashed with).
// Context: signal handler.
[[noreturn]] void die_by(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  syscall(SYS_tgkill, getpid(), raw_gettid(), sig);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);  // delivered here: the process dies
  _exit(128 + sig);                           // not reached
}

// The kernel's oops header line. Context: signal handler.
void write_oops(int fd, int sig, const siginfo_t* info, int tid) {
  char comm[17] = {};
  if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) std::memcpy(comm, "?", 2);
  Text t;
  t.str("usrtrace: ").str(signal_name(sig));
  if (info && info->si_code > 0)  // raised by a fault: si_addr is the address
    t.str(" at ").hex(reinterpret_cast<uintptr_t>(info->si_addr));
  else if (info)
    t.str(" from pid ").dec(static_cast<uint64_t>(info->si_pid));
  t.str(" in thread ").dec(static_cast<uint64_t>(tid)).str(" (").str(comm).str(")\n");
  t.write(fd);
}

// The faulting thread's backtrace from the faulting frame. Context: signal
// handler; backtrace() was called once when the handlers were installed, so
// libgcc_s is loaded and it allocates nothing. The unwinder may take the
// loader's lock (dl_iterate_phdr, recursive) and, for frames registered at
// run time, libgcc's own: that is why it comes after the buffers.
void write_backtrace(int fd, const ucontext_t* uc) {
  const uintptr_t ip = uc ? static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]) : 0;
  Text t;
  if (ip) t.str("IP: ").hex(ip).str("\n");
  t.str("Call Trace:\n");
  t.write(fd);
  void* frames[64];
  const int n = backtrace(frames, 64);
  // The unwinder steps through the signal frame and reports the interrupted
  // instruction's address exactly: start there, leaving out the handler.
  int from = 0;
  for (int i = 0; i < n; ++i) {
    if (reinterpret_cast<uintptr_t>(frames[i]) == ip) {
      from = i;
      break;
    }
  }
  backtrace_symbols_fd(frames + from, n - from, fd);
}

bool take_storage(int tid) {
  for (int waited = 0;; waited += 10) {
    int expected = 0;
    if (g_owner.compare_exchange_strong(expected, tid, std::memory_order_acquire)) return true;
    // Our own on-demand dump faulted, or another one outlives our patience.
    if (expected == tid || waited >= kWaitMs) return false;
    nap_ms(10);
  }
}

void crash_dump(int sig, const siginfo_t* info, const ucontext_t* uc, int tid) {
  const int fd =
      g_fd.load(std::memory_order_relaxed) >= 0 ? g_fd.load(std::memory_order_relaxed) : STDERR_FILENO;
  const auto mode = static_cast<DumpMode>(g_mode.load(std::memory_order_relaxed));
  write_oops(fd, sig, info, tid);
  Storage* st = g_storage.load(std::memory_order_acquire);
  if (st && take_storage(tid)) {
    detail::dump_buffers(*st, fd, mode, sched_getcpu(), /*stop=*/true);
    g_owner.store(0, std::memory_order_release);
  } else {
    Text().str("usrtrace: trace buffers not dumped (dump storage busy)\n").write(fd);
  }
  write_backtrace(fd, uc);
}

// Puts the previous action back and lets the signal take its course.
void resume(int sig, siginfo_t* info, void* uc, int tid) {
  const struct sigaction prev = g_prev[sig];
  sigaction(sig, &prev, nullptr);
  // A fault: returning runs the faulting instruction again, which faults
  // again under the previous action (core dump, exit status, its handler).
  if (info && info->si_code > 0) return;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uc);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL) {
    // Blocked while this handler runs: delivered when it returns.
    syscall(SYS_tgkill, getpid(), tid, sig);
    return;
  }
  prev.sa_handler(sig);
}

// Context: the crashing thread, on the alternate stack where it has one.
// Async-signal-safe: no lock, no allocation (tests/crash checks the count).
void on_fatal_signal(int sig, siginfo_t* info, void* uc) {
  // A dynamic probe's read of memory that is not there (base/safe_copy.h):
  // not a crash, its fetch goes on with (fault).
  if (base::fixup_fault(sig, info, uc)) return;
  const int saved_errno = errno;
  const int tid = raw_gettid();
  int first = 0;
  if (g_crash_sig.compare_exchange_strong(first, sig, std::memory_order_acq_rel)) {
    g_crash_tid.store(tid, std::memory_order_relaxed);
    crash_dump(sig, info, static_cast<const ucontext_t*>(uc), tid);
    g_crash_done.store(true, std::memory_order_release);
  } else if (g_crash_tid.load(std::memory_order_relaxed) == tid &&
             !g_crash_done.load(std::memory_order_acquire)) {
    die_by(first);  // a fault inside our own dump
  } else {
    // Only one thread dumps; let it finish before this signal kills us all.
    for (int waited = 0; waited < kWaitMs && !g_crash_done.load(std::memory_order_acquire); waited += 10)
      nap_ms(10);
  }
  resume(sig, info, uc, tid);
  errno = saved_errno;
}

void install_locked() USRTRACE_REQUIRES(g_mu) {
  if (g_installed) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  // The other fatal signals stay unblocked, so a fault of another kind
  // inside the dump reaches on_fatal_signal, which gives up; one of the
  // same kind is blocked, and the kernel kills with it directly.
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) sigaction(sig, &sa, &g_prev[sig]);
  g_installed = true;
}

void uninstall_locked() USRTRACE_REQUIRES(g_mu) {
  if (!g_installed) return;
  for (int sig : kSignals) sigaction(sig, &g_prev[sig], nullptr);
  g_installed = false;
}

// The storage's alternate stack, for the first thread that enables the dump
// and has none (one stack serves one thread): a stack overflow's SIGSEGV
// can then still dump on that thread. Other threads dump on their own stack.
void set_altstack(Storage& st) USRTRACE_REQUIRES(g_mu) {
  stack_t old{};
  if (g_altstack_given || sigaltstack(nullptr, &old) != 0 || !(old.ss_flags & SS_DISABLE)) return;
  g_altstack_given = true;
  stack_t ss{};
  ss.ss_sp = st.altstack.get();
  ss.ss_size = detail::kAltStackSize;
  sigaltstack(&ss, nullptr);
}

int prepare_locked() USRTRACE_REQUIRES(g_mu) {
  if (Storage* st = g_storage.load(std::memory_order_relaxed)) {
    set_altstack(*st);
    return 0;
  }
  auto* st = new (std::nothrow) Storage(base::nr_possible_cpus());
  if (!st) return -ENOMEM;
  // What the handler must not do for the first time: load libgcc_s (the
  // unwinder; dlopen allocates) and calibrate the TSC clock (20 ms, and a
  // guarded static).
  void* frames[4];
  (void)backtrace(frames, 4);
  (void)clock::tsc_calibration();
  set_altstack(*st);
  // order: release; a dump that loads the pointer sees the storage built.
  g_storage.store(st, std::memory_order_release);
  return 0;
}

// Reads USRTRACE_DUMP_ON_CRASH when the library is loaded.
struct EnvInit {
  EnvInit() {
    const char* v = base::env("USRTRACE_DUMP_ON_CRASH");
    if (!v || !*v) return;
    size_t bad = 0;
    const int err = configure(v, &bad);
    if (err == 0) return;
    // No control file to fail: say it on stderr, and in the top error_log.
    fprintf(stderr, "usrtrace: USRTRACE_DUMP_ON_CRASH=%s: %s (expected 0, 1, 2 or all, then :PATH)\n", v,
            strerror(-err));
    if (instance::Instance* top = instance::Instance::top())
      top->log_error("crash", err == -EINVAL ? "Bad USRTRACE_DUMP_ON_CRASH value" : strerror(-err), v, bad);
  }
};
EnvInit g_env_init;

}  // namespace

bool parse_mode(std::string_view s, DumpMode* mode, size_t* bad) {
  std::string_view v = s;
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  static constexpr struct {
    std::string_view text;
    DumpMode mode;
  } kModes[] = {
      {"0", DumpMode::kOff}, {"1", DumpMode::kTop}, {"2", DumpMode::kOrigCpu}, {"all", DumpMode::kAll}};
  for (const auto& m : kModes) {
    if (v == m.text) {
      *mode = m.mode;
      return true;
    }
  }
  // The caret goes under the first byte that is no prefix of a valid value.
  size_t i = 0;
  for (const auto& m : kModes) {
    size_t k = 0;
    while (k < v.size() && k < m.text.size() && v[k] == m.text[k]) ++k;
    i = std::max(i, k);
  }
  *bad = i;
  return false;
}

const char* mode_name(DumpMode mode) {
  switch (mode) {
    case DumpMode::kOff:
      return "0";
    case DumpMode::kTop:
      return "1";
    case DumpMode::kOrigCpu:
      return "2";
    case DumpMode::kAll:
      return "all";
  }
  return "0";
}

int prepare() {
  base::MutexLock l(&g_mu);
  return prepare_locked();
}

int set_mode(DumpMode mode) {
  base::MutexLock l(&g_mu);
  if (mode == DumpMode::kOff) {
    uninstall_locked();
  } else {
    if (int err = prepare_locked(); err != 0) return err;
    install_locked();
  }
  g_mode.store(static_cast<uint8_t>(mode), std::memory_order_relaxed);
  return 0;
}

DumpMode mode() { return static_cast<DumpMode>(g_mode.load(std::memory_order_relaxed)); }

int set_file(std::string_view path, std::string* why) {
  if (path.size() >= PATH_MAX || path.find('\0') != std::string_view::npos) return -EINVAL;
  base::MutexLock l(&g_mu);
  if (path.empty()) {
    g_fd.store(-1, std::memory_order_relaxed);
    g_path.clear();
    return 0;
  }
  // A FIFO is refused, never opened for a reader to come: the control
  // thread would wait, and a crash dump would block in its handler. A
  // terminal or /dev/null is fine.
  const int fd = base::open_for_write(std::string(path), {O_WRONLY | O_APPEND, 0600, true}, why);
  if (fd < 0) return fd;
  // One descriptor number for every dump file, never closed: a handler
  // may have loaded it and be writing. dup3 replaces the file behind it
  // in one step (a write in progress finishes on the file it started
  // on), so a thousand writes of this file hold one descriptor.
  if (g_file_fd < 0) {
    g_file_fd = fd;
  } else {
    if (::dup3(fd, g_file_fd, O_CLOEXEC) < 0) {
      const int e = errno;
      ::close(fd);
      return -e;
    }
    ::close(fd);
  }
  g_fd.store(g_file_fd, std::memory_order_relaxed);
  g_path.assign(path);
  return 0;
}

std::string file() {
  base::MutexLock l(&g_mu);
  return g_path;
}

int configure(std::string_view value, size_t* bad) {
  const size_t colon = value.find(':');
  DumpMode m;
  if (!parse_mode(value.substr(0, colon), &m, bad)) return -EINVAL;
  if (colon != std::string_view::npos) {
    if (int err = set_file(value.substr(colon + 1)); err != 0) {
      *bad = colon + 1;
      return err;
    }
  }
  return set_mode(m);
}

namespace {
// The function tracers' dump and cpudump commands (function/core.h).
struct RegisterDump {
  RegisterDump() {
    function::register_dump({&prepare, [](bool orig_cpu) {
                               const int fd = g_fd.load(std::memory_order_relaxed);
                               return dump(fd >= 0 ? fd : STDERR_FILENO,
                                           orig_cpu ? DumpMode::kOrigCpu : DumpMode::kTop);
                             }});
  }
} g_register_dump;
}  // namespace

int dump(int fd, DumpMode mode) {
  Storage* st = g_storage.load(std::memory_order_acquire);
  if (!st) return -ENOMEM;
  int expected = 0;
  if (!g_owner.compare_exchange_strong(expected, raw_gettid(), std::memory_order_acquire)) return -EAGAIN;
  const int err = detail::dump_buffers(*st, fd, mode, sched_getcpu(), /*stop=*/false);
  g_owner.store(0, std::memory_order_release);
  return err;
}

}  // namespace usrtrace::crash
