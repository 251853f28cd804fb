// usrtrace start|stop|restart|reset -P PID: trace-cmd's verbs for a
// running process. start sets up events, filters, tracer, buffer size,
// options and clock (in the order given, -B switching instance) and turns
// tracing on; stop and restart turn it off and on; reset takes the
// process back to nothing enabled and an empty buffer.
#include <cstdio>
#include <string>

#include "commands.h"
#include "remote.h"

namespace usrtrace::tool {
namespace {

struct Targets {
  int pid = 0;
  std::vector<std::string> instances;
  bool all = false;
  bool top = false;
};

// The instances a stop/restart/reset acts on: -B ones, -t the top too, -a
// every one; none given: the top.
std::vector<std::string> targets_of(control::Client& c, const Targets& t) {
  std::vector<std::string> out;
  if (t.all) {
    out.push_back("");
    std::vector<std::string> names;
    c.list("instances", &names);
    for (auto& n : names) out.push_back(n);
    return out;
  }
  if (t.instances.empty() || t.top) out.push_back("");
  for (auto& n : t.instances) out.push_back(n);
  return out;
}

void add_targets(CLI::App* sub, Targets* t) {
  sub->add_option("-P,--pid", t->pid, "Process")->required()->check(CLI::PositiveNumber);
  sub->add_option("-B,--instance", t->instances, "Instance (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("-a,--all", t->all, "Every instance and the top");
  sub->add_flag("-t,--top", t->top, "The top instance too, with -B");
}

int set_tracing(const std::string& verb, const Targets& t, const char* value) {
  auto c = connect_to(verb, t.pid);
  if (!c) return 1;
  for (const std::string& inst : targets_of(*c, t)) {
    const std::string path = instance_dir(inst) + "tracing_on";
    if (long rc = c->write_file(path, value); rc < 0) return fail(verb, why(path, rc));
  }
  return 0;
}

// Every enabled event's filter and triggers cleared, as trace-cmd reset.
void clear_events(control::Client& c, const std::string& dir) {
  std::vector<std::string> systems;
  if (c.list(dir + "events", &systems) < 0) return;
  for (const std::string& sys : systems) {
    bool is_dir = false;
    if (c.stat(dir + "events/" + sys, &is_dir, nullptr) < 0 || !is_dir) continue;
    std::vector<std::string> events;
    c.list(dir + "events/" + sys, &events);
    for (const std::string& ev : events) {
      const std::string base = dir + "events/" + sys + "/" + ev + "/";
      if (c.stat(base + "filter", nullptr, nullptr) < 0) continue;
      std::string f;
      if (c.read_file(base + "filter", &f) > 0 && f != "none\n") c.write_file(base + "filter", "0");
      std::string trig;
      if (c.read_file(base + "trigger", &trig) <= 0) continue;
      size_t at = 0;
      while (at < trig.size()) {
        size_t nl = trig.find('\n', at);
        if (nl == std::string::npos) nl = trig.size();
        std::string line = trig.substr(at, nl - at);
        at = nl + 1;
        if (line.empty() || line[0] == '#') continue;
        // "hist:keys=...:size=2048 [active]" -> "!hist:keys=...".
        const size_t blank = line.find(' ');
        if (blank != std::string::npos) line.resize(blank);
        c.write_file(base + "trigger", "!" + line, true);
      }
    }
  }
}

}  // namespace

Runner add_start(CLI::App& app) {
  struct Options {
    int pid = 0;
    Setup setup;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("start", "Set up tracing in a process and turn it on");
  sub->add_option("-P,--pid", o->pid, "Process")->required()->check(CLI::PositiveNumber);
  o->setup.add_options(sub);
  return [o] {
    auto c = connect_to("start", o->pid, true);
    if (!c) return 1;
    Setup::Undo undo;
    if (o->setup.apply("start", *c, &undo) != 0) {
      Setup::revert(*c, undo);  // all or nothing
      return 1;
    }
    for (const std::string& inst : o->setup.instances()) {
      const std::string path = instance_dir(inst) + "tracing_on";
      if (long rc = c->write_file(path, "1"); rc < 0) return fail("start", why(path, rc));
    }
    return 0;
  };
}

Runner add_stop(CLI::App& app) {
  auto t = std::make_shared<Targets>();
  CLI::App* sub =
      app.add_subcommand("stop", "Turn tracing off in a process (the buffers keep what they hold)");
  add_targets(sub, t.get());
  return [t] { return set_tracing("stop", *t, "0"); };
}

Runner add_restart(CLI::App& app) {
  auto t = std::make_shared<Targets>();
  CLI::App* sub = app.add_subcommand("restart", "Turn tracing back on in a process");
  add_targets(sub, t.get());
  return [t] { return set_tracing("restart", *t, "1"); };
}

Runner add_reset(CLI::App& app) {
  struct Options {
    Targets t;
    bool remove = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "reset", "Disable every event, filter, trigger and tracer, empty the buffer, tracing on");
  add_targets(sub, &o->t);
  sub->add_flag("-d,--remove", o->remove, "Remove the -B instances (or, with -a, every instance) after");
  return [o] {
    auto c = connect_to("reset", o->t.pid);
    if (!c) return 1;
    for (const std::string& inst : targets_of(*c, o->t)) {
      const std::string dir = instance_dir(inst);
      if (!inst.empty() && c->stat("instances/" + inst, nullptr, nullptr) < 0)
        return fail("reset", "no instance '" + inst + "'");
      c->write_file(dir + "tracing_on", "0");
      c->write_file(dir + "set_event", "");
      c->write_file(dir + "current_tracer", "nop");
      clear_events(*c, dir);
      c->write_file(dir + "trace", "");
      c->write_file(dir + "tracing_on", "1");
      if (o->remove && !inst.empty())
        if (int rc = c->rmdir("instances/" + inst); rc < 0)
          return fail("reset", why("instances/" + inst, rc));
    }
    return 0;
  };
}

}  // namespace usrtrace::tool
