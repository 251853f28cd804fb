// usrtrace: the command-line tool. A table of verbs (trace-cmd's habit);
// each verb lives in its own cmd_*.cc.
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "commands.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"usrtrace: ftrace for user space"};
  app.require_subcommand(1);
  using Adder = usrtrace::tool::Runner (*)(CLI::App&);
  const std::pair<const char*, Adder> verbs[] = {
      {"extract", usrtrace::tool::add_extract},   {"list", usrtrace::tool::add_list},
      {"mount", usrtrace::tool::add_mount},       {"probe", usrtrace::tool::add_probe},
      {"record", usrtrace::tool::add_record},     {"recover", usrtrace::tool::add_recover},
      {"report", usrtrace::tool::add_report},     {"reset", usrtrace::tool::add_reset},
      {"restart", usrtrace::tool::add_restart},   {"show", usrtrace::tool::add_show},
      {"snapshot", usrtrace::tool::add_snapshot}, {"start", usrtrace::tool::add_start},
      {"stat", usrtrace::tool::add_stat},         {"stop", usrtrace::tool::add_stop},
      {"stream", usrtrace::tool::add_stream},     {"umount", usrtrace::tool::add_umount},
  };
  std::map<std::string, usrtrace::tool::Runner> runners;
  for (const auto& [name, add] : verbs) runners[name] = add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto* sub : app.get_subcommands()) return runners[sub->get_name()]();
  return 2;
}

}  // namespace

// Whatever throws (out of memory, a CLI11 error after parsing) ends with a
// message and status 1, not std::terminate's abort and core dump.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fprintf(stderr, "usrtrace: %s\n", e.what());
  } catch (...) {
    fprintf(stderr, "usrtrace: an unknown exception\n");
  }
  return 1;
}
