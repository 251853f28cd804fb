// The record journal (journal.h; docs/design/record-journal.md).
#include "record/journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
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

#include "base/sys.h"
#include "function/function.h"
#include "record/journal_format.h"
#include "record/recorder.h"
#include "tracedat/chunks.h"

namespace usrtrace::tracedat {

using namespace journal_format;

namespace {

// The bytes of pages in the whole chunks of the first `n` bytes of a
// kChunks payload (u32 stream, u32 CPU, chunks).
uint64_t chunked_bytes(const std::string& payload, uint64_t n) {
  n = std::min<uint64_t>(n, payload.size());
  uint64_t bytes = 0;
  for (uint64_t at = 8; at + kChunkHead <= n;) {
    uint32_t head[2];
    std::memcpy(head, payload.data() + at, kChunkHead);
    if (at + kChunkHead + head[0] > n) break;
    bytes += head[1];
    at += kChunkHead + head[0];
  }
  return bytes;
}

}  // namespace

JournalWriter::~JournalWriter() {
  if (compressor_.joinable()) {
    {
      std::lock_guard<std::mutex> q(qmu_);
      stopping_ = true;
    }
    q_put_.notify_all();
    compressor_.join();  // after what was queued is written
  }
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
  // A compressed file without a size limit: compressed as recorded (a
  // ring's pages are overwritten in place, so -m keeps page files and is
  // compressed at the end).
  compress_ = opts.compress && !page_files_;
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
  if (int rc = append(kOutput, p, nullptr, 0, err); rc < 0) return rc;
  if (compress_) {
    // It blocks every signal, as the recorder threads do: the program's
    // handlers run in its own threads.
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, function::patch::sweep_signal());  // the patcher's sweep (function/function.h)
    pthread_sigmask(SIG_SETMASK, &all, &old);
    compressor_ = std::thread([this] {
      base::name_own_thread("usrtrace-zstd");
      // At the recorder's priority: a lower one (nice 10 was tried) lets
      // other work on the machine starve it even of the writes it does
      // when it is behind, and the recorder then waits on it.
      compress_loop();
    });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  return 0;
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

// The journal has not failed, and `bytes` are whole pages of a known stream
// (*unit: its page size). Context: mu_ held.
int JournalWriter::check_pages_locked(uint32_t stream, size_t bytes, uint32_t* unit, std::string* err) {
  if (error_) {
    *err = error_text_;
    return -error_;
  }
  *unit = stream < stream_page_size_.size() ? stream_page_size_[stream] : 0;
  if (*unit == 0 || bytes % *unit != 0) {
    *err = "pages of an unknown stream, or not whole pages";
    return -EINVAL;
  }
  return 0;
}

int JournalWriter::put_pages(uint32_t stream, uint32_t cpu, const void* pages, size_t bytes,
                             std::string* err) {
  if (bytes == 0) return 0;
  if (page_files_) return put_in_page_file(stream, cpu, pages, bytes, err);
  if (compress_) {
    {
      std::lock_guard<std::mutex> l(mu_);
      uint32_t unit = 0;
      if (int rc = check_pages_locked(stream, bytes, &unit, err); rc < 0) return rc;
    }
    std::unique_lock<std::mutex> q(qmu_);
    // Full: the recorder waits (the program's buffers hold its pages).
    auto room = [&] { return queued_ == 0 || queued_ + bytes <= kCompressQueueBytes; };
    if (!room()) {
      ++waiting_;  // the compressor is behind (compress_loop)
      q_space_.wait(q, room);
      --waiting_;
    }
    Batch b{stream, cpu, {}};
    if (!spare_.empty()) {
      b.pages = std::move(spare_.back());
      spare_.pop_back();
    }
    b.pages.assign(static_cast<const char*>(pages), bytes);
    queue_.push_back(std::move(b));
    queued_ += bytes;
    q.unlock();
    q_put_.notify_one();
    return 0;
  }
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
  uint32_t unit = 0;
  if (int rc = check_pages_locked(stream, bytes, &unit, err); rc < 0) return rc;
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

int JournalWriter::drain(std::string* err) {
  if (compress_) {
    std::unique_lock<std::mutex> q(qmu_);
    q_space_.wait(q, [&] { return queued_ == 0; });
  }
  std::lock_guard<std::mutex> l(mu_);
  if (error_) {
    *err = error_text_;
    return -error_;
  }
  return 0;
}

// The compressor thread: takes up to half the queue at a time, cuts each
// CPU's pages of it (in the order put) into chunks of kChunkPages pages,
// and appends one kChunks record per CPU. The queue's bytes are given back
// once they are in the journal: the bound is on what a death would lose.
// When it is behind (a recorder is waiting for room in the queue when it
// takes a round), it writes that round's pages as they are (kPages, in the
// same order), for the end of the recording to compress: the recorder then
// waits on a write, not on zstd, and the program's buffers do not grow for
// the compressor's sake. It compresses what a spare CPU can.
void JournalWriter::compress_loop() {
  ChunkCompressor z(WriteOptions{}.zstd_level);
  std::vector<Batch> work;
  std::string pages, chunks;
  for (;;) {
    size_t taken = 0;
    bool behind = false;
    {
      std::unique_lock<std::mutex> q(qmu_);
      q_put_.wait(q, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping, and all written
      while (!queue_.empty() &&
             (taken == 0 || taken + queue_.front().pages.size() <= kCompressQueueBytes / 2)) {
        taken += queue_.front().pages.size();
        work.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      behind = waiting_ > 0;
    }
    // Each CPU's pages in one run: its batches, in order.
    std::map<std::pair<uint32_t, uint32_t>, std::vector<const Batch*>> by_cpu;
    for (const Batch& b : work) by_cpu[{b.stream, b.cpu}].push_back(&b);
    for (const auto& [key, batches] : by_cpu) {
      uint32_t unit = 0;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (error_) break;  // the recording has failed: nothing more is written
        unit = stream_page_size_[key.first];
      }
      chunks.clear();
      put32(&chunks, key.first);
      put32(&chunks, key.second);
      if (behind) {
        std::string ignored;
        std::lock_guard<std::mutex> l(mu_);
        for (const Batch* b : batches)
          if (append_locked(kPages, chunks, b->pages.data(), b->pages.size(), &ignored) < 0) break;
        if (error_) break;
        continue;
      }
      const std::string* run = &batches[0]->pages;
      if (batches.size() > 1) {
        pages.clear();
        for (const Batch* b : batches) pages += b->pages;
        run = &pages;
      }
      const int64_t count = z.pages(run->data(), run->size(), unit, &chunks);
      std::lock_guard<std::mutex> l(mu_);
      if (count < 0) {
        if (!error_) fail_locked(ENOMEM, "compressing the recorded pages");
        break;
      }
      std::string ignored;
      if (append_locked(kChunks, chunks, nullptr, 0, &ignored) < 0) break;
    }
    {
      std::lock_guard<std::mutex> q(qmu_);
      for (Batch& b : work)
        if (spare_.size() < 16) spare_.push_back(std::move(b.pages));
      queued_ -= taken;
    }
    work.clear();
    q_space_.notify_all();
  }
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
      if (kind == kChunks) page_bytes_ += chunked_bytes(head, at - (end_ + sizeof rec));
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
  if (kind == kChunks) page_bytes_ += chunked_bytes(head, head.size());
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

}  // namespace usrtrace::tracedat
