// The reader of crash-surviving buffer files (include/usrtrace/recover.h).
//
// The file is untrusted: it may be truncated, corrupted, or from a process
// that died in the middle of anything. Every read goes through Bytes::get,
// which checks bounds; every structure is checked against the others:
//
//   1. header: magic, version, sizes, and the CpuBuffer layout must be ours;
//   2. region table: each live region inside the file;
//   3. per CPU buffer (role word != 0): its pages region found by the
//      addresses the CpuBuffer holds, by binary search in the pages
//      regions sorted (the table may have 2^20 entries: a scan per CPU
//      buffer would be quadratic); a pages region is read for one CPU
//      buffer only (in a real file no two share one: a resize gives a
//      CpuBuffer new pages, a swap moves whole CpuBuffers), so that a
//      crafted table cannot multiply the work and the events; w0 inside
//      those pages;
//   4. per page, from the oldest possible seq to the tail's (the page w0 is
//      in): its meta seq must be the one expected in that slot (else the page
//      was being reused at the death, or is gone), its length is w0's for the
//      tail and the closed page's commit length otherwise, and walking its
//      entries must end exactly at that length with the entry count its
//      metadata gives (w0's low bits for the tail, meta.entries otherwise).
//      A page that fails is left out whole.
//
// Bytes past the committed w0 (a write cut by the death) are never walked.
//
// open() reads only a regular file (base/files.h: a FIFO would block, a
// device such as /dev/zero never ends), and no more than its size.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <tuple>

#include "base/files.h"
#include "clock/trace_clock.h"
#include "persist/file_format.h"
#include "ring_buffer/page_format.h"
#include "usrtrace/recover.h"

namespace usrtrace {

using persist::BlobRef;
using persist::CmdlineSlot;
using persist::CpuLayout;
using persist::FileHeader;
using persist::RegionDesc;

namespace {

struct Bytes {
  const std::vector<uint8_t>& v;
  bool in(uint64_t off, uint64_t len) const { return off <= v.size() && len <= v.size() - off; }
  template <class T>
  bool get(uint64_t off, T* out) const {
    if (!in(off, sizeof(T))) return false;
    std::memcpy(out, v.data() + off, sizeof(T));
    return true;
  }
};

std::string cstr(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

// A pages region of the dead process, by the address it was mapped at.
struct PagesRegion {
  uint64_t offset, size, base, pages_off;
  uint32_t nr_pages, page_size;
  uint32_t index;        // in the region table
  bool claimed = false;  // read for a CPU buffer already
  // What a CpuBuffer's fields must equal: meta, pages, nr_pages, page_size
  // (pages as the dead process computed it, wrapping), then the table
  // index, so that of equal keys the last in the table is found, as the
  // scan this index replaced found it.
  auto key() const { return std::make_tuple(base, base + pages_off, nr_pages, page_size, index); }
};

// The checks of the header alone, before anything else is read.
bool check_header(const FileHeader& h, std::string* why) {
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (std::memcmp(h.magic, persist::kMagic, sizeof h.magic) != 0)
    return fail("not a usrtrace buffer file (bad magic)");
  if (h.version != persist::kVersion)
    return fail("unsupported buffer file version " + std::to_string(h.version));
  if (h.header_size != sizeof(FileHeader)) return fail("corrupt header (header size)");
  const CpuLayout own = persist::cpu_layout();
  if (std::memcmp(&h.cpu_layout, &own, sizeof own) != 0)
    return fail("written by a usrtrace build with another buffer layout; use that build's reader");
  if (h.page_size < rb::kMinPageSize || h.page_size > rb::kMaxPageSize || (h.page_size & (h.page_size - 1)))
    return fail("corrupt header (page size " + std::to_string(h.page_size) + ")");
  if (h.nr_cpus == 0 || h.nr_cpus > 65536) return fail("corrupt header (nr_cpus)");
  return true;
}

// Reads up to `len` bytes at `off`; what was read (less at the end of the
// file), or -errno.
ssize_t read_at(int fd, uint8_t* to, size_t len, off_t off) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, to + done, len - done, off + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

struct Recovery::Impl {
  std::vector<uint8_t> bytes;
  Info info;
  std::vector<Format> formats;
  std::string header_page, header_event;
  std::vector<std::pair<int, std::string>> cmdlines;
  std::vector<std::string> warnings;
  std::map<uint32_t, std::vector<Event>> by_tag;
  // Raw -> ns conversion of the file.
  bool tsc_ns = false;
  uint64_t tsc0 = 0, ns0 = 0, mult = 0;

  uint64_t to_ns(uint64_t raw) const {
    __extension__ typedef unsigned __int128 u128;
    if (!tsc_ns) return raw;
    if (raw >= tsc0) return ns0 + static_cast<uint64_t>((static_cast<u128>(raw - tsc0) * mult) >> 32);
    uint64_t back = static_cast<uint64_t>((static_cast<u128>(tsc0 - raw) * mult) >> 32);
    return back < ns0 ? ns0 - back : 0;
  }
  void warn(std::string w) {
    if (warnings.size() < 1000) warnings.push_back(std::move(w));
  }

  bool parse(std::string* error);
  void parse_formats(const FileHeader& h);
  void parse_cmdlines(const FileHeader& h);
  void read_cpu(const FileHeader& h, const RegionDesc& d, uint32_t idx, std::vector<PagesRegion>* pages);
};

bool Recovery::Impl::parse(std::string* error) {
  const Bytes b{bytes};
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return false;
  };
  FileHeader h;
  if (!b.get(0, &h)) return fail("not a usrtrace buffer file: shorter than its header");
  if (!check_header(h, error)) return false;
  const CpuLayout own = persist::cpu_layout();
  if (h.region_capacity == 0 || h.region_capacity > (1u << 20) ||
      !b.in(h.region_table, uint64_t{h.region_capacity} * sizeof(RegionDesc)))
    return fail("truncated or corrupt file: region table out of bounds");

  info.pid = h.pid;
  info.program = cstr(h.program, sizeof h.program);
  info.instance = cstr(h.instance, sizeof h.instance);
  info.clock = cstr(h.clock_name, sizeof h.clock_name);
  info.clock_in_ns = h.clock_in_ns != 0;
  info.page_size = h.page_size;
  info.nr_cpus = static_cast<int>(h.nr_cpus);
  info.created_ns = h.created_ns;
  tsc_ns = h.clock_tsc && h.clock_in_ns;
  tsc0 = h.tsc0;
  ns0 = h.ns0;
  mult = h.mult;

  parse_formats(h);
  parse_cmdlines(h);

  std::vector<PagesRegion> pages;
  std::vector<std::pair<RegionDesc, uint32_t>> cpus;
  for (uint32_t i = 0; i < h.region_capacity; ++i) {
    RegionDesc d;
    b.get(h.region_table + uint64_t{i} * sizeof(RegionDesc), &d);
    if (d.state != persist::kStateLive) continue;
    if (d.offset % persist::kFileAlign || !b.in(d.offset, d.size)) {
      warn("region " + std::to_string(i) + ": beyond the end of the file (truncated?), left out");
      continue;
    }
    if (d.kind == persist::kRegionPages) {
      const uint64_t ps = d.page_size;
      if (ps != h.page_size || d.nr_pages < 2 || uint64_t{d.nr_pages} * own.meta_size > d.pages_off ||
          d.pages_off > d.size || (d.size - d.pages_off) / ps < d.nr_pages) {
        warn("region " + std::to_string(i) + ": corrupt page region, left out");
        continue;
      }
      pages.push_back({d.offset, d.size, d.base, d.pages_off, d.nr_pages, d.page_size, i});
    } else if (d.kind == persist::kRegionCpu) {
      if (d.size < own.size) {
        warn("region " + std::to_string(i) + ": corrupt cpu region, left out");
        continue;
      }
      if (d.role != 0) cpus.push_back({d, i});
    }
  }
  std::sort(pages.begin(), pages.end(),
            [](const PagesRegion& x, const PagesRegion& y) { return x.key() < y.key(); });
  std::map<uint64_t, int> seen;  // role -> count
  for (auto& [d, i] : cpus) {
    if (++seen[d.role] == 2)
      warn("two buffers claim cpu " + std::to_string(d.role & 0xffffffff) + " of buffer " +
           std::to_string((d.role >> 32) - 1) + " (the process died during a swap); both kept");
    read_cpu(h, d, i, &pages);
  }
  for (auto& [tag, evs] : by_tag)
    std::stable_sort(evs.begin(), evs.end(), [](const Event& a, const Event& b2) { return a.ts < b2.ts; });
  return true;
}

void Recovery::Impl::parse_formats(const FileHeader& h) {
  const Bytes b{bytes};
  const BlobRef ref = h.formats[h.formats_cur & 1];
  if (ref.size == 0) {
    warn("no event formats in the file");
    return;
  }
  if (!b.in(ref.offset, ref.size)) {
    warn("event formats beyond the end of the file (truncated?), left out");
    return;
  }
  uint64_t off = ref.offset;
  const uint64_t end = ref.offset + ref.size;
  while (off < end) {
    uint32_t kind = 0, len = 0;
    if (end - off < 8 || !b.get(off, &kind) || !b.get(off + 4, &len) || len > end - off - 8) {
      warn("event formats corrupt after " + std::to_string(formats.size()) + " events");
      return;
    }
    const char* p = reinterpret_cast<const char*>(bytes.data() + off + 8);
    switch (kind) {
      case persist::kRecHeaderPage:
        header_page.assign(p, len);
        break;
      case persist::kRecHeaderEvent:
        header_event.assign(p, len);
        break;
      case persist::kRecEvent: {
        uint16_t id, slen;
        if (len < 4) break;
        std::memcpy(&id, p, 2);
        std::memcpy(&slen, p + 2, 2);
        if (slen > len - 4) {
          warn("event format record corrupt, left out");
          break;
        }
        formats.push_back({id, std::string(p + 4, slen), std::string(p + 4 + slen, len - 4 - slen)});
        break;
      }
      default:
        break;  // a later version's record
    }
    off += 8 + ((uint64_t{len} + 7) & ~uint64_t{7});
  }
}

void Recovery::Impl::parse_cmdlines(const FileHeader& h) {
  const Bytes b{bytes};
  if (h.cmdline_count > 65536 || !b.in(h.cmdlines, uint64_t{h.cmdline_count} * sizeof(CmdlineSlot))) {
    warn("saved_cmdlines out of bounds, left out");
    return;
  }
  for (uint32_t i = 0; i < h.cmdline_count; ++i) {
    CmdlineSlot s;
    b.get(h.cmdlines + uint64_t{i} * sizeof s, &s);
    if (s.seq == 0 || (s.seq & 1) || s.tid <= 0 || strnlen(s.comm, sizeof s.comm) == sizeof s.comm) continue;
    cmdlines.emplace_back(s.tid, std::string(s.comm));
  }
}

void Recovery::Impl::read_cpu(const FileHeader& h, const RegionDesc& d, uint32_t idx,
                              std::vector<PagesRegion>* regions) {
  const Bytes b{bytes};
  const CpuLayout& l = h.cpu_layout;
  const uint32_t tag = static_cast<uint32_t>((d.role >> 32) - 1);
  const uint32_t cpu = static_cast<uint32_t>(d.role);
  const std::string who = "buffer " + std::to_string(tag) + " cpu " + std::to_string(cpu);
  if (cpu >= h.nr_cpus) {
    warn("region " + std::to_string(idx) + ": cpu " + std::to_string(cpu) + " out of range, left out");
    return;
  }
  uint64_t w0 = 0, pages_va = 0, meta_va = 0;
  uint32_t nr = 0, ps = 0;
  int cb_cpu = -1;
  b.get(d.offset + l.w0, &w0);
  b.get(d.offset + l.pages, &pages_va);
  b.get(d.offset + l.meta, &meta_va);
  b.get(d.offset + l.nr_pages, &nr);
  b.get(d.offset + l.page_size, &ps);
  b.get(d.offset + l.cpu, &cb_cpu);
  by_tag[tag];  // the buffer exists, even if empty
  if (cb_cpu != static_cast<int>(cpu)) {
    warn(who + ": cpu field disagrees with its role word, left out");
    return;
  }
  // The last region (by table index) with these addresses and sizes: the
  // one before the first with a greater key (`regions` is sorted by key()).
  const auto past = std::upper_bound(regions->begin(), regions->end(),
                                     std::make_tuple(meta_va, pages_va, nr, ps, UINT32_MAX),
                                     [](const auto& k, const PagesRegion& r) { return k < r.key(); });
  PagesRegion* pr = past == regions->begin() ? nullptr : &*(past - 1);
  if (pr && std::make_tuple(pr->base, pr->base + pr->pages_off, pr->nr_pages, pr->page_size) !=
                std::make_tuple(meta_va, pages_va, nr, ps))
    pr = nullptr;
  if (!pr) {
    warn(who + ": its pages are not in the file (died during a resize?), left out");
    return;
  }
  if (pr->claimed) {
    warn(who + ": its pages are another buffer's (a corrupt file), left out");
    return;
  }
  pr->claimed = true;
  const uint64_t wp = w0 >> 16;
  const uint64_t span = uint64_t{nr} * ps;
  if (wp < pages_va || wp - pages_va >= span) {
    warn(who + ": write position outside its pages, left out");
    return;
  }
  const uint64_t tail_slot = (wp - pages_va) / ps;
  const uint64_t tail_off = (wp - pages_va) % ps;
  const uint64_t meta_off = pr->offset;
  const uint64_t pages_off = pr->offset + pr->pages_off;
  auto meta_field = [&](uint64_t slot, uint32_t field) {
    uint64_t v = 0;
    b.get(meta_off + slot * l.meta_size + field, &v);
    return v;
  };
  const uint64_t tail_seq = meta_field(tail_slot, l.meta_seq);
  if (tail_seq == 0) return;  // nothing written since the last reset
  if (tail_off < rb::kPageHeaderSize || (tail_seq - 1) % nr != tail_slot) {
    warn(who + ": write position inconsistent with its page, left out");
    return;
  }
  const uint32_t tail_len = static_cast<uint32_t>(tail_off - rb::kPageHeaderSize);
  const uint32_t tail_entries = static_cast<uint32_t>(w0 & 0xffff);
  std::vector<Event>& out = by_tag[tag];
  const uint64_t oldest = tail_seq > nr ? tail_seq - nr + 1 : 1;
  // Entries are numbered per CPU from the last reset: a page whose first
  // index is past the expected one says how many were lost before it
  // (overwritten, dropped, or on a page left out above).
  uint64_t next_index = 0;
  uint64_t pending_lost = 0;
  // Counted, not `s <= tail_seq`: a corrupt tail seq of 2^64-1 would make
  // that condition always true (the recover fuzzer found it).
  const uint64_t count = tail_seq - oldest + 1;
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t s = oldest + k;
    const uint64_t slot = (s - 1) % nr;
    if (meta_field(slot, l.meta_seq) != s) {
      continue;  // reused or never completed: the next page's index tells the loss
    }
    const uint64_t fi = meta_field(slot, l.meta_first_index);
    const uint64_t missed = meta_field(slot, l.meta_missed);
    const uint64_t page = pages_off + slot * ps;
    rb::PageHeader ph;
    b.get(page, &ph);
    const bool tail = s == tail_seq;
    const uint64_t len = tail ? tail_len : (ph.commit & rb::kCommitLengthMask);
    const uint64_t entries = tail ? tail_entries : meta_field(slot, l.meta_entries);
    if (len > ps - rb::kPageHeaderSize) {
      warn(who + " page " + std::to_string(s) + ": commit length past the page, left out");
      continue;
    }
    rb::PageWalker w(bytes.data() + page + rb::kPageHeaderSize, static_cast<uint32_t>(len), ph.timestamp);
    std::vector<Event> evs;
    rb::Entry e;
    while (w.next_data(&e)) {
      Event ev;
      ev.cpu = static_cast<int>(cpu);
      ev.ts_raw = e.ts;
      ev.ts = to_ns(e.ts);
      ev.data = e.payload;
      ev.len = e.payload_len;
      evs.push_back(ev);
    }
    if (w.corrupt() || w.offset() != len || evs.size() != entries) {
      warn(who + " page " + std::to_string(s) + ": entries do not match its metadata, left out");
      continue;
    }
    if (fi > next_index) pending_lost += fi - next_index;
    pending_lost += missed;
    next_index = fi + entries;
    for (Event& ev : evs) {
      ev.lost_before = pending_lost;
      pending_lost = 0;
      out.push_back(ev);
    }
  }
}

Recovery::Recovery(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Recovery::~Recovery() = default;

std::unique_ptr<Recovery> Recovery::parse(std::vector<uint8_t> bytes, std::string* error) {
  // Out of memory (a file of many events on a small machine) is an error
  // like the others, not an exception out of a reader of untrusted files.
  try {
    auto impl = std::make_unique<Impl>();
    impl->bytes = std::move(bytes);
    if (!impl->parse(error)) return nullptr;
    return std::unique_ptr<Recovery>(new Recovery(std::move(impl)));
  } catch (const std::bad_alloc&) {
    if (error) *error = "out of memory";
    return nullptr;
  }
}

std::unique_ptr<Recovery> Recovery::open(const std::string& path, std::string* error) {
  off_t size = 0;
  std::string why;
  const int fd = base::open_regular_for_read(path, &size, &why);
  if (fd < 0) {
    if (error) *error = why;
    return nullptr;
  }
  auto fail = [&](const std::string& w) {
    ::close(fd);
    if (error) *error = path + ": " + w;
    return nullptr;
  };
  // The header first: a file that is not ours (a large one by mistake) is
  // refused before its size is allocated.
  if (static_cast<uint64_t>(size) >= sizeof(FileHeader)) {
    FileHeader h;
    const ssize_t n = read_at(fd, reinterpret_cast<uint8_t*>(&h), sizeof h, 0);
    if (n < 0) return fail(std::strerror(static_cast<int>(-n)));
    if (static_cast<size_t>(n) == sizeof h && !check_header(h, &why)) return fail(why);
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    return fail("out of memory reading " + std::to_string(size) + " bytes");
  }
  // No more than the size: a file still growing is read as it was.
  const ssize_t n = read_at(fd, bytes.data(), bytes.size(), 0);
  if (n < 0) return fail(std::strerror(static_cast<int>(-n)));
  ::close(fd);
  bytes.resize(static_cast<size_t>(n));  // shorter if it shrank meanwhile
  auto r = parse(std::move(bytes), &why);
  if (!r && error) *error = path + ": " + why;
  return r;
}

const Recovery::Info& Recovery::info() const { return impl_->info; }
const std::vector<Recovery::Format>& Recovery::formats() const { return impl_->formats; }
const std::string& Recovery::header_page() const { return impl_->header_page; }
const std::string& Recovery::header_event() const { return impl_->header_event; }
const std::vector<std::pair<int, std::string>>& Recovery::cmdlines() const { return impl_->cmdlines; }
const std::vector<std::string>& Recovery::warnings() const { return impl_->warnings; }

std::vector<uint32_t> Recovery::tags() const {
  std::vector<uint32_t> t;
  for (auto& [tag, evs] : impl_->by_tag) t.push_back(tag);
  return t;
}

std::vector<Recovery::Event> Recovery::events(uint32_t tag) const {
  auto it = impl_->by_tag.find(tag);
  return it == impl_->by_tag.end() ? std::vector<Event>{} : it->second;
}

}  // namespace usrtrace
