// The tree: path resolution, stat/list/mkdir/rmdir/open, the generic file,
// errors and value parsers. The files themselves are in instance_files.cc,
// event_files.cc and per_cpu_files.cc.
//
// Layout (every instance directory, the root included, has the instance
// files; the root also has the top-only ones):
//
//   <instance>/  available_tracers buffer_percent buffer_size_kb
//                buffer_total_size_kb current_tracer error_log free_buffer
//                set_event set_event_pid set_event_notrace_pid trace
//                trace_clock trace_marker trace_marker_raw trace_options
//                trace_pipe tracing_cpumask tracing_max_latency tracing_on
//                tracing_thresh timerlat_period_us
//                set_ftrace_filter set_ftrace_notrace set_ftrace_pid
//                set_ftrace_notrace_pid set_graph_function set_graph_notrace
//                max_graph_depth (function_files.cc)
//                options/NAME
//                events/{enable,header_page,header_event}
//                events/SYS/enable   (not for the ftrace system, as in the kernel)
//                events/SYS/EVENT/{enable,filter,format,id,trigger}
//                per_cpu/cpuN/{buffer_size_kb,stats,trace,trace_pipe,trace_pipe_raw}
//   root only:   README available_events saved_cmdlines saved_tgids instances/
//                available_filter_functions enabled_functions
//                function_profile_enabled trace_stat/functionN
//                ftrace_dump_on_oops ftrace_dump_on_oops_file (src/crash)
#include "tracefs/tracefs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>

#include "events/registry.h"
#include "tracefs/internal.h"

namespace usrtrace::tracefs {
namespace detail {
namespace {

struct FileSpec {
  const char* name;
  Kind kind;
  mode_t mode;
  bool top_only;
};

// The kernel's modes since 5.17: TRACE_MODE_WRITE 0640, TRACE_MODE_READ
// 0440; trace_marker(_raw) 0220, free_buffer 0200; directories 0750.
constexpr mode_t kRW = 0640, kRO = 0440, kDirMode = 0750;

constexpr FileSpec kRootFiles[] = {
    {"README", Kind::kReadme, kRO, true},
    {"available_events", Kind::kAvailableEvents, kRO, true},
    {"available_filter_functions", Kind::kAvailableFilterFunctions, kRO, true},
    {"available_tracers", Kind::kAvailableTracers, kRO, false},
    {"buffer_file", Kind::kBufferFile, kRW, false},
    {"buffer_percent", Kind::kBufferPercent, kRW, false},
    {"buffer_size_kb", Kind::kBufferSizeKb, kRW, false},
    {"buffer_total_size_kb", Kind::kBufferTotalSizeKb, kRO, false},
    {"current_tracer", Kind::kCurrentTracer, kRW, false},
    {"enabled_functions", Kind::kEnabledFunctions, kRO, true},
    {"error_log", Kind::kErrorLog, kRW, false},
    {"free_buffer", Kind::kFreeBuffer, 0200, false},
    {"max_graph_depth", Kind::kMaxGraphDepth, kRW, false},
    {"ftrace_dump_on_oops", Kind::kFtraceDumpOnOops, kRW, true},
    {"ftrace_dump_on_oops_file", Kind::kFtraceDumpOnOopsFile, kRW, true},
    {"function_profile_enabled", Kind::kFunctionProfileEnabled, kRW, true},
    {"saved_cmdlines", Kind::kSavedCmdlines, kRO, true},
    {"saved_tgids", Kind::kSavedTgids, kRO, true},
    {"set_event", Kind::kSetEvent, kRW, false},
    {"set_event_notrace_pid", Kind::kSetEventNotracePid, kRW, false},
    {"set_event_pid", Kind::kSetEventPid, kRW, false},
    {"set_ftrace_filter", Kind::kSetFtraceFilter, kRW, false},
    {"set_ftrace_notrace", Kind::kSetFtraceNotrace, kRW, false},
    {"set_ftrace_notrace_pid", Kind::kSetFtraceNotracePid, kRW, false},
    {"set_ftrace_pid", Kind::kSetFtracePid, kRW, false},
    {"set_graph_function", Kind::kSetGraphFunction, kRW, false},
    {"set_graph_notrace", Kind::kSetGraphNotrace, kRW, false},
    {"snapshot", Kind::kSnapshot, kRW, false},
    {"snapshot_enabled", Kind::kSnapshotEnabled, kRW, false},
    {"snapshot_ring_size", Kind::kSnapshotRingSize, kRW, false},
    {"trace", Kind::kTrace, kRW, false},
    {"trace_clock", Kind::kTraceClock, kRW, false},
    {"trace_marker", Kind::kTraceMarker, 0220, false},
    {"trace_marker_raw", Kind::kTraceMarkerRaw, 0220, false},
    {"trace_options", Kind::kTraceOptions, kRW, false},
    {"trace_pipe", Kind::kTracePipe, kRO, false},
    {"tracing_cpumask", Kind::kTracingCpumask, kRW, false},
    {"tracing_on", Kind::kTracingOn, kRW, false},
    {"tracing_max_latency", Kind::kTracingMaxLatency, kRW, false},
    {"tracing_thresh", Kind::kTracingThresh, kRW, false},
    {"timerlat_period_us", Kind::kTimerlatPeriodUs, kRW, false},
};
constexpr const char* kRootDirs[] = {"events", "instances", "options", "per_cpu", "trace_stat"};

constexpr FileSpec kCpuFiles[] = {
    {"buffer_size_kb", Kind::kCpuBufferSizeKb, kRW, false},
    {"snapshot", Kind::kCpuSnapshot, kRW, false},
    {"snapshot_raw", Kind::kCpuSnapshotRaw, kRO, false},
    {"stats", Kind::kCpuStats, kRO, false},
    {"trace", Kind::kCpuTrace, kRW, false},
    {"trace_pipe", Kind::kCpuTracePipe, kRO, false},
    {"trace_pipe_raw", Kind::kCpuTracePipeRaw, kRO, false},
};

constexpr FileSpec kEventFiles[] = {
    {"enable", Kind::kEventEnable, kRW, false},
    {"filter", Kind::kEventFilter, kRW, false},
    {"format", Kind::kEventFormat, kRO, false},
    {"hist", Kind::kEventHist, kRO, false},
    {"id", Kind::kEventId, kRO, false},
    {"trigger", Kind::kEventTrigger, kRW, false},
};

bool is_ftrace(std::string_view system) { return system == "ftrace"; }

void set_dir(Node* n, std::string path) {
  n->kind = Kind::kDir;
  n->mode = kDirMode;
  n->dir_path = std::move(path);
}

void set_file(Node* n, Kind k, mode_t mode) {
  n->kind = k;
  n->mode = mode;
}

bool system_exists(std::string_view sys) {
  for (const auto& s : events::Registry::get().systems())
    if (s == sys) return true;
  return false;
}

// "cpu12" -> 12 if below nr_cpus, else -1 (no leading zeros, as the names are made).
int parse_cpu_dir(std::string_view name, int nr_cpus) {
  if (name.size() < 4 || name.size() > 10 || name.substr(0, 3) != "cpu") return -1;
  std::string_view d = name.substr(3);
  if (d.size() > 1 && d[0] == '0') return -1;
  int v = 0;
  for (char c : d) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v < nr_cpus ? v : -1;
}

// Resolves `rest` (the components below an instance directory).
int resolve_in_instance(const std::vector<std::string_view>& c, size_t i, bool top, Node* n) {
  Instance& inst = *n->inst;
  const size_t left = c.size() - i;
  if (left == 0) {
    set_dir(n, "");
    return 0;
  }
  const std::string_view name = c[i];
  if (left == 1 && name.substr(0, 9) == "snapshot.") {
    // snapshot.AGE: the kept snapshots older than the newest.
    uint64_t age = 0;
    size_t bad = 0;
    const std::string_view d = name.substr(9);
    if (d.empty() || d[0] == '0' || d[0] == '+' || parse_u64(d, 10, &age, &bad) < 0 ||
        age >= static_cast<uint64_t>(inst.snapshots().ring_size()))
      return -ENOENT;
    n->age = static_cast<int>(age);
    set_file(n, Kind::kSnapshotOld, kRO);
    return 0;
  }
  if (left == 1) {
    for (const FileSpec& f : kRootFiles) {
      if (name == f.name && (top || !f.top_only)) {
        set_file(n, f.kind, f.mode);
        return 0;
      }
    }
  }
  auto leaf = [&](int depth) { return left == static_cast<size_t>(depth) ? 0 : -ENOTDIR; };
  if (name == "options") {
    if (left == 1) return set_dir(n, "options"), 0;
    const int o = instance::option_by_name(c[i + 1]);
    if (o < 0) return -ENOENT;
    n->option = o;
    set_file(n, Kind::kOption, kRW);
    return leaf(2);
  }
  if (name == "trace_stat" && top) {
    // trace_stat/functionN: the function profiler's per-CPU tables.
    if (left == 1) return set_dir(n, "trace_stat"), 0;
    const std::string_view f = c[i + 1];
    if (f.size() < 9 || f.substr(0, 8) != "function") return -ENOENT;
    const int cpu = parse_cpu_dir(std::string("cpu").append(f.substr(8)), inst.buffer().nr_cpus());
    if (cpu < 0) return -ENOENT;
    n->cpu = cpu;
    set_file(n, Kind::kFunctionStat, kRO);
    return leaf(2);
  }
  if (name == "per_cpu") {
    if (left == 1) return set_dir(n, "per_cpu"), 0;
    const int cpu = parse_cpu_dir(c[i + 1], inst.buffer().nr_cpus());
    if (cpu < 0) return -ENOENT;
    n->cpu = cpu;
    if (left == 2) return set_dir(n, "per_cpu/cpu"), 0;
    for (const FileSpec& f : kCpuFiles) {
      if (c[i + 2] == f.name) {
        set_file(n, f.kind, f.mode);
        return leaf(3);
      }
    }
    return -ENOENT;
  }
  if (name == "events") {
    if (left == 1) return set_dir(n, "events"), 0;
    const std::string_view sub = c[i + 1];
    if (sub == "enable") return set_file(n, Kind::kEventsEnable, kRW), leaf(2);
    if (sub == "header_page") return set_file(n, Kind::kHeaderPage, kRO), leaf(2);
    if (sub == "header_event") return set_file(n, Kind::kHeaderEvent, kRO), leaf(2);
    if (!system_exists(sub)) return -ENOENT;
    n->system = std::string(sub);
    if (left == 2) return set_dir(n, "events/SYS"), 0;
    const std::string_view ev = c[i + 2];
    if (ev == "enable" && !is_ftrace(sub)) return set_file(n, Kind::kSystemEnable, kRW), leaf(3);
    if (ev == "filter" && !is_ftrace(sub)) return set_file(n, Kind::kSystemFilter, kRW), leaf(3);
    if (!events::Registry::get().find(sub, ev)) return -ENOENT;
    n->event = std::string(ev);
    if (left == 3) return set_dir(n, "events/SYS/EVENT"), 0;
    for (const FileSpec& f : kEventFiles) {
      if (c[i + 3] == f.name && (!is_ftrace(sub) || f.kind == Kind::kEventFormat ||
                                 f.kind == Kind::kEventId)) {
        set_file(n, f.kind, f.mode);
        return leaf(4);
      }
    }
    return -ENOENT;
  }
  // A file name followed by more components: not a directory.
  for (const FileSpec& f : kRootFiles)
    if (name == f.name && (top || !f.top_only)) return -ENOTDIR;
  return -ENOENT;
}

}  // namespace

int resolve(std::string_view path, Node* n) {
  if (path.size() >= PATH_MAX) return -ENAMETOOLONG;
  std::vector<std::string_view> c;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view comp = path.substr(start, end - start);
    if (comp.size() > NAME_MAX) return -ENAMETOOLONG;
    if (comp == "..") return -ENOENT;  // no walking out of a node: keep paths canonical
    if (!comp.empty() && comp != ".") c.push_back(comp);
    start = end + 1;
  }
  if (!c.empty() && c[0] == "instances") {
    n->in_instances_dir = true;
    if (c.size() == 1) {
      set_dir(n, "instances");
      return 0;
    }
    Instance* inst = Instance::find_get(c[1]);
    if (!inst) return -ENOENT;
    n->inst = InstanceRef(inst);
    return resolve_in_instance(c, 2, false, n);
  }
  Instance* top = Instance::find_get("");
  if (!top) return -ENOSYS;
  n->inst = InstanceRef(top);
  return resolve_in_instance(c, 0, true, n);
}

void list_dir(const Node& n, std::vector<std::string>* out) {
  const std::string& d = n.dir_path;
  if (d == "instances") {
    *out = Instance::names();
    return;
  }
  if (d.empty()) {
    const bool top = !n.in_instances_dir;
    for (const FileSpec& f : kRootFiles)
      if (top || !f.top_only) out->emplace_back(f.name);
    for (int age = 1; age < n.inst->snapshots().ring_size(); ++age)
      out->push_back("snapshot." + std::to_string(age));
    for (const char* dir : kRootDirs)
      if (top || (std::string_view(dir) != "instances" && std::string_view(dir) != "trace_stat"))
        out->emplace_back(dir);
  } else if (d == "options") {
    for (const int o : instance::listed_options()) out->emplace_back(instance::option_info(o).name);
  } else if (d == "per_cpu") {
    for (int c = 0; c < n.inst->buffer().nr_cpus(); ++c) out->push_back("cpu" + std::to_string(c));
  } else if (d == "trace_stat") {
    for (int c = 0; c < n.inst->buffer().nr_cpus(); ++c) out->push_back("function" + std::to_string(c));
  } else if (d == "per_cpu/cpu") {
    for (const FileSpec& f : kCpuFiles) out->emplace_back(f.name);
  } else if (d == "events") {
    out->assign({"enable", "header_event", "header_page"});
    for (auto& s : events::Registry::get().systems()) out->push_back(std::move(s));
  } else if (d == "events/SYS") {
    if (!is_ftrace(n.system)) out->insert(out->end(), {"enable", "filter"});
    events::Registry::get().for_each([&](events::EventDesc& e) {
      if (n.system == e.system) out->emplace_back(e.name);
    });
  } else if (d == "events/SYS/EVENT") {
    for (const FileSpec& f : kEventFiles)
      if (!is_ftrace(n.system) || f.kind == Kind::kEventFormat || f.kind == Kind::kEventId)
        out->emplace_back(f.name);
  }
  std::sort(out->begin(), out->end());
}

// ---- SimpleFile

long SimpleFile::read(char* buf, size_t size) {
  if (stream) {
    if (off_ == text_.size() && !ended_) {
      text_.clear();
      off_ = 0;
      // A window of at least 64 KiB: small reads (FUSE's 4 KiB) do not
      // each restart the formatting.
      if (!stream(&text_, std::max<size_t>(size, 64 * 1024))) ended_ = true;
    }
    const size_t n = std::min(size, text_.size() - off_);
    std::memcpy(buf, text_.data() + off_, n);
    off_ += n;
    return static_cast<long>(n);
  }
  if (!show) return -EINVAL;
  if (!shown_) {
    text_ = show();
    shown_ = true;
  }
  const size_t n = std::min(size, text_.size() - off_);
  std::memcpy(buf, text_.data() + off_, n);
  off_ += n;
  return static_cast<long>(n);
}

long SimpleFile::write(const char* buf, size_t size) {
  if (!store) return -EINVAL;
  if (size > static_cast<size_t>(LONG_MAX)) return -EINVAL;
  return store(std::string_view(buf, size));
}

// ---- Errors

namespace {
constexpr const char* kErrTexts[] = {
    "Empty value",                                   // kEmpty
    "Invalid number",                                // kNotNumber
    "Number out of range",                           // kNumberRange
    "Value must be 0 or 1",                          // kNotBool
    "Value must be between 0 and 100",               // kPercentRange
    "Buffer size must be greater than 0",            // kSizeZero
    "Buffer size too large",                         // kSizeTooLarge
    "Not enough memory",                             // kNoMemory
    "Unknown clock",                                 // kUnknownClock
    "Unknown option",                                // kUnknownOption
    "Unknown tracer",                                // kUnknownTracer
    "No event matches",                              // kNoSuchEvent
    "Invalid pid",                                   // kBadPid
    "Invalid CPU mask",                              // kBadCpumask
    "CPU mask has bits beyond the last CPU",         // kCpumaskOverflow
    "Markers are disabled (options/markers)",        // kMarkersOff
    "Raw marker needs a 4-byte id",                  // kRawTooShort
    "Raw marker too large",                          // kRawTooLong
    "Value too long",                                // kTooLong
    "Snapshot is being read",                        // kSnapshotBusy
    "Only the whole snapshot can be freed",          // kSnapshotFreeCpu
    "Snapshot ring size must be between 1 and 16",   // kSnapshotRing
    "Invalid path",                                  // kBadPath
    "Cannot create the buffer file",                 // kBufferFileOpen
    "Cannot allocate the buffer in the file",        // kBufferFileAlloc
    "Value must be 0, 1, 2 or all",                  // kBadDumpMode
    "Cannot open the dump file",                     // kDumpFileOpen
    "No traceable function matches",                 // kNoFunction
    "Unknown function command",                      // kFunctionCommand
    "Missing module name after :mod:",               // kBadModule
    "Invalid count",                                 // kCommandCount
    "Function commands only work in set_ftrace_filter",  // kCommandNotHere
    "Latency tracers need a TSC trace_clock (local, global, perf, x86-tsc)",  // kLatencyClock
    "A latency tracer uses the max buffer",          // kMaxBufferBusy
    "Period must be between 100 and 1000000 us",     // kTimerlatPeriod
};
static_assert(sizeof(kErrTexts) / sizeof(kErrTexts[0]) == static_cast<size_t>(Err::kCount));
constexpr size_t kMaxLoggedCommand = 256;
}  // namespace

const char* err_text(Err e) { return kErrTexts[static_cast<size_t>(e)]; }

long fail(Instance& inst, std::string_view subsystem, Err e, std::string_view command, size_t pos,
          int errnum) {
  return fail_text(inst, subsystem, err_text(e), command, pos, errnum);
}

long fail_text(Instance& inst, std::string_view subsystem, std::string_view message,
               std::string_view command, size_t pos, int errnum) {
  // The log is text: binary junk and control bytes show as '.', one byte
  // each, so the caret stays under the byte it names.
  std::string cmd(command.substr(0, kMaxLoggedCommand));
  while (!cmd.empty() && cmd.back() == '\n') cmd.pop_back();
  for (char& ch : cmd) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u >= 0x7f) ch = '.';
  }
  inst.log_error(subsystem, message, cmd, std::min(pos, cmd.size()));
  return -errnum;
}

int parse_u64(std::string_view s, int base, uint64_t* v, size_t* bad) {
  size_t i = 0;
  if (i < s.size() && s[i] == '+') ++i;
  if (base == 0) {
    base = 10;
    if (i < s.size() && s[i] == '0') {
      base = 8;
      if (i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'X') && i + 2 < s.size() &&
          std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
        base = 16;
        i += 2;
      }
    }
  }
  const size_t first = i;
  uint64_t val = 0;
  for (; i < s.size(); ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    int d = -1;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'z') d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'Z') d = ch - 'A' + 10;
    if (d < 0 || d >= base) break;
    const auto ub = static_cast<uint64_t>(base), ud = static_cast<uint64_t>(d);
    if (val > (UINT64_MAX - ud) / ub) {
      *bad = i;
      return -ERANGE;
    }
    val = val * ub + ud;
  }
  if (i == first) {
    *bad = i;
    return -EINVAL;
  }
  if (i < s.size() && s[i] == '\n') ++i;
  if (i != s.size()) {
    *bad = i;
    return -EINVAL;
  }
  *v = val;
  return 0;
}

std::vector<Token> tokens(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  auto space = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  while (i < s.size()) {
    while (i < s.size() && space(s[i])) ++i;
    const size_t b = i;
    while (i < s.size() && !space(s[i])) ++i;
    if (i > b) out.push_back({s.substr(b, i - b), b});
  }
  return out;
}

std::string_view strip(std::string_view s) {
  auto space = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace detail

using detail::Kind;
using detail::Node;

int stat(std::string_view path, Stat* st) {
  Node n;
  if (int rc = detail::resolve(path, &n); rc < 0) return rc;
  st->is_dir = n.kind == Kind::kDir;
  st->mode = n.mode;
  return 0;
}

int list(std::string_view dir, std::vector<std::string>* names) {
  Node n;
  if (int rc = detail::resolve(dir, &n); rc < 0) return rc;
  if (n.kind != Kind::kDir) return -ENOTDIR;
  names->clear();
  detail::list_dir(n, names);
  return 0;
}

namespace {

// Splits "instances/NAME" (with optional slashes around); returns false
// when the path is not directly under instances/.
int instance_name(std::string_view path, std::string_view* name) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.size() >= PATH_MAX) return -ENAMETOOLONG;
  constexpr std::string_view kPrefix = "instances/";
  if (path.substr(0, kPrefix.size()) != kPrefix) {
    Node n;  // an existing path outside instances/ -> EEXIST/EPERM like the kernel
    return detail::resolve(path, &n) == 0 ? -EEXIST : -EPERM;
  }
  *name = path.substr(kPrefix.size());
  if (name->find('/') != std::string_view::npos) {
    // instances/NAME/x: the kernel only creates directories in instances/.
    Node n;
    return detail::resolve(path, &n) == 0 ? -EEXIST : -EPERM;
  }
  if (name->size() > NAME_MAX) return -ENAMETOOLONG;
  return 0;
}

}  // namespace

int mkdir(std::string_view path) {
  std::string_view name;
  if (int rc = instance_name(path, &name); rc < 0) return rc;
  int err = 0;
  if (!instance::Instance::create(name, &err)) return -err;
  return 0;
}

int rmdir(std::string_view path) {
  std::string_view name;
  if (int rc = instance_name(path, &name); rc < 0) return rc == -EEXIST ? -EPERM : rc;
  if (!instance::Instance::valid_name(name)) return -ENOENT;
  return instance::Instance::destroy(name);
}

int open(std::string_view path, int flags, std::unique_ptr<File>* out) {
  const int acc = flags & O_ACCMODE;
  if (acc != O_RDONLY && acc != O_WRONLY && acc != O_RDWR) return -EINVAL;
  Node n;
  if (int rc = detail::resolve(path, &n); rc < 0) return rc;
  if (n.kind == Kind::kDir) return -EISDIR;
  const bool want_read = acc != O_WRONLY, want_write = acc != O_RDONLY;
  if ((want_read && !(n.mode & 0400)) || (want_write && !(n.mode & 0200))) return -EACCES;
  int err = 0;
  std::unique_ptr<File> f;
  switch (n.kind) {
    case Kind::kSetEvent:
    case Kind::kAvailableEvents:
    case Kind::kSetEventPid:
    case Kind::kSetEventNotracePid:
    case Kind::kEventsEnable:
    case Kind::kHeaderPage:
    case Kind::kHeaderEvent:
    case Kind::kSystemEnable:
    case Kind::kSystemFilter:
    case Kind::kEventEnable:
    case Kind::kEventFilter:
    case Kind::kEventHist:
    case Kind::kEventFormat:
    case Kind::kEventId:
    case Kind::kEventTrigger:
      f = detail::open_event_file(std::move(n), flags, &err);
      break;
    case Kind::kCpuBufferSizeKb:
    case Kind::kCpuStats:
    case Kind::kCpuTrace:
    case Kind::kCpuTracePipe:
    case Kind::kCpuTracePipeRaw:
      f = detail::open_per_cpu_file(std::move(n), flags, &err);
      break;
    case Kind::kSnapshot:
    case Kind::kSnapshotEnabled:
    case Kind::kSnapshotRingSize:
    case Kind::kSnapshotOld:
    case Kind::kCpuSnapshot:
    case Kind::kCpuSnapshotRaw:
      f = detail::open_snapshot_file(std::move(n), flags, &err);
      break;
    case Kind::kAvailableFilterFunctions:
    case Kind::kEnabledFunctions:
    case Kind::kSetFtraceFilter:
    case Kind::kSetFtraceNotrace:
    case Kind::kSetGraphFunction:
    case Kind::kSetGraphNotrace:
    case Kind::kSetFtracePid:
    case Kind::kSetFtraceNotracePid:
    case Kind::kMaxGraphDepth:
    case Kind::kTracingThresh:
    case Kind::kTracingMaxLatency:
    case Kind::kTimerlatPeriodUs:
    case Kind::kFunctionProfileEnabled:
    case Kind::kFunctionStat:
      f = detail::open_function_file(std::move(n), flags, &err);
      break;
    default:
      f = detail::open_instance_file(std::move(n), flags, &err);
      break;
  }
  if (!f) return -(err ? err : ENOENT);
  *out = std::move(f);
  return 0;
}

long read_file(std::string_view path, std::string* out) {
  std::unique_ptr<File> f;
  if (int rc = open(path, O_RDONLY | O_NONBLOCK, &f); rc < 0) return rc;
  out->clear();
  char buf[16384];
  for (;;) {
    const long n = f->read(buf, sizeof buf);
    if (n == -EAGAIN) break;  // trace_pipe: what was there
    if (n < 0) return n;
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  return static_cast<long>(out->size());
}

long write_file(std::string_view path, std::string_view text, bool append) {
  std::unique_ptr<File> f;
  if (int rc = open(path, O_WRONLY | (append ? O_APPEND : O_TRUNC), &f); rc < 0) return rc;
  size_t done = 0;
  while (done < text.size()) {
    const long n = f->write(text.data() + done, text.size() - done);
    if (n < 0) return n;
    if (n == 0) break;  // took nothing: do not spin
    done += static_cast<size_t>(n);
  }
  return static_cast<long>(done);
}

}  // namespace usrtrace::tracefs
