// usrtrace list: the processes that can be traced, or what one of them has
// (trace-cmd list's options: -e events, -t tracers, -o options,
// -f filterable functions).
#include <cstdio>
#include <string>

#include "commands.h"
#include "remote.h"

namespace usrtrace::tool {

Runner add_list(CLI::App& app) {
  struct Options {
    int pid = 0;
    bool events = false, tracers = false, options = false, functions = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub =
      app.add_subcommand("list", "List traceable processes, or a process's events, tracers, options");
  sub->add_option("-P,--pid", o->pid, "Process to list for (without it: the processes that can be traced)")
      ->check(CLI::PositiveNumber);
  sub->add_flag("-e,--events", o->events, "Events (available_events)");
  sub->add_flag("-t,--tracers", o->tracers, "Tracers (available_tracers)");
  sub->add_flag("-o,--options", o->options, "Options (trace_options)");
  sub->add_flag("-f,--functions", o->functions,
                "Functions that can be filtered (available_filter_functions)");
  return [o] {
    if (o->pid == 0) {
      if (o->events || o->tracers || o->options || o->functions)
        return fail("list", "-e, -t, -o and -f need -P PID");
      const auto procs = control::list_processes();
      printf("%8s  %-16s  %s\n", "PID", "COMM", "SOCKET");
      for (const auto& p : procs) printf("%8d  %-16s  %s\n", p.pid, p.comm.c_str(), p.socket.c_str());
      return 0;
    }
    auto c = connect_to("list", o->pid);
    if (!c) return 1;
    const bool all = !(o->events || o->tracers || o->options || o->functions);
    struct Part {
      bool on;
      const char* title;
      const char* file;
    };
    const Part parts[] = {{all || o->events, "events", "available_events"},
                          {all || o->tracers, "tracers", "available_tracers"},
                          {all || o->options, "options", "trace_options"},
                          {o->functions, "functions", "available_filter_functions"}};
    int wanted = 0;
    for (const Part& p : parts) wanted += p.on;
    for (const Part& p : parts) {
      if (!p.on) continue;
      std::string text;
      const long rc = c->read_file(p.file, &text);
      if (rc < 0) return fail("list", why(p.file, rc));
      if (std::string(p.file) == "available_tracers") {  // one line, blank-separated
        for (char& ch : text)
          if (ch == ' ') ch = '\n';
      }
      if (wanted > 1) printf("%s:\n", p.title);
      fputs(text.c_str(), stdout);
      if (!text.empty() && text.back() != '\n') putchar('\n');
    }
    return 0;
  };
}

}  // namespace usrtrace::tool
