// trace.dat writer. Layouts (all numbers little-endian, as written by an
// x86-64 trace-cmd):
//
//  v6: header | header_page | header_event | ftrace formats | systems |
//      kallsyms | printk | cmdlines | u32 cpus | "options  \0" options... |
//      "flyrecord\0" top table + clock | top pages |
//      per other buffer: "flyrecord\0" table + clock | pages
//      (each BUFFER option holds the offset of its "flyrecord\0" block,
//      patched in once known).
//  v7: header + compression name/version + u64 offset of the options |
//      sections 16..21 (metadata, compressed if asked) |
//      per buffer: a BUFFER section with page-aligned per-CPU data
//      (compressed in chunks if asked) |
//      one options section (offsets of the sections above, clock, uname,
//      version, CPU stats, one BUFFER option per buffer, DONE 0).
#include "tracedat/writer.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "tracedat/chunks.h"
#include "tracedat/format.h"

namespace usrtrace::tracedat {
namespace {

static_assert(std::endian::native == std::endian::little, "the writer writes host-endian numbers");

class Out {
 public:
  Out(int fd, std::string* err) : fd_(fd), err_(err) {}
  bool ok() const { return errno_ == 0; }
  int error() const { return -errno_; }
  uint64_t pos() const { return pos_; }

  void bytes(const void* p, size_t n) {
    if (!ok()) return;
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd_, c, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return fail(errno, "write");
      }
      c += w;
      n -= static_cast<size_t>(w);
      pos_ += static_cast<uint64_t>(w);
    }
  }
  void str(const std::string& s) { bytes(s.c_str(), s.size() + 1); }  // with its NUL
  template <class T>
  void num(T v) {
    bytes(&v, sizeof v);
  }
  // Zero-fills up to the next multiple of `align`.
  void pad_to(uint64_t align) {
    static const char zeros[4096] = {};
    uint64_t n = (align - pos_ % align) % align;
    while (n > 0 && ok()) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, sizeof zeros));
      bytes(zeros, k);
      n -= k;
    }
  }
  // Overwrites `n` bytes at `at` (a placeholder written before).
  void patch(uint64_t at, const void* p, size_t n) {
    if (!ok()) return;
    if (::pwrite(fd_, p, n, static_cast<off_t>(at)) != static_cast<ssize_t>(n))
      fail(errno ? errno : EIO, "write");
  }
  template <class T>
  void patch_num(uint64_t at, T v) {
    patch(at, &v, sizeof v);
  }
  // Appends `n` bytes of `in` at `off`: copy_file_range (no copy through
  // user space), else read and write.
  void copy_from(int in, uint64_t off, uint64_t n, std::vector<char>* scratch) {
    loff_t from = static_cast<loff_t>(off);
    while (n > 0 && ok()) {
      const ssize_t c =
          ::copy_file_range(in, &from, fd_, nullptr, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)), 0);
      if (c > 0) {
        n -= static_cast<uint64_t>(c);
        pos_ += static_cast<uint64_t>(c);
        continue;
      }
      if (c < 0 && errno == EINTR) continue;
      break;  // not supported here (or EOF): the plain way
    }
    off = static_cast<uint64_t>(from);
    while (n > 0 && ok()) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(scratch->size(), n));
      if (!read_in(in, off, scratch->data(), k)) return;
      bytes(scratch->data(), k);
      off += k;
      n -= k;
    }
  }
  // Reads `size` bytes of `in` at `off` into `buf` (exactly, or fails).
  bool read_in(int in, uint64_t off, void* buf, size_t size) {
    char* c = static_cast<char*>(buf);
    while (size > 0) {
      ssize_t r = ::pread(in, c, size, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        fail(r < 0 ? errno : EIO, "read of the CPU data");
        return false;
      }
      c += r;
      off += static_cast<uint64_t>(r);
      size -= static_cast<size_t>(r);
    }
    return true;
  }
  // Goes on writing at `at`.
  void seek(uint64_t at) {
    if (!ok()) return;
    if (::lseek(fd_, static_cast<off_t>(at), SEEK_SET) < 0) return fail(errno, "seek");
    pos_ = at;
  }
  void fail(int e, const char* what) {
    if (errno_) return;
    errno_ = e ? e : EIO;
    *err_ = std::string(what) + ": " + std::strerror(errno_);
  }

 private:
  int fd_;
  std::string* err_;
  uint64_t pos_ = 0;
  int errno_ = 0;
};

// The metadata blocks, as v6 writes them in sequence and v7 as sections.
std::string header_info(const Metadata& m) {
  std::string b;
  auto put64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  b.append("header_page", 12);
  put64(m.header_page.size());
  b += m.header_page;
  b.append("header_event", 13);
  put64(m.header_event.size());
  b += m.header_event;
  return b;
}
void put32(std::string* b, uint32_t v) { b->append(reinterpret_cast<const char*>(&v), 4); }
void put64(std::string* b, uint64_t v) { b->append(reinterpret_cast<const char*>(&v), 8); }
std::string ftrace_events(const Metadata& m) {
  std::string b;
  put32(&b, static_cast<uint32_t>(m.ftrace_formats.size()));
  for (const std::string& f : m.ftrace_formats) {
    put64(&b, f.size());
    b += f;
  }
  return b;
}
std::string event_formats(const Metadata& m) {
  std::string b;
  put32(&b, static_cast<uint32_t>(m.systems.size()));
  for (const auto& [sys, formats] : m.systems) {
    b.append(sys.c_str(), sys.size() + 1);
    put32(&b, static_cast<uint32_t>(formats.size()));
    for (const std::string& f : formats) {
      put64(&b, f.size());
      b += f;
    }
  }
  return b;
}
std::string sized32(const std::string& text) {
  std::string b;
  put32(&b, static_cast<uint32_t>(text.size()));
  return b + text;
}
std::string sized64(const std::string& text) {
  std::string b;
  put64(&b, text.size());
  return b + text;
}

void option(std::string* b, uint16_t id, const void* data, uint32_t size) {
  b->append(reinterpret_cast<const char*>(&id), 2);
  put32(b, size);
  b->append(static_cast<const char*>(data), size);
}
void option_str(std::string* b, uint16_t id, const std::string& s) {
  option(b, id, s.c_str(), static_cast<uint32_t>(s.size() + 1));
}
void option_u64(std::string* b, uint16_t id, uint64_t v) { option(b, id, &v, 8); }

// TSC2NSEC (mult, shift, offset 0) and OFFSET ("%lld" ns), for raw TSC stamps.
void tsc_options(std::string* opts, const Metadata& meta) {
  if (meta.tsc2nsec.mult == 0) return;
  std::string d;
  put32(&d, meta.tsc2nsec.mult);
  put32(&d, meta.tsc2nsec.shift);
  put64(&d, 0);
  option(opts, kOptTsc2Nsec, d.data(), static_cast<uint32_t>(d.size()));
  if (meta.tsc2nsec.offset != 0) option_str(opts, kOptOffset, std::to_string(meta.tsc2nsec.offset));
}

std::string cpustat_text(int cpu, const std::string& stats) {
  return "CPU: " + std::to_string(cpu) + "\n" + stats;
}

int check(const Metadata& meta, const std::vector<BufferData>& buffers, const WriteOptions& opts,
          std::string* err) {
  auto bad = [&](const std::string& why) {
    *err = why;
    return -EINVAL;
  };
  if (opts.version != 6 && opts.version != 7) return bad("file version must be 6 or 7");
  if (opts.version == 6 && opts.compression != Compression::kNone)
    return bad("compression needs file version 7");
  if (buffers.empty() || !buffers[0].name.empty()) return bad("the first buffer must be the top instance");
  if (meta.nr_cpus <= 0 || meta.page_size == 0 || (meta.page_size & (meta.page_size - 1)))
    return bad("bad CPU count or page size");
  for (const BufferData& b : buffers) {
    if (b.cpus.size() > static_cast<size_t>(meta.nr_cpus)) return bad("more CPUs than the file has");
    if (b.page_size == 0 || (b.page_size & (b.page_size - 1))) return bad("bad page size");
    for (const CpuData& c : b.cpus) {
      uint64_t chunks = 0;
      for (const Extent& e : c.extents) {
        if (e.chunks == 0 && e.size % b.page_size != 0) return bad("CPU data is not whole pages");
        chunks += e.chunks ? e.chunks
                           : (e.size + uint64_t{b.page_size} * kChunkPages - 1) / b.page_size / kChunkPages;
      }
      if (chunks > UINT32_MAX) return bad("more compressed chunks than a file holds");
      if (!c.in_place) continue;
      if (c.chunks) return bad("compressed CPU data cannot be in place");
      // The header's first page stays free of it; the sections come after.
      if (opts.version != 7 || opts.compression != Compression::kNone)
        return bad("CPU data in place needs file version 7 without compression");
      if (c.extents.size() != 1 || c.extents[0].offset < 4096 || c.extents[0].offset % b.page_size != 0 ||
          c.extents[0].offset + c.extents[0].size > opts.append_at)
        return bad("CPU data in place must be one page-aligned run before the sections");
    }
  }
  if (opts.append_at % 4096 != 0) return bad("the sections must start on a page");
  return 0;
}

// The pages of CPU data with chunks (CpuData::chunks): the pages as they
// are, the chunks decompressed, each chunk's head checked before its frame
// is read, and the frame must give exactly the size its head says (a
// journal is untrusted input).
void copy_decompressed(Out& out, const CpuData& c, uint32_t page_size) {
  std::vector<char> frame, pages, scratch(uint64_t{page_size} * kChunkPages);
  ChunkDecompressor d;
  for (const Extent& e : c.extents) {
    if (e.chunks == 0) {
      out.copy_from(c.fd, e.offset, e.size, &scratch);
      continue;
    }
    for (uint64_t at = e.offset, end = e.offset + e.size; at < end && out.ok();) {
      uint32_t head[2];
      if (end - at < kChunkHead || !out.read_in(c.fd, at, head, kChunkHead)) {
        out.fail(EINVAL, "a compressed chunk cut short");
        return;
      }
      if (!chunk_head_ok(head[0], head[1], page_size) || head[0] > end - at - kChunkHead) {
        out.fail(EINVAL, "a compressed chunk whose sizes do not check out");
        return;
      }
      frame.resize(head[0]);
      pages.resize(head[1]);
      if (!out.read_in(c.fd, at + kChunkHead, frame.data(), frame.size())) return;
      if (!d.decompress(frame.data(), frame.size(), pages.data(), pages.size())) {
        out.fail(EINVAL, "a compressed chunk that does not decompress to its size");
        return;
      }
      out.bytes(pages.data(), pages.size());
      at += kChunkHead + head[0];
    }
  }
}

// ---- v6 ----

void write_flyrecord_v6(Out& out, const Metadata& meta, const BufferData& b, bool with_clock) {
  out.bytes("flyrecord", 10);
  const uint64_t table = out.pos();
  for (int cpu = 0; cpu < meta.nr_cpus; ++cpu) {
    out.num<uint64_t>(0);
    out.num<uint64_t>(0);
  }
  // trace-cmd reads the clock here only when a TRACECLOCK option exists,
  // and always writes it; so do we.
  if (with_clock) {
    out.num<uint64_t>(meta.trace_clock.size());
    out.bytes(meta.trace_clock.data(), meta.trace_clock.size());
  }
  for (size_t cpu = 0; cpu < b.cpus.size(); ++cpu) {
    const CpuData& c = b.cpus[cpu];
    if (c.size() == 0) continue;
    out.pad_to(b.page_size);
    const uint64_t at = out.pos();
    if (c.chunks) {
      copy_decompressed(out, c, b.page_size);
    } else {
      std::vector<char> chunk(std::min<uint64_t>(c.size(), uint64_t{b.page_size} * kChunkPages));
      for (const Extent& e : c.extents) out.copy_from(c.fd, e.offset, e.size, &chunk);
    }
    out.patch_num<uint64_t>(table + cpu * 16, at);
    out.patch_num<uint64_t>(table + cpu * 16 + 8, out.pos() - at);
  }
}

int write_v6(Out& out, const Metadata& meta, const std::vector<BufferData>& buffers) {
  out.str("6");
  out.num<uint8_t>(0);  // little endian
  out.num<uint8_t>(8);  // long size
  out.num<uint32_t>(meta.page_size);
  const std::string blocks = header_info(meta) + ftrace_events(meta) + event_formats(meta) +
                             sized32(meta.kallsyms) + sized32(meta.printk) + sized64(meta.cmdlines);
  out.bytes(blocks.data(), blocks.size());
  out.num<uint32_t>(static_cast<uint32_t>(meta.nr_cpus));

  std::string opts;
  const bool clock = !meta.trace_clock.empty();
  if (clock) option_str(&opts, kOptTraceClock, meta.trace_clock);
  if (!meta.uname.empty()) option_str(&opts, kOptUname, meta.uname);
  if (!meta.version.empty()) option_str(&opts, kOptVersion, meta.version);
  for (const std::string& maps : meta.procmaps) option_str(&opts, kOptProcMaps, maps);
  const uint32_t ncpus = static_cast<uint32_t>(meta.nr_cpus);
  option(&opts, kOptCpuCount, &ncpus, 4);
  tsc_options(&opts, meta);
  for (size_t cpu = 0; cpu < buffers[0].stats.size(); ++cpu)
    option_str(&opts, kOptCpuStat, cpustat_text(static_cast<int>(cpu), buffers[0].stats[cpu]));
  // BUFFER options: u64 offset (patched below) + name.
  std::vector<uint64_t> buffer_slots;
  for (size_t i = 1; i < buffers.size(); ++i) {
    std::string data(8, '\0');
    data.append(buffers[i].name.c_str(), buffers[i].name.size() + 1);
    buffer_slots.push_back(opts.size() + 6);
    option(&opts, kOptBuffer, data.data(), static_cast<uint32_t>(data.size()));
  }
  out.bytes("options  ", 10);
  const uint64_t opts_at = out.pos();
  out.bytes(opts.data(), opts.size());
  out.num<uint16_t>(kOptDone);

  write_flyrecord_v6(out, meta, buffers[0], clock);
  for (size_t i = 1; i < buffers.size(); ++i) {
    out.patch_num<uint64_t>(opts_at + buffer_slots[i - 1], out.pos());
    write_flyrecord_v6(out, meta, buffers[i], clock);
  }
  return out.ok() ? 0 : out.error();
}

// ---- v7 ----

using Compressor = ChunkCompressor;

// Compresses `e` of `fd` into chunks of `chunk` bytes, appended in order,
// on up to zs.size() threads (one compressor each): the pages a recording
// could not compress while it ran are compressed at its end, when the
// program is gone and every CPU is free. Each round reads kRound chunks
// per thread, compresses them, then writes them in order. The helper
// threads block every signal (in-process, the program's handlers must not
// run on them).
void compress_extent(Out& out, int fd, const Extent& e, size_t chunk,
                     std::vector<std::unique_ptr<Compressor>>& zs) {
  constexpr size_t kRound = 8;
  const size_t group = zs.size() * kRound;
  std::vector<std::string> in(group), packed(group);
  for (uint64_t done = 0; done < e.size && out.ok();) {
    size_t n = 0;
    for (; n < group && done < e.size; ++n) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(chunk, e.size - done));
      in[n].resize(k);
      if (!out.read_in(fd, e.offset + done, in[n].data(), k)) return;
      done += k;
    }
    std::atomic<bool> failed{false};
    auto work = [&](size_t w) {
      for (size_t i = w; i < n; i += zs.size()) {
        packed[i].clear();
        if (!zs[w]->block(in[i].data(), in[i].size(), &packed[i])) failed.store(true);
      }
    };
    std::vector<std::thread> helpers;
    if (n > 1 && zs.size() > 1) {
      sigset_t all, old;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);
      for (size_t w = 1; w < zs.size() && w < n; ++w) helpers.emplace_back(work, w);
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    work(0);
    for (std::thread& t : helpers) t.join();
    if (failed.load()) return out.fail(ENOMEM, "zstd compression");
    for (size_t i = 0; i < n; ++i) out.bytes(packed[i].data(), packed[i].size());
  }
}

// Writes a section; returns its offset.
uint64_t section(Out& out, uint16_t id, const std::string& data, Compressor* z) {
  const uint64_t at = out.pos();
  std::string body;
  if (z) {
    if (!z->block(data.data(), data.size(), &body)) {
      out.fail(ENOMEM, "zstd compression");
      return at;
    }
  }
  const std::string& payload = z ? body : data;
  out.num<uint16_t>(id);
  out.num<uint16_t>(z ? kSectionCompressed : 0);
  out.num<uint32_t>(0);  // description: no STRINGS option
  out.num<uint64_t>(payload.size());
  out.bytes(payload.data(), payload.size());
  return at;
}

struct WrittenCpu {
  uint32_t cpu;
  uint64_t offset, size;
};

// A BUFFER section: page-aligned per-CPU data. Returns the section offset.
uint64_t flyrecord_v7(Out& out, const BufferData& b, std::vector<std::unique_ptr<Compressor>>* zs,
                      std::vector<WrittenCpu>* cpus) {
  Compressor* z = zs->empty() ? nullptr : (*zs)[0].get();
  const uint64_t at = out.pos();
  out.num<uint16_t>(kOptBuffer);
  out.num<uint16_t>(z ? kSectionCompressed : 0);
  out.num<uint32_t>(0);
  const uint64_t size_at = out.pos();
  out.num<uint64_t>(0);
  const uint64_t data_start = out.pos();
  std::vector<char> chunk(uint64_t{b.page_size} * kChunkPages);
  for (size_t cpu = 0; cpu < b.cpus.size() && out.ok(); ++cpu) {
    const CpuData& c = b.cpus[cpu];
    out.pad_to(b.page_size);
    const uint64_t cpu_at = out.pos();
    const uint64_t size = c.size();
    if (size == 0) {
      cpus->push_back({static_cast<uint32_t>(cpu), cpu_at, 0});
      continue;
    }
    if (c.in_place) {  // named, not copied (check() saw it is before us)
      cpus->push_back({static_cast<uint32_t>(cpu), c.extents[0].offset, size});
      continue;
    }
    if (!z && c.chunks) {
      copy_decompressed(out, c, b.page_size);
    } else if (!z) {
      for (const Extent& e : c.extents) out.copy_from(c.fd, e.offset, e.size, &chunk);
    } else {
      // Chunks of kChunkPages pages of the CPU's stream, never across
      // extents; those compressed while recorded (record/journal.h) taken
      // as they are.
      uint64_t nchunks = 0;
      for (const Extent& e : c.extents)
        nchunks += e.chunks ? e.chunks : (e.size + chunk.size() - 1) / chunk.size();
      out.num<uint32_t>(static_cast<uint32_t>(nchunks));
      for (const Extent& e : c.extents) {
        if (e.chunks) {
          out.copy_from(c.fd, e.offset, e.size, &chunk);
          continue;
        }
        compress_extent(out, c.fd, e, chunk.size(), *zs);
      }
    }
    // As trace-cmd writes it: a compressed CPU's size leaves out the chunk count.
    cpus->push_back({static_cast<uint32_t>(cpu), cpu_at, out.pos() - cpu_at - (z ? 4 : 0)});
  }
  out.patch_num<uint64_t>(size_at, out.pos() - data_start);
  return at;
}

int write_v7(Out& out, const Metadata& meta, const std::vector<BufferData>& buffers, const WriteOptions& o) {
  out.str("7");
  out.num<uint8_t>(0);
  out.num<uint8_t>(8);
  out.num<uint32_t>(meta.page_size);
  std::unique_ptr<Compressor> z;
  // CPU data: a compressor per thread, as many as CPUs up to 4.
  std::vector<std::unique_ptr<Compressor>> zs;
  if (o.compression == Compression::kZstd) {
    z = std::make_unique<Compressor>(o.zstd_level);
    const unsigned cpus = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
    for (unsigned i = 0; i < cpus; ++i) zs.push_back(std::make_unique<Compressor>(o.zstd_level));
    out.str("zstd");
    out.str(ZSTD_versionString());
  } else {
    out.str("none");
    out.str("");
  }
  const uint64_t options_slot = out.pos();
  out.num<uint64_t>(0);
  if (o.append_at > out.pos()) out.seek(o.append_at);

  std::string opts;
  option_u64(&opts, kOptHeaderInfo, section(out, kOptHeaderInfo, header_info(meta), z.get()));
  option_u64(&opts, kOptFtraceEvents, section(out, kOptFtraceEvents, ftrace_events(meta), z.get()));
  option_u64(&opts, kOptEventFormats, section(out, kOptEventFormats, event_formats(meta), z.get()));
  option_u64(&opts, kOptKallsyms, section(out, kOptKallsyms, sized32(meta.kallsyms), z.get()));
  option_u64(&opts, kOptPrintk, section(out, kOptPrintk, sized32(meta.printk), z.get()));
  option_u64(&opts, kOptCmdlines, section(out, kOptCmdlines, sized64(meta.cmdlines), z.get()));
  if (!meta.trace_clock.empty()) option_str(&opts, kOptTraceClock, meta.trace_clock);
  if (!meta.uname.empty()) option_str(&opts, kOptUname, meta.uname);
  if (!meta.version.empty()) option_str(&opts, kOptVersion, meta.version);
  for (const std::string& maps : meta.procmaps) option_str(&opts, kOptProcMaps, maps);
  for (size_t cpu = 0; cpu < buffers[0].stats.size(); ++cpu)
    option_str(&opts, kOptCpuStat, cpustat_text(static_cast<int>(cpu), buffers[0].stats[cpu]));
  const uint32_t ncpus = static_cast<uint32_t>(meta.nr_cpus);
  option(&opts, kOptCpuCount, &ncpus, 4);
  tsc_options(&opts, meta);

  for (const BufferData& b : buffers) {
    std::vector<WrittenCpu> cpus;
    const uint64_t at = flyrecord_v7(out, b, &zs, &cpus);
    std::string data;
    put64(&data, at);
    data.append(b.name.c_str(), b.name.size() + 1);
    data.append(b.clock.c_str(), b.clock.size() + 1);
    put32(&data, b.page_size);
    put32(&data, static_cast<uint32_t>(cpus.size()));
    for (const WrittenCpu& c : cpus) {
      put32(&data, c.cpu);
      put64(&data, c.offset);
      put64(&data, c.size);
    }
    option(&opts, kOptBuffer, data.data(), static_cast<uint32_t>(data.size()));
  }
  option_u64(&opts, kOptDone, 0);

  const uint64_t options_at = out.pos();
  out.num<uint16_t>(kOptDone);  // an options section has id 0
  out.num<uint16_t>(0);
  out.num<uint32_t>(0);
  out.num<uint64_t>(opts.size());
  out.bytes(opts.data(), opts.size());
  out.patch_num<uint64_t>(options_slot, options_at);
  return out.ok() ? 0 : out.error();
}

}  // namespace

int write_file(int fd, const Metadata& meta, const std::vector<BufferData>& buffers, const WriteOptions& opts,
               std::string* err) {
  if (int e = check(meta, buffers, opts, err)) return e;
  Out out(fd, err);
  out.bytes(kMagic, 3);
  out.bytes(kTag, 7);
  return opts.version == 6 ? write_v6(out, meta, buffers) : write_v7(out, meta, buffers, opts);
}

}  // namespace usrtrace::tracedat
