// The tree: path resolution, stat/list/mkdir/rmdir/open, the generic file,
// errors and value parsers. The files themselves are described by the
// tables of their groups (FileSpec, tracefs/internal.h), each beside its
// open functions: instance_files.cc, event_files.cc, snapshot_files.cc,
// per_cpu_files.cc, function_files.cc and latency_files.cc. Here are only
// the directories (kDirs) and the walk over both.
//
// Layout (every instance directory, the root included, has the instance
// files; the root also has the top-only ones):
//
//   <instance>/  available_tracers buffer_file buffer_percent buffer_size_kb
//                buffer_total_size_kb current_tracer error_log free_buffer
//                trace trace_clock trace_marker trace_marker_raw
//                trace_options trace_pipe tracing_cpumask tracing_on
//                options/NAME                                  (instance_files.cc)
//                set_event set_event_pid set_event_notrace_pid
//                events/{enable,header_page,header_event}
//                events/SYS/{enable,filter}  (not for the ftrace system, as in the kernel)
//                events/SYS/EVENT/{enable,filter,format,hist,id,trigger}
//                                                              (event_files.cc)
//                snapshot snapshot_enabled snapshot_ring_size snapshot.AGE
//                per_cpu/cpuN/{snapshot,snapshot_raw}          (snapshot_files.cc)
//                per_cpu/cpuN/{buffer_size_kb,stats,trace,trace_pipe,trace_pipe_raw}
//                                                              (per_cpu_files.cc)
//                set_ftrace_filter set_ftrace_notrace set_ftrace_pid
//                set_ftrace_notrace_pid set_graph_function set_graph_notrace
//                max_graph_depth tracing_thresh                (function_files.cc)
//                tracing_max_latency timerlat_period_us        (latency_files.cc)
//   root only:   instances/
//                README saved_cmdlines saved_tgids
//                ftrace_dump_on_oops ftrace_dump_on_oops_file  (instance_files.cc)
//                available_events                              (event_files.cc)
//                available_filter_functions enabled_functions
//                function_profile_enabled trace_stat/functionN (function_files.cc)
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

// Every group's files. No two of them name the same file in one directory,
// so the order is only that of the walk.
constexpr const std::span<const FileSpec>* kGroups[] = {
    &kInstanceFiles, &kEventFiles,   &kSnapshotFiles, &kPerCpuFiles,
    &kFunctionFiles, &kLatencyFiles, &kProbeFiles,    &kSynthFiles,
};

// A directory in a directory, or a family of them named by a parameter
// (per_cpu/cpuN, events/SYS, events/SYS/EVENT), as FileSpec is for files.
struct DirSpec {
  const char* name;  // null for a family
  Dir parent, self;
  uint8_t flags;  // kTopOnly
  bool (*match)(std::string_view name, Node* n) = nullptr;
  void (*names)(const Node& n, std::vector<std::string>* out) = nullptr;
};

bool is_ftrace(std::string_view system) { return system == "ftrace"; }

bool system_exists(std::string_view sys) {
  for (const auto& s : events::Registry::get().systems())
    if (s == sys) return true;
  return false;
}

bool match_cpu(std::string_view name, Node* n) {
  const int cpu = parse_cpu_dir(name, n->inst->buffer().nr_cpus());
  if (cpu < 0) return false;
  n->cpu = cpu;
  return true;
}

void list_cpus(const Node& n, std::vector<std::string>* out) {
  for (int c = 0; c < n.inst->buffer().nr_cpus(); ++c) out->push_back("cpu" + std::to_string(c));
}

bool match_system(std::string_view name, Node* n) {
  if (!system_exists(name)) return false;
  n->system = std::string(name);
  return true;
}

void list_systems(const Node&, std::vector<std::string>* out) {
  for (auto& s : events::Registry::get().systems()) out->push_back(std::move(s));
}

bool match_event(std::string_view name, Node* n) {
  if (!events::Registry::get().find(n->system, name)) return false;
  n->event = std::string(name);
  return true;
}

void list_events(const Node& n, std::vector<std::string>* out) {
  events::Registry::get().for_each([&](events::EventDesc& e) {
    if (n.system == e.system) out->emplace_back(e.name);
  });
}

constexpr DirSpec kDirs[] = {
    {"events", Dir::kRoot, Dir::kEvents, 0},
    // Listed only: resolve() takes instances/ before the walk, which
    // needs the instance to walk in.
    {"instances", Dir::kRoot, Dir::kInstances, kTopOnly},
    {"options", Dir::kRoot, Dir::kOptions, 0},
    {"per_cpu", Dir::kRoot, Dir::kPerCpu, 0},
    {"trace_stat", Dir::kRoot, Dir::kTraceStat, kTopOnly},
    {nullptr, Dir::kPerCpu, Dir::kCpu, 0, match_cpu, list_cpus},
    {nullptr, Dir::kEvents, Dir::kSystem, 0, match_system, list_systems},
    {nullptr, Dir::kSystem, Dir::kEvent, 0, match_event, list_events},
};

// Whether a file or directory with these flags shows where `n` is.
bool shows(uint8_t flags, const Node& n) {
  if ((flags & kTopOnly) && n.in_instances_dir) return false;
  if ((flags & kNoFtrace) && is_ftrace(n.system))
    return ((flags & kFtracePrint) && n.event == "print") ||
           ((flags & kFtraceFunction) && n.event == "function");
  return true;
}

const FileSpec* find_file(Dir d, std::string_view name, Node* n) {
  for (const std::span<const FileSpec>* group : kGroups) {
    for (const FileSpec& f : *group) {
      if (f.dir != d || !shows(f.flags, *n)) continue;
      if (f.name ? name == f.name : f.match(name, n)) return &f;
    }
  }
  return nullptr;
}

const DirSpec* find_dir(Dir d, std::string_view name, Node* n) {
  for (const DirSpec& s : kDirs) {
    if (s.parent != d || !shows(s.flags, *n)) continue;
    if (s.name ? name == s.name : s.match(name, n)) return &s;
  }
  return nullptr;
}

// Resolves the components from c[i] on, below an instance directory (*n
// holds the instance). Files come before directories in a directory: a
// system named "enable" would be hidden by events/enable, as an event named
// "filter" by events/SYS/filter.
int resolve_in_instance(const std::vector<std::string_view>& c, size_t i, Node* n) {
  Dir d = Dir::kRoot;
  for (; i < c.size(); ++i) {
    if (const FileSpec* f = find_file(d, c[i], n)) {
      // A file name followed by more components: not a directory.
      if (i + 1 < c.size()) return (f->flags & kNoSubpath) ? -ENOENT : -ENOTDIR;
      n->spec = f;
      n->dir = d;
      n->mode = f->mode;
      return 0;
    }
    const DirSpec* sub = find_dir(d, c[i], n);
    if (!sub) return -ENOENT;
    d = sub->self;
  }
  n->dir = d;
  n->mode = kDirMode;
  return 0;
}

}  // namespace

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
      n->dir = Dir::kInstances;
      n->mode = kDirMode;
      return 0;
    }
    Instance* inst = Instance::find_get(c[1]);
    if (!inst) return -ENOENT;
    n->inst = InstanceRef(inst);
    return resolve_in_instance(c, 2, n);
  }
  Instance* top = Instance::find_get("");
  if (!top) return -ENOSYS;
  n->inst = InstanceRef(top);
  return resolve_in_instance(c, 0, n);
}

void list_dir(const Node& n, std::vector<std::string>* out) {
  if (n.dir == Dir::kInstances) {
    *out = Instance::names();  // already sorted
    return;
  }
  for (const std::span<const FileSpec>* group : kGroups) {
    for (const FileSpec& f : *group) {
      if (f.dir != n.dir || !shows(f.flags, n)) continue;
      if (f.name)
        out->emplace_back(f.name);
      else
        f.names(n, out);
    }
  }
  for (const DirSpec& s : kDirs) {
    if (s.parent != n.dir || !shows(s.flags, n)) continue;
    if (s.name)
      out->emplace_back(s.name);
    else
      s.names(n, out);
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
    "Empty value",                                                            // kEmpty
    "Invalid number",                                                         // kNotNumber
    "Number out of range",                                                    // kNumberRange
    "Value must be 0 or 1",                                                   // kNotBool
    "Value must be between 0 and 100",                                        // kPercentRange
    "Buffer size must be greater than 0",                                     // kSizeZero
    "Buffer size too large",                                                  // kSizeTooLarge
    "Not enough memory",                                                      // kNoMemory
    "Unknown clock",                                                          // kUnknownClock
    "Unknown option",                                                         // kUnknownOption
    "Unknown tracer",                                                         // kUnknownTracer
    "No event matches",                                                       // kNoSuchEvent
    "Invalid pid",                                                            // kBadPid
    "Invalid CPU mask",                                                       // kBadCpumask
    "CPU mask has bits beyond the last CPU",                                  // kCpumaskOverflow
    "Markers are disabled (options/markers)",                                 // kMarkersOff
    "Raw marker needs a 4-byte id",                                           // kRawTooShort
    "Raw marker too large",                                                   // kRawTooLong
    "Value too long",                                                         // kTooLong
    "Snapshot is being read",                                                 // kSnapshotBusy
    "Only the whole snapshot can be freed",                                   // kSnapshotFreeCpu
    "Snapshot ring size must be between 1 and 16",                            // kSnapshotRing
    "Invalid path",                                                           // kBadPath
    "Cannot create the buffer file",                                          // kBufferFileOpen
    "Cannot allocate the buffer in the file",                                 // kBufferFileAlloc
    "Value must be 0, 1, 2 or all",                                           // kBadDumpMode
    "Cannot open the dump file",                                              // kDumpFileOpen
    "No traceable function matches",                                          // kNoFunction
    "Unknown function command",                                               // kFunctionCommand
    "Missing module name after :mod:",                                        // kBadModule
    "Invalid count",                                                          // kCommandCount
    "Function commands only work in set_ftrace_filter",                       // kCommandNotHere
    "Latency tracers need a TSC trace_clock (local, global, perf, x86-tsc)",  // kLatencyClock
    "A latency tracer uses the max buffer",                                   // kMaxBufferBusy
    "Period must be between 100 and 1000000 us",                              // kTimerlatPeriod
};
static_assert(sizeof(kErrTexts) / sizeof(kErrTexts[0]) == static_cast<size_t>(Err::kCount));
constexpr size_t kMaxLoggedCommand = 256;
}  // namespace

const char* err_text(Err e) { return kErrTexts[static_cast<size_t>(e)]; }

long fail(Instance& inst, std::string_view subsystem, Err e, std::string_view command, size_t pos,
          int errnum) {
  return fail_text(inst, subsystem, err_text(e), command, pos, errnum);
}

long fail_text(Instance& inst, std::string_view subsystem, std::string_view message, std::string_view command,
               size_t pos, int errnum) {
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
    if (ch >= '0' && ch <= '9')
      d = ch - '0';
    else if (ch >= 'a' && ch <= 'z')
      d = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'Z')
      d = ch - 'A' + 10;
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

long write_u64(Instance& inst, std::string_view subsystem, std::string_view s, uint64_t max, uint64_t* v) {
  size_t bad = 0;
  const int rc = parse_u64(strip(s), 10, v, &bad);
  if (rc < 0) return fail(inst, subsystem, rc == -ERANGE ? Err::kNumberRange : Err::kNotNumber, s, bad, -rc);
  if (*v > max) return fail(inst, subsystem, Err::kNumberRange, s, 0, EINVAL);
  return static_cast<long>(s.size());
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

using detail::Node;

int stat(std::string_view path, Stat* st) {
  Node n;
  if (int rc = detail::resolve(path, &n); rc < 0) return rc;
  st->is_dir = n.spec == nullptr;
  st->mode = n.mode;
  return 0;
}

int list(std::string_view dir, std::vector<std::string>* names) {
  Node n;
  if (int rc = detail::resolve(dir, &n); rc < 0) return rc;
  if (n.spec) return -ENOTDIR;
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
  if (!n.spec) return -EISDIR;
  const bool want_read = acc != O_WRONLY, want_write = acc != O_RDONLY;
  if ((want_read && !(n.mode & 0400)) || (want_write && !(n.mode & 0200))) return -EACCES;
  int err = 0;
  const detail::OpenFn open_file = n.spec->open;  // read before the node moves into it
  std::unique_ptr<File> f = open_file(std::move(n), flags, &err);
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
