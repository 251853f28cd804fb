// usrtrace record|extract: a running process's buffers to trace.dat.
//
//   usrtrace record [-e ...] [-B INSTANCE] ... -o FILE -P PID
//       sets tracing up as `start` does, drains the buffers into FILE until
//       Ctrl-C or the process exits, then takes back what it set up (-k
//       keeps it).
//   usrtrace record [...] -o FILE -- COMMAND ARGS
//       starts COMMAND with the runtime preloaded (LD_PRELOAD), holds it
//       before main() until tracing is set up, and records it to its end.
//   usrtrace extract -P PID -o FILE
//       what the buffers hold now, in one go (the flight-recorder case).
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "commands.h"
#include "remote.h"
#include "usrtrace/tracedat.h"
#include "usrtrace_toolkit/toolkit.h"

namespace usrtrace::tool {
namespace {

struct FileOptions {
  std::string output = "trace.dat";
  int file_version = 7;
  std::string compression;  // as given: "", "none", "zstd" or "any"
  bool compress_flag = false;
  bool compress = false;  // what resolve() decided
  std::string perfetto;   // --perfetto FILE: the trace.dat converted there too

  // trace-cmd's flag: zstd (or "any", the one there is) compresses a version
  // 7 file's data; a version 6 file cannot be. --compress says zstd. Not the
  // default, unlike trace-cmd's: the pages are compressed while recorded, but
  // on two CPUs the compressor falls behind a busy program and the whole job
  // takes 1.5x uftrace's wall time (docs/design/record-journal.md). 0, or 1
  // with the error said.
  int resolve(const char* verb) {
    if (compress_flag && compression == "none")
      return fail(verb, "--compress and --compression none disagree");
    compress = compress_flag || (!compression.empty() && compression != "none");
    if (compress && file_version != 7) return fail(verb, "compression needs file version 7");
    return 0;
  }
};

void add_file_options(CLI::App* sub, FileOptions* f) {
  sub->add_option("-o,--output", f->output, "Output file (default trace.dat)");
  sub->add_option("--file-version", f->file_version, "trace.dat version: 6 or 7 (default 7)")
      ->check(CLI::IsMember({6, 7}));
  sub->add_option(
         "--compression", f->compression,
         "Compression of the data (version 7), as trace-cmd's: none (the default), zstd, or any (zstd)")
      ->check(CLI::IsMember({"none", "zstd", "any"}));
  sub->add_flag("--compress", f->compress_flag, "The same as --compression zstd");
  sub->add_option("--perfetto", f->perfetto,
                  "Also write FILE: the trace.dat as a Perfetto trace (usrtrace report --format perfetto)");
}

void report(const std::string& verb, const RecordStats& st, const std::string& file) {
  if (st.pages_dropped > 0) {
    fprintf(
        stderr,
        "usrtrace %s: %llu pages taken, the %llu oldest given up to the size limit (-m), %llu written to %s; "
        "%llu events lost\n",
        verb.c_str(), static_cast<unsigned long long>(st.pages),
        static_cast<unsigned long long>(st.pages_dropped),
        static_cast<unsigned long long>(st.pages - std::min(st.pages, st.pages_dropped)), file.c_str(),
        static_cast<unsigned long long>(st.lost_events));
    return;
  }
  fprintf(stderr, "usrtrace %s: %llu pages (%llu bytes) written to %s; %llu events lost\n", verb.c_str(),
          static_cast<unsigned long long>(st.pages), static_cast<unsigned long long>(st.bytes), file.c_str(),
          static_cast<unsigned long long>(st.lost_events));
}

uint64_t start_time_of(int pid) { return toolkit::process_start_time(pid); }

struct Child {
  pid_t pid = -1;
  // Our end of the gate (src/preload/preload.cc): "E" comes before the
  // program's constructors, "R" before main(); "G" lets it go on each time
  // (sent with MSG_NOSIGNAL: a program that died in a constructor must not
  // take us with it by SIGPIPE).
  int gate = -1;
};

// Starts the command with the runtime preloaded, held before its
// constructors.
// `follow`: the socket its descendants announce themselves on (-c).
// --buffer-cap's default, in bytes: a quarter of the machine's memory, for
// each instance's spares (docs/cli/usrtrace-record.md).
uint64_t default_buffer_cap() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) / 4;
}

// `grow`: USRTRACE_SHARED_GROW for the command, the bytes its buffers'
// spares may hold (0: they do not grow).
int spawn(const std::vector<std::string>& cmd, const std::string& follow, uint64_t grow, Child* out) {
  const std::string lib = preload_library();
  if (lib.empty())
    return fail("record", "cannot find libusrtrace-preload.so (set USRTRACE_PRELOAD to its path)");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return fail("record", std::string("socketpair: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) return fail("record", std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(sv[0]);
    const int fd = dup(sv[1]);  // without CLOEXEC: the program's runtime takes it
    std::string preload = lib;
    if (const char* old = getenv("LD_PRELOAD"); old && *old) preload += std::string(":") + old;
    setenv("LD_PRELOAD", preload.c_str(), 1);
    // For this process only (its pid: exec keeps it); see preload.cc.
    setenv("USRTRACE_GATE_FD", (std::to_string(fd) + ":" + std::to_string(getpid())).c_str(), 1);
    setenv("USRTRACE_DEFER_SIGNALS", "1", 1);
    // Its exit waits for us to take the last pages and the names: we are
    // its parent and answer, or the socket closes when we die, which ends
    // the wait too. So wait long enough for a loaded machine (the 5 s
    // default is for processes whose recorder may be stuck elsewhere).
    setenv("USRTRACE_EXIT_WAIT_MS", "60000", 0);
    if (!follow.empty()) setenv("USRTRACE_FOLLOW", follow.c_str(), 1);
    // Its buffers in shared memory, which we map and read ourselves
    // (src/record/shared_buffers.h); USRTRACE_SHARED_BUFFERS=0 keeps them
    // private and the pages come through its control socket.
    setenv("USRTRACE_SHARED_BUFFERS", "1", 0);
    // Rather than overwrite pages we have not taken, its buffers take
    // fresh ones, up to this (src/ring_buffer/grow.cc).
    setenv("USRTRACE_SHARED_GROW", std::to_string(grow).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    fprintf(stderr, "usrtrace record: %s: %s\n", cmd[0].c_str(), std::strerror(errno));
    _exit(127);
  }
  ::close(sv[1]);
  out->pid = pid;
  out->gate = sv[0];
  // Until the program is before its constructors, or gone.
  pollfd p{out->gate, POLLIN, 0};
  char c = 0;
  if (poll(&p, 1, 60000) <= 0 || ::read(out->gate, &c, 1) != 1 || c != 'E') {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 127)
      return 1;  // the child said why
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return fail("record", cmd[0] +
                              " did not start with usrtrace's runtime (a static program, or one "
                              "that replaces LD_PRELOAD?)");
  }
  return 0;
}

// -c: the processes the command starts (and theirs) announce themselves
// on a socket as their runtime starts (src/preload/preload.cc); each is
// set up as the command was and recorded into the same file before it is
// let go.
class Follower {
 public:
  ~Follower() { stop(); }

  int listen(std::string* err) {
    char tmpl[] = "/tmp/usrtrace-follow-XXXXXX";
    if (!mkdtemp(tmpl)) {
      *err = std::string("mkdtemp: ") + std::strerror(errno);
      return -1;
    }
    dir_ = tmpl;
    path_ = dir_ + "/follow";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 64) != 0) {
      *err = path_ + ": " + std::strerror(errno);
      return -1;
    }
    return 0;
  }
  const std::string& path() const { return path_; }

  void start(TraceRecorder* rec, const Setup* setup) {
    thread_ = std::thread([this, rec, setup] { run(rec, setup); });
  }

  // Stops taking new processes (those that come later run unrecorded).
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!path_.empty()) ::unlink(path_.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
    path_.clear();
    dir_.clear();
  }

  int followed() const { return followed_; }

 private:
  void run(TraceRecorder* rec, const Setup* setup) {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      pollfd q{c, POLLIN, 0};
      int32_t pid = 0;
      // The pid it says must be its own (the kernel's word, SO_PEERCRED):
      // a process cannot have another one set up and recorded.
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::poll(&q, 1, 2000) == 1 && ::read(c, &pid, sizeof pid) == static_cast<ssize_t>(sizeof pid) &&
          pid > 0 && ::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid == pid)
        take(rec, setup, pid);
      [[maybe_unused]] ssize_t w = ::write(c, "G", 1);  // recorded or not, it goes on
      ::close(c);
    }
  }

  void take(TraceRecorder* rec, const Setup* setup, int pid) {
    auto c = connect_to("record", pid);
    if (!c) return;
    Done d{pid, start_time_of(pid), {}};
    if (setup->apply("record", *c, &d.undo, pid) != 0) {
      Setup::revert(*c, d.undo);
      return;
    }
    for (const std::string& inst : setup->instances()) c->write_file(instance_dir(inst) + "tracing_on", "1");
    std::string err;
    if (rec->add_process(pid, &err) < 0) {
      // It fails alone, and says so; the others' recordings go on.
      fail("record", "following process " + std::to_string(pid) + ": " + err + " (not recorded)");
      Setup::revert(*c, d.undo);
      return;
    }
    // Only what undoes its setup is kept (the connection closes here): a
    // recording of hundreds of processes holds no descriptor per process.
    std::lock_guard<std::mutex> l(mu_);
    set_up_.push_back(std::move(d));
    ++followed_;
  }

 public:
  // Takes back the setup of each followed process that still runs (the
  // same process: its start time), as record does for the command; -k
  // keeps it. Context: after stop().
  void revert_survivors() {
    std::lock_guard<std::mutex> l(mu_);
    for (const Done& d : set_up_) {
      if (::kill(d.pid, 0) != 0 || start_time_of(d.pid) != d.started) continue;
      std::string err;
      auto c = control::Client::connect(d.pid, &err);
      if (c) Setup::revert(*c, d.undo);
    }
    set_up_.clear();
  }

 private:
  struct Done {
    int pid;
    uint64_t started;  // /proc/PID/stat's start time: the pid is not reused by another
    Setup::Undo undo;
  };
  std::mutex mu_;
  std::vector<Done> set_up_;  // under mu_
  std::string dir_, path_;
  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> followed_{0};
};

}  // namespace

// The buffer size per CPU, in KiB, of each instance a recorded command's
// setup names and gives no -b: the recorder reads the command's buffers
// from shared memory while it runs, and what it has not read when a
// buffer comes round again is lost. The kernel's default (1408 KiB)
// fills in about 4 ms at function_graph's rate (Lua, bench/README.md's
// whole job), and a recorder kept off its CPU that long on a busy machine
// lost events in 2 runs of 5; with 16 MiB none of 5 did. Shared memory is
// taken as pages are written, so a quiet program does not pay for it.
constexpr const char* kCommandBufferKb = "16384";

void default_buffer_sizes(Setup* s) {
  std::vector<Setup::Action> out;
  bool sized = true;  // the scope before any action: nothing to size yet
  auto close_scope = [&](size_t at) {
    if (!sized) out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), {'b', kCommandBufferKb});
  };
  size_t scope_start = 0;
  const bool top = s->actions.empty() || s->actions.front().opt != 'B';
  if (top) sized = false;
  for (const Setup::Action& a : s->actions) {
    if (a.opt == 'B') {
      close_scope(scope_start);
      out.push_back(a);
      scope_start = out.size();
      sized = false;
      continue;
    }
    if (a.opt == 'b') sized = true;
    out.push_back(a);
  }
  close_scope(scope_start);
  s->actions = std::move(out);
}

constexpr const char* kNoSleepInterval =
    "usrtrace's recorder has no sleep interval: it wakes when a CPU's buffer is buffer_percent full "
    "(the instance's buffer_percent file)";

Runner add_record(CLI::App& app) {
  struct Options {
    int pid = 0;
    Setup setup;
    FileOptions file;
    bool keep = false;
    bool children = false;
    bool quiet = false;
    uint64_t max_kib = 0;
    std::optional<uint64_t> cap_kib;
    std::vector<std::string> kernel_events;
    std::vector<std::string> command;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("record", "Record a process's buffers to trace.dat");
  sub->add_option("-P,--pid", o->pid, "Process to record")->check(CLI::PositiveNumber);
  o->setup.add_options(sub);
  add_file_options(sub, &o->file);
  sub->add_flag("-k,--keep", o->keep, "Keep the tracing set up after recording (default: take it back)");
  sub->add_flag(
      "-F,--main-thread", o->setup.main_thread_only,
      "With -- COMMAND: function tracers trace only its main thread (set_ftrace_pid), as trace-cmd's -F");
  sub->add_flag("-c,--children", o->children,
                "With -- COMMAND: also record the programs it starts, and theirs (into the same file)");
  sub->add_flag("-q,--quiet", o->quiet, "Say nothing but errors and lost events");
  sub->add_option(
         "-K,--kernel-event", o->kernel_events,
         "Kernel event to record too, into the buffer \"kernel\" of the same file: SYS:EVENT, SYS or "
         "EVENT (globs work; repeatable), limited to the process's threads; needs root and tracefs")
      ->allow_extra_args(false);
  // trace-cmd's flags that have no meaning here: said, not ignored.
  sub->add_option_function<std::string>(
      "-s", [](const std::string&) { throw CLI::ValidationError("-s", kNoSleepInterval); },
      "Not taken: the recorder wakes when a buffer is buffer_percent full, not on a timer");
  sub->add_option("-m,--max-size", o->max_kib,
                  "KiB per CPU of each instance that the file keeps: the newest pages, the older given up as "
                  "the recording goes (whole pages, at least one), as trace-cmd's -m")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  sub->add_option("--buffer-cap", o->cap_kib,
                  "With -- COMMAND: KiB that each instance's buffer may grow by, rather than overwrite pages "
                  "not yet recorded (default: a quarter of the machine's memory; 0: fixed rings)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 40));
  sub->add_option("command", o->command, "-- COMMAND ARGS: start and record this program");
  sub->positionals_at_end();
  return [o] {
    if ((o->pid != 0) == !o->command.empty()) return fail("record", "give either -P PID or -- COMMAND ARGS");
    if (o->file.resolve("record") != 0) return 1;
    if (o->setup.main_thread_only && o->command.empty())
      return fail("record", "-F traces only the command record starts: give -- COMMAND ARGS");
    if (o->children && o->command.empty())
      return fail("record", "-c follows the programs a COMMAND starts: give -- COMMAND ARGS");
    if (o->cap_kib && o->command.empty())
      return fail(
          "record",
          "--buffer-cap sizes the buffers of the COMMAND record starts (a running process's were sized "
          "when it started): give -- COMMAND ARGS");
    o->setup.missing_events_ok = o->children;
    if (!o->kernel_events.empty()) {  // before the command starts or the process is touched
      std::string err;
      if (toolkit::check_kernel_events(o->kernel_events, &err) < 0) return fail("record", err);
    }
    Child child;
    Follower follower;
    int pid = o->pid;
    if (!o->command.empty()) {
      std::string err;
      if (o->children && follower.listen(&err) < 0) return fail("record", err);
      const uint64_t grow = o->cap_kib ? *o->cap_kib * 1024 : default_buffer_cap();
      if (int rc = spawn(o->command, o->children ? follower.path() : std::string(), grow, &child)) return rc;
      pid = child.pid;
      if (o->children) {
        // Each live followed process holds a connection, its shared buffer
        // and a page file per CPU: the soft limit (1024) would stop following
        // at a few hundred at once; the hard one is the user's to set. After
        // the spawn: the command keeps the limits it would have had.
        rlimit nofile{};
        if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
          nofile.rlim_cur = nofile.rlim_max;
          setrlimit(RLIMIT_NOFILE, &nofile);
        }
      }
    }
    bool asked = false;  // Ctrl-C came, at interrupted_at
    auto interrupted_at = std::chrono::steady_clock::time_point{};
    // When the recorder was done after a Ctrl-C: the command's 10 s to end
    // count from there. Its runtime holds the signal until we have taken
    // the last pages, which on a loaded machine (or under a sanitizer)
    // takes a while; a command is not killed for our slowness.
    auto recorder_done = std::chrono::steady_clock::time_point{};
    auto finish_child = [&](int rc) {
      if (child.pid > 0) {
        ::close(child.gate);  // lets it run (or die, if we failed)
        int status = 0;
        // After a Ctrl-C the program had its chance to end (its runtime
        // held the signal only until the last pages were taken); one that
        // still runs 10 s later (it caught the signal and went on) is killed.
        const auto give_up = std::max(interrupted_at, recorder_done) + std::chrono::seconds(10);
        while (asked && waitpid(child.pid, &status, WNOHANG) == 0) {
          if (std::chrono::steady_clock::now() > give_up) {
            fprintf(stderr, "usrtrace record: %s still runs 10 s after Ctrl-C: killing it\n",
                    o->command[0].c_str());
            kill(child.pid, SIGKILL);
            waitpid(child.pid, &status, 0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (!asked) waitpid(child.pid, &status, 0);
        if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0)
          fprintf(stderr, "usrtrace record: %s exited with status %d\n", o->command[0].c_str(),
                  WEXITSTATUS(status));
        if (rc == 0 && WIFSIGNALED(status))
          fprintf(stderr, "usrtrace record: %s was killed by signal %d\n", o->command[0].c_str(),
                  WTERMSIG(status));
      }
      return rc;
    };
    auto c = connect_to("record", pid, child.pid <= 0);
    if (!c) return finish_child(1);
    if (child.pid > 0) default_buffer_sizes(&o->setup);
    Setup::Undo undo;
    // A command is held before its constructors: everything but events now
    // (the function tracers then see the constructors), the events when it
    // reaches main() (its constructors registered them).
    const auto first = child.pid > 0 ? Setup::Phase::kBeforeConstructors : Setup::Phase::kAll;
    if (o->setup.apply("record", *c, &undo, pid, first) != 0) {
      Setup::revert(*c, undo);
      return finish_child(1);
    }
    const std::vector<std::string> instances = o->setup.instances();
    for (const std::string& inst : instances) c->write_file(instance_dir(inst) + "tracing_on", "1");
    catch_interrupts();
    if (child.pid > 0) {
      // Its constructors run, traced into its buffers (which keep them
      // until the recorder starts below); then "R" at main(), or EOF (it
      // ended in a constructor). The recorder starts after the events are
      // on, so the formats it takes first have every event the
      // constructors registered (a program that exits fast unregisters
      // them before a later look could see them).
      char r = 0;
      ssize_t n = 0;
      if (::send(child.gate, "G", 1, MSG_NOSIGNAL) == 1)
        while ((n = ::read(child.gate, &r, 1)) < 0 && errno == EINTR && !interrupted()) {
        }
      if (n == 0) {
        // EOF: it ended (exit() or a signal) before main(). Its buffers
        // went with it: no recorder was attached yet.
        fprintf(stderr, "usrtrace record: %s ended before main() (in a constructor): nothing was recorded\n",
                o->command[0].c_str());
        return finish_child(1);
      }
      if (n == 1 && r == 'R' && o->setup.apply("record", *c, &undo, pid, Setup::Phase::kEvents) != 0) {
        Setup::revert(*c, undo);
        return finish_child(1);
      }
    }
    RecordOptions ro;
    ro.output = o->file.output;
    ro.file_version = o->file.file_version;
    ro.compress = o->file.compress;
    ro.pid = pid;
    ro.instances = instances;
    ro.max_cpu_bytes = o->max_kib * 1024;
    ro.kernel_events = o->kernel_events;
    std::string err;
    // A recording of the same output that was killed left its pages: say
    // so once, before this one adds its own journal beside them.
    for (const std::string& j : toolkit::abandoned_journals(ro.output))
      fprintf(stderr,
              "usrtrace record: note: %s holds the pages of an earlier recording of %s that did not finish "
              "(`usrtrace recover %s` writes a trace.dat from them; or remove it)\n",
              j.c_str(), ro.output.c_str(), j.c_str());
    auto rec = TraceRecorder::start(ro, &err);
    if (!rec) {
      Setup::revert(*c, undo);
      return finish_child(fail("record", err));
    }
    if (o->children) follower.start(rec.get(), &o->setup);
    if (child.pid > 0 && ::send(child.gate, "G", 1, MSG_NOSIGNAL) != 1) {
      rec->stop(&err);
      return finish_child(fail("record", "the command went away before it started"));
    }
    // As trace-cmd record says it: from here on, everything is recorded.
    if (!o->quiet)
      fprintf(stderr, "usrtrace record: recording process %d to %s; hit Ctrl-C to stop\n", pid,
              ro.output.c_str());
    // Until Ctrl-C or the process's end. Ctrl-C reaches a started command
    // too (same terminal); its runtime holds its death until we have taken
    // the last pages.
    while (!rec->process_exited()) {
      if (interrupted() && !asked) {
        asked = true;
        interrupted_at = std::chrono::steady_clock::now();
        if (child.pid <= 0) break;  // -P: stop recording, the process goes on
        kill(child.pid, SIGINT);    // in case it is not in our terminal's group
      }
      // A command that caught or ignored the signal and goes on: 10 s.
      // One whose runtime holds it for us (process_exiting): until the
      // recorder has the last pages (at most its exit wait,
      // USRTRACE_EXIT_WAIT_MS, 5 s by default, however slowly a loaded
      // machine then takes them), with a bound for a runtime that never
      // lets go.
      if (asked) {
        const auto waited = std::chrono::steady_clock::now() - interrupted_at;
        if (waited > std::chrono::seconds(rec->process_exiting() ? 120 : 10)) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    follower.stop();  // add_process must not run into stop()
    // (Only a command held for us was waiting on the recorder: one that
    // goes on after the signal has had its 10 s from the Ctrl-C.)
    const bool was_held = rec->process_exiting();
    const int rc = rec->stop(&err);
    if (was_held) recorder_done = std::chrono::steady_clock::now();
    const RecordStats st = rec->stats();
    if (const std::string w = rec->warnings(); !w.empty()) fprintf(stderr, "usrtrace record: %s", w.c_str());
    if (o->children)
      fprintf(stderr, "usrtrace record: followed %d process%s\n", follower.followed(),
              follower.followed() == 1 ? "" : "es");
    if (!o->keep && !rec->process_exited()) Setup::revert(*c, undo);
    if (!o->keep) follower.revert_survivors();
    if (rc < 0) return finish_child(fail("record", err));
    if (!o->quiet || st.lost_events != 0) report("record", st, ro.output);
    if (!o->file.perfetto.empty() && export_trace(ro.output, "perfetto", o->file.perfetto) != 0)
      return finish_child(1);
    return finish_child(0);
  };
}

Runner add_extract(CLI::App& app) {
  struct Options {
    int pid = 0;
    std::vector<std::string> instances;
    bool all = false;
    FileOptions file;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("extract", "Write what a process's buffers hold now to trace.dat");
  sub->add_option("-P,--pid", o->pid, "Process")->required()->check(CLI::PositiveNumber);
  sub->add_option("-B,--instance", o->instances, "Instance (repeatable; default: the top)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("-a,--all", o->all, "The top instance and every other");
  add_file_options(sub, &o->file);
  return [o] {
    if (o->file.resolve("extract") != 0) return 1;
    RecordOptions ro;
    ro.output = o->file.output;
    ro.file_version = o->file.file_version;
    ro.compress = o->file.compress;
    ro.pid = o->pid;
    ro.instances = o->instances;
    if (o->all) {
      auto c = connect_to("extract", o->pid, true);
      if (!c) return 1;
      std::vector<std::string> names;
      c->list("instances", &names);
      ro.instances = {""};
      ro.instances.insert(ro.instances.end(), names.begin(), names.end());
    }
    std::string err;
    RecordStats st;
    if (extract_trace(ro, &err, &st) < 0) return fail("extract", err);
    report("extract", st, ro.output);
    return o->file.perfetto.empty() ? 0 : export_trace(ro.output, "perfetto", o->file.perfetto);
  };
}

}  // namespace usrtrace::tool
