// The record journal read back: recover, and a recording's end (journal.h;
// docs/design/record-journal.md). Every length, index and count is checked
// against the file: a journal is untrusted input.
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

#include "record/journal_format.h"
#include "record/recorder.h"
#include "tracedat/chunks.h"

namespace usrtrace::tracedat {

using namespace journal_format;

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

int read_journal(int fd, Journal* out, std::string* err, const std::string& path, bool check_chunks) {
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
  std::vector<char> frame, unpacked;  // check_chunks
  ChunkDecompressor unzstd;
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
      // In the journal, as the CPU's pages before them (a compressed
      // recording's compressor writes pages it cannot keep up with as they
      // are, between its chunks).
      if (!s.cpus[cpu].extents.empty() && s.cpus[cpu].fd != fd) {
        damaged("pages in the journal of a CPU whose pages are in its page file");
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
    if (kind == kChunks) {
      // Whole chunks, each head checked before its frame is used: a record
      // cut short keeps the whole chunks before the cut; a chunk that does
      // not check out ends the journal there.
      char ids[8];
      if (len < 8 || avail < 8 || !read_at(fd, body, ids, 8)) {
        damaged("a chunk record cut short");
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
      CpuData& c = s.cpus[cpu];
      if (!c.extents.empty() && c.fd != fd) {
        damaged("compressed pages of a CPU whose pages are in its page file");
        break;
      }
      const uint64_t want = len - 8, data = body + 8;
      uint64_t have = std::min(want, avail - 8);
      // Chunks the journal holds, not a hole (as for kPages).
      const off_t h = have > 0 ? ::lseek(fd, static_cast<off_t>(data), SEEK_HOLE) : -1;
      const bool hole = h >= 0 && static_cast<uint64_t>(h) < data + have;
      if (hole) have = static_cast<uint64_t>(h) - data;
      uint64_t done = 0, chunks = 0, bytes = 0;
      std::string bad;
      while (done < have) {
        uint32_t sizes[2];
        if (have - done < kChunkHead || !read_at(fd, data + done, sizes, kChunkHead)) break;
        if (!chunk_head_ok(sizes[0], sizes[1], s.page_size)) {
          bad = "a compressed chunk whose sizes do not check out";
          break;
        }
        if (sizes[0] > have - done - kChunkHead) break;
        if (check_chunks) {
          frame.resize(sizes[0]);
          unpacked.resize(sizes[1]);
          if (!read_at(fd, data + done + kChunkHead, frame.data(), frame.size())) break;
          if (!unzstd.decompress(frame.data(), frame.size(), unpacked.data(), unpacked.size())) {
            bad = "a compressed chunk that does not decompress to its size";
            break;
          }
        }
        done += kChunkHead + sizes[0];
        ++chunks;
        bytes += sizes[1];
      }
      if (chunks > 0) {
        c.extents.push_back({data, done, chunks});
        c.chunks += chunks;
        out->pages += bytes / s.page_size;
      }
      if (!bad.empty()) {
        damaged(bad + " (the chunks before it are kept)");
        break;
      }
      if (hole) {
        damaged("a chunk record over a hole in the journal (its whole chunks before it are kept)");
        break;
      }
      if (done < want) {
        damaged(have < want ? "a chunk record cut short (its whole chunks are kept)"
                            : "a chunk record whose chunks do not fill it");
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
      if (c.chunks) {
        damaged("pages of a CPU whose pages are compressed");
        break;
      }
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
      if (c.fd == w.fd() || c.chunks) return 1;  // pages in the journal itself: an older layout
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
  // What the compressor still holds goes to the journal first.
  int rc = w.drain(err);
  // Its own chunks are not decompressed again: the end costs a copy.
  if (rc == 0) rc = read_journal(w.fd(), &j, err, w.path(), /*check_chunks=*/false);
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
