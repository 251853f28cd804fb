// The function tracers' files: available_filter_functions,
// enabled_functions, set_ftrace_filter, set_ftrace_notrace,
// set_graph_function, set_graph_notrace, set_ftrace_pid,
// set_ftrace_notrace_pid, max_graph_depth, tracing_thresh,
// function_profile_enabled, trace_stat/functionN.
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

function::List list_of(Kind k) {
  switch (k) {
    case Kind::kSetFtraceNotrace:
      return function::List::kNotrace;
    case Kind::kSetGraphFunction:
      return function::List::kGraphFunction;
    case Kind::kSetGraphNotrace:
      return function::List::kGraphNotrace;
    default:
      return function::List::kFilter;
  }
}

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

long write_u64(Instance& inst, std::string_view s, uint64_t max, uint64_t* v) {
  size_t bad = 0;
  const int rc = parse_u64(strip(s), 10, v, &bad);
  if (rc < 0) return fail(inst, kSub, rc == -ERANGE ? Err::kNumberRange : Err::kNotNumber, s, bad, -rc);
  if (*v > max) return fail(inst, kSub, Err::kNumberRange, s, 0, EINVAL);
  return size_of(s);
}

}  // namespace

std::unique_ptr<File> open_function_file(Node node, int flags, int* err) {
  (void)err;
  const bool trunc = (flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC);
  Instance* ip = node.inst.get();
  const Kind kind = node.kind;
  const int node_cpu = node.cpu;
  auto f = std::make_unique<SimpleFile>(std::move(node.inst));
  switch (kind) {
    case Kind::kAvailableFilterFunctions:
      f->show = [] { return function::available_filter_functions(); };
      break;
    case Kind::kEnabledFunctions:
      f->show = [] { return function::enabled_functions(); };
      break;
    case Kind::kSetFtraceFilter:
    case Kind::kSetFtraceNotrace:
    case Kind::kSetGraphFunction:
    case Kind::kSetGraphNotrace: {
      const function::List list = list_of(kind);
      // O_TRUNC ('>') empties the list at the first write (or at close if
      // nothing is written, as `echo > set_ftrace_filter` does); '>>' adds.
      auto truncate = std::make_shared<bool>(trunc);
      f->show = [ip, list] { return function::show_list(*ip, list); };
      f->store = [ip, list, truncate](std::string_view s) { return write_list(*ip, list, s, truncate.get()); };
      f->on_close = [ip, list, truncate] {
        if (*truncate) function::clear_list(*ip, list);
      };
      break;
    }
    case Kind::kSetFtracePid:
    case Kind::kSetFtraceNotracePid: {
      const bool notrace = kind == Kind::kSetFtraceNotracePid;
      if (trunc) function::set_pids(*ip, notrace, {}, true);
      f->show = [ip, notrace] {
        std::string out;
        for (int p : function::pids(*ip, notrace)) out += std::to_string(p) + "\n";
        return out.empty() && !notrace ? std::string("no pid\n") : out;
      };
      f->store = [ip, notrace](std::string_view s) -> long {
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
      break;
    }
    case Kind::kMaxGraphDepth:
      f->show = [ip] { return std::to_string(function::max_graph_depth(*ip)) + "\n"; };
      f->store = [ip](std::string_view s) -> long {
        uint64_t v = 0;
        const long rc = write_u64(*ip, s, UINT32_MAX, &v);
        if (rc >= 0) function::set_max_graph_depth(*ip, static_cast<uint32_t>(v));
        return rc;
      };
      break;
    case Kind::kTracingThresh:
      f->show = [ip] { return std::to_string(function::thresh_us(*ip)) + "\n"; };
      f->store = [ip](std::string_view s) -> long {
        uint64_t v = 0;
        const long rc = write_u64(*ip, s, UINT64_MAX / 1000, &v);
        if (rc >= 0) {
          function::set_thresh_us(*ip, v);
          latency::set_thresh_us(*ip, v);
        }
        return rc;
      };
      break;
    case Kind::kTracingMaxLatency:
      f->show = [ip] { return std::to_string(latency::max_latency_us(*ip)) + "\n"; };
      f->store = [ip](std::string_view s) -> long {
        uint64_t v = 0;
        const long rc = write_u64(*ip, s, UINT64_MAX / 1000, &v);
        if (rc >= 0) latency::set_max_latency_us(*ip, v);
        return rc;
      };
      break;
    case Kind::kTimerlatPeriodUs:
      f->show = [ip] { return std::to_string(latency::timerlat_period_us(*ip)) + "\n"; };
      f->store = [ip](std::string_view s) -> long {
        uint64_t v = 0;
        const long rc = write_u64(*ip, s, UINT64_MAX / 1000, &v);
        if (rc < 0) return rc;
        if (latency::set_timerlat_period_us(*ip, v) < 0) return fail(*ip, "timerlat", Err::kTimerlatPeriod, s, 0, EINVAL);
        return rc;
      };
      break;
    case Kind::kFunctionProfileEnabled:
      f->show = [] { return std::string(function::profiling() ? "1\n" : "0\n"); };
      f->store = [ip](std::string_view s) -> long {
        uint64_t v = 0;
        const long rc = write_u64(*ip, s, 1, &v);
        if (rc >= 0) function::set_profiling(v != 0);
        return rc;
      };
      break;
    case Kind::kFunctionStat: {
      const int cpu = node_cpu;
      f->show = [cpu] { return function::function_stat(cpu); };
      break;
    }
    default:
      return nullptr;
  }
  return f;
}

}  // namespace usrtrace::tracefs::detail
