// What the command-line tests share (cli_test.cc, cli_record_test.cc): a
// child process with its stdin and outputs, `usrtrace ARGS`, cli_target
// driven line by line, and readers of report's text. Each test binary
// includes it once.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cli_harness {

using Clock = std::chrono::steady_clock;

// In the ASan build, `record -- COMMAND` preloads an instrumented
// libusrtrace-preload.so ahead of the program's own ASan runtime, which
// ASan refuses unless told the order is fine. Every child inherits this.
[[maybe_unused]] const bool g_asan_order = [] {
  std::string o = getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "";
  setenv("ASAN_OPTIONS", (o + (o.empty() ? "" : ":") + "verify_asan_link_order=0").c_str(), 1);
  return true;
}();

// `record -- /bin/bash ...` preloads libusrtrace-preload.so into bash. In the
// TSan build that library is instrumented and needs the TSan runtime
// (__tsan_init), which only an instrumented program carries (clang links it
// statically); Debian's bash has none, so the command cannot start. Tests
// whose subject is a real shell's children skip there; the gcc and ASan
// builds run them.
#if USRTRACE_TEST_TSAN
#define SKIP_FOR_AN_UNINSTRUMENTED_COMMAND() \
  GTEST_SKIP() << "the TSan build's runtime cannot be preloaded into an uninstrumented /bin/bash"
#else
#define SKIP_FOR_AN_UNINSTRUMENTED_COMMAND() \
  do {                                       \
  } while (0)
#endif

struct Result {
  int rc = -1;  // exit status, or 128 + signal
  std::string out, err;
};

int status_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// A child with pipes on its stdin (optional), stdout and stderr.
struct Proc {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string out_text, err_text;

  static Proc start(const std::vector<std::string>& argv, bool with_stdin) {
    int i[2] = {-1, -1}, o[2], e[2];
    if (with_stdin && pipe2(i, O_CLOEXEC) != 0) abort();
    if (pipe2(o, O_CLOEXEC) != 0 || pipe2(e, O_CLOEXEC) != 0) abort();
    Proc p;
    p.pid = fork();
    if (p.pid == 0) {
      setpgid(0, 0);  // its own group: a stuck test kills what it started, children too
      if (with_stdin) {
        dup2(i[0], 0);
      } else {
        const int null = ::open("/dev/null", O_RDONLY);
        dup2(null, 0);
      }
      dup2(o[1], 1);
      dup2(e[1], 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    if (with_stdin) {
      ::close(i[0]);
      p.in = i[1];
    }
    ::close(o[1]);
    ::close(e[1]);
    p.out = o[0];
    p.err = e[0];
    return p;
  }

  // Reads what is there from stdout/stderr, waiting up to `ms`; false at
  // end of both.
  bool pump(int ms) {
    pollfd f[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
    if (out < 0) f[0].fd = -1;
    if (err < 0) f[1].fd = -1;
    if (f[0].fd < 0 && f[1].fd < 0) return false;
    if (::poll(f, 2, ms) <= 0) return true;
    char buf[65536];
    for (int k = 0; k < 2; ++k) {
      if (!(f[k].revents & (POLLIN | POLLHUP))) continue;
      int& fd = k == 0 ? out : err;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fd);
        fd = -1;
      } else {
        (k == 0 ? out_text : err_text).append(buf, static_cast<size_t>(n));
      }
    }
    return true;
  }

  // Waits (bounded) until stdout holds `what` after `from`; its end, or npos.
  size_t wait_for(const std::string& what, size_t from = 0, int seconds = 60) {
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    for (;;) {
      const size_t at = out_text.find(what, from);
      if (at != std::string::npos) return at + what.size();
      if (Clock::now() > end || !pump(100)) return std::string::npos;
    }
  }

  void close_stdin() {
    if (in >= 0) ::close(in);
    in = -1;
  }

  // Closes its stdin (unless keep_stdin) and waits for its end.
  Result finish(int seconds = 120, bool keep_stdin = false) {
    if (!keep_stdin) close_stdin();
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (pump(100) && Clock::now() < end) {
    }
    Result r;
    int status = 0;
    for (;;) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) break;
      if (Clock::now() > end) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      if (!pump(20)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    while (pump(0)) {
    }
    r.rc = status_of(status);
    r.out = out_text;
    r.err = err_text;
    pid = -1;
    return r;
  }

  ~Proc() {
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    for (int fd : {in, out, err})
      if (fd >= 0) ::close(fd);
  }
};

// `usrtrace ARGS...`, to its end.
Result run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), USRTRACE_CLI);
  Proc p = Proc::start(args, false);
  return p.finish();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// cli_target, ready to take commands.
class Target {
 public:
  Target() : proc_(Proc::start({CLI_TARGET}, true)) {
    const size_t end = proc_.wait_for("\n");
    if (end == std::string::npos || proc_.out_text.rfind("ready ", 0) != 0) {
      ADD_FAILURE() << "cli_target did not start: " << proc_.out_text << proc_.err_text;
      return;
    }
    pid_ = std::atoi(proc_.out_text.c_str() + 6);
    seen_ = end;
  }
  int pid() const { return pid_; }
  std::string spid() const { return std::to_string(pid_); }

  // Sends a command and waits for its "ok".
  void cmd(const std::string& line) {
    const std::string l = line + "\n";
    ASSERT_EQ(::write(proc_.in, l.data(), l.size()), static_cast<ssize_t>(l.size()));
    const size_t end = proc_.wait_for("ok\n", seen_);
    ASSERT_NE(end, std::string::npos) << "no answer to '" << line << "': " << proc_.err_text;
    seen_ = end;
  }
  Result finish() { return proc_.finish(); }

 private:
  Proc proc_;
  int pid_ = 0;
  size_t seen_ = 0;
};

std::string temp_dir() {
  char tmpl[] = "/tmp/usrtrace-cli-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

// Waits (bounded) until `pid` handles SIGINT itself: a command that
// catches Ctrl-C to stop cleanly has reached that point.
bool catches_sigint(pid_t pid) {
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < end) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("SigCgt:", 0) == 0) {
        const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
        if (mask & (1ull << (SIGINT - 1))) return true;
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Waits (bounded) for record's "hit Ctrl-C to stop" line on stderr.
bool recording(Proc& rec) {
  const auto end = Clock::now() + std::chrono::seconds(60);
  while (rec.err_text.find("hit Ctrl-C to stop") == std::string::npos)
    if (Clock::now() > end || !rec.pump(100)) return false;
  return true;
}

// The events of a `usrtrace report` text, "tick: seq=N" and the like, in
// order, for the lines naming `event`.
std::vector<unsigned> seqs(const std::string& report, const std::string& event) {
  std::vector<unsigned> out;
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + event + ":") == std::string::npos) continue;
    const size_t at = line.find("seq=");
    if (at != std::string::npos)
      out.push_back(static_cast<unsigned>(std::strtoul(line.c_str() + at + 4, nullptr, 10)));
  }
  return out;
}

bool have_trace_cmd() { return ::access("/usr/bin/trace-cmd", X_OK) == 0; }

#ifdef PERFETTO_DIR
// A Perfetto trace as protoc reads it with Perfetto's own schema
// (tests/output/perfetto/perfetto_trace.proto, pinned): its text, or ""
// with *why set when protoc is missing or refuses the bytes.
std::string perfetto_text(const std::string& trace, std::string* why) {
  if (::access("/usr/bin/protoc", X_OK) != 0) {
    *why = "protoc is not installed (apt-get install protobuf-compiler; scripts/install-deps.sh does)";
    return "";
  }
  const std::string cmd = "/usr/bin/protoc -I" PERFETTO_DIR " --decode=perfetto.protos.Trace " PERFETTO_DIR
                          "/perfetto_trace.proto < '" +
                          trace + "' 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    if (pclose(p) != 0) {
      *why = "protoc refused it: " + out.substr(0, 2000);
      return "";
    }
  }
  return out;
}
#endif

}  // namespace cli_harness
