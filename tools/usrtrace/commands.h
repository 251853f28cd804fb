// The usrtrace command's verbs, one file each (cmd_*.cc), registered in
// main.cc's table.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace usrtrace::tool {

// Adds the subcommand to `app`; the returned function runs it once parsed
// and gives the exit status.
using Runner = std::function<int()>;
Runner add_extract(CLI::App& app);
Runner add_list(CLI::App& app);
Runner add_mount(CLI::App& app);
Runner add_probe(CLI::App& app);
Runner add_record(CLI::App& app);
Runner add_recover(CLI::App& app);
Runner add_report(CLI::App& app);
Runner add_reset(CLI::App& app);
Runner add_restart(CLI::App& app);
Runner add_show(CLI::App& app);
Runner add_snapshot(CLI::App& app);
Runner add_start(CLI::App& app);
Runner add_stat(CLI::App& app);
Runner add_stop(CLI::App& app);
Runner add_stream(CLI::App& app);
Runner add_umount(CLI::App& app);

// `usrtrace report --format FORMAT -o OUTPUT INPUT`: what record and
// extract run for --perfetto. The exit status.
int export_trace(const std::string& input, const std::string& format, const std::string& output);

}  // namespace usrtrace::tool
