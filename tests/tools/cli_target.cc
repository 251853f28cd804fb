// cli_target: a traced program for the usrtrace command's tests, driven
// line by line on stdin so that every test knows exactly what it wrote:
//
//   tick N        N clitest:tick events (seq 0..N-1) from this thread
//   rare N        N clitest:rare events
//   marker TEXT   TEXT into the top instance's trace_marker (printk)
//   write PATH TEXT  TEXT written to the file PATH (a kernel instance's
//                 trace_marker: a reference point on the kernel's timeline)
//   stamp         8 times clitest:rare n=A why=stamp, then n=B why=stamp-end:
//                 the first was written between A and B (CLOCK_MONOTONIC_RAW, ns)
//   spin          a thread writing clitest:tick without pause until "stop"
//                 (answered once its first tick is written)
//   stop          ends the spinning thread
//   name NAME     pthread_setname_np on this thread (usrtrace:thread_rename)
//   spawn N       runs another cli_target (exec'ed) that writes N ticks and
//                 exits; answered once it has
//   forge N       forks (the system call, past atfork handlers) N children
//                 that writes lines of 3 KB ("forged fff...") into the
//                 trace_marker for ever, into the buffers this
//                 process shares, holding none of its descriptors; says
//                 "forger PID" for each
//   ignoreint     ignores SIGINT from now on (a program that survives Ctrl-C)
//   exit CODE     exits with CODE (the atexit path: recorders take the rest)
//   abort         dies by SIGABRT
//
// Each command is answered with "ok\n" once done; "ready PID\n" comes first.
// End of input: exit 0. With CLI_TARGET_EXIT_IN_CONSTRUCTOR=CODE in its
// environment it exits with CODE from a static constructor, before main().
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "usrtrace/event.h"
#include "usrtrace/usrtrace.h"

USRTRACE_EVENT(clitest, tick, (uint32_t, seq)(uint32_t, tid)(char[16], label), "seq=%u tid=%u label=%s",
               REC->seq, REC->tid, REC->label)
USRTRACE_EVENT(clitest, rare, (uint64_t, n)(const char*, why), "n=%llu why=%s", REC->n, __get_str(why))

namespace {

std::atomic<bool> g_spin{false};

// A program that never reaches main(): a static constructor ends it.
[[maybe_unused]] const int g_exit_in_constructor = [] {
  if (const char* code = getenv("CLI_TARGET_EXIT_IN_CONSTRUCTOR")) {
    fputs("constructor exits\n", stderr);
    exit(atoi(code));
  }
  return 0;
}();

void ok() {
  fputs("ok\n", stdout);
  fflush(stdout);
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  printf("ready %d\n", getpid());
  fflush(stdout);
  std::thread spinner;
  std::string line;
  while (std::getline(std::cin, line)) {
    const size_t sp = line.find(' ');
    const std::string cmd = line.substr(0, sp);
    const std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (cmd == "tick") {
      const unsigned n = static_cast<unsigned>(std::strtoul(arg.c_str(), nullptr, 10));
      for (unsigned i = 0; i < n; ++i) trace_clitest_tick(i, static_cast<uint32_t>(gettid()), "main");
    } else if (cmd == "rare") {
      const unsigned n = static_cast<unsigned>(std::strtoul(arg.c_str(), nullptr, 10));
      for (unsigned i = 0; i < n; ++i) trace_clitest_rare(i, "because");
    } else if (cmd == "stamp") {
      // rare(n = A, "stamp"), then rare(n = B, "stamp-end"): the first
      // event was written between A and B, CLOCK_MONOTONIC_RAW readings.
      auto raw_ns = [] {
        timespec t;
        clock_gettime(CLOCK_MONOTONIC_RAW, &t);
        return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
      };
      for (int i = 0; i < 8; ++i) {  // the reader takes the narrowest
        const uint64_t a = raw_ns();
        trace_clitest_rare(a, "stamp");
        const uint64_t b = raw_ns();
        trace_clitest_rare(b, "stamp-end");
      }
    } else if (cmd == "marker") {
      usrtrace_array* top = usrtrace_array_lookup(nullptr);
      usrtrace_array_printk(top, "%s\n", arg.c_str());
      usrtrace_array_put(top);
    } else if (cmd == "write") {
      const size_t at = arg.find(' ');
      const std::string path = arg.substr(0, at), text = at == std::string::npos ? "" : arg.substr(at + 1);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        perror(path.c_str());
        return 5;
      }
      ::close(fd);
    } else if (cmd == "spin") {
      if (!spinner.joinable()) {
        g_spin.store(true);
        std::atomic<bool> first{false};
        spinner = std::thread([&first] {
          pthread_setname_np(pthread_self(), "spinner");
          for (uint32_t seq = 0; g_spin.load(std::memory_order_relaxed); ++seq) {
            trace_clitest_tick(seq, static_cast<uint32_t>(gettid()), "spin");
            if (seq == 0) first.store(true);
          }
        });
        // Answered once it has written: a Ctrl-C right after "ok" then
        // finds events to keep, however late the thread was scheduled.
        while (!first.load()) std::this_thread::yield();
      }
    } else if (cmd == "stop") {
      g_spin.store(false);
      if (spinner.joinable()) spinner.join();
    } else if (cmd == "spawn") {
      const std::string script = "tick " + arg + "\nexit 0\n";
      int in[2];
      if (pipe(in) != 0) return 3;
      const pid_t child = fork();
      if (child == 0) {
        dup2(in[0], 0);
        ::close(in[0]);
        ::close(in[1]);
        const int null = ::open("/dev/null", O_WRONLY);
        dup2(null, 1);
        char self[4096] = {};  // the real path: its name is the process's comm
        if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) _exit(126);
        execl(self, "cli_target", static_cast<char*>(nullptr));
        _exit(127);
      }
      ::close(in[0]);
      if (::write(in[1], script.data(), script.size()) != static_cast<ssize_t>(script.size())) return 3;
      ::close(in[1]);
      int status = 0;
      waitpid(child, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
    } else if (cmd == "forge") {
      // A child that keeps writing clitest:tick into the buffers it shares
      // with this process (record's shared memory), and holds no descriptor
      // of ours: after this process dies, the pages still change under a
      // recorder that maps them. The fork system call itself, past the
      // runtime's atfork handler (which gives a child private copies of
      // the buffers): what a hostile program does.
      const int forgers = arg.empty() ? 1 : std::atoi(arg.c_str());
      for (int k = 0; k < forgers; ++k) {
        const pid_t child = static_cast<pid_t>(syscall(SYS_fork));
        if (child == 0) {
          ::close_range(3, ~0u, 0);
          // Lines of most of a page each: pages as fast as memcpy fills them.
          const std::string forged = "forged " + std::string(3000, 'f');
          usrtrace_array* top = usrtrace_array_lookup(nullptr);
          for (;;) usrtrace_array_printk(top, "%s\n", forged.c_str());
        }
        printf("forger %d\n", child);
        fflush(stdout);
      }
    } else if (cmd == "ignoreint") {
      signal(SIGINT, SIG_IGN);
    } else if (cmd == "name") {
      pthread_setname_np(pthread_self(), arg.substr(0, 15).c_str());
    } else if (cmd == "exit") {
      g_spin.store(false);
      if (spinner.joinable()) spinner.join();
      ok();
      std::exit(std::atoi(arg.c_str()));
    } else if (cmd == "killself") {
      raise(SIGKILL);  // no handler, no exit path: the process just ends
    } else if (cmd == "abort") {
      ok();
      std::abort();
    } else {
      fprintf(stderr, "cli_target: unknown command '%s'\n", line.c_str());
      return 2;
    }
    ok();
  }
  g_spin.store(false);
  if (spinner.joinable()) spinner.join();
  return 0;
}
