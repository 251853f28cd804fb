// usrtrace: the command-line tool. A table of verbs (trace-cmd's habit);
// each verb lives in its own cmd_*.cc.
#include <cstdio>
#include <map>
#include <string>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"usrtrace: ftrace for user space"};
  app.require_subcommand(1);
  using Adder = usrtrace::tool::Runner (*)(CLI::App&);
  const std::pair<const char*, Adder> verbs[] = {
      {"recover", usrtrace::tool::add_recover},
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
