#include "remote.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "usrtrace_toolkit/toolkit.h"

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

bool time_filter_us(const std::string& text, std::string* us, std::string* err) {
  size_t end = 0;
  while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  if (end == 0 || end > 15) {
    *err = "not a time (a number, then ns, us, ms or s)";
    return false;
  }
  const unsigned long long n = std::stoull(text.substr(0, end));
  const std::string unit = text.substr(end);
  unsigned long long ns = 0;
  if (unit == "ns" || unit == "nsec")
    ns = n;
  else if (unit.empty() || unit == "us" || unit == "usec")
    ns = n * 1000;
  else if (unit == "ms" || unit == "msec")
    ns = n * 1000 * 1000;
  else if (unit == "s" || unit == "sec")
    ns = n * 1000 * 1000 * 1000;
  else {
    *err = "unknown unit '" + unit + "' (ns, us, ms or s)";
    return false;
  }
  if (ns % 1000 != 0) {
    *err = "tracing_thresh counts whole microseconds";
    return false;
  }
  *us = std::to_string(ns / 1000);
  return true;
}

int fail(const std::string& verb, const std::string& message) {
  fprintf(stderr, "usrtrace %s: %s\n", verb.c_str(), message.c_str());
  return 1;
}

std::string why(const std::string& path, long rc) {
  return path + ": " + std::strerror(static_cast<int>(-rc));
}

// The preloaded runtime: USRTRACE_PRELOAD, else the one installed with this
// program (USRTRACE_PRELOAD_REL from its directory: ../lib/ARCH on Debian),
// else, for the command in the build tree and only for it, the build tree's.
// An installed copy never takes the build tree's: that one may be of another
// version, or gone.
std::string preload_library() {
  if (const char* e = getenv("USRTRACE_PRELOAD"); e && *e) return e;
  struct stat st;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  self[n] = '\0';
  const std::string exe(self);
  const std::string dir = exe.substr(0, exe.rfind('/'));
  if (std::string p = dir + "/" USRTRACE_PRELOAD_REL; ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    return p;
#ifdef USRTRACE_PRELOAD_BUILD
  if (exe == USRTRACE_TOOL_BUILD && ::stat(USRTRACE_PRELOAD_BUILD, &st) == 0) return USRTRACE_PRELOAD_BUILD;
#endif
  return "";
}

namespace {

// Whether the process has a usrtrace runtime loaded (its maps name
// libusrtrace), or its program defines one (a static link).
bool has_runtime(int pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("/libusrtrace") != std::string::npos) return true;
  return false;
}

}  // namespace

std::unique_ptr<control::Client> connect_to(const std::string& verb, int pid, bool attach) {
  std::string err;
  auto c = control::Client::connect(pid, &err);
  if (!c && attach && ::kill(pid, 0) != 0 && errno == EPERM) {
    fail(verb, "process " + std::to_string(pid) +
                   " is another user's: attaching to it needs that user, or root (CAP_SYS_PTRACE)");
    return nullptr;
  }
  if (c || !attach || ::kill(pid, 0) != 0 || has_runtime(pid)) {
    if (!c) fail(verb, err);
    return c;
  }
  // No runtime there: load one (docs/guide/attach.md), then connect as to
  // any process that links usrtrace. Its server starts as it loads.
  const std::string lib = preload_library();
  if (lib.empty()) {
    fail(verb, "process " + std::to_string(pid) +
                   " has no usrtrace runtime, and libusrtrace-preload.so to load into it was not found "
                   "(set USRTRACE_PRELOAD to its path)");
    return nullptr;
  }
  std::string why_not;
  if (int rc = toolkit::inject_library(pid, lib, &why_not); rc < 0) {
    fail(verb, "attaching to process " + std::to_string(pid) + ": " + why_not);
    return nullptr;
  }
  c = control::Client::connect(pid, &err);
  if (!c) fail(verb, "loaded the runtime into process " + std::to_string(pid) + ", but: " + err);
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
  // trace-cmd's short flags with its meanings, in its order-dependent style:
  // -B scopes what follows, -f, -R and -v bind to the -e next to them.
  if (with_instances) add("-B,--instance", 'B', "Instance the options after it apply to (made if missing)");
  add("-e,--event", 'e', "Event to enable: SYS:EVENT, SYS, EVENT or all (globs work)");
  add("-f,--event-filter", 'f', "Filter for the -e before it (the kernel's filter language)");
  add("-R,--trigger", 'R', "Trigger for the -e SYS:EVENT before it (events/SYS/EVENT/trigger; repeatable)");
  add("--probe", 'u',
      "A dynamic probe, as a line of uprobe_events (p|r[:[GRP/]EVENT] PATH:OFFSET|[PATH:]SYMBOL[+OFFS] "
      "[ARGS]): "
      "defined, and enabled here as an -e would be (-f and -R after it bind to it); removed at the end");
  add("--synth", 'y',
      "A synthetic event, as a line of synthetic_events (NAME TYPE FIELD[; TYPE FIELD...]): defined, and "
      "enabled here as an -e would be (-f and -R after it bind to it; hist triggers' onmatch().NAME() "
      "generate it); removed at the end");
  sub->add_flag_callback(
         "-v,--negate",
         [this] {
           actions.push_back({'v', ""});
         },
         "The -e after it disables its events instead (as trace-cmd's -v)")
      ->trigger_on_parse();
  sub->add_flag_callback(
         "-T,--stacktrace",
         [this] {
           actions.push_back({'T', ""});
         },
         "A user stack trace after each event of the -e's in this instance (a stacktrace trigger on each, "
         "with the event's filter)")
      ->trigger_on_parse();
  sub->add_flag_callback(
         "--func-stack",
         [this] {
           actions.push_back({'S', ""});
         },
         "With -p function and -l: a stack trace after each traced call (options/func_stack_trace)")
      ->trigger_on_parse();
  add("-p,--tracer", 'p', "Tracer for current_tracer");
  add("-b,--buffer-size", 'b', "Buffer size per CPU in KB (buffer_size_kb)");
  add("-M,--cpumask", 'M', "CPUs to trace, a hex mask (tracing_cpumask)");
  add("-O,--option", 'O', "Option for trace_options (OPTION or noOPTION)");
  add("-C,--clock", 'C', "Trace clock (trace_clock)");
  // trace-cmd's function-tracer options, with its meanings: each appends to
  // the instance's file (globs, !FUNC and FUNC:COMMAND[:ARG] as there).
  add("-l,--ftrace-filter", 'l',
      "Function to trace (set_ftrace_filter; globs; FUNC:COMMAND for a function command)");
  add("-n,--ftrace-notrace", 'n', "Function not to trace (set_ftrace_notrace)");
  add("-g,--graph-function", 'g',
      "Function whose calls function_graph graphs, with its callees (set_graph_function)");
  add("--max-graph-depth", 'd', "Deepest call function_graph records (max_graph_depth; 0: no limit)");
  // uftrace's long spellings, with uftrace's meanings.
  add("--filter", 'g', "uftrace's -F: only FUNC and what it calls (set_graph_function)");
  add("--notrace", 'N', "uftrace's -N: neither FUNC nor what it calls (set_graph_notrace)");
  add("--depth", 'd', "uftrace's -D: the same as --max-graph-depth");
  add("--time-filter", 't',
      "uftrace's -t: function_graph keeps only calls that took at least TIME (tracing_thresh; "
      "TIME in us, or with ns, us, ms or s)");
}

std::vector<std::string> Setup::instances() const {
  std::vector<std::string> out;
  const bool top = actions.empty() || actions.front().opt != 'B';
  if (top) out.push_back("");
  for (const Action& a : actions)
    if (a.opt == 'B' && std::find(out.begin(), out.end(), a.value) == out.end()) out.push_back(a.value);
  return out;
}

namespace {
constexpr long kRefusedShown = 40;  // refused functions listed; the rest counted
}  // namespace

int Setup::apply(const std::string& verb, control::Client& c, Undo* undo, int pid, Phase phase) const {
  std::string dir;
  // The -e before: its filter file (an event or a system; "" after a glob,
  // "-" when it was skipped) and, for one event, its directory (-R).
  std::string last_event_filter, last_event_dir;
  bool negate = false;  // -v: the next -e disables
  // -T: per instance dir it is given in (before or after the -e's, as a
  // trace-cmd flag), the -e specs whose events get a stacktrace trigger.
  std::vector<std::pair<std::string, std::vector<std::string>>> stacks;
  auto stacks_of = [&stacks](const std::string& d) -> std::vector<std::string>* {
    for (auto& [k, v] : stacks)
      if (k == d) return &v;
    return nullptr;
  };
  std::vector<int> scope;  // per action: which -B it is under (0: before any)
  for (const Action& a : actions) {
    if (a.opt == 'B') dir = instance_dir(a.value);
    if (a.opt == 'T' && !stacks_of(dir)) stacks.push_back({dir, {}});
    scope.push_back((scope.empty() ? 0 : scope.back()) + (a.opt == 'B'));
  }
  dir.clear();
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
  // -f and -R bind to the -e before them: a filter is in place before the
  // event is enabled (trace-cmd's order; enabled first, it would record
  // unfiltered until the filter came), and so is a trigger (a traceoff
  // must see the first event). ENOENT: no such event, which set_event then
  // says (or, with missing_events_ok, skips).
  auto bound = [&](const Action& a, bool* skipped) -> bool {
    const bool trigger = a.opt == 'R';
    if (last_event_filter == "-") return true;  // the skipped -e's
    const std::string flag = trigger ? "-R" : "-f";
    if (trigger ? last_event_dir.empty() : last_event_filter.empty()) {
      fail(verb, flag + " '" + a.value + "' needs a -e " + (trigger ? "SYS:EVENT" : "SYS:EVENT or -e SYS") +
                     " before it (no globs)");
      return false;
    }
    const std::string path = trigger ? last_event_dir + "trigger" : last_event_filter;
    const long rc = c.write_file(path, a.value, trigger);
    if (rc == -ENOENT) {
      *skipped = true;
      return true;
    }
    if (rc < 0 && !write(path, a.value, trigger)) return false;
    undo->writes.push_back({path, trigger ? "!" + a.value : "0"});
    return true;
  };
  // The -f and -R right after an event's action (-e, --probe, --synth), bound
  // to it; *i moves past those done (a skipped event's stay, as its -f's).
  auto bind_following = [&](size_t* i) -> bool {
    bool skipped = false;
    while (*i + 1 < actions.size() && (actions[*i + 1].opt == 'f' || actions[*i + 1].opt == 'R') &&
           !skipped) {
      if (!bound(actions[*i + 1], &skipped)) return false;
      if (!skipped) ++*i;  // done
    }
    return true;
  };
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const bool event = a.opt == 'e' || a.opt == 'f' || a.opt == 'R' || a.opt == 'v' || a.opt == 'T' ||
                       a.opt == 'u' || a.opt == 'y';
    // (--func-stack, 'S', is a tracer option: set with the tracers, before constructors.)
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
        last_event_dir.clear();
        break;
      }
      case 'v':
        negate = true;
        break;
      case 'T':  // taken above
        break;
      case 'S': {
        // trace-cmd's --func-stack: a stack per call of every function
        // traced would drown the trace; it wants the functions named.
        bool named = false;
        for (size_t j = 0; j < actions.size(); ++j)
          named = named || (actions[j].opt == 'l' && scope[j] == scope[i]);
        if (!named) return fail(verb, "--func-stack needs -l FUNC in its instance (the functions to stack)");
        if (!write(dir + "trace_options", "func_stack_trace", false)) return 1;
        undo->writes.push_back({dir + "trace_options", "nofunc_stack_trace"});
        break;
      }
      case 'e': {
        std::string spec = a.value;
        last_event_filter.clear();
        last_event_dir.clear();
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
          last_event_dir = dir + "events/" + spec.substr(0, colon) + "/" + spec.substr(colon + 1) + "/";
          last_event_filter = last_event_dir + "filter";
        }
        if (negate) {  // -v -e SPEC: as `echo '!SPEC' >> set_event`
          negate = false;
          const std::string off = "!" + spec;
          last_event_filter = last_event_dir = "";
          if (i + 1 < actions.size() && (actions[i + 1].opt == 'f' || actions[i + 1].opt == 'R'))
            return fail(verb, (actions[i + 1].opt == 'f' ? "-f '" : "-R '") + actions[i + 1].value +
                                  "' follows a -v -e, which disables events");
          if (!write(dir + "set_event", off, true)) return 1;
          break;
        }
        if (!bind_following(&i)) return 1;
        if (missing_events_ok) {
          const long rc = c.write_file(dir + "set_event", spec, true);
          if (rc == -EINVAL) {
            last_event_filter = "-";  // its -f and -R go too
            break;
          }
          if (rc < 0 && !write(dir + "set_event", spec, true)) return 1;
        } else if (!write(dir + "set_event", spec, true)) {
          return 1;
        }
        undo->writes.push_back({dir + "set_event", "!" + spec});
        if (std::vector<std::string>* st = stacks_of(dir)) st->push_back(spec);
        break;
      }
      case 'u': {
        // Defined in uprobe_events (global, whatever the -B), then enabled
        // like an -e GRP:EVENT. Its name is what the file lists after the
        // write and did not before: the kernel's default names (p_SYMBOL_0,
        // p_prog_0x1234) are the process's to make.
        const std::string before = read("uprobe_events");
        const long rc = c.write_file("uprobe_events", a.value, true);
        if (rc < 0) {
          std::string log, msg = why("uprobe_events", rc) + " (wrote '" + a.value + "')";
          if (c.read_file("error_log", &log) > 0) {
            const size_t last = log.rfind("trace_uprobe: error:");
            if (last != std::string::npos) msg += "\n  " + trim(log.substr(last));
          }
          return fail(verb, msg);
        }
        std::string added, one;
        std::istringstream now(read("uprobe_events"));
        while (std::getline(now, one))
          if (!one.empty() && before.find(one + "\n") == std::string::npos) added = one;
        // "p:GRP/EVENT TARGET ...": GRP and EVENT.
        const size_t colon = added.find(':'), slash = added.find('/'), blank = added.find(' ');
        if (colon == std::string::npos || slash == std::string::npos || blank == std::string::npos ||
            !(colon < slash && slash < blank))
          return fail(verb,
                      "--probe '" + a.value + "': the definition is not in uprobe_events after the write");
        const std::string grp = added.substr(colon + 1, slash - colon - 1),
                          ev = added.substr(slash + 1, blank - slash - 1);
        undo->writes.push_back({"uprobe_events", "-:" + grp + "/" + ev});
        last_event_dir = dir + "events/" + grp + "/" + ev + "/";
        last_event_filter = last_event_dir + "filter";
        if (!bind_following(&i)) return 1;
        if (!write(dir + "set_event", grp + ":" + ev, true)) return 1;
        undo->writes.push_back({dir + "set_event", "!" + grp + ":" + ev});
        break;
      }
      case 'y': {
        // Defined in synthetic_events (global, whatever the -B), then
        // enabled as -e synthetic:NAME. Removed at the end after the
        // triggers that generate it (the undo runs backwards).
        if (!write("synthetic_events", a.value, true)) return 1;
        std::string name = trim(a.value);
        name = name.substr(0, name.find_first_of(" \t"));
        undo->writes.push_back({"synthetic_events", "!" + name});
        last_event_dir = dir + "events/synthetic/" + name + "/";
        last_event_filter = last_event_dir + "filter";
        if (!bind_following(&i)) return 1;
        if (!write(dir + "set_event", "synthetic:" + name, true)) return 1;
        undo->writes.push_back({dir + "set_event", "!synthetic:" + name});
        break;
      }
      case 'f':
      case 'R': {
        bool skipped = false;
        if (!bound(a, &skipped)) return 1;
        break;
      }
      case 'p':
        if (!write(dir + "current_tracer", a.value, false)) return 1;
        undo->writes.push_back({dir + "current_tracer", "nop"});
        break;
      case 'b':
      case 'M':
      case 'd':
      case 't': {
        // One value replaced; the one before comes back at the end.
        const char* file = a.opt == 'b'   ? "buffer_size_kb"
                           : a.opt == 'M' ? "tracing_cpumask"
                           : a.opt == 'd' ? "max_graph_depth"
                                          : "tracing_thresh";
        std::string value = a.value;
        if (a.opt == 't') {
          std::string err;
          if (!time_filter_us(a.value, &value, &err))
            return fail(verb, "--time-filter '" + a.value + "': " + err);
        }
        const std::string before = trim(read(dir + file));
        if (!write(dir + file, value, false)) return 1;
        if (!before.empty() && before != "X") undo->writes.push_back({dir + file, before});
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
      case 'g':
      case 'N': {
        const char* file = a.opt == 'l'   ? "set_ftrace_filter"
                           : a.opt == 'n' ? "set_ftrace_notrace"
                           : a.opt == 'g' ? "set_graph_function"
                                          : "set_graph_notrace";
        if (!write(dir + file, a.value, true)) return 1;
        // "!X" takes X back out (a function, a glob or a command).
        if (a.value.rfind('!', 0) != 0) undo->writes.push_back({dir + file, "!" + a.value});
        break;
      }
      default:
        break;
    }
  }
  if (negate) return fail(verb, "-v needs a -e after it (the events to disable)");
  // -T: a stacktrace trigger on every event the instance's -e's enabled,
  // under the event's own filter, so that a stack follows each event that
  // is recorded (what the kernel's stacktrace option gives its events).
  for (const auto& [d, specs] : stacks) {
    if (specs.empty()) {
      if (phase == Phase::kBeforeConstructors) continue;
      return fail(verb, "-T needs a -e in its instance (the events that get a stack trace)");
    }
    std::string enabled = read(d + "set_event");
    size_t at = 0;
    while (at < enabled.size()) {
      size_t nl = enabled.find('\n', at);
      if (nl == std::string::npos) nl = enabled.size();
      const std::string ev = enabled.substr(at, nl - at);
      at = nl + 1;
      const size_t colon = ev.find(':');
      if (colon == std::string::npos) continue;
      bool wanted = false;
      for (const std::string& spec : specs) wanted = wanted || fnmatch(spec.c_str(), ev.c_str(), 0) == 0;
      if (!wanted) continue;
      const std::string edir = d + "events/" + ev.substr(0, colon) + "/" + ev.substr(colon + 1) + "/";
      const std::string filter = trim(read(edir + "filter"));
      const std::string trigger =
          filter.empty() || filter == "none" ? "stacktrace" : "stacktrace if " + filter;
      const long rc = c.write_file(edir + "trigger", trigger, true);
      if (rc == -EEXIST) continue;  // it has one already (-R stacktrace)
      if (rc < 0 && !write(edir + "trigger", trigger, true)) return 1;
      undo->writes.push_back({edir + "trigger", "!" + trigger});
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
  // The functions a function tracer was asked for and could not take
  // (plain code whose entry cannot become a jump): said, as uftrace and
  // kprobes say what they refuse. The list is the process's
  // (refused_functions), the same for every instance.
  bool function_tracer = false;
  for (const Action& a : actions)
    function_tracer = function_tracer || (a.opt == 'p' && a.value.rfind("function", 0) == 0);
  if (function_tracer && phase != Phase::kEvents) {
    std::string refused;
    if (c.read_file("refused_functions", &refused) > 0) {
      const long n = std::count(refused.begin(), refused.end(), '\n');
      fprintf(stderr,
              "usrtrace %s: %ld function%s not traced: %s entry cannot take a jump (refused_functions):\n",
              verb.c_str(), n, n == 1 ? "" : "s", n == 1 ? "its" : "their");
      std::istringstream lines(refused);
      std::string line;
      for (long k = 0; k < kRefusedShown && std::getline(lines, line); ++k) {
        const size_t tab = line.find('\t');
        fprintf(stderr, "  %s: %s\n", line.substr(0, tab).c_str(),
                tab == std::string::npos ? "" : line.substr(tab + 1).c_str());
      }
      if (n > kRefusedShown) fprintf(stderr, "  ... and %ld more\n", n - kRefusedShown);
    }
  }
  return 0;
}

void Setup::revert(control::Client& c, const Undo& undo) {
  for (auto it = undo.writes.rbegin(); it != undo.writes.rend(); ++it)
    c.write_file(it->first, it->second,
                 it->first.ends_with("set_event") || it->first.ends_with("set_ftrace_filter") ||
                     it->first.ends_with("set_ftrace_notrace") || it->first.ends_with("set_graph_function") ||
                     it->first.ends_with("set_graph_notrace") || it->first.ends_with("/trigger") ||
                     it->first == "uprobe_events");
  for (const std::string& name : undo.created) c.rmdir("instances/" + name);
}

}  // namespace usrtrace::tool
