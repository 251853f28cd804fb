// usrtrace show|stream|snapshot|stat -P PID: reading a running process's
// buffers and settings, as trace-cmd show, stream, snapshot and stat do for
// the kernel.
#include <fcntl.h>

#include <cstdio>
#include <string>

#include "commands.h"
#include "remote.h"

namespace usrtrace::tool {
namespace {

// Copies a pipe (trace_pipe) to stdout until Ctrl-C or the process exits.
int follow_pipe(const std::string& verb, control::Client& c, const std::string& path) {
  const int h = c.open(path, O_RDONLY);
  if (h < 0) return fail(verb, why(path, h));
  catch_interrupts();
  std::string buf(64 * 1024, '\0');
  while (!interrupted()) {
    // Short waits, so Ctrl-C is seen at once.
    const long n = c.read(h, buf.data(), buf.size(), 200);
    if (n == -EAGAIN) {
      if (c.exiting()) break;
      continue;
    }
    if (n == -EPIPE) break;  // the process exited
    if (n < 0) return fail(verb, why(path, n));
    fwrite(buf.data(), 1, static_cast<size_t>(n), stdout);
    fflush(stdout);
  }
  return 0;
}

int cat(const std::string& verb, control::Client& c, const std::string& path) {
  std::string text;
  const long rc = c.read_file(path, &text);
  if (rc < 0) return fail(verb, why(path, rc));
  fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

Runner add_show(CLI::App& app) {
  struct Options {
    int pid = 0;
    std::string instance;
    bool snapshot = false, pipe = false;
    int cpu = -1;
    std::vector<std::string> files;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("show", "Print a process's trace (or a setting)");
  sub->add_option("-P,--pid", o->pid, "Process")->required()->check(CLI::PositiveNumber);
  sub->add_option("-B,--instance", o->instance, "Instance");
  sub->add_flag("-s,--snapshot", o->snapshot, "The snapshot instead of the trace");
  sub->add_flag("-p,--pipe", o->pipe, "Follow trace_pipe (consuming) until Ctrl-C or the process exits");
  sub->add_option("-c,--cpu", o->cpu, "Only this CPU (per_cpu/cpuN/...)")->check(CLI::NonNegativeNumber);
  const std::pair<const char*, const char*> settings[] = {
      {"--tracing_on", "tracing_on"},           {"--current_tracer", "current_tracer"},
      {"--buffer_size", "buffer_size_kb"},      {"--buffer_total_size", "buffer_total_size_kb"},
      {"--buffer_percent", "buffer_percent"},   {"--cpumask", "tracing_cpumask"},
      {"--ftrace_filter", "set_ftrace_filter"}, {"--ftrace_notrace", "set_ftrace_notrace"},
      {"--ftrace_pid", "set_ftrace_pid"},       {"--graph_function", "set_graph_function"},
      {"--graph_notrace", "set_graph_notrace"}, {"--set_event", "set_event"},
      {"--trace_clock", "trace_clock"},         {"--error_log", "error_log"},
      {"--max_graph_depth", "max_graph_depth"}, {"--tracing_thresh", "tracing_thresh"}};
  for (const auto& [flag, file] : settings)
    sub->add_flag_callback(
           flag, [o, f = std::string(file)] { o->files.push_back(f); },
           std::string("Print ") + file)
        ->trigger_on_parse();  // printed in the order given
  sub->add_option_function<std::string>(
         "--hist",
         [o](const std::string& ev) {
           const size_t colon = ev.find(':');
           o->files.push_back(
               "events/" +
               (colon == std::string::npos ? ev : ev.substr(0, colon) + "/" + ev.substr(colon + 1)) +
               "/hist");
         },
         "Print the hist file of SYS:EVENT (its hist triggers' tables, maxima and snapshots taken)")
      ->trigger_on_parse()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag_callback(
         "--synthetic_events", [o] { o->files.push_back("synthetic_events"); }, "Print synthetic_events")
      ->trigger_on_parse();
  return [o] {
    auto c = connect_to("show", o->pid);
    if (!c) return 1;
    const std::string dir = instance_dir(o->instance);
    if (!o->files.empty()) {
      for (const std::string& f : o->files)
        if (int rc = cat("show", *c, dir + f)) return rc;
      return 0;
    }
    const std::string cpu_dir = o->cpu >= 0 ? "per_cpu/cpu" + std::to_string(o->cpu) + "/" : "";
    if (o->pipe) return follow_pipe("show", *c, dir + cpu_dir + "trace_pipe");
    return cat("show", *c, dir + cpu_dir + (o->snapshot ? "snapshot" : "trace"));
  };
}

Runner add_stream(CLI::App& app) {
  struct Options {
    int pid = 0;
    std::string instance;
    Setup setup;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub =
      app.add_subcommand("stream", "Print a process's events as they come, until Ctrl-C or its exit");
  sub->add_option("-P,--pid", o->pid, "Process")->required()->check(CLI::PositiveNumber);
  o->setup.add_options(sub);
  return [o] {
    auto c = connect_to("stream", o->pid, true);
    if (!c) return 1;
    Setup::Undo undo;
    if (o->setup.apply("stream", *c, &undo) != 0) {
      Setup::revert(*c, undo);
      return 1;
    }
    const auto instances = o->setup.instances();
    const int rc = follow_pipe("stream", *c, instance_dir(instances.back()) + "trace_pipe");
    Setup::revert(*c, undo);  // as trace-cmd stream leaves the kernel
    return rc;
  };
}

Runner add_snapshot(CLI::App& app) {
  struct Options {
    int pid = 0;
    std::string instance;
    bool take = false, reset = false, free = false;
    int cpu = -1;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("snapshot", "Take, clear, free or print a process's snapshot");
  sub->add_option("-P,--pid", o->pid, "Process")->required()->check(CLI::PositiveNumber);
  sub->add_option("-B,--instance", o->instance, "Instance");
  auto* s = sub->add_flag("-s,--take", o->take, "Take a snapshot (echo 1 > snapshot)");
  auto* r = sub->add_flag("-r,--reset", o->reset, "Clear the snapshot (echo 2 > snapshot)");
  auto* f = sub->add_flag("-f,--free", o->free, "Free the snapshot buffer (echo 0 > snapshot)");
  s->excludes(r)->excludes(f);
  r->excludes(f);
  sub->add_option("-c,--cpu", o->cpu, "Only this CPU's snapshot")->check(CLI::NonNegativeNumber);
  return [o] {
    auto c = connect_to("snapshot", o->pid);
    if (!c) return 1;
    const std::string path = instance_dir(o->instance) +
                             (o->cpu >= 0 ? "per_cpu/cpu" + std::to_string(o->cpu) + "/" : "") + "snapshot";
    const char* value = o->take ? "1" : o->reset ? "2" : o->free ? "0" : nullptr;
    if (!value) return cat("snapshot", *c, path);
    if (long rc = c->write_file(path, value); rc < 0) return fail("snapshot", why(path, rc));
    return 0;
  };
}

Runner add_stat(CLI::App& app) {
  auto pid = std::make_shared<int>(0);
  CLI::App* sub = app.add_subcommand("stat", "Show how a process's tracing is set up");
  sub->add_option("-P,--pid", *pid, "Process")->required()->check(CLI::PositiveNumber);
  return [pid] {
    auto c = connect_to("stat", *pid);
    if (!c) return 1;
    std::vector<std::string> instances = {""};
    std::vector<std::string> names;
    c->list("instances", &names);
    instances.insert(instances.end(), names.begin(), names.end());
    printf("Process: %d (%s)\n", c->pid(), c->comm().c_str());
    auto text = [&](const std::string& path) {
      std::string s;
      if (c->read_file(path, &s) < 0) s.clear();
      while (!s.empty() && s.back() == '\n') s.pop_back();
      return s;
    };
    // Global: the synthetic events (their triggers are listed with the
    // instances that enable them).
    if (const std::string synth = text("synthetic_events"); !synth.empty()) {
      printf("\nSynthetic events:\n");
      size_t at = 0;
      while (at < synth.size()) {
        size_t nl = synth.find('\n', at);
        if (nl == std::string::npos) nl = synth.size();
        printf("  %s\n", synth.substr(at, nl - at).c_str());
        at = nl + 1;
      }
    }
    for (const std::string& inst : instances) {
      const std::string dir = instance_dir(inst);
      printf("\n%s\n", inst.empty() ? "Top instance:" : ("Instance: " + inst).c_str());
      printf("  Tracer: %s\n", text(dir + "current_tracer").c_str());
      printf("  Tracing: %s\n", text(dir + "tracing_on") == "1" ? "on" : "off");
      printf("  Trace clock: %s\n", text(dir + "trace_clock").c_str());
      printf("  Buffer size in kilobytes: %s (per CPU)\n", text(dir + "buffer_size_kb").c_str());
      const std::string ev = text(dir + "set_event");
      printf("  Events:%s\n", ev.empty() ? " none" : "");
      if (!ev.empty()) {
        std::string line;
        for (char ch : ev + "\n") {
          if (ch != '\n') {
            line += ch;
            continue;
          }
          const std::string sys = line.substr(0, line.find(':'));
          const std::string name = line.substr(line.find(':') + 1);
          printf("    %s\n", line.c_str());
          const std::string f = text(dir + "events/" + sys + "/" + name + "/filter");
          if (!f.empty() && f != "none") printf("      filter: %s\n", f.c_str());
          const std::string t = text(dir + "events/" + sys + "/" + name + "/trigger");
          size_t at = 0;
          while (at < t.size()) {
            size_t nl = t.find('\n', at);
            if (nl == std::string::npos) nl = t.size();
            const std::string l = t.substr(at, nl - at);
            if (!l.empty() && l[0] != '#') printf("      trigger: %s\n", l.c_str());
            at = nl + 1;
          }
          line.clear();
        }
      }
      const std::string errors = text(dir + "error_log");
      if (!errors.empty()) printf("  Errors (error_log):\n%s\n", errors.c_str());
    }
    return 0;
  };
}

}  // namespace usrtrace::tool
