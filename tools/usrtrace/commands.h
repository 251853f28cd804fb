// The usrtrace command's verbs, one file each (cmd_*.cc), registered in
// main.cc's table.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace usrtrace::tool {

// Adds the subcommand to `app`; the returned function runs it once parsed
// and gives the exit status.
using Runner = std::function<int()>;
Runner add_recover(CLI::App& app);

}  // namespace usrtrace::tool
