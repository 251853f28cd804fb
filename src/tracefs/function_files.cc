// The function tracers' files: available_filter_functions,
// enabled_functions, set_ftrace_filter, set_ftrace_notrace,
// set_graph_function, set_graph_notrace, set_ftrace_pid,
// set_ftrace_notrace_pid, max_graph_depth, tracing_thresh,
// function_profile_enabled, trace_stat/functionN. Their table,
// kFunctionFiles, is at the end.
#include <fcntl.h>

#include <cerrno>

#include "function/control.h"
#include "latency/latency.h"
#include "tracefs/internal.h"

namespace usrtrace::tracefs::detail {
namespace {

constexpr std::string_view kSub = "ftrace";  // error_log subsystem
constexpr uint64_t kPidMax = 4194304;

long size_of(std::string_view s) { return static_cast<long>(s.size()); }

long write_list(Instance& inst, function::List list, std::string_view s, bool* truncate) {
  function::Error e;
  const int rc = function::write_list(inst, list, s, *truncate, &e);
  if (rc < 0) {
    Err code = Err::kNoFunction;
    switch (e.code) {
      case function::Error::kNoFunction:
        break;
      case function::Error::kBadModule:
        code = Err::kBadModule;
        break;
      case function::Error::kUnknownCommand:
        code = Err::kFunctionCommand;
        break;
      case function::Error::kBadCount:
        code = Err::kCommandCount;
        break;
      case function::Error::kNoEvent:
        code = Err::kNoSuchEvent;
        break;
      case function::Error::kNotHere:
        code = Err::kCommandNotHere;
        break;
      case function::Error::kNoMemory:
        code = Err::kNoMemory;
        break;
    }
    return fail(inst, kSub, code, s, e.pos, -rc);
  }
  *truncate = false;  // later writes on the same open file append
  return size_of(s);
}

bool truncating(int flags) { return (flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC); }

// ---- The open functions; `ip` stays valid as long as the file, which holds
// the node's reference on it.

std::unique_ptr<File> open_available_filter_functions(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return function::available_filter_functions(); };
  return f;
}

std::unique_ptr<File> open_enabled_functions(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return function::enabled_functions(); };
  return f;
}

std::unique_ptr<File> open_refused_functions(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return function::refused_functions(); };
  return f;
}

// set_ftrace_filter, set_ftrace_notrace, set_graph_function and
// set_graph_notrace: the list of each.
template <function::List list>
std::unique_ptr<File> open_list(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  // O_TRUNC ('>') empties the list at the first write (or at close if
  // nothing is written, as `echo > set_ftrace_filter` does); '>>' adds.
  auto truncate = std::make_shared<bool>(truncating(flags));
  f->show = [ip] { return function::show_list(*ip, list); };
  f->store = [ip, truncate](std::string_view s) { return write_list(*ip, list, s, truncate.get()); };
  f->on_close = [ip, truncate] {
    if (*truncate) function::clear_list(*ip, list);
  };
  return f;
}

// set_ftrace_pid (notrace false) and set_ftrace_notrace_pid.
template <bool notrace>
std::unique_ptr<File> open_pids(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  if (truncating(flags)) function::set_pids(*ip, notrace, {}, true);
  f->show = [ip] {
    std::string out;
    for (int p : function::pids(*ip, notrace)) out += std::to_string(p) + "\n";
    return out.empty() && !notrace ? std::string("no pid\n") : out;
  };
  f->store = [ip](std::string_view s) -> long {
    std::vector<int> add;
    for (const Token& t : tokens(s)) {
      uint64_t v = 0;
      size_t bad = 0;
      const int rc = parse_u64(t.text, 0, &v, &bad);
      if (rc < 0 || v >= kPidMax) return fail(*ip, kSub, Err::kBadPid, s, t.pos + (rc < 0 ? bad : 0), EINVAL);
      add.push_back(static_cast<int>(v));
    }
    if (!add.empty()) function::set_pids(*ip, notrace, std::move(add), false);
    return size_of(s);
  };
  return f;
}

std::unique_ptr<File> open_max_graph_depth(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::to_string(function::max_graph_depth(*ip)) + "\n"; };
  f->store = [ip](std::string_view s) -> long {
    uint64_t v = 0;
    const long rc = write_u64(*ip, kSub, s, UINT32_MAX, &v);
    if (rc >= 0) function::set_max_graph_depth(*ip, static_cast<uint32_t>(v));
    return rc;
  };
  return f;
}

// tracing_thresh is here, not with the latency tracers' files: its value is
// the function tracers' (function_graph's duration threshold), as the
// kernel's is trace.c's for function_graph and the latency tracers alike;
// a write tells the latency tracers too.
std::unique_ptr<File> open_tracing_thresh(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::to_string(function::thresh_us(*ip)) + "\n"; };
  f->store = [ip](std::string_view s) -> long {
    uint64_t v = 0;
    const long rc = write_u64(*ip, kSub, s, UINT64_MAX / 1000, &v);
    if (rc >= 0) {
      function::set_thresh_us(*ip, v);
      latency::set_thresh_us(*ip, v);
    }
    return rc;
  };
  return f;
}

std::unique_ptr<File> open_function_profile_enabled(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return std::string(function::profiling() ? "1\n" : "0\n"); };
  f->store = [ip](std::string_view s) -> long {
    uint64_t v = 0;
    const long rc = write_u64(*ip, kSub, s, 1, &v);
    if (rc >= 0) function::set_profiling(v != 0);
    return rc;
  };
  return f;
}

// trace_stat/functionN: the function profiler's table of CPU N.
bool match_function_stat(std::string_view name, Node* n) {
  if (name.size() < 9 || name.substr(0, 8) != "function") return false;
  const int cpu = parse_cpu_dir(std::string("cpu").append(name.substr(8)), n->inst->buffer().nr_cpus());
  if (cpu < 0) return false;
  n->cpu = cpu;
  return true;
}

void list_function_stats(const Node& n, std::vector<std::string>* out) {
  for (int c = 0; c < n.inst->buffer().nr_cpus(); ++c) out->push_back("function" + std::to_string(c));
}

std::unique_ptr<File> open_function_stat(Node n, int, int*) {
  const int cpu = n.cpu;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [cpu] { return function::function_stat(cpu); };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"available_filter_functions", kRO, Dir::kRoot, kTopOnly, open_available_filter_functions},
    {"enabled_functions", kRO, Dir::kRoot, kTopOnly, open_enabled_functions},
    {"function_profile_enabled", kRW, Dir::kRoot, kTopOnly, open_function_profile_enabled},
    {"max_graph_depth", kRW, Dir::kRoot, 0, open_max_graph_depth},
    {"refused_functions", kRO, Dir::kRoot, kTopOnly, open_refused_functions},
    {"set_ftrace_filter", kRW, Dir::kRoot, 0, open_list<function::List::kFilter>},
    {"set_ftrace_notrace", kRW, Dir::kRoot, 0, open_list<function::List::kNotrace>},
    {"set_ftrace_notrace_pid", kRW, Dir::kRoot, 0, open_pids<true>},
    {"set_ftrace_pid", kRW, Dir::kRoot, 0, open_pids<false>},
    {"set_graph_function", kRW, Dir::kRoot, 0, open_list<function::List::kGraphFunction>},
    {"set_graph_notrace", kRW, Dir::kRoot, 0, open_list<function::List::kGraphNotrace>},
    {"tracing_thresh", kRW, Dir::kRoot, 0, open_tracing_thresh},
    {nullptr, kRO, Dir::kTraceStat, 0, open_function_stat, match_function_stat, list_function_stats},
};

}  // namespace

constinit const std::span<const FileSpec> kFunctionFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
