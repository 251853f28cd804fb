// trace.dat reader (usrtrace::TraceFile). Every number read from the file
// goes through ByteReader, which refuses to read past the end; offsets are
// checked against the file's size before use; decompressed sizes are
// bounded before anything is allocated. Metadata that does not check out
// makes open() fail with a message naming the part; CPU data that does not
// is skipped page by page, with a warning.
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "base/files.h"
#include "ring_buffer/page_format.h"
#include "tracedat/format.h"
#include "usrtrace/tracedat.h"

namespace usrtrace {
namespace {

using namespace tracedat;

// Bounds for what a hostile file can make us allocate.
constexpr uint64_t kMaxChunk = 64ull << 20;        // one decompressed block
constexpr uint64_t kMaxDecompressed = 4ull << 30;  // all of a file's
// What all of a file's zstd data may inflate to, as a multiple of the
// file's size (at least kInflateFloor). zstd itself goes to ~32000:1 (a
// 128 KiB RLE block in 4 bytes: 37 KB of them claimed 1.2 GB). Trace data
// stays far below 1024:1: function_graph pages compress ~8:1, and even a
// page that holds one event carries a header and a commit that differ from
// the next page's, which keeps a file of near-empty 4 KiB pages in the
// hundreds. A 400 MB recording compressed 8:1 (50 MB) may inflate to
// kMaxDecompressed, ten times what it holds.
constexpr uint64_t kMaxInflateRatio = 1024;
constexpr uint64_t kInflateFloor = 16ull << 20;
// CPU slots (Buffer::cpus, one per CPU id up to the largest listed) all
// buffers of a file may have, at least: a buffer that lists CPU 4095 alone
// has 4096 slots for 20 bytes of the file. Past this floor every slot must
// be paid for by 16 bytes of the file (what a listed CPU costs in a v6
// flyrecord table; 20 in a v7 BUFFER option), so a file whose buffers list
// their CPUs, as trace-cmd's and ours do, always fits.
constexpr uint64_t kCpuSlotFloor = 65536;
constexpr uint64_t kBytesPerCpuSlot = 16;
constexpr int kMaxOptionSections = 256;

struct Fail {
  std::string what;
  // The file as a whole is refused, even where a part of it would only be
  // skipped with a warning (CPU data): it exceeds what a file may cost.
  bool whole_file = false;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* p, uint64_t n, std::string where) : p_(p), n_(n), where_(std::move(where)) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  void seek(uint64_t at) {
    if (at > n_)
      throw Fail{where_ + ": offset " + std::to_string(at) + " is past the end (" + std::to_string(n_) +
                 " bytes)"};
    pos_ = at;
  }
  const uint8_t* take(uint64_t k, const char* what) {
    if (k > left())
      throw Fail{where_ + ": " + what + " needs " + std::to_string(k) + " bytes at offset " +
                 std::to_string(pos_) + ", " + std::to_string(left()) + " left (truncated?)"};
    const uint8_t* r = p_ + pos_;
    pos_ += k;
    return r;
  }
  template <class T>
  T num(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  std::string str(const char* what) {
    const void* z = std::memchr(p_ + pos_, 0, left());
    if (z == nullptr) throw Fail{where_ + ": " + what + ": string not terminated"};
    const size_t len = static_cast<size_t>(static_cast<const uint8_t*>(z) - (p_ + pos_));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len + 1;
    return s;
  }
  std::string text(uint64_t k, const char* what) {
    const uint8_t* b = take(k, what);
    return std::string(reinterpret_cast<const char*>(b), static_cast<size_t>(k));
  }
  void expect(const char* tag, size_t len, const char* what) {
    const uint8_t* b = take(len, what);
    if (std::memcmp(b, tag, len) != 0)
      throw Fail{where_ + ": " + what + ": expected \"" + std::string(tag) + "\""};
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
  std::string where_;
};

struct CpuSlice {
  const uint8_t* data = nullptr;  // whole pages
  uint64_t size = 0;
};

}  // namespace

struct TraceFile::Impl {
  // The file: mapped, or owned bytes.
  void* map = nullptr;
  size_t map_len = 0;
  std::vector<uint8_t> owned;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  std::vector<std::vector<uint8_t>> inflated;  // decompressed CPU data and sections
  uint64_t inflated_total = 0;                 // of every block inflated (sections too)
  uint64_t cpu_slots = 0;                      // of all buffers' Buffer::cpus
  uint64_t latency_options = 0;                // BUFFER_TEXT options seen

  int version = 0;
  std::string compression = "none";
  int long_size = 8;
  uint32_t page_size = 0;
  int nr_cpus = 0;
  std::string header_page, header_event, kallsyms, printk, cmdlines, trace_clock, uname, tool_version,
      latency;
  std::vector<Format> formats;
  uint32_t tsc_mult = 0, tsc_shift = 0;
  int64_t ts_offset = 0;
  std::vector<std::string> cpu_stats;
  std::vector<Buffer> buffers;
  std::vector<std::vector<CpuSlice>> data;  // per buffer, per CPU
  mutable std::vector<std::string> warnings;
  std::vector<ProcMap> procmaps;

  // "PID NR COMM\n" then NR "START END PATH\n" lines, hex numbers (trace-cmd's
  // add_pid_maps). Untrusted: a bad one is left out with a warning.
  void parse_procmaps(const std::string& text) {
    ProcMap pm;
    size_t at = 0;
    auto line = [&](std::string* out) {
      if (at >= text.size()) return false;
      size_t nl = text.find('\n', at);
      if (nl == std::string::npos) nl = text.size();
      *out = text.substr(at, nl - at);
      at = nl + 1;
      return true;
    };
    std::string head;
    char* end = nullptr;
    unsigned long nr = 0;
    bool ok = line(&head);
    if (ok) {
      const unsigned long pid = std::strtoul(head.c_str(), &end, 16);
      nr = std::strtoul(end, &end, 16);
      ok = pid > 0 && pid <= 0x7fffffff && *end == ' ' && nr <= (1u << 20);
      pm.pid = static_cast<int>(pid);
      if (ok) pm.comm = end + 1;
    }
    for (unsigned long i = 0; ok && i < nr; ++i) {
      std::string l;
      ok = line(&l);
      if (!ok) break;
      ProcMap::Object o;
      o.start = std::strtoull(l.c_str(), &end, 16);
      o.end = std::strtoull(end, &end, 16);
      ok = *end == ' ' && o.end >= o.start;
      if (ok) o.path = end + 1;
      pm.objects.push_back(std::move(o));
    }
    if (!ok) {
      warnings.push_back("a PROCMAPS option is malformed; left out");
      return;
    }
    procmaps.push_back(std::move(pm));
  }

  ~Impl() {
    if (map) munmap(map, map_len);
  }

  // A raw stamp in the clock's printed unit, as trace-cmd computes it
  // (timestamp_calc: TSC2NSEC's mult/shift, then OFFSET).
  uint64_t time(uint64_t raw) const {
    uint64_t ts = raw;
    if (tsc_mult != 0) {
      const uint64_t lo = raw & 0xffffffffu, hi = raw >> 32;
      ts = (lo * tsc_mult) >> tsc_shift;
      if (hi) ts += (hi * tsc_mult) << (32 - tsc_shift);
    }
    return ts + static_cast<uint64_t>(ts_offset);
  }

  // ---- decompression ----
  std::vector<uint8_t> inflate_block(ByteReader& r, const char* what) {
    if (compression != "zstd")
      throw Fail{std::string(what) + ": compressed with '" + compression + "', which is not supported"};
    const uint32_t csize = r.num<uint32_t>(what), usize = r.num<uint32_t>(what);
    const uint8_t* src = r.take(csize, what);
    if (usize > kMaxChunk)
      throw Fail{std::string(what) + ": a compressed block claims " + std::to_string(usize) +
                 " bytes (too large)"};
    // Checked before anything is allocated, over the whole file: the same
    // compressed bytes named by many CPUs or buffers count each time.
    const uint64_t budget = std::min(kMaxDecompressed, std::max(kInflateFloor, kMaxInflateRatio * size));
    if (inflated_total + usize > budget)
      throw Fail{std::string(what) + ": zstd data would inflate to more than " + std::to_string(budget) +
                     " bytes, " + std::to_string(kMaxInflateRatio) + " times the file's " +
                     std::to_string(size) + " (a compression bomb?)",
                 true};
    const unsigned long long fsize = ZSTD_getFrameContentSize(src, csize);
    if (fsize == ZSTD_CONTENTSIZE_ERROR || (fsize != ZSTD_CONTENTSIZE_UNKNOWN && fsize != usize))
      throw Fail{std::string(what) + ": a compressed block is not a zstd frame of the size it claims"};
    std::vector<uint8_t> out(usize);
    const size_t got = ZSTD_decompress(out.data(), out.size(), src, csize);
    if (ZSTD_isError(got) || got != usize)
      throw Fail{std::string(what) +
                 ": zstd: " + (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short block")};
    inflated_total += usize;
    return out;
  }

  // ---- metadata blocks (v6 inline, v7 sections) ----
  void read_header_info(ByteReader& r) {
    r.expect("header_page", 12, "header_page tag");
    header_page = r.text(r.num<uint64_t>("header_page size"), "header_page");
    r.expect("header_event", 13, "header_event tag");
    header_event = r.text(r.num<uint64_t>("header_event size"), "header_event");
    // The long size, as libtraceevent takes it: the commit field's size.
    const size_t c = header_page.find("commit;");
    if (c != std::string::npos) {
      const size_t s = header_page.find("size:", c);
      if (s != std::string::npos) long_size = header_page.compare(s, 6, "size:4") == 0 ? 4 : 8;
    }
  }
  void read_ftrace_formats(ByteReader& r) {
    const uint32_t n = r.num<uint32_t>("ftrace format count");
    for (uint32_t i = 0; i < n; ++i)
      formats.push_back({"ftrace", r.text(r.num<uint64_t>("ftrace format size"), "ftrace format")});
  }
  void read_event_formats(ByteReader& r) {
    const uint32_t systems = r.num<uint32_t>("event system count");
    for (uint32_t s = 0; s < systems; ++s) {
      std::string sys = r.str("event system name");
      const uint32_t n = r.num<uint32_t>("event count");
      for (uint32_t i = 0; i < n; ++i)
        formats.push_back({sys, r.text(r.num<uint64_t>("event format size"), "event format")});
    }
  }

  // ---- v6 ----
  void read_options_v6(ByteReader& r, std::vector<std::pair<uint64_t, std::string>>* subbuffers) {
    for (;;) {
      const uint16_t id = r.num<uint16_t>("option id");
      if (id == kOptDone) return;
      const uint32_t len = r.num<uint32_t>("option size");
      ByteReader o(r.take(len, "option data"), len, "option " + std::to_string(id));
      option(id, o, len, subbuffers);
    }
  }

  void option(uint16_t id, ByteReader& o, uint32_t len,
              std::vector<std::pair<uint64_t, std::string>>* v6_buffers) {
    auto cstr = [&] {
      std::string s = o.text(len, "text");
      while (!s.empty() && s.back() == '\0') s.pop_back();
      return s;
    };
    switch (id) {
      case kOptCpuStat:
        cpu_stats.push_back(cstr());
        break;
      case kOptTsc2Nsec: {
        const uint32_t mult = o.num<uint32_t>("TSC2NSEC mult"), shift = o.num<uint32_t>("TSC2NSEC shift");
        if (shift > 32) throw Fail{"option TSC2NSEC: shift " + std::to_string(shift)};
        tsc_mult = mult;
        tsc_shift = shift;
        break;
      }
      case kOptOffset:
        ts_offset += std::strtoll(cstr().c_str(), nullptr, 0);
        break;
      case kOptTraceClock:
        trace_clock = cstr();
        break;
      case kOptUname:
        uname = cstr();
        break;
      case kOptVersion:
        tool_version = cstr();
        break;
      case kOptProcMaps:
        parse_procmaps(cstr());
        break;
      case kOptCpuCount: {
        const uint32_t n = o.num<uint32_t>("CPU count");
        if (n == 0 || n > 4096) throw Fail{"option CPUCOUNT: " + std::to_string(n) + " CPUs"};
        if (version >= 7) nr_cpus = static_cast<int>(n);
        break;
      }
      case kOptBuffer: {
        const uint64_t off = o.num<uint64_t>("buffer offset");
        std::string name = o.str("buffer name");
        if (version < 7) {
          if (v6_buffers) v6_buffers->emplace_back(off, std::move(name));
          break;
        }
        Buffer b;
        b.name = std::move(name);
        b.clock = o.str("buffer clock");
        b.page_size = o.num<uint32_t>("buffer page size");
        const uint32_t ncpu = o.num<uint32_t>("buffer CPU count");
        if (b.page_size < 64 || (b.page_size & (b.page_size - 1)) || b.page_size > (16u << 20))
          throw Fail{"buffer '" + b.name + "': bad page size " + std::to_string(b.page_size)};
        if (ncpu > 4096) throw Fail{"buffer '" + b.name + "': " + std::to_string(ncpu) + " CPUs"};
        std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> cpus;
        uint32_t max_cpu = 0;
        for (uint32_t i = 0; i < ncpu; ++i) {
          const uint32_t cpu = o.num<uint32_t>("buffer CPU id");
          const uint64_t coff = o.num<uint64_t>("buffer CPU offset"),
                         csize = o.num<uint64_t>("buffer CPU size");
          if (cpu > 4096) throw Fail{"buffer '" + b.name + "': CPU id " + std::to_string(cpu)};
          max_cpu = std::max(max_cpu, cpu);
          cpus.push_back({cpu, {coff, csize}});
        }
        b.nr_cpus = ncpu ? static_cast<int>(max_cpu + 1) : 0;
        charge_cpu_slots(static_cast<uint64_t>(b.nr_cpus), "buffer '" + b.name + "'");
        std::vector<CpuSlice> slices(static_cast<size_t>(b.nr_cpus));
        const bool compressed = section_compressed(off, "buffer '" + b.name + "'");
        b.cpus.resize(static_cast<size_t>(b.nr_cpus));
        for (const auto& [cpu, range] : cpus) {
          slices[cpu] = cpu_data(b, cpu, range.first, range.second, compressed);
          b.cpus[cpu] = {range.first, range.second};
        }
        // The top buffer goes first, once all are read (read_v7): inserted
        // at the front here, 40000 BUFFER options took 5 s.
        buffers.push_back(std::move(b));
        data.push_back(std::move(slices));
        break;
      }
      case kOptBufferText: {  // v7 latency data: the trace file's text
        const uint64_t off = o.num<uint64_t>("latency offset");
        o.str("latency buffer name");
        if (latency_options++ > 0) {  // the first only, as for the metadata sections (read_v7)
          if (latency_options == 2) warnings.push_back("more than one latency text; the first is read");
          break;
        }
        std::vector<uint8_t> t = section(off, kOptBufferText, "latency text");
        latency.assign(t.begin(), t.end());
        break;
      }
      default:
        break;
    }
  }

  // Counts `n` more CPU slots against what the file can pay for (see
  // kCpuSlotFloor): thousands of BUFFER options that each name CPU 4096,
  // or v6 buffers that share one CPU table, are refused before they cost
  // 128 KiB apiece (a 277 KB file held 650 MB).
  void charge_cpu_slots(uint64_t n, const std::string& what) {
    cpu_slots += n;
    const uint64_t limit = std::max(kCpuSlotFloor, size / kBytesPerCpuSlot);
    if (cpu_slots > limit)
      throw Fail{what + ": the buffers have " + std::to_string(cpu_slots) + " CPU slots in all, more than " +
                 std::to_string(limit) + " (" + std::to_string(size) + " bytes of file) can describe"};
  }

  // The flags of the v7 section at `off`.
  bool section_compressed(uint64_t off, const std::string& what) {
    ByteReader r(base, size, what);
    r.seek(off);
    r.take(2, "section id");
    const uint16_t flags = r.num<uint16_t>("section flags");
    return (flags & kSectionCompressed) != 0;
  }

  // One CPU's pages at [off, off + len), clipped (with a warning) if the
  // file ends first, and decompressed if the section is.
  CpuSlice cpu_data(const Buffer& b, uint32_t cpu, uint64_t off, uint64_t len, bool compressed) {
    const std::string where = "buffer '" + b.name + "' CPU " + std::to_string(cpu);
    if (len == 0) return {};
    if (off > size) {
      warnings.push_back(where + ": data at offset " + std::to_string(off) + " is past the end of the file");
      return {};
    }
    // Compressed data: trace-cmd's size leaves out the 4-byte chunk count.
    const uint64_t extra = compressed ? 4 : 0;
    if (len + extra > size - off) {
      warnings.push_back(where + ": data cut short: " + std::to_string(len) + " bytes recorded, " +
                         std::to_string(size - off - std::min(size - off, extra)) + " in the file");
      len = size - off - std::min(size - off, extra);
    }
    if (!compressed) return {base + off, len - len % b.page_size};
    ByteReader r(base + off, len + extra, where);
    std::vector<uint8_t> all;
    try {
      const uint32_t chunks = r.num<uint32_t>("chunk count");
      for (uint32_t i = 0; i < chunks; ++i) {
        std::vector<uint8_t> c = inflate_block(r, where.c_str());
        all.insert(all.end(), c.begin(), c.end());
      }
    } catch (const Fail& f) {
      if (f.whole_file) throw;
      warnings.push_back(f.what + " (the data before it is kept)");
    }
    all.resize(all.size() - all.size() % b.page_size);
    inflated.push_back(std::move(all));
    return {inflated.back().data(), inflated.back().size()};
  }

  void read_flyrecord_v6(ByteReader& r, const std::string& name) {
    Buffer b;
    b.name = name;
    b.page_size = page_size;
    b.nr_cpus = nr_cpus;
    b.clock = clock_from_text(trace_clock);
    charge_cpu_slots(static_cast<uint64_t>(nr_cpus), "buffer '" + name + "'");
    std::vector<CpuSlice> slices(static_cast<size_t>(nr_cpus));
    for (int cpu = 0; cpu < nr_cpus; ++cpu) {
      const uint64_t off = r.num<uint64_t>("CPU data offset"), len = r.num<uint64_t>("CPU data size");
      slices[static_cast<size_t>(cpu)] = cpu_data(b, static_cast<uint32_t>(cpu), off, len, false);
      b.cpus.push_back({off, len});
    }
    buffers.push_back(std::move(b));
    data.push_back(std::move(slices));
  }

  static std::string clock_from_text(const std::string& t) {
    const size_t a = t.find('['), e = t.find(']');
    if (a == std::string::npos || e == std::string::npos || e < a) return "local";
    return t.substr(a + 1, e - a - 1);
  }

  void read_v6(ByteReader& r) {
    read_header_info(r);
    read_ftrace_formats(r);
    read_event_formats(r);
    kallsyms = r.text(r.num<uint32_t>("kallsyms size"), "kallsyms");
    printk = r.text(r.num<uint32_t>("printk formats size"), "printk formats");
    cmdlines = r.text(r.num<uint64_t>("saved cmdlines size"), "saved cmdlines");
    const uint32_t cpus = r.num<uint32_t>("CPU count");
    if (cpus == 0 || cpus > 4096) throw Fail{"CPU count " + std::to_string(cpus)};
    nr_cpus = static_cast<int>(cpus);
    std::vector<std::pair<uint64_t, std::string>> subbuffers;
    const uint8_t* tag = r.take(10, "data kind");
    if (std::memcmp(tag, "options  ", 10) == 0) {
      read_options_v6(r, &subbuffers);
      tag = r.take(10, "data kind");
    }
    if (std::memcmp(tag, "latency  ", 10) == 0) {
      latency = r.text(r.left(), "latency text");
      Buffer b;
      b.page_size = page_size;
      b.clock = clock_from_text(trace_clock);
      buffers.push_back(b);
      data.emplace_back();
      return;
    }
    if (std::memcmp(tag, "flyrecord", 10) != 0)
      throw Fail{"expected \"flyrecord\" or \"latency\" at offset " + std::to_string(r.pos() - 10)};
    read_flyrecord_v6(r, "");
    for (const auto& [off, name] : subbuffers) {
      ByteReader s(base, size, "buffer '" + name + "'");
      s.seek(off);
      const uint8_t* t = s.take(10, "buffer data kind");
      if (std::memcmp(t, "options  ", 10) == 0) {
        read_options_v6(s, nullptr);
        t = s.take(10, "buffer data kind");
      }
      if (std::memcmp(t, "flyrecord", 10) != 0) throw Fail{"buffer '" + name + "': no flyrecord data"};
      read_flyrecord_v6(s, name);
    }
  }

  // ---- v7 ----
  // A section's payload at `off` with id `id`, decompressed if it is.
  std::vector<uint8_t> section(uint64_t off, uint16_t id, const char* what) {
    ByteReader r(base, size, what);
    r.seek(off);
    const uint16_t sid = r.num<uint16_t>("section id"), flags = r.num<uint16_t>("section flags");
    r.num<uint32_t>("section description");
    const uint64_t len = r.num<uint64_t>("section size");
    if (sid != id)
      throw Fail{std::string(what) + ": section at offset " + std::to_string(off) + " has id " +
                 std::to_string(sid) + ", expected " + std::to_string(id)};
    const uint8_t* p = r.take(len, "section data");
    if (flags & kSectionCompressed) {
      ByteReader b(p, len, what);
      return inflate_block(b, what);
    }
    return std::vector<uint8_t>(p, p + len);
  }

  void read_v7(ByteReader& r) {
    compression = r.str("compression name");
    r.str("compression version");
    if (compression != "none" && compression != "zstd")
      throw Fail{"compression '" + compression + "' is not supported (zstd and none are)"};
    uint64_t next = r.num<uint64_t>("options offset");
    std::set<uint64_t> seen;
    std::vector<std::pair<uint16_t, uint64_t>> sections;  // at most one per kind
    bool repeated = false;
    while (next != 0) {
      if (!seen.insert(next).second || static_cast<int>(seen.size()) > kMaxOptionSections)
        throw Fail{"options sections loop (offset " + std::to_string(next) + ")"};
      std::vector<uint8_t> opts = section(next, kOptDone, "options section");
      ByteReader o(opts.data(), opts.size(), "options section at " + std::to_string(next));
      next = 0;
      while (o.left() > 0) {
        const uint16_t id = o.num<uint16_t>("option id");
        const uint32_t len = o.num<uint32_t>("option size");
        ByteReader d(o.take(len, "option data"), len, "option " + std::to_string(id));
        if (id == kOptDone) {
          next = d.num<uint64_t>("next options offset");
          break;
        }
        if (id >= kOptHeaderInfo && id <= kOptCmdlines) {
          // The first of each kind (trace-cmd writes one): each read copies
          // or inflates its section, and 40000 options naming one large
          // section would read it 40000 times.
          const uint64_t at = d.num<uint64_t>("section offset");
          if (std::none_of(sections.begin(), sections.end(), [id](const auto& s) { return s.first == id; }))
            sections.emplace_back(id, at);
          else
            repeated = true;
          continue;
        }
        option(id, d, len, nullptr);
      }
    }
    if (repeated) warnings.push_back("a metadata section is named more than once; the first is read");
    bool have_header = false;
    for (const auto& [id, off] : sections) {
      static const char* const kNames[] = {"header info", "ftrace formats", "event formats",
                                           "kallsyms",    "printk formats", "saved cmdlines"};
      const char* what = kNames[id - kOptHeaderInfo];
      std::vector<uint8_t> s = section(off, id, what);
      ByteReader b(s.data(), s.size(), what);
      switch (id) {
        case kOptHeaderInfo:
          read_header_info(b);
          have_header = true;
          break;
        case kOptFtraceEvents:
          read_ftrace_formats(b);
          break;
        case kOptEventFormats:
          read_event_formats(b);
          break;
        case kOptKallsyms:
          kallsyms = b.text(b.num<uint32_t>("kallsyms size"), what);
          break;
        case kOptPrintk:
          printk = b.text(b.num<uint32_t>("printk size"), what);
          break;
        case kOptCmdlines:
          cmdlines = b.text(b.num<uint64_t>("cmdlines size"), what);
          break;
        default:
          break;
      }
    }
    if (!have_header) throw Fail{"no header info section (header_page)"};
    // The top buffer (the first one named "") first, the others in the
    // file's order.
    const auto top =
        std::find_if(buffers.begin(), buffers.end(), [](const Buffer& b) { return b.name.empty(); });
    if (top != buffers.end()) {
      const auto at = top - buffers.begin();
      std::rotate(buffers.begin(), top, top + 1);
      std::rotate(data.begin(), data.begin() + at, data.begin() + at + 1);
    }
    if (buffers.empty() || !buffers[0].name.empty()) {  // no top buffer: an empty one
      Buffer b;
      b.page_size = page_size;
      b.clock = clock_from_text(trace_clock);
      buffers.insert(buffers.begin(), b);
      data.insert(data.begin(), std::vector<CpuSlice>{});
    }
    if (nr_cpus == 0)
      for (const Buffer& b : buffers) nr_cpus = std::max(nr_cpus, b.nr_cpus);
  }

  void read() {
    ByteReader r(base, size, "file header");
    if (size < 10) throw Fail{"not a trace.dat file (" + std::to_string(size) + " bytes)"};
    const uint8_t* m = r.take(10, "magic");
    if (std::memcmp(m, kMagic, 3) != 0 || std::memcmp(m + 3, kTag, 7) != 0)
      throw Fail{"not a trace.dat file (bad magic)"};
    const std::string v = r.str("version");
    if (v == "6")
      version = 6;
    else if (v == "7")
      version = 7;
    else
      throw Fail{"trace.dat version '" + v + "' is not supported (6 and 7 are)"};
    if (r.num<uint8_t>("endian") != 0) throw Fail{"big-endian trace.dat files are not supported"};
    const uint8_t ls = r.num<uint8_t>("long size");
    if (ls != 4 && ls != 8) throw Fail{"long size " + std::to_string(ls)};
    long_size = ls;
    page_size = r.num<uint32_t>("page size");
    if (page_size < 64 || (page_size & (page_size - 1)) || page_size > (16u << 20))
      throw Fail{"page size " + std::to_string(page_size)};
    if (version == 6)
      read_v6(r);
    else
      read_v7(r);
  }
};

// ---- TraceFile ----

TraceFile::TraceFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceFile::~TraceFile() = default;

namespace {
std::unique_ptr<TraceFile::Impl> finish(std::unique_ptr<TraceFile::Impl> impl, const std::string& name,
                                        std::string* err) {
  try {
    impl->read();
  } catch (const Fail& f) {
    *err = name + ": " + f.what;
    return nullptr;
  } catch (const std::bad_alloc&) {
    *err = name + ": out of memory";
    return nullptr;
  }
  return impl;
}
}  // namespace

std::unique_ptr<TraceFile> TraceFile::open(const std::string& path, std::string* err) {
  auto impl = std::make_unique<Impl>();
  // A regular file only (base/files.h): open() of a FIFO would wait for a
  // writer, and a device has no size to map.
  off_t size = 0;
  const int fd = base::open_regular_for_read(path, &size, err);
  if (fd < 0) return nullptr;
  if (size > 0) {
    impl->map = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (impl->map == MAP_FAILED) {
      impl->map = nullptr;
      *err = path + ": mmap: " + std::strerror(errno);
      ::close(fd);
      return nullptr;
    }
    impl->map_len = static_cast<size_t>(size);
  }
  ::close(fd);
  impl->base = static_cast<const uint8_t*>(impl->map);
  impl->size = impl->map_len;
  impl = finish(std::move(impl), path, err);
  return impl ? std::unique_ptr<TraceFile>(new TraceFile(std::move(impl))) : nullptr;
}

std::unique_ptr<TraceFile> TraceFile::parse(std::vector<uint8_t> bytes, std::string* err) {
  auto impl = std::make_unique<Impl>();
  impl->owned = std::move(bytes);
  impl->base = impl->owned.data();
  impl->size = impl->owned.size();
  impl = finish(std::move(impl), "trace.dat", err);
  return impl ? std::unique_ptr<TraceFile>(new TraceFile(std::move(impl))) : nullptr;
}

int TraceFile::version() const { return impl_->version; }
const std::string& TraceFile::compression() const { return impl_->compression; }
int TraceFile::long_size() const { return impl_->long_size; }
uint32_t TraceFile::page_size() const { return impl_->page_size; }
int TraceFile::nr_cpus() const { return impl_->nr_cpus; }
const std::string& TraceFile::header_page() const { return impl_->header_page; }
const std::string& TraceFile::header_event() const { return impl_->header_event; }
const std::vector<TraceFile::Format>& TraceFile::formats() const { return impl_->formats; }
const std::string& TraceFile::kallsyms() const { return impl_->kallsyms; }
const std::string& TraceFile::printk_formats() const { return impl_->printk; }
const std::string& TraceFile::cmdlines() const { return impl_->cmdlines; }
const std::string& TraceFile::trace_clock() const { return impl_->trace_clock; }
const std::string& TraceFile::uname() const { return impl_->uname; }
const std::string& TraceFile::tool_version() const { return impl_->tool_version; }
const std::vector<TraceFile::ProcMap>& TraceFile::procmaps() const { return impl_->procmaps; }
const std::vector<std::string>& TraceFile::cpu_stats() const { return impl_->cpu_stats; }
const std::string& TraceFile::latency_text() const { return impl_->latency; }
const std::vector<TraceFile::Buffer>& TraceFile::buffers() const { return impl_->buffers; }
std::vector<std::string> TraceFile::warnings() const { return impl_->warnings; }

// ---- Cursor ----

struct TraceFile::Cursor::State {
  struct Stream {
    int buffer = 0, cpu = 0;
    const uint8_t* data = nullptr;
    uint64_t size = 0, page_size = 0;
    uint64_t page = 0;  // index of the next page to load
    int long_size = 8;
    rb::PageWalker walker{nullptr, 0, 0};
    bool loaded = false;
    int64_t page_missed = 0;
    bool have = false;  // `next` holds a record
    Record next;
  };
  const TraceFile::Impl* f = nullptr;
  std::vector<Stream> streams;

  // Loads pages until one gives a record, or the data ends.
  bool advance(Stream& s) {
    for (;;) {
      if (s.loaded) {
        rb::Entry e;
        if (s.walker.next_data(&e)) {
          s.next.buffer = s.buffer;
          s.next.cpu = s.cpu;
          s.next.ts = f->time(e.ts);
          s.next.data = e.payload;
          s.next.len = e.payload_len;
          s.next.missed = s.page_missed;
          s.page_missed = 0;
          return s.have = true;
        }
        if (s.walker.corrupt())
          f->warnings.push_back("buffer '" + f->buffers[static_cast<size_t>(s.buffer)].name + "' CPU " +
                                std::to_string(s.cpu) + ": page " + std::to_string(s.page - 1) +
                                " has a corrupt entry at offset " + std::to_string(s.walker.offset()) +
                                "; the rest of the page is skipped");
        s.loaded = false;
      }
      if ((s.page + 1) * s.page_size > s.size) return s.have = false;
      const uint8_t* p = s.data + s.page * s.page_size;
      ++s.page;
      uint64_t ts, commit = 0;
      std::memcpy(&ts, p, 8);
      const uint32_t hdr = s.long_size == 8 ? 16 : 12;
      if (s.long_size == 8) {
        std::memcpy(&commit, p + 8, 8);
      } else {
        uint32_t c32;
        std::memcpy(&c32, p + 8, 4);
        commit = c32;
      }
      uint64_t len = commit & rb::kCommitLengthMask;
      if (len > s.page_size - hdr) {
        f->warnings.push_back("buffer '" + f->buffers[static_cast<size_t>(s.buffer)].name + "' CPU " +
                              std::to_string(s.cpu) + ": page " + std::to_string(s.page - 1) + " claims " +
                              std::to_string(len) + " bytes of data; skipped");
        continue;
      }
      if (commit & rb::kMissedEvents) {
        int64_t missed = -1;
        if ((commit & rb::kMissedStored) && hdr + len + static_cast<uint64_t>(s.long_size) <= s.page_size) {
          uint64_t m = 0;
          std::memcpy(&m, p + hdr + len, static_cast<size_t>(s.long_size));
          if (m != 0 && m < (1ull << 62)) missed = static_cast<int64_t>(m);
        }
        s.page_missed = missed;
      }
      s.walker = rb::PageWalker(p + hdr, static_cast<uint32_t>(len), ts);
      s.loaded = true;
    }
  }
};

TraceFile::Cursor::Cursor(const TraceFile& file, std::vector<int> buffers, std::vector<int> cpus)
    : st_(std::make_unique<State>()) {
  const Impl& f = *file.impl_;
  st_->f = &f;
  for (size_t b = 0; b < f.buffers.size(); ++b) {
    if (!buffers.empty() && std::find(buffers.begin(), buffers.end(), static_cast<int>(b)) == buffers.end())
      continue;
    for (size_t c = 0; c < f.data[b].size(); ++c) {
      if (!cpus.empty() && std::find(cpus.begin(), cpus.end(), static_cast<int>(c)) == cpus.end()) continue;
      if (f.data[b][c].size == 0) continue;
      State::Stream s;
      s.buffer = static_cast<int>(b);
      s.cpu = static_cast<int>(c);
      s.data = f.data[b][c].data;
      s.size = f.data[b][c].size;
      s.page_size = f.buffers[b].page_size;
      s.long_size = f.long_size;
      st_->streams.push_back(s);
    }
  }
  for (auto& s : st_->streams) st_->advance(s);
}

TraceFile::Cursor::~Cursor() = default;

void TraceFile::Cursor::progress(uint64_t* done, uint64_t* total) const {
  *done = *total = 0;
  for (const auto& s : st_->streams) {
    *done += std::min(s.page * s.page_size, s.size);
    *total += s.size;
  }
}

bool TraceFile::Cursor::next(Record* r) {
  State::Stream* best = nullptr;
  for (auto& s : st_->streams)
    if (s.have && (best == nullptr || s.next.ts < best->next.ts)) best = &s;
  if (best == nullptr) return false;
  *r = best->next;
  st_->advance(*best);
  return true;
}

}  // namespace usrtrace
