// The recorder behind usrtrace::TraceRecorder and extract_trace().
//
// Data path: RingBuffer::read_page() (what trace_pipe_raw hands out) into
// a page-sized buffer, appended to one temporary file per (instance, CPU).
// No event is looked at. A thread per instance sleeps in RingBuffer::wait()
// until some CPU reaches the watermark (buffer_percent), then takes every
// full page; stop() takes the partly filled ones too. The metadata (event
// formats, symbols, thread names, stats) is read at stop(), through the
// control files, so that events registered and threads named during the
// run are in the file.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/files.h"
#include "base/sys.h"
#include "clock/trace_clock.h"
#include "function/function.h"
#include "instance/instance.h"
#include "record/journal.h"
#include "record/recorder.h"
#include "record/remote_recorder.h"
#include "ring_buffer/page_format.h"
#include "symbols/symbols.h"
#include "tracedat/writer.h"
#include "tracefs/tracefs.h"
#include "usrtrace/tracedat.h"

namespace usrtrace {
namespace tracedat {
namespace {

__extension__ typedef unsigned __int128 u128;

using instance::Instance;

// Stop requests are seen within this time by a recorder thread waiting for
// data that does not come.
constexpr int kWaitSliceMs = 50;
// Pages are batched in memory before a write() to the temporary file.
constexpr size_t kBatchBytes = 1024 * 1024;

std::string prefix_of(const std::string& inst) { return inst.empty() ? "" : "instances/" + inst + "/"; }

std::string read_text(const std::string& path) {
  std::string s;
  if (tracefs::read_file(path, &s) < 0) s.clear();
  return s;
}

// A /proc file (st_size 0: read to its end). "" when it cannot be read.
std::string read_proc(const char* path) {
  std::string out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// This process as trace-cmd's PROCMAPS option has it (record --proc-map):
// "PID NR COMM" and each mapped file's lowest start and highest end.
std::string procmaps_text() {
  const std::string maps = read_proc("/proc/self/maps");
  std::string comm = read_proc("/proc/self/comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> objs;  // in map order
  size_t at = 0;
  while (at < maps.size()) {
    size_t nl = maps.find('\n', at);
    if (nl == std::string::npos) nl = maps.size();
    const std::string line = maps.substr(at, nl - at);
    at = nl + 1;
    // "start-end perms offset dev inode   path"
    unsigned long long start = 0, end = 0;
    int path_at = 0;
    if (sscanf(line.c_str(), "%llx-%llx %*s %*s %*s %*s %n", &start, &end, &path_at) < 2 || path_at <= 0)
      continue;
    const std::string path = line.substr(static_cast<size_t>(path_at));
    // [heap], [stack], anonymous memory and our own buffers (memfd:) are
    // not objects a frame can be in.
    if (path.empty() || path[0] != '/' || path.rfind("/memfd:", 0) == 0) continue;
    if (!objs.empty() && objs.back().first == path) {
      objs.back().second.second = std::max<uint64_t>(objs.back().second.second, end);
      continue;
    }
    objs.push_back({path, {start, end}});
  }
  char head[64];
  snprintf(head, sizeof head, "%x %zx ", static_cast<unsigned>(getpid()), objs.size());
  std::string out = head + comm + "\n";
  for (const auto& [path, range] : objs) {
    char b[48];
    snprintf(b, sizeof b, "%" PRIx64 " %" PRIx64 " ", range.first, range.second);
    out += b + path + "\n";
  }
  return out;
}

}  // namespace

Metadata collect_metadata(const std::vector<std::string>& instances) {
  Metadata m;
  Instance* top = Instance::top();
  m.nr_cpus = top ? top->buffer().nr_cpus() : 1;
  m.page_size = top ? top->buffer().page_size(0) : 4096;
  m.header_page = read_text("events/header_page");
  m.header_event = read_text("events/header_event");
  std::vector<std::string> systems;
  tracefs::list("events", &systems);
  for (const std::string& sys : systems) {
    tracefs::Stat st;
    if (tracefs::stat("events/" + sys, &st) < 0 || !st.is_dir) continue;
    std::vector<std::string> names, formats;
    tracefs::list("events/" + sys, &names);
    for (const std::string& ev : names) {
      std::string f;
      if (tracefs::read_file("events/" + sys + "/" + ev + "/format", &f) > 0) formats.push_back(std::move(f));
    }
    if (sys == "ftrace")
      m.ftrace_formats = std::move(formats);
    else if (!formats.empty())
      m.systems.emplace_back(sys, std::move(formats));
  }
  m.kallsyms = symbols::kallsyms_text(symbols::load_process_symbols());
  m.cmdlines = read_text("saved_cmdlines");
  m.trace_clock = read_text(prefix_of(instances.empty() ? "" : instances[0]) + "trace_clock");
  struct utsname u;
  if (uname(&u) == 0) m.uname = std::string(u.sysname) + " " + u.nodename + " " + u.release + " " + u.machine;
  m.version = "usrtrace " USRTRACE_VERSION_STRING;
  m.procmaps.push_back(procmaps_text());
  // The TSC clocks' pages hold raw TSC counts: the file carries the
  // calibration that turns them into the ns the trace file prints.
  Instance* first = Instance::find(instances.empty() ? "" : instances[0]);
  if (first) m.tsc2nsec = tsc2nsec_for(first->buffer().clock());
  return m;
}

int collect_instance_meta(const std::vector<std::string>& instances, control::RemoteMeta* out) {
  std::vector<std::string> names = instances;
  if (names.empty()) names.push_back("");
  for (const std::string& n : names) {
    Instance* inst = Instance::find_get(n);
    if (!inst) return -ENOENT;
    control::InstanceMeta im;
    im.name = n;
    im.clock = clock_name(read_text(prefix_of(n) + "trace_clock"));
    im.page_size = inst->buffer().page_size(0);
    im.nr_cpus = inst->buffer().nr_cpus();
    for (int cpu = 0; cpu < im.nr_cpus; ++cpu)
      im.capacity += uint64_t{inst->buffer().nr_pages(cpu)} * im.page_size;
    for (int cpu = 0; cpu < im.nr_cpus; ++cpu)
      im.stats.push_back(read_text(prefix_of(n) + "per_cpu/cpu" + std::to_string(cpu) + "/stats"));
    inst->put_reader();
    out->instances.push_back(std::move(im));
  }
  out->meta = collect_metadata(names);
  return 0;
}

Metadata::Tsc2Nsec tsc2nsec_for(clock::ClockId id) {
  Metadata::Tsc2Nsec t;
  const clock::ClockDesc& d = clock::describe(id);
  if (!d.tsc || !d.in_ns) return t;
  return tsc2nsec_from(clock::tsc_calibration());
}

Metadata::Tsc2Nsec tsc2nsec_from(const clock::TscCalibration& c) {
  Metadata::Tsc2Nsec t;
  // The option's mult is a u32 in the file, but trace-cmd keeps it in an
  // int (trace-input.c: struct tsc2nsec) and widens it with sign extension
  // before multiplying: a mult of 2^31 or more (a TSC slower than 2 GHz at
  // shift 32) turns every time stamp into garbage there. So it stays below
  // 2^31; a shift of 31 instead of 32 rounds to within one cycle's ns in
  // 2^31 cycles (0.5 us per 1000 s at 2 GHz) instead of 2^32.
  uint64_t mult = c.mult;
  uint32_t shift = 32;
  while (mult > INT32_MAX && shift > 0) {
    mult >>= 1;
    --shift;
  }
  if (mult == 0 || mult > INT32_MAX) return t;
  t.mult = static_cast<uint32_t>(mult);
  t.shift = shift;
  // ns = ns0 + (tsc - tsc0) * mult >> shift = (tsc * mult >> shift) + offset
  const uint64_t at_tsc0 = static_cast<uint64_t>((static_cast<u128>(c.tsc0) * mult) >> shift);
  t.offset = static_cast<int64_t>(c.ns0) - static_cast<int64_t>(at_tsc0);
  return t;
}

Metadata::Tsc2Nsec tsc2nsec_between(const clock::TscSample& a, const clock::TscSample& b) {
  if (b.ns < a.ns + kMinRefineNs || b.tsc <= a.tsc) return {};
  const auto mult = static_cast<uint64_t>((static_cast<u128>(b.ns - a.ns) << 32) / (b.tsc - a.tsc));
  return tsc2nsec_from(clock::TscCalibration{a.tsc, a.ns, mult});
}

std::string clock_name(const std::string& trace_clock_text) {
  const size_t a = trace_clock_text.find('['), b = trace_clock_text.find(']');
  if (a == std::string::npos || b == std::string::npos || b < a) return "local";
  return trace_clock_text.substr(a + 1, b - a - 1);
}

bool take_page(rb::RingBuffer& rb, int cpu, uint8_t* page, uint32_t page_size, bool full_only,
               uint64_t* missed) {
  *missed = 0;
  const uint32_t len = rb.read_page(cpu, page, page_size, full_only);
  if (len == 0) return false;
  settle_page(page, page_size, len, missed);
  return true;
}

void settle_page(uint8_t* page, uint32_t page_size, uint32_t len, uint64_t* missed) {
  *missed = 0;
  uint64_t commit;
  std::memcpy(&commit, page + 8, 8);
  // What read_page did not write is stale bytes of the caller's buffer:
  // zero it (readers ignore it, but a file should not carry stale data).
  const uint32_t end = rb::kPageHeaderSize + len + ((commit & rb::kMissedStored) ? 8 : 0);
  if (end < page_size) std::memset(page + end, 0, page_size - end);
  if ((commit & rb::kMissedStored) && end <= page_size)
    std::memcpy(missed, page + rb::kPageHeaderSize + len, 8);
}

namespace {

// "name: NAME" of a format file's text.
std::string_view format_name(std::string_view fmt) {
  const size_t at = fmt.find("name: ");
  if (at == std::string_view::npos) return {};
  const size_t end = fmt.find('\n', at);
  return fmt.substr(at + 6, end == std::string_view::npos ? std::string_view::npos : end - at - 6);
}

}  // namespace

void keep_departed(const Metadata& before, Metadata* now) {
  // Linear in both: hash sets, never a search of one text per line of the
  // other (150k saved_cmdlines lines from a traced process cost a root
  // recorder 40 s that way). And bounded: what is kept beyond `now` stops
  // at kMaxDepartedFormats formats and kMaxCmdlines lines in all, so that a
  // process that keeps naming new threads or events cannot grow the
  // metadata (and each journaled copy of it) without end.
  std::unordered_map<std::string_view, size_t> system_at;
  size_t formats = 0;
  for (size_t i = 0; i < now->systems.size(); ++i) {
    system_at.emplace(now->systems[i].first, i);
    formats += now->systems[i].second.size();
  }
  // The departed systems are added after the loop: `now->systems` must not
  // move while system_at holds views of its names.
  std::vector<std::pair<std::string, std::vector<std::string>>> gone_systems;
  for (const auto& system : before.systems) {
    auto it = system_at.find(system.first);
    if (it == system_at.end()) {
      if (formats + system.second.size() > kMaxDepartedFormats) continue;
      formats += system.second.size();
      gone_systems.push_back(system);
      continue;
    }
    std::vector<std::string>& have = now->systems[it->second].second;
    std::unordered_set<std::string_view> names;
    names.reserve(have.size());
    for (const std::string& g : have) names.insert(format_name(g));
    std::vector<std::string> gone;
    for (const std::string& f : system.second)
      if (!names.count(format_name(f)) && formats < kMaxDepartedFormats) {
        gone.push_back(f);
        ++formats;
      }
    for (std::string& f : gone) have.push_back(std::move(f));
  }
  for (auto& g : gone_systems) now->systems.push_back(std::move(g));

  // saved_cmdlines: "PID COMM" lines; a pid missing now keeps its old name.
  std::unordered_set<std::string_view> pids;
  size_t lines = 0;
  for (size_t at = 0; at < now->cmdlines.size();) {
    size_t nl = now->cmdlines.find('\n', at);
    if (nl == std::string::npos) nl = now->cmdlines.size();
    const std::string_view line(now->cmdlines.data() + at, nl - at);
    if (const size_t sp = line.find(' '); sp != std::string_view::npos) pids.insert(line.substr(0, sp));
    ++lines;
    at = nl + 1;
  }
  std::string extra;
  for (size_t at = 0; at < before.cmdlines.size() && lines < kMaxCmdlines;) {
    size_t nl = before.cmdlines.find('\n', at);
    if (nl == std::string::npos) nl = before.cmdlines.size();
    const std::string_view line(before.cmdlines.data() + at, nl - at);
    at = nl + 1;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || !pids.insert(line.substr(0, sp)).second) continue;
    extra.append(line);
    extra += '\n';
    ++lines;
  }
  pids.clear();  // views into now->cmdlines, which grows below
  if (!extra.empty()) {
    if (!now->cmdlines.empty() && now->cmdlines.back() != '\n') now->cmdlines += '\n';
    now->cmdlines += extra;
  }
}

int check_options(const RecordOptions& o, std::string* dir, std::string* err) {
  if (o.file_version != 6 && o.file_version != 7) {
    *err = "file version must be 6 or 7";
    return -EINVAL;
  }
  if (o.compress && o.file_version != 7) {
    *err = "compression needs file version 7";
    return -EINVAL;
  }
  if (o.buffer_percent > 100) {
    *err = "buffer percent must be 0..100";
    return -EINVAL;
  }
  if (o.pid < 0) {
    *err = "bad pid " + std::to_string(o.pid);
    return -EINVAL;
  }
  const size_t slash = o.output.rfind('/');
  *dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : o.output.substr(0, slash));
  // What would fail at the end fails now, before the program runs: the
  // output is written beside itself and renamed over (write_output).
  if (o.output.empty() || o.output.back() == '/') {
    *err = "no output file name";
    return -EINVAL;
  }
  struct stat st;
  if (::stat(dir->c_str(), &st) != 0) {
    const int e = errno;
    *err = *dir + ": " + std::strerror(e);
    return -e;
  }
  if (!S_ISDIR(st.st_mode)) {
    *err = *dir + ": " + std::strerror(ENOTDIR);
    return -ENOTDIR;
  }
  if (::access(dir->c_str(), W_OK | X_OK) != 0) {
    const int e = errno;
    *err = *dir + ": cannot create files there: " + std::strerror(e);
    return -e;
  }
  if (::stat(o.output.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    *err = o.output + ": " + base::file_type_name(st.st_mode) + ", not a regular file";
    return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
  }
  const std::vector<std::string>& in = o.instances;
  for (size_t i = 0; i < in.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (in[i] == in[j]) {
        *err = "instance '" + in[i] + "' given twice";
        return -EINVAL;
      }
  return 0;
}

int write_output(const RecordOptions& opts, Metadata meta, std::vector<BufferData> buffers, std::string* err,
                 const InPlaceFile* in_place) {
  std::vector<BufferData> ordered;
  for (auto& b : buffers)
    if (b.name.empty()) ordered.push_back(std::move(b));
  if (ordered.empty()) {  // trace-cmd's layout: the top buffer is always there, here empty
    BufferData b;
    b.clock = clock_name(meta.trace_clock);
    b.page_size = meta.page_size;
    ordered.push_back(b);
    if (!buffers.empty()) meta.page_size = buffers[0].page_size;
  }
  for (auto& b : buffers)
    if (!b.name.empty()) ordered.push_back(std::move(b));
  WriteOptions wo;
  wo.version = opts.file_version;
  wo.compression = opts.compress ? Compression::kZstd : Compression::kNone;
  if (in_place) {
    // The file is ours (a page file, journal.h) and renamed only once
    // complete: the same whole-or-nothing as replace_file's.
    wo.append_at = in_place->append_at;
    if (::lseek(in_place->fd, 0, SEEK_SET) != 0) {
      const int e = errno;
      *err = in_place->path + ": " + std::strerror(e);
      return -e;
    }
    if (int rc = write_file(in_place->fd, meta, ordered, wo, err); rc < 0) return rc;
    return base::install_file(in_place->path, opts.output, err);
  }
  // Written whole or not at all (base::replace_file): a full disk or a
  // death half-way leaves the previous file as it was (trace-cmd truncates
  // it first).
  return base::replace_file(
      opts.output, [&](int fd, std::string* e) { return write_file(fd, meta, ordered, wo, e); }, err);
}

// One instance being recorded.
struct Source {
  std::string name;
  JournalWriter* journal = nullptr;  // the recording's, which outlives its sources
  uint32_t stream = 0;
  Instance* inst = nullptr;  // holds a reader reference (get_reader)
  rb::RingBuffer* rb = nullptr;
  uint32_t page_size = 0;
  int percent = 50;
  std::vector<std::string> batch;  // per CPU
  std::thread thread;
  // Read by stats() while the thread runs.
  std::atomic<uint64_t> pages{0}, bytes{0}, lost{0};
  int error = 0;
  std::string error_text;

  ~Source() {
    if (inst) inst->put_reader();
  }

  // The pages taken go to the journal before more are taken.
  void flush(size_t cpu) {
    std::string& b = batch[cpu];
    if (!b.empty() && error == 0) {
      if (int rc = journal->put_pages(stream, static_cast<uint32_t>(cpu), b.data(), b.size(), &error_text);
          rc < 0)
        error = -rc;
      else
        bytes.fetch_add(b.size(), std::memory_order_relaxed);
    }
    b.clear();
  }

  // Moves pages out of the buffer; returns how many.
  uint64_t drain(bool full_only) {
    uint64_t n = 0;
    for (size_t cpu = 0; cpu < batch.size(); ++cpu) {
      std::string& b = batch[cpu];
      for (;;) {
        const size_t at = b.size();
        b.resize(at + page_size);
        uint8_t* page = reinterpret_cast<uint8_t*>(b.data() + at);
        uint64_t missed = 0;
        if (!take_page(*rb, static_cast<int>(cpu), page, page_size, full_only, &missed)) {
          b.resize(at);
          break;
        }
        lost.fetch_add(missed, std::memory_order_relaxed);
        ++n;
        if (b.size() >= kBatchBytes) flush(cpu);
      }
      flush(cpu);
    }
    pages.fetch_add(n, std::memory_order_relaxed);
    return n;
  }

  void run(const std::atomic<bool>* stop) {
    while (!stop->load(std::memory_order_acquire) && error == 0) {
      if (!rb->wait(-1, percent, kWaitSliceMs)) continue;
      // Woken: take the full pages; if the watermark was met by a page the
      // writer is still filling (a small buffer), take that too, so that a
      // wake-up always makes progress.
      if (drain(true) == 0) drain(false);
    }
  }
};

class Recording {
 public:
  int open(const RecordOptions& o, std::string* err) {
    opts_ = o;
    if (opts_.instances.empty()) opts_.instances.push_back("");
    std::string dir;
    if (int rc = check_options(opts_, &dir, err); rc < 0) return rc;
    if (!opts_.kernel_events.empty()) {
      *err =
          "kernel events (RecordOptions::kernel_events) are recorded from outside the process only "
          "(usrtrace record -K, or RecordOptions::pid)";
      return -EINVAL;
    }
    for (const std::string& name : opts_.instances) {
      auto s = std::make_unique<Source>();
      s->name = name;
      s->journal = &journal_;
      int e = 0;
      s->inst = Instance::get(name, Instance::GetMode::kExisting, &e);
      if (!s->inst) {
        *err = name.empty() ? std::string("no top instance (does the kernel have rseq?)")
                            : "no instance '" + name + "'";
        return -(e ? e : ENOENT);
      }
      s->rb = &s->inst->buffer();
      s->page_size = s->rb->page_size(0);
      s->percent = o.buffer_percent >= 0 ? o.buffer_percent : s->inst->buffer_percent();
      s->batch.resize(static_cast<size_t>(s->rb->nr_cpus()));
      sources_.push_back(std::move(s));
    }
    // The journal holds the metadata from the start, so that what was
    // taken reads even if the process dies before stop().
    uint32_t process = 0;
    if (int rc = journal_.create(opts_, err); rc < 0) return rc;
    if (int rc = journal_.add_process(getpid(), "", &process, err); rc < 0) return rc;
    for (auto& s : sources_)
      if (int rc = journal_.add_stream(process, s->name, s->page_size, static_cast<uint32_t>(s->batch.size()),
                                       &s->stream, err);
          rc < 0)
        return rc;
    if (collect_instance_meta(opts_.instances, &start_meta_) < 0) {
      *err = "an instance went away while the recording began";
      return -ENOENT;
    }
    return journal_.put_meta(process, start_meta_, err);
  }

  // The threads block every signal (the program's handlers run in its own
  // threads, not in ours) and are named usrtrace-rec.
  void start_threads() {
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, function::patch::sweep_signal());  // the patcher's sweep (function/function.h)
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (auto& s : sources_)
      s->thread = std::thread([this, src = s.get()] {
        base::name_own_thread("usrtrace-rec");
        src->run(&stop_);
      });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  int finish(std::string* err) {
    stop_.store(true, std::memory_order_release);
    for (auto& s : sources_)
      if (s->thread.joinable()) s->thread.join();
    for (auto& s : sources_) {
      s->drain(false);
      if (s->error) {
        *err = s->error_text;
        return -s->error;
      }
    }
    // The metadata as it is now (events registered, threads named during
    // the run), keeping what departed since the start.
    control::RemoteMeta now;
    if (collect_instance_meta(opts_.instances, &now) == 0) {
      keep_departed(start_meta_.meta, &now.meta);
      if (int rc = journal_.put_meta(0, now, err); rc < 0) return rc;
    }
    return finish_journal(journal_, {}, err);
  }

  RecordStats stats() const {
    RecordStats st;
    for (const auto& s : sources_) {
      st.pages += s->pages.load(std::memory_order_relaxed);
      st.bytes += s->bytes.load(std::memory_order_relaxed);
      st.lost_events += s->lost.load(std::memory_order_relaxed);
    }
    st.pages_dropped = journal_.pages_dropped();
    return st;
  }

 private:
  RecordOptions opts_;
  JournalWriter journal_;  // outlives the sources (declared before them)
  control::RemoteMeta start_meta_;
  std::vector<std::unique_ptr<Source>> sources_;
  std::atomic<bool> stop_{false};
};

}  // namespace tracedat

struct TraceRecorder::Impl {
  std::unique_ptr<tracedat::Recording> local;
  std::unique_ptr<tracedat::ProcessTreeRecording> remote;
  bool stopped = false;
};

namespace {
bool is_remote(const RecordOptions& o) { return o.pid != 0 && o.pid != getpid(); }
}  // namespace

TraceRecorder::TraceRecorder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<TraceRecorder> TraceRecorder::start(const RecordOptions& opts, std::string* err) {
  auto impl = std::make_unique<Impl>();
  if (is_remote(opts)) {
    impl->remote = std::make_unique<tracedat::ProcessTreeRecording>();
    if (impl->remote->open(opts, err) < 0) return nullptr;
    impl->remote->start_thread();
  } else {
    impl->local = std::make_unique<tracedat::Recording>();
    if (impl->local->open(opts, err) < 0) return nullptr;
    impl->local->start_threads();
  }
  return std::unique_ptr<TraceRecorder>(new TraceRecorder(std::move(impl)));
}

int TraceRecorder::stop(std::string* err) {
  if (impl_->stopped) return 0;
  impl_->stopped = true;
  return impl_->remote ? impl_->remote->finish(err) : impl_->local->finish(err);
}

RecordStats TraceRecorder::stats() const {
  return impl_->remote ? impl_->remote->stats() : impl_->local->stats();
}

bool TraceRecorder::process_exited() const { return impl_->remote && impl_->remote->process_gone(); }

bool TraceRecorder::process_exiting() const { return impl_->remote && impl_->remote->process_exiting(); }

int TraceRecorder::add_process(int pid, std::string* err) {
  if (!impl_->remote) {
    *err = "add_process needs a recording of another process (RecordOptions::pid)";
    return -EINVAL;
  }
  if (impl_->stopped) {
    *err = "the recording has stopped";
    return -EINVAL;
  }
  return impl_->remote->add_process(pid, err);
}

std::string TraceRecorder::warnings() const {
  return impl_->remote ? impl_->remote->warnings() : std::string();
}

TraceRecorder::~TraceRecorder() {
  std::string err;
  if (impl_ && !impl_->stopped) stop(&err);
}

int extract_trace(const RecordOptions& opts, std::string* err, RecordStats* stats) {
  if (!opts.kernel_events.empty()) {
    // What the kernel did before now is not in an instance of ours.
    *err = "kernel events are recorded as they happen (TraceRecorder, usrtrace record -K), not extracted";
    return -EINVAL;
  }
  if (is_remote(opts)) {
    tracedat::RemoteRecording rec;
    if (int e = rec.open(opts, nullptr, "", err)) return e;
    const int r = rec.finish(err);
    if (stats) *stats = rec.stats();
    return r;
  }
  tracedat::Recording rec;
  if (int e = rec.open(opts, err)) return e;
  const int r = rec.finish(err);
  if (stats) *stats = rec.stats();
  return r;
}

}  // namespace usrtrace
