// A program that crashes on purpose, for crash_test.cc: it turns the dump on
// (as its options say), writes known events and dies by a signal.
//
//   crash_child SCENARIO [--api=MODE[:PATH]] [--tracefs=MODE] [--chain]
//               [--instance=NAME] [--pin=CPU_CRASH,CPU_OTHER]
//
// SCENARIO: segv (a store through a null pointer), abort, fpe (an integer
// division by zero), poison (abort, and the dump then faults in an event's
// printer), threads (two threads store through null pointers at once),
// overflow (the main thread's stack overflows).
// With --chain it installs its own handler for the signal before turning
// the dump on; that handler reports the allocations counted while the dump
// ran, then dies by the signal.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "usrtrace/event.h"
#include "usrtrace/usrtrace.h"

USRTRACE_EVENT(crashtest, step, (int32_t, n), "n=%d", REC->n)
// Its printer reads a string at `addr`: a bad address makes the dump fault.
USRTRACE_EVENT(crashtest, poison, (uint64_t, addr), "text=%s", reinterpret_cast<const char*>(REC->addr))

#include "testing/alloc_counter.h"

static void say(const char* s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

static void say_count(const char* what, long n) {
  char buf[96];
  int len = snprintf(buf, sizeof buf, "crash_child: %s: %ld\n", what, n);
  (void)!write(STDERR_FILENO, buf, static_cast<size_t>(len));
}

// --chain: the handler that was there before the dump's.
static void chained_handler(int sig) {
  g_armed = 0;
  say_count("allocations during the dump", g_allocs);
  signal(sig, SIG_DFL);  // a fault runs again and kills; abort() raises again
}

// ---- The crashes. Exported (the target has ENABLE_EXPORTS), not inlined
// and not sanitized, so the backtrace names them and the fault happens.

#define CRASH_FN extern "C" __attribute__((noinline, no_sanitize("address", "undefined")))

CRASH_FN void crash_segv() {
  int* volatile p = nullptr;
  *p = 1;
  asm volatile("" ::: "memory");  // not a tail position: the frame stays
}

CRASH_FN void crash_abort() {
  void (*volatile f)() = abort;  // not known as noreturn: a return address inside this function
  f();
  asm volatile("" ::: "memory");
}

CRASH_FN int crash_fpe(int a) {
  volatile int zero = 0;
  int r = a / zero;
  asm volatile("" ::: "memory");
  return r;
}

static volatile int g_stop_depth = -1;  // never reached: the stack overflows first

CRASH_FN int crash_overflow(int depth) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(depth);
  if (depth == g_stop_depth) return 0;
  return crash_overflow(depth + 1) + pad[0];  // not a tail call
}

static pthread_barrier_t g_barrier;
static void* crash_thread(void*) {
  pthread_barrier_wait(&g_barrier);
  crash_segv();
  return nullptr;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<size_t>(cpu), &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    perror("crash_child: sched_setaffinity");
    exit(2);
  }
}

int main(int argc, char** argv) {
  alarm(120);  // a hang shows as SIGALRM, not as a stuck test
  install_counter();
  if (argc < 2) {
    say("usage: crash_child segv|abort|fpe|poison|threads|overflow [options]\n");
    return 2;
  }
  const std::string scenario = argv[1];
  const int sig = scenario == "abort" || scenario == "poison" ? SIGABRT
                  : scenario == "fpe"                         ? SIGFPE
                                                              : SIGSEGV;
  std::string api, tracefs_mode, inst_name;
  bool chain = false;
  int pin_crash = -1, pin_other = -1;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--api=", 0) == 0)
      api = a.substr(6);
    else if (a.rfind("--tracefs=", 0) == 0)
      tracefs_mode = a.substr(10);
    else if (a == "--chain")
      chain = true;
    else if (a.rfind("--instance=", 0) == 0)
      inst_name = a.substr(11);
    else if (sscanf(a.c_str(), "--pin=%d,%d", &pin_crash, &pin_other) == 2) {
    } else {
      fprintf(stderr, "crash_child: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (chain) signal(sig, chained_handler);
  if (!api.empty()) {
    const size_t colon = api.find(':');
    const std::string mode = api.substr(0, colon);
    const std::string path = colon == std::string::npos ? "" : api.substr(colon + 1);
    int rc = usrtrace_dump_on_crash(mode.c_str(), colon == std::string::npos ? nullptr : path.c_str());
    if (rc != 0) {
      fprintf(stderr, "crash_child: usrtrace_dump_on_crash: %s\n", strerror(-rc));
      return 2;
    }
  }
  if (!tracefs_mode.empty()) {
    long rc = usrtrace_tracefs_write("ftrace_dump_on_oops", tracefs_mode.data(), tracefs_mode.size());
    if (rc < 0) {
      fprintf(stderr, "crash_child: ftrace_dump_on_oops: %s\n", strerror(static_cast<int>(-rc)));
      return 2;
    }
  }
  struct usrtrace_array* top = usrtrace_array_get_by_name(nullptr);
  if (!top || usrtrace_array_set_clr_event(top, "crashtest", "*", true) < 0) {
    say("crash_child: cannot enable the events\n");
    return 2;
  }
  if (!inst_name.empty()) {
    struct usrtrace_array* tr = usrtrace_array_get_by_name(inst_name.c_str());
    if (!tr || usrtrace_array_set_clr_event(tr, "crashtest", "step", true) < 0) {
      say("crash_child: cannot make the instance\n");
      return 2;
    }
  }
  if (pin_other >= 0) {
    pin(pin_other);
    for (int n = 101; n <= 103; ++n) trace_crashtest_step(n);
    pin(pin_crash);
  }
  for (int n = 1; n <= 5; ++n) trace_crashtest_step(n);
  if (scenario == "poison") trace_crashtest_poison(16);

  // The counter counts: one allocation seen while armed.
  g_allocs = 0;
  g_armed = 1;
  void* (*volatile alloc)(size_t) = malloc;
  free(alloc(16));
  g_armed = 0;
  say_count("allocations seen by the counter check", g_allocs);
  g_allocs = 0;
  g_armed = chain ? 1 : 0;

  if (scenario == "segv")
    crash_segv();
  else if (scenario == "abort" || scenario == "poison")
    crash_abort();
  else if (scenario == "fpe")
    crash_fpe(argc);
  else if (scenario == "overflow")
    crash_overflow(0);
  else if (scenario == "threads") {
    pthread_barrier_init(&g_barrier, nullptr, 2);
    pthread_t t;
    pthread_create(&t, nullptr, crash_thread, nullptr);
    crash_thread(nullptr);
    pthread_join(t, nullptr);
  }
  say("crash_child: still alive\n");
  return 3;
}
