// usrtrace probe: the dynamic probes of a running process, as
// `echo DEF >> uprobe_events` would define them (docs/guide/probes.md).
//   usrtrace probe -P PID                 its probes (uprobe_events)
//   usrtrace probe -P PID DEF...          defines each (p:/r:) or removes it (-:GRP/EVENT)
//   usrtrace probe -P PID -r GRP/EVENT    removes it
//   usrtrace probe -P PID --clear         removes every probe (none while one is enabled)
//   usrtrace probe -P PID --profile       hits and misses (uprobe_profile)
//   usrtrace probe -P PID --sites         how each armed site is patched (dynamic_probe_sites)
//   usrtrace probe -P PID --sdt           its USDT probes (available_sdt_probes)
// A definition stays in the process after the command: enable it with
// `usrtrace start -P PID -e GRP:EVENT`, or use `record --probe DEF`, which
// removes what it defined at the end.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "remote.h"

namespace usrtrace::tool {

Runner add_probe(CLI::App& app) {
  struct Options {
    int pid = 0;
    bool list = false, clear = false, profile = false, sites = false, sdt = false;
    std::vector<std::string> defs, removes;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("probe", "List, define or remove a running process's dynamic probes");
  sub->add_option("-P,--pid", o->pid, "The process")->required()->check(CLI::PositiveNumber);
  sub->add_flag("-l,--list", o->list, "List its probes (uprobe_events; the default without DEF)");
  sub->add_flag("--clear", o->clear, "Remove every probe (refused while one is enabled)");
  sub->add_flag("--profile", o->profile, "Hits and misses per probe (uprobe_profile)");
  sub->add_flag("--sites", o->sites, "How each armed site is patched (dynamic_probe_sites)");
  sub->add_flag("--sdt", o->sdt, "Its USDT probes (available_sdt_probes)");
  sub->add_option("-r,--remove", o->removes, "Remove the probe [GRP/]EVENT (as writing -:[GRP/]EVENT)");
  sub->add_option("DEF", o->defs,
                  "A line of uprobe_events: p|r[:[GRP/]EVENT] PATH:OFFSET|[PATH:]SYMBOL[+OFFS] [ARGS], "
                  "or -:[GRP/]EVENT");
  return [o] {
    auto c = connect_to("probe", o->pid, true);
    if (!c) return 1;
    if (o->clear) {
      if (const long rc = c->write_file("uprobe_events", "", false); rc < 0)
        return fail("probe", why("uprobe_events", rc) +
                                 (rc == -EBUSY ? " (a probe is enabled: disable it first)" : ""));
    }
    for (const std::string& r : o->removes) o->defs.push_back("-:" + r);
    for (const std::string& d : o->defs) {
      if (const long rc = c->write_file("uprobe_events", d, true); rc < 0) {
        std::string msg = why("uprobe_events", rc) + " (wrote '" + d + "')", log;
        if (c->read_file("error_log", &log) > 0) {
          const size_t last = log.rfind("trace_uprobe: error:");
          if (last != std::string::npos) {
            std::string tail = log.substr(last);
            while (!tail.empty() && tail.back() == '\n') tail.pop_back();
            msg += "\n  " + tail;
          }
        }
        return fail("probe", msg);
      }
    }
    const bool show_list = o->list || (o->defs.empty() && o->removes.empty() && !o->clear && !o->profile &&
                                       !o->sites && !o->sdt);
    const std::pair<bool, const char*> files[] = {{show_list, "uprobe_events"},
                                                  {o->profile, "uprobe_profile"},
                                                  {o->sites, "dynamic_probe_sites"},
                                                  {o->sdt, "available_sdt_probes"}};
    for (const auto& [on, file] : files) {
      if (!on) continue;
      std::string text;
      if (const long rc = c->read_file(file, &text); rc < 0) return fail("probe", why(file, rc));
      fputs(text.c_str(), stdout);
    }
    return 0;
  };
}

}  // namespace usrtrace::tool
