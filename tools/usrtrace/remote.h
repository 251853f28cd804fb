// What the verbs that drive a running process share: connecting by pid,
// errors in one line, the ordered setup options of start and record
// (-B, -e, -f, -p, -b, -O, -C, as trace-cmd takes them), and Ctrl-C.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "usrtrace/control.h"

namespace usrtrace::tool {

// Prints "usrtrace VERB: MESSAGE" on stderr; returns 1 (the exit status).
int fail(const std::string& verb, const std::string& message);
// "PATH: strerror" for a -errno result.
std::string why(const std::string& path, long rc);

// Connects to -P PID, or prints why not and returns nullptr. `attach`: a
// process with no usrtrace runtime gets one first (ptrace, dlopen:
// toolkit::inject_library), as record, start, stream, extract, probe and
// mount do.
std::unique_ptr<control::Client> connect_to(const std::string& verb, int pid, bool attach = false);
// libusrtrace-preload.so: USRTRACE_PRELOAD, else the one installed with
// this program, else the build tree's for the build tree's command; "" if
// none.
std::string preload_library();

// "" -> "", "foo" -> "instances/foo/".
std::string instance_dir(const std::string& instance);

// Ctrl-C (SIGINT), SIGTERM, SIGHUP: set interrupted() instead of killing
// the tool, so it can stop cleanly.
void catch_interrupts();
bool interrupted();

// uftrace's TIME (N, Nns, Nus, Nms, Ns; no unit: us) as tracing_thresh's
// microseconds. false with *err set: not a time, or not whole microseconds.
bool time_filter_us(const std::string& text, std::string* us, std::string* err);

// The setup options in the order given: each -B starts a new instance and
// the options after it apply there; -f applies to the -e before it.
struct Setup {
  struct Action {
    // 'B', 'e', 'f', 'R', 'v', 'T', 'u' (--probe), 'p', 'b', 'M', 'O', 'C', 'l', 'n', 'g',
    // 'N' (--notrace), 'd' (--max-graph-depth), 't' (--time-filter)
    char opt;
    std::string value;
  };
  std::vector<Action> actions;
  // record -F: the function tracers of every instance the setup names trace
  // only the process's main thread (set_ftrace_pid = its pid), as trace-cmd's
  // -F traces only the command it starts.
  bool main_thread_only = false;
  // -c: the processes of a tree need not all have every event; an -e that
  // names none of a process's events (and its -f) is skipped there.
  bool missing_events_ok = false;

  // Adds -B -e -f -R -v -T -p -b -M -O -C -l -n -g --max-graph-depth and
  // uftrace's --filter --notrace --depth --time-filter to a subcommand
  // (with or without -B).
  void add_options(CLI::App* sub, bool with_instances = true);
  // The instances the setup names: "" (the top) when some option comes
  // before the first -B or there is no -B at all, then each -B.
  std::vector<std::string> instances() const;
  bool empty() const { return actions.empty(); }

  // Applies the setup to the process. Instances it names are made if
  // missing (*created gets those). What was enabled is remembered in
  // *undo (paths and the text that turns it off again). 0, or 1 after
  // printing the error.
  struct Undo {
    std::vector<std::pair<std::string, std::string>> writes;  // path, text
    std::vector<std::string> created;                         // instances made
  };
  // What apply() sets: everything; or, for a command record starts (held
  // before its constructors, then before main(): src/preload/preload.cc),
  // everything but events first, so that the function tracers see the
  // constructors, and then the events, which the constructors register.
  enum class Phase { kAll, kBeforeConstructors, kEvents };
  // `pid`: the process being set up (for main_thread_only).
  int apply(const std::string& verb, control::Client& c, Undo* undo, int pid = 0,
            Phase phase = Phase::kAll) const;
  static void revert(control::Client& c, const Undo& undo);
};

}  // namespace usrtrace::tool
