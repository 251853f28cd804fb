// The files at the root of an instance directory (and options/NAME): the
// kernel's trace.c files, with its value rules and errnos. Their table,
// kInstanceFiles, is at the end.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "clock/trace_clock.h"
#include "crash/crash.h"
#include "function/control.h"
#include "latency/latency.h"
#include "output/trace_output.h"
#include "tracefs/internal.h"
#include "writers/writers.h"

namespace usrtrace::tracefs::detail {
namespace {

constexpr std::string_view kSub = "trace";  // error_log subsystem of these files

constexpr char kReadme[] =
    "tracing mini-HOWTO (usrtrace: ftrace's control files, in process):\n"
    "\n"
    "# echo 0 > tracing_on : quick way to disable tracing\n"
    "# echo 1 > tracing_on : quick way to re-enable tracing\n"
    "\n"
    " Important files:\n"
    "  trace\t\t\t- The static contents of the buffer\n"
    "\t\t\t  To clear the buffer write into this file: echo > trace\n"
    "  trace_pipe\t\t- A consuming read to see the contents of the buffer\n"
    "  current_tracer\t- function and latency tracers\n"
    "  available_tracers\t- list of configured tracers for current_tracer\n"
    "  error_log\t- error log for failed commands (that support it)\n"
    "  buffer_size_kb\t- view and modify size of per cpu buffer\n"
    "  buffer_total_size_kb  - view total size of all cpu buffers\n"
    "  buffer_percent\t- how full a buffer must be before a trace_pipe_raw reader wakes\n"
    "  free_buffer\t\t- shrinks the buffer to its minimum when closed\n"
    "  ftrace_dump_on_oops\t- on a fatal signal, dump the buffers: 0 off, 1 the top\n"
    "\t\t\t  instance, 2 its CPU of the crash, all every instance\n"
    "  ftrace_dump_on_oops_file - where the dump goes (opened now; empty: stderr)\n"
    "\n"
    "  trace_clock\t\t- change the clock used to order events\n"
    "       local:   Per cpu clock but may not be synced across CPUs\n"
    "      global:   Synced across CPUs but slows tracing down.\n"
    "     counter:   Not a clock, but just an increment\n"
    "      uptime:   Jiffy counter from time of boot\n"
    "        perf:   Same clock that perf events use\n"
    "        mono:   CLOCK_MONOTONIC\n"
    "    mono_raw:   CLOCK_MONOTONIC_RAW\n"
    "        boot:   CLOCK_BOOTTIME\n"
    "         tai:   CLOCK_TAI\n"
    "     x86-tsc:   TSC cycle counter\n"
    "\n"
    "  trace_marker\t\t- Writes into this file writes into the kernel buffer\n"
    "  trace_marker_raw\t\t- Writes into this file writes binary data into the kernel buffer\n"
    "  tracing_cpumask\t- Limit which CPUs to trace\n"
    "  trace_options\t\t- Set format or modify how tracing happens\n"
    "\t\t\t  Disable an option by prefixing 'no' to the\n"
    "\t\t\t  option name\n"
    "  saved_cmdlines\t- the names of the threads that wrote events\n"
    "  saved_tgids\t\t- the thread group (process) of each of them\n"
    "  instances\t\t- Make sub-buffers with: mkdir instances/foo\n"
    "\t\t\t  Remove sub-buffer with rmdir\n"
    "\n"
    "  available_events\t- list of all events\n"
    "  set_event\t\t- enables events by name written into it\n"
    "\t\t\t  Format: [!][<system>:]<event> ('!' disables, globs allowed)\n"
    "  events/\t\t- Directory containing all trace event subsystems:\n"
    "      enable\t\t- Write 0/1 to enable/disable tracing of all events\n"
    "  events/<system>/\t- Directory containing all trace events for <system>:\n"
    "      enable\t\t- Write 0/1 to enable/disable tracing of all <system>\n"
    "\t\t\t  events\n"
    "  events/<system>/<event>/\t- Directory containing control files for\n"
    "\t\t\t  <event>:\n"
    "      enable\t\t- Write 0/1 to enable/disable tracing of <event>\n"
    "      format\t\t- the event's record layout and print format\n"
    "      id\t\t- the event's id (common_type)\n"
    "      filter\t\t- If set, only events passing filter are traced\n"
    "      trigger\t\t- If set, a command to perform when event is hit\n"
    "\t\t\t  Format: <trigger>[:count][if <filter>]\n"
    "      hist\t\t- the histograms of the event's hist triggers\n"
    "  current_tracer\t- function, function_graph or nop\n"
    "  set_ftrace_filter\t- echo function name in here to only trace these\n"
    "\t\t\t  functions (globs; '!' removes; :mod:<object>)\n"
    "\t\t\t  Format: <function>:<trigger>[:count]\n"
    "\t\t\t  trigger: traceon, traceoff, snapshot, stacktrace,\n"
    "\t\t\t\t   enable_event:<system>:<event>,\n"
    "\t\t\t\t   disable_event:<system>:<event>, dump, cpudump\n"
    "  set_ftrace_notrace\t- echo function name in here to never trace it\n"
    "  set_graph_function\t- Trace the nested calls of a function (function_graph)\n"
    "  set_graph_notrace\t- Do not trace the nested calls of a function (function_graph)\n"
    "  set_ftrace_pid\t- Only trace these threads (function tracers)\n"
    "  max_graph_depth\t- Trace a limited depth of nested calls, 0 is unlimited\n"
    "  function_profile_enabled\t- 1 profiles the functions into trace_stat/function<cpu>\n"
    "  set_event_pid\t\t- Trace events only for the thread ids listed\n"
    "  set_event_notrace_pid\t- Do not trace events for the thread ids listed\n"
    "  per_cpu/cpuN/\t\t- trace, trace_pipe, trace_pipe_raw, stats, buffer_size_kb of CPU N\n";

std::string line(uint64_t v) { return std::to_string(v) + "\n"; }

// kstrtoul(…, 10) as the kernel's numeric files use it; logs and returns
// -errno on a bad value.
long parse_number(Instance& inst, std::string_view s, uint64_t* v) {
  size_t bad = 0;
  const int rc = parse_u64(s, 10, v, &bad);
  if (rc == -ERANGE) return fail(inst, kSub, Err::kNumberRange, s, bad, ERANGE);
  if (rc < 0) return fail(inst, kSub, s.empty() ? Err::kEmpty : Err::kNotNumber, s, bad, EINVAL);
  return 0;
}

long size_of(std::string_view s) { return static_cast<long>(s.size()); }

// What the kernel's si_mem_available() approximates: MemAvailable.
uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return pages > 0 && psz > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(psz) : 0;
}

// "[local] global counter ...\n", the kernel's tracing_clock_show.
std::string show_clock(Instance& inst) {
  std::string out;
  const clock::ClockId cur = inst.buffer().clock();
  bool first = true;
  for (const clock::ClockDesc& c : clock::all_clocks()) {
    if (!first) out += ' ';
    first = false;
    if (c.id == cur)
      out.append("[").append(c.name).append("]");
    else
      out += c.name;
  }
  return out + "\n";
}

long write_clock(Instance& inst, std::string_view s) {
  if (s.size() >= 64) return fail(inst, kSub, Err::kTooLong, s, 64, EINVAL);  // the kernel's buf[64]
  const std::string_view name = strip(s);
  auto id = clock::clock_from_name(name);
  if (!id)
    return fail(inst, kSub, Err::kUnknownClock, s, static_cast<size_t>(name.data() - s.data()), EINVAL);
  if (!clock::is_tsc(*id) && latency::uses_max_buffer(inst))
    return fail(inst, kSub, Err::kLatencyClock, s, static_cast<size_t>(name.data() - s.data()), EBUSY);
  inst.snapshots().set_clock(*id);  // resets the buffers, as the kernel does
  return size_of(s);
}

std::string show_options(Instance& inst) {
  std::string out;
  for (const int i : instance::listed_options()) {
    if (!inst.option(static_cast<instance::Option>(i))) out += "no";
    out.append(instance::option_info(i).name).append("\n");
  }
  return out;
}

long write_options(Instance& inst, std::string_view s) {
  if (s.size() >= 64) return fail(inst, kSub, Err::kTooLong, s, 64, EINVAL);
  std::string_view name = strip(s);
  const size_t pos = static_cast<size_t>(name.data() - s.data());
  bool on = true;
  if (name.substr(0, 2) == "no") {
    on = false;
    name.remove_prefix(2);
  }
  const int o = instance::option_by_name(name);
  if (o < 0) return fail(inst, kSub, Err::kUnknownOption, s, pos, EINVAL);
  inst.set_option(static_cast<instance::Option>(o), on);
  return size_of(s);
}

long write_bool_option(Instance& inst, int o, std::string_view s) {
  uint64_t v = 0;
  if (long rc = parse_number(inst, s, &v); rc < 0) return rc;
  if (v > 1) return fail(inst, kSub, Err::kNotBool, s, 0, EINVAL);
  inst.set_option(static_cast<instance::Option>(o), v == 1);
  return size_of(s);
}

long write_tracing_on(Instance& inst, std::string_view s) {
  uint64_t v = 0;
  if (long rc = parse_number(inst, s, &v); rc < 0) return rc;
  inst.set_tracing_on(v != 0);  // any nonzero value, as rb_simple_write
  return size_of(s);
}

long write_percent(Instance& inst, std::string_view s) {
  uint64_t v = 0;
  if (long rc = parse_number(inst, s, &v); rc < 0) return rc;
  if (v > 100) return fail(inst, kSub, Err::kPercentRange, s, 0, EINVAL);
  inst.set_buffer_percent(static_cast<int>(v));
  return size_of(s);
}

// buffer_file: a path makes the buffer file-backed there (crash-surviving);
// an empty line moves it back to memory.
long write_buffer_file(Instance& inst, std::string_view s) {
  std::string_view path = s;
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ' || path.back() == '\t'))
    path.remove_suffix(1);
  if (path.size() >= 4096) return fail(inst, kSub, Err::kTooLong, s, 0, ENAMETOOLONG);
  for (size_t i = 0; i < path.size(); ++i)
    if (static_cast<unsigned char>(path[i]) < 0x20) return fail(inst, kSub, Err::kBadPath, s, i, EINVAL);
  std::string why;
  // The open file of this write holds one reference.
  const int rc = inst.set_buffer_file(std::string(path), 1, &why);
  if (rc < 0) {
    // The reason in words (in use, holds a trace, a FIFO, another user's
    // link) after the table's text: the errno alone does not say it.
    const bool open = why.rfind("cannot create ", 0) == 0;
    const std::string reason = open ? why.substr(14) : why;
    return fail_text(inst, kSub,
                     std::string(err_text(open ? Err::kBufferFileOpen : Err::kBufferFileAlloc)) +
                         (reason.empty() ? "" : ": " + reason),
                     s, 0, -rc);
  }
  return size_of(s);
}

long write_tracer(Instance& inst, std::string_view s) {
  const std::string_view name = strip(s.substr(0, 100));  // MAX_TRACER_SIZE
  const size_t at = static_cast<size_t>(name.data() - s.data());
  if (latency::is_tracer(name)) {
    std::string why;
    if (int rc = latency::set_tracer(inst, name, &why); rc < 0) return fail_text(inst, kSub, why, s, at, -rc);
    return size_of(s);
  }
  if (!function::is_tracer(name)) return fail(inst, kSub, Err::kUnknownTracer, s, at, EINVAL);
  latency::clear_tracer(inst);
  function::set_tracer(inst, name);
  return size_of(s);
}

std::string current_tracer(const Instance& inst) {
  std::string name = latency::tracer_name(inst);
  return name.empty() ? function::tracer_name(inst) : name;
}

// tracing_cpumask: "%*pb" of nr_cpus bits, 32-bit chunks from the top,
// the first one only as wide as its bits need.
std::string show_cpumask(Instance& inst) {
  const int nbits = inst.buffer().nr_cpus();
  const std::vector<uint64_t> words = inst.cpumask();
  std::string out;
  int chunk_bits = nbits % 32 ? nbits % 32 : 32;
  for (int lo = (nbits + 31) / 32 * 32 - 32; lo >= 0; lo -= 32) {
    const auto w = static_cast<size_t>(lo / 64);
    uint64_t val = w < words.size() ? words[w] >> (lo % 64) : 0;
    val &= chunk_bits == 32 ? 0xffffffffu : (uint64_t{1} << chunk_bits) - 1;
    char buf[16];
    snprintf(buf, sizeof buf, "%0*" PRIx64, (chunk_bits + 3) / 4, val);
    if (!out.empty()) out += ',';
    out += buf;
    chunk_bits = 32;
  }
  return out + "\n";
}

// bitmap_parse: comma-separated chunks of at most 8 hex digits, the last
// chunk being bits 0..31. -EINVAL for a bad digit, -EOVERFLOW for a chunk
// too wide or a bit past the last CPU, as the kernel.
// Example, 40 CPUs, "f0,00000003\n":
//   1. strip: "f0,00000003"
//   2. last chunk "00000003" -> chunk 0: CPUs 0 and 1
//   3. previous chunk "f0"   -> chunk 1: CPUs 36..39 (all below 40: fine)
//   4. no chunk left: install {0, 1, 36, 37, 38, 39}
long write_cpumask(Instance& inst, std::string_view s) {
  const std::string_view body = strip(s);
  const auto at = [&](std::string_view p) { return static_cast<size_t>(p.data() - s.data()); };
  if (body.empty()) return fail(inst, kSub, Err::kEmpty, s, 0, EINVAL);
  const int nbits = inst.buffer().nr_cpus();
  std::vector<uint64_t> words(static_cast<size_t>(nbits + 63) / 64, 0);
  size_t end = body.size();
  uint64_t chunk = 0;
  for (;;) {
    const size_t comma = body.rfind(',', end == 0 ? 0 : end - 1);
    const size_t b = (comma == std::string_view::npos || comma >= end) ? 0 : comma + 1;
    const std::string_view part = body.substr(b, end - b);
    if (part.empty()) return fail(inst, kSub, Err::kBadCpumask, s, at(body.substr(b)), EINVAL);
    uint64_t v = 0;
    for (size_t i = 0; i < part.size(); ++i) {
      const int d = std::isxdigit(static_cast<unsigned char>(part[i]))
                        ? (part[i] <= '9' ? part[i] - '0' : (part[i] | 0x20) - 'a' + 10)
                        : -1;
      if (d < 0) return fail(inst, kSub, Err::kBadCpumask, s, at(part) + i, EINVAL);
      v = (v << 4 | static_cast<uint64_t>(d)) & uint64_t{0xfffffffff};  // 9 digits are enough to know
    }
    if (part.size() > 8) return fail(inst, kSub, Err::kCpumaskOverflow, s, at(part), EOVERFLOW);
    for (int bit = 0; bit < 32; ++bit) {
      if (!(v >> bit & 1)) continue;
      const uint64_t cpu = chunk * 32 + static_cast<uint64_t>(bit);
      if (cpu >= static_cast<uint64_t>(nbits))
        return fail(inst, kSub, Err::kCpumaskOverflow, s, at(part), EOVERFLOW);
      words[cpu / 64] |= uint64_t{1} << (cpu % 64);
    }
    ++chunk;
    if (b == 0) break;
    end = b - 1;
  }
  inst.set_cpumask(words);
  return size_of(s);
}

long write_marker(Instance& inst, std::string_view s, bool raw) {
  long rc = raw ? inst.write_marker_raw(s) : inst.write_marker(s);
  if (rc >= 0) return rc;
  // Tracing off: EBADF and no error_log line, as the kernel's (a program
  // that writes markers in a loop must not flood the log).
  if (rc == -EBADF) return rc;
  const int e = static_cast<int>(-rc);
  if (!inst.option(instance::kOptMarkers)) return fail(inst, kSub, Err::kMarkersOff, s, 0, e);
  return fail(inst, kSub, s.size() < 4 ? Err::kRawTooShort : Err::kRawTooLong, s, 0, e);
}

// ftrace_dump_on_oops: "0", "1", "2" or "all" (src/crash/crash.h).
long write_dump_on_oops(Instance& inst, std::string_view s) {
  const std::string_view v = strip(s);
  const size_t at = static_cast<size_t>(v.data() - s.data());
  crash::DumpMode m;
  size_t bad = 0;
  if (!crash::parse_mode(v, &m, &bad)) return fail(inst, kSub, Err::kBadDumpMode, s, at + bad, EINVAL);
  if (crash::set_mode(m) != 0) return fail(inst, kSub, Err::kNoMemory, s, at, ENOMEM);
  return size_of(s);
}

// ftrace_dump_on_oops_file: a path, opened now; empty: stderr.
long write_dump_file(Instance& inst, std::string_view s) {
  if (s.size() >= PATH_MAX) return fail(inst, kSub, Err::kTooLong, s, PATH_MAX, EINVAL);
  const std::string_view v = strip(s);
  const size_t at = static_cast<size_t>(v.data() - s.data());
  if (const size_t nul = v.find('\0'); nul != std::string_view::npos)
    return fail(inst, kSub, Err::kDumpFileOpen, s, at + nul, EINVAL);
  std::string why;
  if (int err = crash::set_file(v, &why); err != 0)
    return fail_text(inst, kSub, std::string(err_text(Err::kDumpFileOpen)) + (why.empty() ? "" : ": " + why),
                     s, at, -err);
  return size_of(s);
}

std::string show_saved(bool tgids) {
  std::string out;
  char buf[64];
  for (const auto& c : writers::saved_cmdlines()) {
    if (tgids)
      snprintf(buf, sizeof buf, "%d %d\n", c.tid, static_cast<int>(getpid()));
    else
      snprintf(buf, sizeof buf, "%d %s\n", c.tid, c.comm.c_str());
    out += buf;
  }
  return out;
}

// trace_pipe and per_cpu/cpuN/trace_pipe: consuming reads of the text,
// waiting for data unless O_NONBLOCK. What does not fit the caller's buffer
// is kept for the next read, as the kernel's iter->seq.
class TracePipe : public File {
 public:
  TracePipe(InstanceRef inst, int cpu, bool nonblock)
      : inst_(std::move(inst)), cpu_(cpu), nonblock_(nonblock) {}
  long read(char* buf, size_t size) override {
    if (size == 0) return 0;
    while (off_ == pending_.size()) {
      pending_.clear();
      off_ = 0;
      output::read_pipe(*inst_, cpu_, std::max<size_t>(size, 4096), &pending_);
      if (!pending_.empty()) break;
      if (nonblock_) return -EAGAIN;
      if (!inst_->buffer().wait(cpu_, 0)) return -EINTR;  // woken without data
    }
    const size_t n = std::min(size, pending_.size() - off_);
    std::memcpy(buf, pending_.data() + off_, n);
    off_ += n;
    return static_cast<long>(n);
  }
  long write(const char*, size_t) override { return -EINVAL; }

 private:
  InstanceRef inst_;
  int cpu_;
  bool nonblock_;
  std::string pending_;
  size_t off_ = 0;
};

}  // namespace

std::unique_ptr<File> make_trace_pipe(InstanceRef inst, int cpu, bool nonblock) {
  return std::make_unique<TracePipe>(std::move(inst), cpu, nonblock);
}

base::Mutex& size_mu() {
  static base::Mutex* mu = new base::Mutex();
  return *mu;
}

std::string show_buffer_size(Instance& inst, int cpu) {
  base::MutexLock l(&size_mu());
  rb::RingBuffer& rb = inst.buffer();
  if (cpu >= 0) return line(rb.size_bytes(cpu) >> 10);
  for (int c = 1; c < rb.nr_cpus(); ++c)
    if (rb.size_bytes(c) != rb.size_bytes(0)) return "X\n";  // per-CPU sizes differ
  return line(rb.size_bytes(0) >> 10);
}

long write_buffer_size(Instance& inst, int cpu, std::string_view s) {
  uint64_t kb = 0;
  if (long rc = parse_number(inst, s, &kb); rc < 0) return rc;
  if (kb == 0) return fail(inst, kSub, Err::kSizeZero, s, 0, EINVAL);
  rb::RingBuffer& rb = inst.buffer();
  const uint64_t ncpus = cpu < 0 ? static_cast<uint64_t>(rb.nr_cpus()) : 1;
  // The kernel refuses what memory cannot hold (si_mem_available): ENOMEM,
  // before it would try. This also keeps kb << 10 from overflowing.
  if (kb > mem_available() / 1024 / ncpus) return fail(inst, kSub, Err::kSizeTooLarge, s, 0, ENOMEM);
  base::MutexLock l(&size_mu());
  if (int rc = inst.snapshots().resize(cpu, kb << 10); rc < 0)
    return fail(inst, kSub, rc == -ENOMEM ? Err::kNoMemory : Err::kSizeTooLarge, s, 0, -rc);
  return size_of(s);
}

namespace {

// The open functions, one per file; `ip` stays valid as long as the file,
// which holds the node's reference on it.

std::unique_ptr<File> open_readme(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return std::string(kReadme); };
  return f;
}

std::unique_ptr<File> open_available_tracers(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] {
    std::string out;
    // The kernel's order: timerlat, function_graph, the wakeup tracers,
    // the irqsoff family, function, nop.
    std::vector<std::string> names = latency::tracer_names();
    const std::vector<std::string>& fn = function::tracer_names();
    names.insert(names.begin() + 1, fn[0]);
    names.insert(names.end(), fn.begin() + 1, fn.end());
    for (const std::string& t : names) out += (out.empty() ? "" : " ") + t;
    return out + "\n";
  };
  return f;
}

std::unique_ptr<File> open_current_tracer(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return current_tracer(*ip) + "\n"; };
  f->store = [ip](std::string_view s) { return write_tracer(*ip, s); };
  return f;
}

std::unique_ptr<File> open_buffer_file(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] {
    std::string p = ip->buffer_file();
    return p + "\n";
  };
  f->store = [ip](std::string_view s) { return write_buffer_file(*ip, s); };
  return f;
}

std::unique_ptr<File> open_buffer_percent(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return line(static_cast<uint64_t>(ip->buffer_percent())); };
  f->store = [ip](std::string_view s) { return write_percent(*ip, s); };
  return f;
}

std::unique_ptr<File> open_buffer_size_kb(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return show_buffer_size(*ip, -1); };
  f->store = [ip](std::string_view s) { return write_buffer_size(*ip, -1, s); };
  return f;
}

std::unique_ptr<File> open_buffer_total_size_kb(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] {
    base::MutexLock l(&size_mu());
    uint64_t kb = 0;
    for (int c = 0; c < ip->buffer().nr_cpus(); ++c) kb += ip->buffer().size_bytes(c) >> 10;
    return line(kb);
  };
  return f;
}

std::unique_ptr<File> open_error_log(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  if ((flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC)) ip->clear_error_log();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return ip->error_log(); };
  f->store = [](std::string_view s) { return size_of(s); };
  return f;
}

std::unique_ptr<File> open_free_buffer(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->store = [](std::string_view s) { return size_of(s); };  // what is written does not matter
  f->on_close = [ip] {
    if (ip->option(instance::kOptDisableOnFree)) ip->set_tracing_on(false);
    base::MutexLock l(&size_mu());
    ip->snapshots().resize(-1, 1);  // the smallest buffer the ring allows
  };
  return f;
}

std::unique_ptr<File> open_saved_cmdlines(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return show_saved(false); };
  return f;
}

std::unique_ptr<File> open_saved_tgids(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return show_saved(true); };
  return f;
}

std::unique_ptr<File> open_dump_on_oops(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return std::string(crash::mode_name(crash::mode())) + "\n"; };
  f->store = [ip](std::string_view s) { return write_dump_on_oops(*ip, s); };
  return f;
}

std::unique_ptr<File> open_dump_on_oops_file(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return crash::file() + "\n"; };
  f->store = [ip](std::string_view s) { return write_dump_file(*ip, s); };
  return f;
}

std::unique_ptr<File> open_trace(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  if ((flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC)) {
    // While a latency tracer runs `trace` is its max trace (the kernel
    // empties the max buffer then).
    if (latency::uses_max_buffer(*ip))
      ip->snapshots().clear(-1);
    else
      ip->buffer().reset();
  }
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  // Made as it is read (output::TraceText), from the first read on.
  f->stream = [ip, t = std::shared_ptr<output::TraceText>()](std::string* out, size_t want) mutable {
    if (!t) t = output::TraceText::live(*ip, -1);
    return t->fill(out, want);
  };
  f->store = [](std::string_view s) { return size_of(s); };  // the kernel ignores it too
  return f;
}

std::unique_ptr<File> open_trace_clock(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return show_clock(*ip); };
  f->store = [ip](std::string_view s) { return write_clock(*ip, s); };
  return f;
}

std::unique_ptr<File> open_trace_marker(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->store = [ip](std::string_view s) { return write_marker(*ip, s, false); };
  return f;
}

std::unique_ptr<File> open_trace_marker_raw(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->store = [ip](std::string_view s) { return write_marker(*ip, s, true); };
  return f;
}

std::unique_ptr<File> open_trace_options(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return show_options(*ip); };
  f->store = [ip](std::string_view s) { return write_options(*ip, s); };
  return f;
}

std::unique_ptr<File> open_trace_pipe(Node n, int flags, int*) {
  return make_trace_pipe(std::move(n.inst), -1, (flags & O_NONBLOCK) != 0);
}

std::unique_ptr<File> open_tracing_cpumask(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return show_cpumask(*ip); };
  f->store = [ip](std::string_view s) { return write_cpumask(*ip, s); };
  return f;
}

std::unique_ptr<File> open_tracing_on(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::string(ip->tracing_on() ? "1\n" : "0\n"); };
  f->store = [ip](std::string_view s) { return write_tracing_on(*ip, s); };
  return f;
}

// options/NAME: one file per instance option.
bool match_option(std::string_view name, Node* n) {
  const int o = instance::option_by_name(name);
  if (o < 0) return false;
  n->option = o;
  return true;
}

void list_options(const Node&, std::vector<std::string>* out) {
  for (const int o : instance::listed_options()) out->emplace_back(instance::option_info(o).name);
}

std::unique_ptr<File> open_option(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const int o = n.option;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, o] { return std::string(ip->option(static_cast<instance::Option>(o)) ? "1\n" : "0\n"); };
  f->store = [ip, o](std::string_view s) { return write_bool_option(*ip, o, s); };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"README", kRO, Dir::kRoot, kTopOnly, open_readme},
    {"available_tracers", kRO, Dir::kRoot, 0, open_available_tracers},
    {"buffer_file", kRW, Dir::kRoot, 0, open_buffer_file},
    {"buffer_percent", kRW, Dir::kRoot, 0, open_buffer_percent},
    {"buffer_size_kb", kRW, Dir::kRoot, 0, open_buffer_size_kb},
    {"buffer_total_size_kb", kRO, Dir::kRoot, 0, open_buffer_total_size_kb},
    {"current_tracer", kRW, Dir::kRoot, 0, open_current_tracer},
    {"error_log", kRW, Dir::kRoot, 0, open_error_log},
    {"free_buffer", 0200, Dir::kRoot, 0, open_free_buffer},
    {"ftrace_dump_on_oops", kRW, Dir::kRoot, kTopOnly, open_dump_on_oops},
    {"ftrace_dump_on_oops_file", kRW, Dir::kRoot, kTopOnly, open_dump_on_oops_file},
    {"saved_cmdlines", kRO, Dir::kRoot, kTopOnly, open_saved_cmdlines},
    {"saved_tgids", kRO, Dir::kRoot, kTopOnly, open_saved_tgids},
    {"trace", kRW, Dir::kRoot, 0, open_trace},
    {"trace_clock", kRW, Dir::kRoot, 0, open_trace_clock},
    {"trace_marker", 0220, Dir::kRoot, 0, open_trace_marker},
    {"trace_marker_raw", 0220, Dir::kRoot, 0, open_trace_marker_raw},
    {"trace_options", kRW, Dir::kRoot, 0, open_trace_options},
    {"trace_pipe", kRO, Dir::kRoot, 0, open_trace_pipe},
    {"tracing_cpumask", kRW, Dir::kRoot, 0, open_tracing_cpumask},
    {"tracing_on", kRW, Dir::kRoot, 0, open_tracing_on},
    {nullptr, kRW, Dir::kOptions, 0, open_option, match_option, list_options},
};

}  // namespace

constinit const std::span<const FileSpec> kInstanceFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
