#include "remote.h"

#include <fcntl.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace usrtrace::tool {
namespace {

std::atomic<bool> g_interrupted{false};

void on_interrupt(int) { g_interrupted.store(true, std::memory_order_relaxed); }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// "[local] global ..." -> "local".
std::string selected(const std::string& text) {
  const size_t a = text.find('['), b = text.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return trim(text);
  return text.substr(a + 1, b - a - 1);
}

}  // namespace

int fail(const std::string& verb, const std::string& message) {
  fprintf(stderr, "usrtrace %s: %s\n", verb.c_str(), message.c_str());
  return 1;
}

std::string why(const std::string& path, long rc) {
  return path + ": " + std::strerror(static_cast<int>(-rc));
}

std::unique_ptr<control::Client> connect_to(const std::string& verb, int pid) {
  std::string err;
  auto c = control::Client::connect(pid, &err);
  if (!c) fail(verb, err);
  return c;
}

std::string instance_dir(const std::string& instance) {
  return instance.empty() ? std::string() : "instances/" + instance + "/";
}

void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

bool interrupted() { return g_interrupted.load(std::memory_order_relaxed); }

void Setup::add_options(CLI::App* sub, bool with_instances) {
  auto add = [this, sub](const char* names, char opt, const char* help) {
    sub->add_option_function<std::string>(
           names,
           [this, opt](const std::string& v) {
             actions.push_back({opt, v});
           },
           help)
        ->trigger_on_parse()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  };
  if (with_instances) add("-B", 'B', "Instance the options after it apply to (made if missing)");
  add("-e", 'e', "Event to enable: SYS:EVENT, SYS, EVENT or all (globs work)");
  add("-f", 'f', "Filter for the -e before it (the kernel's filter language)");
  add("-p", 'p', "Tracer for current_tracer");
  add("-b", 'b', "Buffer size per CPU in KB (buffer_size_kb)");
  add("-O", 'O', "Option for trace_options (OPTION or noOPTION)");
  add("-C", 'C', "Trace clock (trace_clock)");
  // trace-cmd's function-tracer options, with its meanings: each appends to
  // the instance's file (globs, !FUNC and FUNC:COMMAND[:ARG] as there).
  add("-l", 'l', "Function to trace (set_ftrace_filter; globs; FUNC:COMMAND for a function command)");
  add("-n", 'n', "Function not to trace (set_ftrace_notrace)");
  add("-g", 'g', "Function whose calls function_graph graphs, with its callees (set_graph_function)");
  add("--max-graph-depth", 'd', "Deepest call function_graph records (max_graph_depth; 0: no limit)");
}

std::vector<std::string> Setup::instances() const {
  std::vector<std::string> out;
  const bool top = actions.empty() || actions.front().opt != 'B';
  if (top) out.push_back("");
  for (const Action& a : actions)
    if (a.opt == 'B' && std::find(out.begin(), out.end(), a.value) == out.end()) out.push_back(a.value);
  return out;
}

int Setup::apply(const std::string& verb, control::Client& c, Undo* undo, int pid, Phase phase) const {
  std::string dir;
  std::string last_event_filter;  // where -f goes: the previous -e's filter file
  auto write = [&](const std::string& path, const std::string& text, bool append) -> bool {
    const long rc = c.write_file(path, text, append);
    if (rc >= 0) return true;
    std::string log;
    std::string msg = why(path, rc) + " (wrote '" + text + "')";
    // The error_log line says what the kernel would say.
    if (c.read_file(dir + "error_log", &log) > 0) {
      const size_t last = log.rfind("error:", log.size());
      if (last != std::string::npos) msg += "\n  " + trim(log.substr(last));
    }
    fail(verb, msg);
    return false;
  };
  auto read = [&](const std::string& path) {
    std::string s;
    if (c.read_file(path, &s) < 0) s.clear();
    return s;
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const bool event = a.opt == 'e' || a.opt == 'f';
    if (phase == Phase::kBeforeConstructors && event) continue;
    if (phase == Phase::kEvents && !event && a.opt != 'B') continue;  // -B: where the events go
    switch (a.opt) {
      case 'B': {
        const int rc = c.mkdir("instances/" + a.value);
        if (rc == 0)
          undo->created.push_back(a.value);
        else if (rc != -EEXIST)
          return fail(verb, why("instances/" + a.value, rc));
        dir = instance_dir(a.value);
        last_event_filter.clear();
        break;
      }
      case 'e': {
        std::string spec = a.value;
        last_event_filter.clear();
        if (spec == "all") {
          spec = "*:*";
        } else if (spec.find(':') == std::string::npos) {
          bool is_dir = false;
          if (c.stat(dir + "events/" + spec, &is_dir, nullptr) == 0 && is_dir) {
            last_event_filter = dir + "events/" + spec + "/filter";
            spec += ":*";
          } else {
            spec = "*:" + spec;
          }
        } else if (spec.find_first_of("*?[") == std::string::npos) {
          const size_t colon = spec.find(':');
          last_event_filter =
              dir + "events/" + spec.substr(0, colon) + "/" + spec.substr(colon + 1) + "/filter";
        }
        // Its -f goes in first, as trace-cmd does: enabled first, the event
        // would record unfiltered until the filter came.
        // No such event (ENOENT): set_event below says so, as the kernel
        // would, or skips it and its -f (missing_events_ok).
        if (i + 1 < actions.size() && actions[i + 1].opt == 'f' && !last_event_filter.empty()) {
          const std::string& filter = actions[i + 1].value;
          const long rc = c.write_file(last_event_filter, filter, false);
          if (rc != -ENOENT) {
            if (rc < 0 && !write(last_event_filter, filter, false)) return 1;
            undo->writes.push_back({last_event_filter, "0"});
            ++i;  // done
          }
        }
        if (missing_events_ok) {
          const long rc = c.write_file(dir + "set_event", spec, true);
          if (rc == -EINVAL) {
            last_event_filter = "-";  // its -f goes too
            break;
          }
          if (rc < 0 && !write(dir + "set_event", spec, true)) return 1;
        } else if (!write(dir + "set_event", spec, true)) {
          return 1;
        }
        undo->writes.push_back({dir + "set_event", "!" + spec});
        break;
      }
      case 'f':
        if (last_event_filter == "-") break;  // the skipped -e's
        if (last_event_filter.empty())
          return fail(verb, "-f '" + a.value + "' needs a -e SYS:EVENT or -e SYS before it (no globs)");
        if (!write(last_event_filter, a.value, false)) return 1;
        undo->writes.push_back({last_event_filter, "0"});
        break;
      case 'p':
        if (!write(dir + "current_tracer", a.value, false)) return 1;
        undo->writes.push_back({dir + "current_tracer", "nop"});
        break;
      case 'b': {
        const std::string before = trim(read(dir + "buffer_size_kb"));
        if (!write(dir + "buffer_size_kb", a.value, false)) return 1;
        if (!before.empty() && before != "X") undo->writes.push_back({dir + "buffer_size_kb", before});
        break;
      }
      case 'O': {
        if (!write(dir + "trace_options", a.value, false)) return 1;
        const bool no = a.value.rfind("no", 0) == 0;
        undo->writes.push_back({dir + "trace_options", no ? a.value.substr(2) : "no" + a.value});
        break;
      }
      case 'C': {
        const std::string before = selected(read(dir + "trace_clock"));
        if (!write(dir + "trace_clock", a.value, false)) return 1;
        if (!before.empty()) undo->writes.push_back({dir + "trace_clock", before});
        break;
      }
      case 'l':
      case 'n':
      case 'g': {
        const char* file = a.opt == 'l'   ? "set_ftrace_filter"
                           : a.opt == 'n' ? "set_ftrace_notrace"
                                          : "set_graph_function";
        if (!write(dir + file, a.value, true)) return 1;
        // "!X" takes X back out (a function, a glob or a command).
        if (a.value.rfind('!', 0) != 0) undo->writes.push_back({dir + file, "!" + a.value});
        break;
      }
      case 'd': {
        const std::string before = trim(read(dir + "max_graph_depth"));
        if (!write(dir + "max_graph_depth", a.value, false)) return 1;
        if (!before.empty()) undo->writes.push_back({dir + "max_graph_depth", before});
        break;
      }
      default:
        break;
    }
  }
  if (main_thread_only && phase != Phase::kEvents) {
    if (pid <= 0) return fail(verb, "-F needs the process's pid");
    for (const std::string& inst : instances()) {
      const std::string path = instance_dir(inst) + "set_ftrace_pid";
      if (!write(path, std::to_string(pid), false)) return 1;
      undo->writes.push_back({path, ""});
    }
  }
  return 0;
}

void Setup::revert(control::Client& c, const Undo& undo) {
  for (auto it = undo.writes.rbegin(); it != undo.writes.rend(); ++it)
    c.write_file(it->first, it->second,
                 it->first.ends_with("set_event") || it->first.ends_with("set_ftrace_filter") ||
                     it->first.ends_with("set_ftrace_notrace") || it->first.ends_with("set_graph_function"));
  for (const std::string& name : undo.created) c.rmdir("instances/" + name);
}

}  // namespace usrtrace::tool
