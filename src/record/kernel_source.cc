// record -K: the kernel's events into the recording's journal; see
// kernel_source.h.
//
// What the kernel's pages need before they join ours:
//   * their ids: remapped page by page as they are taken (remap_page_ids),
//     and the formats' "ID:" lines with them, so that one set of formats
//     describes every buffer of the file;
//   * their time stamps: nothing. The instance runs on the kernel clock
//     whose raw values are ours (kernel_clock_for), so the file's one
//     conversion (TSC2NSEC and OFFSET for the TSC clocks) turns both into
//     the same nanoseconds, and the kernel's records fall between ours
//     exactly where they happened.
#include "record/kernel_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include "base/files.h"
#include "base/sys.h"
#include "control/meta.h"
#include "record/recorder.h"
#include "ring_buffer/page_format.h"

namespace usrtrace::tracedat {

namespace {

constexpr long kTracefsMagic = 0x74726163;  // TRACEFS_MAGIC
constexpr const char* kInstancePrefix = "usrtrace-";

bool is_tracefs(const std::string& dir) {
  struct statfs s;
  return ::statfs(dir.c_str(), &s) == 0 && static_cast<long>(s.f_type) == kTracefsMagic;
}

// 0 or -errno; *err says which file refused what.
int put_file(const std::string& path, const std::string& text, std::string* err) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  int e = 0;
  if (fd < 0) {
    e = errno;
  } else {
    if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) e = errno ? errno : EIO;
    ::close(fd);
  }
  if (e == 0) return 0;
  *err = "writing '" + text + "' to " + path + ": " + std::strerror(e);
  return -e;
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode)) out.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool matches(const std::string& spec, const std::string& sys, const std::string& ev) {
  const size_t colon = spec.find(':');
  if (colon != std::string::npos)
    return fnmatch(spec.substr(0, colon).c_str(), sys.c_str(), 0) == 0 &&
           fnmatch(spec.substr(colon + 1).c_str(), ev.c_str(), 0) == 0;
  if (spec == "all") return true;
  return fnmatch(spec.c_str(), sys.c_str(), 0) == 0 || fnmatch(spec.c_str(), ev.c_str(), 0) == 0;
}

// The "ID: N" line of a format file: N, or -1.
long format_id(const std::string& fmt) {
  const size_t at = fmt.find("\nID: ");
  if (at == std::string::npos) return -1;
  char* end = nullptr;
  const long id = std::strtol(fmt.c_str() + at + 5, &end, 10);
  return end != fmt.c_str() + at + 5 && id > 0 && id < 65536 ? id : -1;
}

std::string with_id(const std::string& fmt, uint16_t id) {
  const size_t at = fmt.find("\nID: ") + 5;
  const size_t end = fmt.find('\n', at);
  return fmt.substr(0, at) + std::to_string(id) + fmt.substr(end);
}

// Who this recorder is, for its instance's name: its pid, the pid's start
// time (/proc/self/stat field 22, clock ticks since boot) and its pid
// namespace (the inode of /proc/self/ns/pid). Instances do not outlive a
// boot, so the three name one process for as long as the name exists.
struct Owner {
  long pid = 0;
  unsigned long long start = 0;
  unsigned long long ns = 0;
};

unsigned long long start_time_of(const std::string& which) { return base::process_start_time(which); }

// Whether /proc speaks of this process's pid namespace: mounted for
// another (a parent's, as `unshare --pid --fork` without --mount-proc
// leaves it), /proc/PID is another process than our PID, and its start
// time proves nothing.
bool proc_is_our_pid_namespace() {
  char link[32];
  const ssize_t n = ::readlink("/proc/self", link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = '\0';
  return std::strtol(link, nullptr, 10) == static_cast<long>(::getpid());
}

Owner self_owner() {
  Owner o;
  o.pid = ::getpid();
  o.start = start_time_of("self");  // ours whichever namespace /proc is of
  struct stat st;
  if (::stat("/proc/self/ns/pid", &st) == 0) o.ns = st.st_ino;
  return o;
}

// usrtrace-PID-START-NS-N, whole and nothing else: true with *o set.
bool parse_owner(const std::string& name, Owner* o) {
  if (name.rfind(kInstancePrefix, 0) != 0) return false;
  const char* p = name.c_str() + std::strlen(kInstancePrefix);
  unsigned long long v[4];
  for (int i = 0; i < 4; ++i) {
    if (*p < '0' || *p > '9') return false;
    char* end = nullptr;
    errno = 0;
    v[i] = std::strtoull(p, &end, 10);
    if (errno != 0 || end == p || (i < 3 ? *end != '-' : *end != '\0')) return false;
    p = end + (i < 3 ? 1 : 0);
  }
  if (v[0] == 0 || v[0] > (1ull << 22)) return false;
  o->pid = static_cast<long>(v[0]);
  o->start = v[1];
  o->ns = v[2];
  return true;
}

// Instances a recorder left when it was killed: they would go on recording
// into nobody's buffer. Removed only when the name proves it one of ours
// whose owner is gone: usrtrace-PID-START-NS-N in our pid namespace (where
// PID means what it says), and PID not running, or running since another
// time (reused). Any other name (another tool's, an older usrtrace's, a
// recorder's in another namespace) is left alone, and so is every one when
// /proc is another namespace's, or a start time cannot be read: what
// cannot be read proves nothing.
void remove_abandoned(const std::string& instances, const Owner& self) {
  if (self.ns == 0 || !proc_is_our_pid_namespace()) return;
  for (const std::string& name : subdirs(instances)) {
    Owner o;
    if (!parse_owner(name, &o) || o.ns != self.ns || o.start == 0) continue;
    bool gone = ::kill(static_cast<pid_t>(o.pid), 0) != 0 && errno == ESRCH;
    if (!gone) {
      const unsigned long long start = start_time_of(std::to_string(o.pid));
      gone = start != 0 && start != o.start;
    }
    if (gone) (void)::rmdir((instances + "/" + name).c_str());
  }
}

}  // namespace

bool remap_page_ids(uint8_t* page, uint32_t page_size, const std::vector<uint16_t>& ids) {
  if (page_size < rb::kPageHeaderSize || ids.size() < 65536) return false;
  uint64_t commit;
  std::memcpy(&commit, page + 8, 8);
  const uint64_t len = commit & rb::kCommitLengthMask;
  if (len > page_size - rb::kPageHeaderSize) return false;
  uint8_t* data = page + rb::kPageHeaderSize;
  rb::PageWalker w(data, static_cast<uint32_t>(len), 0);
  rb::Entry e;
  for (;;) {
    const rb::PageWalker::Step s = w.next(&e);
    if (s == rb::PageWalker::Step::kEnd) return true;
    if (s == rb::PageWalker::Step::kCorrupt) return false;
    if (s != rb::PageWalker::Step::kData || e.payload_len < 2) continue;
    uint8_t* type = data + e.offset + (e.size - e.payload_len);
    uint16_t id;
    std::memcpy(&id, type, 2);
    std::memcpy(type, &ids[id], 2);
  }
}

std::string kernel_clock_for(const std::string& ours) {
  if (ours == "local" || ours == "global" || ours == "perf" || ours == "x86-tsc") return "x86-tsc";
  if (ours == "mono" || ours == "mono_raw" || ours == "boot" || ours == "tai") return ours;
  return "";
}

int KernelSource::check(const std::vector<std::string>& specs, std::string* tracefs, std::string* err) {
  tracefs->clear();
  for (const char* d : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"})
    if (is_tracefs(d)) {
      *tracefs = d;
      break;
    }
  // Not mounted: mounted, as libtracefs and trace-cmd do (root only).
  if (tracefs->empty() && ::mount("nodev", "/sys/kernel/tracing", "tracefs", 0, nullptr) == 0 &&
      is_tracefs("/sys/kernel/tracing"))
    *tracefs = "/sys/kernel/tracing";
  if (tracefs->empty()) {
    const int e = errno;
    *err = std::string(
               "-K needs the kernel's tracefs: it is not mounted at /sys/kernel/tracing, and mounting "
               "it there failed: ") +
           std::strerror(e) + " (as root: mount -t tracefs nodev /sys/kernel/tracing)";
    return -ENOENT;
  }
  const std::string instances = *tracefs + "/instances";
  if (::access(instances.c_str(), W_OK) != 0) {
    const int e = errno;
    *err = "-K: " + instances + ": " + std::strerror(e) +
           (e == EACCES || e == EPERM ? " (recording kernel events needs root, or CAP_SYS_ADMIN)" : "");
    return -e;
  }
  std::vector<bool> used(specs.size(), false);
  for (const std::string& sys : subdirs(*tracefs + "/events")) {
    if (sys == "ftrace") continue;
    for (const std::string& ev : subdirs(*tracefs + "/events/" + sys))
      for (size_t i = 0; i < specs.size(); ++i)
        if (matches(specs[i], sys, ev)) used[i] = true;
  }
  for (size_t i = 0; i < specs.size(); ++i)
    if (!used[i]) {
      *err = "-K " + specs[i] + ": no such kernel event (" + *tracefs + "/available_events lists them)";
      return -ENOENT;
    }
  return 0;
}

KernelSource::~KernelSource() {
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  remove_instance();
}

void KernelSource::remove_instance() {
  for (int& fd : raw_fds_)
    if (fd >= 0) ::close(std::exchange(fd, -1));
  for (int& fd : pipe_)
    if (fd >= 0) ::close(std::exchange(fd, -1));
  if (dir_.empty()) return;
  std::string ignored;
  (void)put_file(dir_ + "/tracing_on", "0", &ignored);
  (void)::rmdir(dir_.c_str());
  dir_.clear();
}

int KernelSource::open(const std::vector<std::string>& specs, const std::string& clock,
                       const std::vector<int>& pids, JournalWriter* journal, std::string* err) {
  journal_ = journal;
  clock_ = kernel_clock_for(clock);
  if (clock_.empty()) {
    *err = "-K: the file's clock, " + clock +
           ", is not one the kernel has (kernel events need local, global, perf, x86-tsc, mono, mono_raw, "
           "boot or "
           "tai: -C)";
    return -EINVAL;
  }
  if (int rc = check(specs, &tracefs_, err); rc < 0) return rc;
  const std::string& tracefs = tracefs_;
  const std::string instances = tracefs + "/instances";
  const Owner self = self_owner();
  remove_abandoned(instances, self);
  // A name of our own: who we are (remove_abandoned's proof), and a count
  // for a second recording in the same process; one taken (EEXIST: another
  // namespace's recorder with our pid and start, however unlikely) is
  // passed over for the next.
  static std::atomic<unsigned> serial{0};
  std::string dir;
  int made = -1;
  for (int tries = 0; tries < 64 && made != 0; ++tries) {
    const std::string name = kInstancePrefix + std::to_string(self.pid) + "-" + std::to_string(self.start) +
                             "-" + std::to_string(self.ns) + "-" + std::to_string(serial++);
    dir = instances + "/" + name;
    made = ::mkdir(dir.c_str(), 0750);
    if (made != 0 && errno != EEXIST) break;
  }
  if (made != 0) {
    const int e = errno;
    *err = "-K: creating the kernel instance " + dir + ": " + std::strerror(e) +
           (e == EACCES || e == EPERM ? " (recording kernel events needs root, or CAP_SYS_ADMIN)" : "");
    return -e;
  }
  dir_ = dir;

  // Off while it is set up; the clock before any event is written.
  if (int rc = put_file(dir + "/tracing_on", "0", err); rc < 0) return rc;
  if (int rc = put_file(dir + "/trace_clock", clock_, err); rc < 0) {
    *err = "-K: the kernel has no " + clock_ + " clock for the file's " + clock + " (" + *err + ")";
    return rc;
  }
  // The process's threads, and (event-fork) every task they start. The
  // kernel applies set_event_pid to the task the event is about where it
  // knows one (sched_switch: either side; sched_wakeup: the woken), else
  // to the one running.
  std::string list;
  for (int pid : pids) {
    bool any = false;
    for (const std::string& tid : subdirs("/proc/" + std::to_string(pid) + "/task")) {
      list += tid + " ";
      any = true;
    }
    if (!any) list += std::to_string(pid) + " ";
  }
  if (!list.empty()) {
    if (int rc = put_file(dir + "/set_event_pid", list, err); rc < 0) return rc;
    if (int rc = put_file(dir + "/options/event-fork", "1", err); rc < 0) return rc;
  }

  if (int rc = enable_events(specs, err); rc < 0) return rc;
  if (int rc = open_readers(err); rc < 0) return rc;
  const int nr_cpus = static_cast<int>(raw_fds_.size());
  if (int rc = journal_->add_process(0, "kernel", &process_, err); rc < 0) return rc;
  if (int rc = journal_->add_stream(process_, "", page_size_, static_cast<uint32_t>(nr_cpus), &stream_, err);
      rc < 0)
    return rc;
  if (int rc = journal_->put_meta(process_, meta(false), err); rc < 0) return rc;
  return put_file(dir + "/tracing_on", "1", err);
}

// What the file needs of the kernel besides its pages: the formats (with
// our ids), the kernel's thread names (saved_cmdlines: the names of the
// tasks its events were about), the clock and, at the end, the per-CPU
// stats (their overruns).
control::RemoteMeta KernelSource::meta(bool with_stats) const {
  control::RemoteMeta km;
  km.meta.page_size = page_size_;
  km.meta.nr_cpus = static_cast<int>(raw_fds_.size());
  km.meta.systems = systems_;
  km.meta.cmdlines = base::read_pseudo_file(tracefs_ + "/saved_cmdlines");
  km.meta.trace_clock = base::read_pseudo_file(dir_ + "/trace_clock");
  control::InstanceMeta im;
  im.clock = clock_;
  im.page_size = page_size_;
  im.nr_cpus = km.meta.nr_cpus;
  for (int cpu = 0; with_stats && cpu < im.nr_cpus; ++cpu)
    im.stats.push_back(base::read_pseudo_file(dir_ + "/per_cpu/cpu" + std::to_string(cpu) + "/stats"));
  km.instances.push_back(im);
  return km;
}

// Enables the events `specs` name in the instance, in a stable order
// (system, then event), each with its id in the file (ids_, systems_).
int KernelSource::enable_events(const std::vector<std::string>& specs, std::string* err) {
  ids_.assign(65536, kKernelIdUnknown);
  // trace_marker writes into the instance: ftrace/print, whose layout is
  // ours (events/builtin.h), keeps the kernel's id and our format.
  ids_[5] = 5;
  std::vector<bool> used(specs.size(), false);
  uint32_t next = kKernelIdFirst;
  for (const std::string& sys : subdirs(dir_ + "/events")) {
    if (sys == "ftrace") continue;  // the kernel's own records, not enabled by name
    std::vector<std::string> formats;
    for (const std::string& ev : subdirs(dir_ + "/events/" + sys)) {
      bool want = false;
      for (size_t i = 0; i < specs.size(); ++i)
        if (matches(specs[i], sys, ev)) want = used[i] = true;
      if (!want) continue;
      const std::string fmt = base::read_pseudo_file(dir_ + "/events/" + sys + "/" + ev + "/format");
      const long id = format_id(fmt);
      if (id < 0) continue;  // a format we cannot read: not recorded
      if (next >= kKernelIdUnknown) {
        *err = "-K names more kernel events than a file can hold beside ours (" +
               std::to_string(kKernelIdUnknown - kKernelIdFirst) + ")";
        return -E2BIG;
      }
      ids_[static_cast<size_t>(id)] = static_cast<uint16_t>(next);
      formats.push_back(with_id(fmt, static_cast<uint16_t>(next++)));
      if (int rc = put_file(dir_ + "/events/" + sys + "/" + ev + "/enable", "1", err); rc < 0) return rc;
    }
    if (!formats.empty()) systems_.emplace_back(sys, std::move(formats));
  }
  for (size_t i = 0; i < specs.size(); ++i)
    if (!used[i]) {  // check() found it: gone since
      *err = "-K " + specs[i] + ": no such kernel event in " + dir_;
      return -ENOENT;
    }
  return 0;
}

// The per-CPU trace_pipe_raw descriptors, the pipe splice goes through,
// and the page size (header_page's data field ends the page).
int KernelSource::open_readers(std::string* err) {
  {
    const std::string hp = base::read_pseudo_file(tracefs_ + "/events/header_page");
    const size_t at = hp.find("char data;");
    unsigned off = 0, size = 0;
    if (at != std::string::npos &&
        std::sscanf(hp.c_str() + at, "char data;\toffset:%u;\tsize:%u;", &off, &size) == 2 &&
        off + size >= rb::kMinPageSize && off + size <= rb::kMaxPageSize)
      page_size_ = off + size;
  }
  const int nr_cpus = base::nr_possible_cpus();
  for (int cpu = 0; cpu < nr_cpus; ++cpu) {
    const std::string raw = dir_ + "/per_cpu/cpu" + std::to_string(cpu) + "/trace_pipe_raw";
    const int fd = ::open(raw.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      *err = "-K: opening " + raw + ": " + std::strerror(e);
      return -e;
    }
    raw_fds_.push_back(fd);
  }
  if (::pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) {
    const int e = errno;
    *err = std::string("-K: pipe: ") + std::strerror(e);
    return -e;
  }
  return 0;
}

void KernelSource::start_thread() {
  thread_ = std::thread([this] {
    base::name_own_thread("usrtrace-kernel");
    std::unique_lock<std::mutex> l(wake_mu_);
    while (!stop_) {
      l.unlock();
      std::string e;
      if (drain(false, &e) < 0) return;  // kept in error_ for take_rest
      l.lock();
      // Not a sleep-and-hope: the kernel's buffer keeps what comes
      // meanwhile, and take_rest() takes the rest.
      wake_.wait_for(l, std::chrono::milliseconds(100), [this] { return stop_; });
    }
  });
}

int KernelSource::put(int cpu, uint8_t* pages, size_t bytes, std::string* err) {
  for (size_t at = 0; at + page_size_ <= bytes; at += page_size_) {
    uint8_t* p = pages + at;
    uint64_t commit;
    std::memcpy(&commit, p + 8, 8);
    const uint64_t len = commit & rb::kCommitLengthMask;
    if (commit & rb::kMissedEvents) {
      uint64_t n = 1;  // the kernel did not say how many: at least one
      if ((commit & rb::kMissedStored) && rb::kPageHeaderSize + len + 8 <= page_size_)
        std::memcpy(&n, p + rb::kPageHeaderSize + len, 8);
      lost_.fetch_add(n, std::memory_order_relaxed);
    }
    (void)remap_page_ids(p, page_size_, ids_);
  }
  pages_.fetch_add(bytes / page_size_, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return journal_->put_pages(stream_, static_cast<uint32_t>(cpu), pages, bytes - bytes % page_size_, err);
}

// Full pages of each CPU (splice hands out only those); with `flush`, then
// what is left of each, one partial page per read.
int KernelSource::drain(bool flush, std::string* err) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_ < 0) {
    *err = error_text_;
    return error_;
  }
  constexpr size_t kBatch = 16;  // a pipe's default capacity, in 4 KiB pages
  std::unique_ptr<uint8_t[]> buf(new uint8_t[page_size_ * kBatch]);
  int rc = 0;
  for (size_t cpu = 0; cpu < raw_fds_.size() && rc == 0; ++cpu) {
    for (;;) {
      const ssize_t n = ::splice(raw_fds_[cpu], nullptr, pipe_[1], nullptr, page_size_ * kBatch,
                                 SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n <= 0) break;
      size_t got = 0;
      while (got < static_cast<size_t>(n)) {
        const ssize_t r = ::read(pipe_[0], buf.get() + got, static_cast<size_t>(n) - got);
        if (r <= 0) break;
        got += static_cast<size_t>(r);
      }
      if ((rc = put(static_cast<int>(cpu), buf.get(), got, err)) < 0) break;
    }
    while (flush && rc == 0) {
      std::memset(buf.get(), 0, page_size_);
      const ssize_t n = ::read(raw_fds_[cpu], buf.get(), page_size_);
      if (n <= 0) break;
      uint64_t commit;
      std::memcpy(&commit, buf.get() + 8, 8);
      if ((commit & rb::kCommitLengthMask) == 0) break;
      rc = put(static_cast<int>(cpu), buf.get(), page_size_, err);
    }
  }
  if (rc < 0) {
    error_ = rc;
    error_text_ = *err;
  }
  return rc;
}

int KernelSource::take_rest(std::string* err) {
  {
    std::lock_guard<std::mutex> l(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (dir_.empty()) return 0;
  std::string ignored;
  (void)put_file(dir_ + "/tracing_on", "0", &ignored);
  int rc = drain(true, err);
  if (rc == 0) rc = journal_->put_meta(process_, meta(true), err);
  remove_instance();
  return rc;
}

RecordStats KernelSource::stats() const {
  RecordStats st;
  st.pages = pages_.load(std::memory_order_relaxed);
  st.bytes = bytes_.load(std::memory_order_relaxed);
  st.lost_events = lost_.load(std::memory_order_relaxed);
  return st;
}

std::string KernelSource::warnings() const {
  const uint64_t lost = lost_.load(std::memory_order_relaxed);
  if (lost == 0) return {};
  return "kernel events lost: " + std::to_string(lost) +
         " (the kernel instance's buffer filled between two takes; fewer -K events, or a narrower glob)\n";
}

}  // namespace usrtrace::tracedat
