// The record journal (journal.h; docs/design/record-journal.md).
#include "record/journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <string_view>

#include "record/recorder.h"

namespace usrtrace::tracedat {
namespace {

constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 32;
constexpr uint32_t kRecordHead = 16;

enum Kind : uint32_t {
  kOutput = 1,
  kProcess = 2,
  kStream = 3,
  kMeta = 4,
  kPages = 5,
  kPagesIn = 6,
  kPagesGone = 7
};

// What a reader accepts (a journal is untrusted input).
constexpr uint64_t kMaxSmallRecord = 1 << 16;  // every record but kMeta and kPages
constexpr uint64_t kMaxMeta = 1ull << 30;      // kallsyms of a very big program
constexpr uint32_t kMaxIds = 1 << 16;          // processes, streams
constexpr size_t kMaxRuns = 64;                // runs of one page file (CpuData::extents)
// A process's prefix or a stream's instance name: well inside
// kMaxSmallRecord, whose records the reader would otherwise refuse.
constexpr size_t kMaxName = 4096;
// With a size limit the journal is compacted once it passes this, or twice
// its size after the last compaction, whichever is more (amortized: each
// byte of the live state is written again at most once per byte appended).
constexpr uint64_t kCompactFloor = 4u << 20;

void put32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void put64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

std::string page_file_name(const std::string& journal, uint32_t stream, uint32_t cpu) {
  return journal + "." + std::to_string(stream) + "." + std::to_string(cpu);
}
void put_str(std::string* s, const std::string& v) {
  put32(s, static_cast<uint32_t>(v.size()));
  s->append(v);
}

std::string mib(uint64_t bytes) {
  char b[32];
  snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}

// Reads exactly n bytes at off; false at EOF or on an error (errno set).
bool read_at(int fd, uint64_t off, void* buf, size_t n) {
  char* c = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, c, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return false;
    }
    c += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A payload being decoded.
struct Cursor {
  const uint8_t* p;
  size_t n;
  bool ok = true;
  uint32_t u32() {
    uint32_t v = 0;
    if (n < 4) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, p, 4);
    p += 4;
    n -= 4;
    return v;
  }
  std::string str() {
    const uint32_t len = u32();
    if (!ok || len > n) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
};

// Takes [off, off + n) out of a CPU's extents (in the order written),
// keeping what is left of each in place: a ring's oldest pages go, the
// rest stay in order. The bytes taken.
uint64_t cut_extents(std::vector<Extent>* extents, uint64_t off, uint64_t n) {
  const uint64_t end = off + n;
  uint64_t cut = 0;
  std::vector<Extent> kept;
  kept.reserve(extents->size() + 1);
  for (const Extent& e : *extents) {
    const uint64_t e_end = e.offset + e.size;
    if (e_end <= off || e.offset >= end) {
      kept.push_back(e);
      continue;
    }
    if (e.offset < off) kept.push_back({e.offset, off - e.offset});
    if (e_end > end) kept.push_back({end, e_end - end});
    cut += std::min(e_end, end) - std::max(e.offset, off);
  }
  *extents = std::move(kept);
  return cut;
}

bool overlaps(const std::vector<Extent>& extents, uint64_t off, uint64_t n) {
  for (const Extent& e : extents)
    if (e.offset < off + n && off < e.offset + e.size) return true;
  return false;
}

}  // namespace

JournalWriter::~JournalWriter() {
  for (auto& [key, f] : files_)
    if (f.fd >= 0) ::close(f.fd);
  if (fd_ < 0) return;
  ::close(fd_);
  if (!keep_ && page_bytes() == 0) {
    // A page file whose first write failed holds nothing either.
    for (auto& [key, f] : files_) ::unlink(page_file_name(path_, key.first, key.second).c_str());
    ::unlink(path_.c_str());
  }
}

int JournalWriter::create(const RecordOptions& opts, std::string* err) {
  const size_t slash = opts.output.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : opts.output.substr(0, slash));
  const std::string base = slash == std::string::npos ? opts.output : opts.output.substr(slash + 1);
  // mkostemp: a name nobody else has (O_CREAT|O_EXCL), 0600, so a planted
  // symlink is never followed.
  std::string tmpl = (dir == "/" ? "" : dir) + "/." + base + ".usrtrace-rec-XXXXXX";
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    *err = "cannot create the recording's journal in " + dir + ": " + std::strerror(e);
    return -e;
  }
  fd_ = fd;
  path_ = tmpl;
  // Held while the recording lives: abandoned_journals() tells a dead
  // recording's journal from a live one's. A new file: nobody else has it.
  ::flock(fd_, LOCK_EX | LOCK_NB);
  output_ = opts.output;
  // trace.dat v7 without compression can name CPU data anywhere in the
  // file: each CPU's pages go where one of them stays (journal.h).
  // A size limit needs them too, whatever the output: a page file is
  // reused as a ring (journal.h).
  page_files_ = (opts.file_version == 7 && !opts.compress) || opts.max_cpu_bytes > 0;
  max_cpu_bytes_ = opts.max_cpu_bytes;
  // The output as an absolute name, so that recover writes it wherever it runs.
  std::string output = opts.output;
  if (output.empty() || output[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) output = std::string(cwd) + "/" + output;
  }
  char head[kHeaderBytes] = {};
  std::memcpy(head, kJournalMagic, 8);
  const uint32_t version = kVersion, bytes = kHeaderBytes;
  std::memcpy(head + 8, &version, 4);
  std::memcpy(head + 12, &bytes, 4);
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t created =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  std::memcpy(head + 16, &created, 8);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (::pwrite(fd_, head, sizeof head, 0) != static_cast<ssize_t>(sizeof head)) {
      const int e = errno ? errno : EIO;
      *err = "writing the recording's journal " + path_ + ": " + std::strerror(e);
      return -e;
    }
    end_ = sizeof head;
    header_.assign(head, sizeof head);
  }
  std::string p;
  put32(&p, static_cast<uint32_t>(opts.file_version));
  put32(&p, opts.compress ? 1 : 0);
  put_str(&p, output);
  output_record_ = p;
  // A size limit bounds the journal too: compaction (below).
  if (max_cpu_bytes_ > 0) compact_at_ = kCompactFloor;
  return append(kOutput, p, nullptr, 0, err);
}

// The id is taken and its record appended under one lock: a reader
// expects ids in order.
int JournalWriter::add_process(int pid, const std::string& prefix, uint32_t* process, std::string* err) {
  if (prefix.size() > kMaxName) {
    *err = "a buffer name of " + std::to_string(prefix.size()) + " bytes";
    return -EPROTO;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (processes_ >= kMaxIds) {
    *err = "more than " + std::to_string(kMaxIds) + " processes in one recording";
    return -EMLINK;
  }
  std::string p;
  put32(&p, processes_);
  put32(&p, static_cast<uint32_t>(pid));
  put_str(&p, prefix);
  if (int rc = append_locked(kProcess, p, nullptr, 0, err); rc < 0) return rc;
  process_records_.push_back(std::move(p));
  meta_at_.emplace_back();
  *process = processes_++;
  return 0;
}

int JournalWriter::add_stream(uint32_t process, const std::string& instance, uint32_t page_size,
                              uint32_t nr_cpus, uint32_t* stream, std::string* err) {
  // What read_journal would refuse is refused here, and only this stream
  // fails: the journal goes on for the others.
  if (!journal_stream_ok(page_size, nr_cpus)) {
    *err = "a buffer of " + std::to_string(nr_cpus) + " CPUs with pages of " + std::to_string(page_size) +
           " bytes (a power of two from 64 bytes to 1 MiB, 1 to " + std::to_string(kJournalMaxCpus) +
           " CPUs)";
    return -EPROTO;
  }
  if (instance.size() > kMaxName) {
    *err = "an instance name of " + std::to_string(instance.size()) + " bytes";
    return -EPROTO;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (streams_ >= kMaxIds) {
    *err = "more than " + std::to_string(kMaxIds) + " buffers in one recording";
    return -EMLINK;
  }
  std::string p;
  put32(&p, streams_);
  put32(&p, process);
  put32(&p, page_size);
  put32(&p, nr_cpus);
  put_str(&p, instance);
  if (int rc = append_locked(kStream, p, nullptr, 0, err); rc < 0) return rc;
  stream_records_.push_back(std::move(p));
  stream_page_size_.push_back(page_size);
  *stream = streams_++;
  return 0;
}

int JournalWriter::put_meta(uint32_t process, const control::RemoteMeta& meta, std::string* err) {
  std::string p;
  put32(&p, process);
  control::encode_meta(meta, &p);
  if (p.size() > kMaxMeta) {  // what read_journal would refuse, and end the journal at
    *err = "metadata of " + std::to_string(p.size()) + " bytes";
    return -EFBIG;
  }
  const size_t hash = std::hash<std::string_view>{}(p);
  std::lock_guard<std::mutex> l(mu_);
  MetaAt* last = process < meta_at_.size() ? &meta_at_[process] : nullptr;
  // The same metadata again (a process asked after every change, that did
  // not change what we keep) is not journaled again: the last one wins.
  if (last && !error_ && last->bytes == p.size() && last->hash == hash) return 0;
  const uint64_t at = end_ + kRecordHead;
  if (int rc = append_locked(kMeta, p, nullptr, 0, err); rc < 0) return rc;
  if (last) *last = {at, p.size(), hash};
  maybe_compact_locked();
  return 0;
}

int JournalWriter::put_pages(uint32_t stream, uint32_t cpu, const void* pages, size_t bytes,
                             std::string* err) {
  if (bytes == 0) return 0;
  if (page_files_) return put_in_page_file(stream, cpu, pages, bytes, err);
  std::string p;
  put32(&p, stream);
  put32(&p, cpu);
  return append(kPages, p, pages, bytes, err);
}

// The pages first, then the record that says they are there: a death in
// between costs that one batch, and the journal never names pages that
// were not written. With a size limit, the record that gives up the pages
// about to be overwritten comes before them: a death in the middle of the
// overwrite never lets the journal name torn or newer pages as older ones.
int JournalWriter::put_in_page_file(uint32_t stream, uint32_t cpu, const void* pages, size_t bytes,
                                    std::string* err) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_) {
    *err = error_text_;
    return -error_;
  }
  const uint32_t unit = stream < stream_page_size_.size() ? stream_page_size_[stream] : 0;
  if (unit == 0 || bytes % unit != 0) {
    *err = "pages of an unknown stream, or not whole pages";
    return -EINVAL;
  }
  PageFile& f = files_[{stream, cpu}];
  const uint64_t start = page_file_start(unit);
  if (f.closed) {
    *err = "pages of a stream that was closed";
    return -EBADF;
  }
  if (f.fd < 0) {
    const std::string name = page_file_name(path_, stream, cpu);
    // A new name beside the journal's (which mkostemp made ours alone):
    // never an existing file, never through a symlink.
    f.fd = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (f.fd < 0) {
      fail_locked(errno, "creating the page file " + name);
      files_.erase({stream, cpu});
      *err = error_text_;
      return -error_;
    }
    struct stat st;
    if (::fstat(f.fd, &st) == 0) {
      f.dev = st.st_dev;
      f.ino = st.st_ino;
    }
    f.end = start;
  }
  // The ring's size: whole pages, at least one.
  const uint64_t ring = max_cpu_bytes_ ? std::max<uint64_t>(1, max_cpu_bytes_ / unit) * unit : 0;
  const char* c = static_cast<const char*>(pages);
  if (ring && bytes > ring) {  // the batch's older pages would be overwritten by its newer
    pages_dropped_ += (bytes - ring) / unit;
    c += bytes - ring;
    bytes = ring;
  }
  while (bytes > 0) {
    uint64_t n = bytes;
    if (ring) {
      if (f.end == start + ring) {
        f.end = start;
        f.wrapped = true;
      }
      n = std::min<uint64_t>(n, start + ring - f.end);
      if (f.wrapped) {
        std::string p;
        put32(&p, stream);
        put32(&p, cpu);
        put64(&p, f.end);
        put64(&p, n);
        if (int rc = append_locked(kPagesGone, p, nullptr, 0, err); rc < 0) return rc;
        pages_dropped_ += n / unit;
      }
    }
    if (int rc = write_pages_locked(f, stream, cpu, unit, c, n, err); rc < 0) return rc;
    c += n;
    bytes -= n;
  }
  // Here, between batches, every page file's state is what the records
  // say: a safe point to compact.
  maybe_compact_locked();
  return 0;
}

// `n` bytes of pages at f.end, then the record that names them.
int JournalWriter::write_pages_locked(PageFile& f, uint32_t stream, uint32_t cpu, uint32_t unit,
                                      const char* c, uint64_t n, std::string* err) {
  const uint64_t at = f.end;
  uint64_t done = 0;
  int e = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(f.fd, c + done, n - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? errno : EIO;
      break;
    }
    done += static_cast<uint64_t>(w);
  }
  const uint64_t whole = done / unit * unit;  // a page cut short does not count
  if (whole > 0) {
    std::string p;
    put32(&p, stream);
    put32(&p, cpu);
    put64(&p, at);
    put64(&p, whole);
    if (int rc = append_locked(kPagesIn, p, nullptr, 0, err); rc < 0) return rc;
    f.end += whole;
    page_bytes_ += whole;
  }
  if (e) {
    fail_locked(e, "writing the recorded pages to " + page_file_name(path_, stream, cpu));
    *err = error_text_;
    return -error_;
  }
  return 0;
}

// The first failure, in the words every later append repeats.
void JournalWriter::fail_locked(int e, const std::string& what) {
  error_ = e;
  error_text_ = what + ": " + std::strerror(e) + " after " + mib(page_bytes_) + " of pages";
  if (page_bytes_ > 0)
    error_text_ += "; they are kept there: `usrtrace recover " + path_ + "` writes " + output_ +
                   " from them once there is room";
  if (e == ENOSPC || e == EDQUOT) error_text_ += " (the previous " + output_ + ", if any, is unchanged)";
}

std::string JournalWriter::page_file(uint32_t stream, uint32_t cpu) const {
  return page_file_name(path_, stream, cpu);
}

int JournalWriter::page_file_fd(uint32_t stream, uint32_t cpu) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find({stream, cpu});
  if (it == files_.end()) return -1;
  PageFile& f = it->second;
  if (f.fd < 0 && f.closed) {
    const std::string name = page_file_name(path_, stream, cpu);
    const int fd = ::open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_dev == f.dev && st.st_ino == f.ino) {
      f.fd = fd;
    } else if (fd >= 0) {
      ::close(fd);  // not the file written: the copy reads what the journal names
    }
  }
  return f.fd;
}

void JournalWriter::close_stream(uint32_t stream) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = files_.lower_bound({stream, 0}); it != files_.end() && it->first.first == stream; ++it) {
    if (it->second.fd >= 0) ::close(it->second.fd);
    it->second.fd = -1;
    it->second.closed = true;
  }
}

void JournalWriter::installed(uint32_t stream, uint32_t cpu) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find({stream, cpu});
  if (it != files_.end()) it->second.installed = true;
}

uint64_t JournalWriter::page_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return page_bytes_;
}

uint64_t JournalWriter::pages_dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return pages_dropped_;
}

void JournalWriter::remove() {
  if (fd_ < 0) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [key, f] : files_)
      if (!f.installed) ::unlink(page_file_name(path_, key.first, key.second).c_str());
  }
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

int JournalWriter::append(uint32_t kind, const std::string& head, const void* data, size_t bytes,
                          std::string* err) {
  std::lock_guard<std::mutex> l(mu_);
  return append_locked(kind, head, data, bytes, err);
}

int JournalWriter::append_locked(uint32_t kind, const std::string& head, const void* data, size_t bytes,
                                 std::string* err) {
  if (error_) {
    *err = error_text_;
    return -error_;
  }
  const uint64_t len = head.size() + bytes;
  const uint64_t pad = (8 - len % 8) % 8;
  char rec[kRecordHead] = {};
  std::memcpy(rec, &kind, 4);
  std::memcpy(rec + 8, &len, 8);
  static const char zeros[8] = {};
  iovec iov[4] = {{rec, sizeof rec},
                  {const_cast<char*>(head.data()), head.size()},
                  {const_cast<void*>(data), bytes},
                  {const_cast<char*>(zeros), static_cast<size_t>(pad)}};
  int first = 0;
  uint64_t at = end_;
  while (first < 4) {
    const ssize_t w = ::pwritev(fd_, iov + first, 4 - first, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      // The whole pages of a record cut short count (read_journal keeps them).
      const uint64_t data_at = end_ + sizeof rec + head.size();
      if (kind == kPages && at > data_at) {
        uint32_t stream;
        std::memcpy(&stream, head.data(), 4);
        const uint64_t unit = stream < stream_page_size_.size() ? stream_page_size_[stream] : 0;
        if (unit) page_bytes_ += (at - data_at) / unit * unit;
      }
      fail_locked(w < 0 ? errno : EIO, "writing the recorded pages to " + path_);
      *err = error_text_;
      return -error_;
    }
    at += static_cast<uint64_t>(w);
    size_t left = static_cast<size_t>(w);
    while (first < 4 && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < 4) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  end_ = at;
  if (kind == kPages) page_bytes_ += bytes;
  return 0;
}

// Compaction. With a size limit (-m) the page files are rings, but the
// journal would grow without end: a kPagesIn and a kPagesGone record per
// batch, and a copy of the metadata each time it changes (1.9 MB a time for
// a big program, or as fast as a hostile process can change it). So once
// the journal passes compact_at_, it is written again, whole, with only
// what still counts: the header, the output, the processes and streams,
// each process's last metadata (copied from the file, not kept in memory)
// and one kPagesIn per run each page file still holds (a ring that came
// round: its older pages from f.end to its end, then the newer from its
// start). The new journal is made beside the old one, locked, and renamed
// over it; a death or a full disk before the rename leaves the old one
// whole (and a stray JOURNAL.compact-XXXXXX that nothing reads); after it,
// the new one. A failure gives up compacting for that round, never the
// recording. Context: under mu_, at a point where every page file's state
// is what the records say (between batches).
void JournalWriter::compact_locked() {
  const uint64_t before = end_;
  // The next attempt, whatever happens to this one: no retry storm.
  compact_at_ = std::max<uint64_t>(kCompactFloor, before * 2);
  std::string tmp = path_ + ".compact-XXXXXX";
  const int nfd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (nfd < 0) return;
  ::flock(nfd, LOCK_EX | LOCK_NB);
  uint64_t at = 0;
  bool ok = true;
  auto put = [&](const void* data, size_t n) {
    const char* c = static_cast<const char*>(data);
    while (ok && n > 0) {
      const ssize_t w = ::pwrite(nfd, c, n, static_cast<off_t>(at));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = false;
        break;
      }
      c += w;
      n -= static_cast<size_t>(w);
      at += static_cast<uint64_t>(w);
    }
  };
  auto record = [&](uint32_t kind, const std::string& payload) {
    char rec[kRecordHead] = {};
    const uint64_t len = payload.size();
    std::memcpy(rec, &kind, 4);
    std::memcpy(rec + 8, &len, 8);
    static const char zeros[8] = {};
    put(rec, sizeof rec);
    put(payload.data(), payload.size());
    put(zeros, (8 - len % 8) % 8);
  };
  put(header_.data(), header_.size());
  record(kOutput, output_record_);
  for (const std::string& p : process_records_) record(kProcess, p);
  for (const std::string& p : stream_records_) record(kStream, p);
  std::vector<MetaAt> moved = meta_at_;
  std::string buf;
  for (MetaAt& m : moved) {
    if (m.bytes == 0 || !ok) continue;
    // Copied a megabyte at a time from the old journal.
    std::string head;  // kind, reserved, bytes (kRecordHead)
    put32(&head, kMeta);
    put32(&head, 0);
    put64(&head, m.bytes);
    put(head.data(), head.size());
    const uint64_t payload_at = at;
    for (uint64_t done = 0; ok && done < m.bytes;) {
      buf.resize(static_cast<size_t>(std::min<uint64_t>(m.bytes - done, 1u << 20)));
      if (!read_at(fd_, m.offset + done, buf.data(), buf.size())) {
        ok = false;
        break;
      }
      put(buf.data(), buf.size());
      done += buf.size();
    }
    static const char zeros[8] = {};
    put(zeros, (8 - m.bytes % 8) % 8);
    m.offset = payload_at;
  }
  for (const auto& entry : files_) {
    const std::pair<uint32_t, uint32_t>& key = entry.first;
    const PageFile& f = entry.second;
    if (f.end == 0 || !ok) continue;  // no page yet
    const uint32_t unit = stream_page_size_[key.first];
    const uint64_t start = page_file_start(unit);
    const uint64_t ring = max_cpu_bytes_ ? std::max<uint64_t>(1, max_cpu_bytes_ / unit) * unit : 0;
    auto run = [&](uint64_t off, uint64_t n) {
      if (n == 0) return;
      std::string p;
      put32(&p, key.first);
      put32(&p, key.second);
      put64(&p, off);
      put64(&p, n);
      record(kPagesIn, p);
    };
    if (f.wrapped) run(f.end, start + ring - f.end);  // the older pages, oldest first
    run(start, f.end - start);
  }
  if (ok && ::rename(tmp.c_str(), path_.c_str()) == 0) {
    ::close(fd_);
    fd_ = nfd;
    end_ = at;
    meta_at_ = std::move(moved);
    compact_at_ = std::max<uint64_t>(kCompactFloor, at * 2);
    return;
  }
  ::unlink(tmp.c_str());
  ::close(nfd);
}

std::vector<std::string> abandoned_journals(const std::string& output) {
  const size_t slash = output.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : output.substr(0, slash));
  const std::string prefix =
      "." + (slash == std::string::npos ? output : output.substr(slash + 1)) + ".usrtrace-rec-";
  std::vector<std::string> found;
  DIR* d = opendir(dir.c_str());
  if (!d) return found;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0 ||
        std::strlen(e->d_name) != prefix.size() + 6)
      continue;
    const std::string path = (dir == "/" ? "" : dir) + "/" + e->d_name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        ::flock(fd, LOCK_SH | LOCK_NB) == 0)
      found.push_back(path);
    ::close(fd);
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

std::string output_beside_journal(const std::string& journal) {
  const size_t slash = journal.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : journal.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? journal : journal.substr(slash + 1);
  static constexpr std::string_view kTag = ".usrtrace-rec-";
  // "." NAME kTag XXXXXX, NAME not empty.
  if (name.size() < 1 + 1 + kTag.size() + 6 || name[0] != '.') return "";
  const size_t tag = name.size() - 6 - kTag.size();
  if (name.compare(tag, kTag.size(), kTag) != 0) return "";
  const std::string out = name.substr(1, tag - 1);
  if (out == "." || out == "..") return "";
  return dir + out;
}

bool is_journal(const void* p, size_t n) { return n >= 8 && std::memcmp(p, kJournalMagic, 8) == 0; }

Journal::~Journal() {
  for (int fd : page_fds) ::close(fd);
}

int read_journal(int fd, Journal* out, std::string* err, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    *err = std::strerror(e);
    return -e;
  }
  std::string jpath = path;
  if (jpath.empty()) {
    char link[4096];
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = ::readlink(proc.c_str(), link, sizeof link - 1);
    if (n > 0) jpath.assign(link, static_cast<size_t>(n));
  }
  // Page files by (stream, CPU): descriptor and size, opened on first use.
  std::map<std::pair<uint32_t, uint32_t>, std::pair<int, uint64_t>> files;
  auto page_file = [&](uint32_t stream, uint32_t cpu, std::pair<int, uint64_t>* f) {
    auto it = files.find({stream, cpu});
    if (it != files.end()) {
      *f = it->second;
      return true;
    }
    const std::string name = page_file_name(jpath, stream, cpu);
    const int pfd = jpath.empty() ? -1 : ::open(name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat ps;
    // The recorder's own file: regular, and the journal's owner's.
    if (pfd < 0 || fstat(pfd, &ps) != 0 || !S_ISREG(ps.st_mode) || ps.st_uid != st.st_uid) {
      if (pfd >= 0) ::close(pfd);
      return false;
    }
    out->page_fds.push_back(pfd);
    *f = files[{stream, cpu}] = {pfd, static_cast<uint64_t>(ps.st_size)};
    return true;
  };
  out->bytes = static_cast<uint64_t>(st.st_size);
  char head[kHeaderBytes];
  uint32_t version = 0, hbytes = 0;
  if (!read_at(fd, 0, head, sizeof head) || !is_journal(head, sizeof head)) {
    *err = "not a recording's journal";
    return -EINVAL;
  }
  std::memcpy(&version, head + 8, 4);
  std::memcpy(&hbytes, head + 12, 4);
  if (version != kVersion || hbytes != kHeaderBytes) {
    *err = "a journal of version " + std::to_string(version) + " (this usrtrace reads version 1)";
    return -EINVAL;
  }
  bool have_output = false;
  uint64_t at = kHeaderBytes;
  std::vector<uint8_t> buf;
  auto damaged = [&](const std::string& why) { out->damage = why + " at offset " + std::to_string(at); };
  while (at < out->bytes) {
    char rec[kRecordHead];
    if (at + kRecordHead > out->bytes || !read_at(fd, at, rec, sizeof rec)) {
      damaged("a record cut short");
      break;
    }
    uint32_t kind;
    uint64_t len;
    std::memcpy(&kind, rec, 4);
    std::memcpy(&len, rec + 8, 8);
    const uint64_t body = at + kRecordHead, avail = out->bytes - body;
    if (kind == kPages) {
      char ids[8];
      if (len < 8 || avail < 8 || !read_at(fd, body, ids, 8)) {
        damaged("a page record cut short");
        break;
      }
      uint32_t stream, cpu;
      std::memcpy(&stream, ids, 4);
      std::memcpy(&cpu, ids + 4, 4);
      if (stream >= out->streams.size() || cpu >= out->streams[stream].cpus.size()) {
        damaged("pages of an unknown stream or CPU");
        break;
      }
      Journal::Stream& s = out->streams[stream];
      const uint64_t want = len - 8;
      uint64_t have = std::min(want, avail - 8);
      if (want % s.page_size != 0) {
        damaged("a page record that is not whole pages");
        break;
      }
      // Pages the journal holds, not a hole (see kPagesIn below).
      const off_t h = have > 0 ? ::lseek(fd, static_cast<off_t>(body + 8), SEEK_HOLE) : -1;
      const bool hole = h >= 0 && static_cast<uint64_t>(h) < body + 8 + have;
      if (hole) have = static_cast<uint64_t>(h) - (body + 8);
      const uint64_t whole = have / s.page_size * s.page_size;
      if (whole > 0) {
        s.cpus[cpu].extents.push_back({body + 8, whole});
        out->pages += whole / s.page_size;
      }
      if (hole) {
        damaged("a page record over a hole in the journal (its whole pages before it are kept)");
        break;
      }
      if (have < want) {
        damaged("a page record cut short (its whole pages are kept)");
        break;
      }
      at = body + len + (8 - len % 8) % 8;
      continue;
    }
    if (kind == kPagesIn || kind == kPagesGone) {
      char r[24];
      if (len != sizeof r || avail < sizeof r || !read_at(fd, body, r, sizeof r)) {
        damaged("a page record cut short");
        break;
      }
      uint32_t stream, cpu;
      uint64_t off, n;
      std::memcpy(&stream, r, 4);
      std::memcpy(&cpu, r + 4, 4);
      std::memcpy(&off, r + 8, 8);
      std::memcpy(&n, r + 16, 8);
      if (stream >= out->streams.size() || cpu >= out->streams[stream].cpus.size()) {
        damaged("pages of an unknown stream or CPU");
        break;
      }
      Journal::Stream& s = out->streams[stream];
      CpuData& c = s.cpus[cpu];
      const uint64_t start = page_file_start(s.page_size);
      if (n == 0 || n % s.page_size != 0 || off < start || (off - start) % s.page_size != 0 ||
          n > UINT64_MAX - off) {
        damaged("a page record that is not whole pages of its page file");
        break;
      }
      if (kind == kPagesGone) {
        const uint64_t gone = cut_extents(&c.extents, off, n) / s.page_size;
        out->pages -= gone;
        out->pages_gone += gone;
        at = body + len + (8 - len % 8) % 8;
        continue;
      }
      std::pair<int, uint64_t> f;
      if (!page_file(stream, cpu, &f)) {
        damaged("pages in a page file that is not there (" + page_file_name(jpath, stream, cpu) + ")");
        break;
      }
      // After what the file held before, or where kPagesGone made room; in
      // the file.
      const bool follows = !c.extents.empty() && off == c.extents.back().offset + c.extents.back().size;
      if ((!c.extents.empty() && c.fd != f.first) || (!follows && overlaps(c.extents, off, n))) {
        damaged("a page record over pages its page file still holds");
        break;
      }
      // A ring that comes round is two or three runs; many more is not a
      // recorder's (and would make each cut cost as much).
      if (!follows && c.extents.size() >= kMaxRuns) {
        damaged("a page file in more than " + std::to_string(kMaxRuns) + " runs");
        break;
      }
      uint64_t have = f.second > off ? std::min(n, (f.second - off) / s.page_size * s.page_size) : 0;
      // Only pages the file holds: a recorder writes every page it names,
      // so a hole (a sparse file: 256 MiB named, no block on disk) is not
      // its, and must not make the reader write what the journal says.
      bool hole = false;
      if (have > 0) {
        const off_t h = ::lseek(f.first, static_cast<off_t>(off), SEEK_HOLE);
        if (h >= 0 && static_cast<uint64_t>(h) < off + have) {
          have = (static_cast<uint64_t>(h) - off) / s.page_size * s.page_size;
          hole = true;
        }
      }
      if (have > 0) {
        c.fd = f.first;
        if (follows)
          c.extents.back().size += have;  // one run: the pages follow each other
        else
          c.extents.push_back({off, have});
        out->pages += have / s.page_size;
      }
      if (hole) {
        damaged("pages that the page file " + page_file_name(jpath, stream, cpu) +
                " does not hold (a hole; the pages before it are kept)");
        break;
      }
      if (have < n) {
        damaged("a page file shorter than its records (its whole pages are kept)");
        break;
      }
      at = body + len + (8 - len % 8) % 8;
      continue;
    }
    const uint64_t limit = kind == kMeta ? kMaxMeta : kMaxSmallRecord;
    if (len > limit) {
      damaged("a record of " + std::to_string(len) + " bytes");
      break;
    }
    if (len > avail) {
      damaged("a record cut short");
      break;
    }
    buf.resize(static_cast<size_t>(len));
    if (!read_at(fd, body, buf.data(), buf.size())) {
      damaged("an unreadable record");
      break;
    }
    Cursor c{buf.data(), buf.size()};
    bool bad = false;
    switch (kind) {
      case kOutput: {
        const uint32_t v = c.u32(), z = c.u32();
        std::string o = c.str();
        if (!c.ok || (v != 6 && v != 7) || z > 1 || o.empty() || have_output) {
          bad = true;
          break;
        }
        out->file_version = static_cast<int>(v);
        out->compress = z == 1;
        out->output = std::move(o);
        have_output = true;
        break;
      }
      case kProcess: {
        const uint32_t id = c.u32(), pid = c.u32();
        std::string prefix = c.str();
        if (!c.ok || id != out->processes.size() || id >= kMaxIds || (id == 0) != prefix.empty()) {
          bad = true;
          break;
        }
        Journal::Process p;
        p.pid = static_cast<int>(pid);
        p.prefix = std::move(prefix);
        out->processes.push_back(std::move(p));
        break;
      }
      case kStream: {
        const uint32_t id = c.u32(), proc = c.u32(), page = c.u32(), cpus = c.u32();
        std::string inst = c.str();
        if (!c.ok || id != out->streams.size() || id >= kMaxIds || proc >= out->processes.size() ||
            !journal_stream_ok(page, cpus)) {
          bad = true;
          break;
        }
        Journal::Stream s;
        s.process = proc;
        s.instance = std::move(inst);
        s.page_size = page;
        s.cpus.assign(cpus, CpuData{fd, {}});
        out->streams.push_back(std::move(s));
        break;
      }
      case kMeta: {
        const uint32_t proc = c.u32();
        control::RemoteMeta m;
        if (!c.ok || proc >= out->processes.size() || control::decode_meta(c.p, c.n, &m) != 0) {
          bad = true;
          break;
        }
        out->processes[proc].meta = std::move(m);
        out->processes[proc].have_meta = true;
        break;
      }
      default:
        bad = true;
    }
    if (bad) {
      damaged("a record that does not decode (kind " + std::to_string(kind) + ")");
      break;
    }
    at = body + len + (8 - len % 8) % 8;
  }
  if (!have_output) {
    *err = "a journal with no output record" + (out->damage.empty() ? "" : " (" + out->damage + ")");
    return -EINVAL;
  }
  return 0;
}

namespace {

// The output's metadata and buffers from the journal: the first process's
// metadata, the others' events and thread names joined to it.
int assemble(const Journal& j, const std::vector<uint32_t>& skip, Metadata* meta_out,
             std::vector<BufferData>* buffers, std::string* err) {
  auto skipped = [&](uint32_t p) { return std::find(skip.begin(), skip.end(), p) != skip.end(); };
  if (j.processes.empty() || !j.processes[0].have_meta) {
    *err = "the journal holds no metadata of the recorded process (it was killed before the recording began)";
    return -EINVAL;
  }
  Metadata meta = j.processes[0].meta.meta;
  for (uint32_t p = 1; p < j.processes.size(); ++p)
    // Their events and thread names join the file's; their time stamps are
    // on the same clock, converted with the first process's calibration.
    if (j.processes[p].have_meta && !skipped(p)) {
      keep_departed(j.processes[p].meta.meta, &meta);
      for (const std::string& maps : j.processes[p].meta.meta.procmaps) meta.procmaps.push_back(maps);
    }
  for (const Journal::Stream& s : j.streams) {
    const Journal::Process& proc = j.processes[s.process];
    if (skipped(s.process) || !proc.have_meta) continue;
    BufferData b;
    b.name = proc.prefix.empty()  ? s.instance
             : s.instance.empty() ? proc.prefix
                                  : proc.prefix + ":" + s.instance;
    b.page_size = s.page_size;
    b.clock = clock_name(proc.meta.meta.trace_clock);
    for (const control::InstanceMeta& im : proc.meta.instances)
      if (im.name == s.instance) {
        if (!im.clock.empty()) b.clock = im.clock;
        b.stats = im.stats;
      }
    b.cpus = s.cpus;
    b.stats.resize(b.cpus.size());
    buffers->push_back(std::move(b));
  }
  *meta_out = std::move(meta);
  return 0;
}

// finish_journal without the copy: the largest page file becomes the
// output, its pages where they are (journal.h). 1 when the journal's
// layout does not allow it (then nothing was touched), 0 when the output is
// written, else -errno with *err (the journal and its page files still
// hold every page where the journal says).
int finish_in_place(JournalWriter& w, const Journal& j, const std::vector<uint32_t>& skip, std::string* err) {
  if (j.file_version != 7 || j.compress) return 1;
  auto skipped = [&](uint32_t p) { return std::find(skip.begin(), skip.end(), p) != skip.end(); };
  int best_stream = -1, best_cpu = -1;
  uint64_t best = 0;
  for (size_t si = 0; si < j.streams.size(); ++si) {
    const Journal::Stream& s = j.streams[si];
    if (skipped(s.process) || !j.processes[s.process].have_meta) continue;
    for (size_t ci = 0; ci < s.cpus.size(); ++ci) {
      const CpuData& c = s.cpus[ci];
      if (c.size() <= best) continue;
      if (c.fd == w.fd()) return 1;  // pages in the journal itself: an older layout
      // A ring that came round (max_cpu_bytes) is not one run: copied.
      if (c.extents.size() != 1 || c.extents[0].offset != page_file_start(s.page_size)) continue;
      best = c.size();
      best_stream = static_cast<int>(si);
      best_cpu = static_cast<int>(ci);
    }
  }
  if (best_stream < 0) return 1;
  const auto stream = static_cast<uint32_t>(best_stream), cpu = static_cast<uint32_t>(best_cpu);
  const CpuData& d = j.streams[stream].cpus[cpu];
  InPlaceFile f;
  f.fd = w.page_file_fd(stream, cpu);
  f.path = w.page_file(stream, cpu);
  if (f.fd < 0) return 1;
  f.append_at = (d.extents[0].offset + d.size() + 4095) / 4096 * 4096;
  Metadata meta;
  std::vector<BufferData> buffers;
  if (int rc = assemble(j, skip, &meta, &buffers, err); rc < 0) return rc;
  for (BufferData& b : buffers)
    for (CpuData& c : b.cpus) c.in_place = c.fd == d.fd && c.size() > 0;
  RecordOptions o;
  o.output = w.output();  // the recorder's own, not what the file says
  o.file_version = j.file_version;
  o.compress = j.compress;
  const int rc = write_output(o, std::move(meta), std::move(buffers), err, &f);
  if (rc == 0)
    w.installed(stream, cpu);
  else  // the page file as it was: what the copy, or recover, reads
    (void)::ftruncate(f.fd, static_cast<off_t>(d.extents[0].offset + d.size()));
  return rc;
}

}  // namespace

int write_from_journal(const Journal& j, const std::string& output, const std::vector<uint32_t>& skip,
                       std::string* err) {
  if (output.empty()) {
    *err = "no output named";
    return -EINVAL;
  }
  Metadata meta;
  std::vector<BufferData> buffers;
  if (int rc = assemble(j, skip, &meta, &buffers, err); rc < 0) return rc;
  RecordOptions o;
  o.output = output;
  o.file_version = j.file_version;
  o.compress = j.compress;
  return write_output(o, std::move(meta), std::move(buffers), err);
}

int finish_journal(JournalWriter& w, const std::vector<uint32_t>& skip, std::string* err) {
  Journal j;
  int rc = read_journal(w.fd(), &j, err, w.path());
  if (rc == 0 && !j.damage.empty()) {
    // The writer takes nothing the reader refuses (journal_stream_ok), so
    // this is a file changed under us or a fault: said, never a trace.dat
    // that silently ends where the journal stopped reading.
    *err = "the recording's journal " + w.path() + " reads back only in part (" + j.damage + ")";
    rc = -EIO;
  }
  if (rc == 0) {
    std::string in_place_err;
    rc = finish_in_place(w, j, skip, &in_place_err);
    // Not possible, or it failed (a rename across filesystems, when the
    // output is a link to another): the copy, from the same pages.
    if (rc != 0) rc = write_from_journal(j, w.output(), skip, err);
  }
  if (rc == 0) {
    w.remove();
    return 0;
  }
  if (w.page_bytes() > 0) {
    w.keep();
    *err += "; the " + mib(w.page_bytes()) + " of pages recorded are kept in " + w.path() +
            " (`usrtrace recover " + w.path() + "` writes the file from them)";
  }
  return rc;
}

}  // namespace usrtrace::tracedat
