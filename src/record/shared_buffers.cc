// Reading a traced process's buffers where they are (shared_buffers.h).
//
// The file is laid out as persist/file_format.h says and changes while it
// is read: the process adds regions (a resize, snapshot spares, format
// blobs), releases them (their state turns dead, their blocks are punched
// out; offsets are never reused), and moves CpuBuffers between roles (a
// snapshot swap). So every call looks again: the CpuBuffer serving the live
// buffer's CPU (role word tag 0), then the pages region its `meta` names,
// with the geometry read once and checked against the region that holds it.
#include "record/shared_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/files.h"
#include "record/recorder.h"

namespace usrtrace::tracedat {

using persist::FileHeader;
using persist::RegionDesc;

namespace {

constexpr uint32_t kMaxRegions = 1u << 16;  // far above what a store makes (file_store.cc)

template <class T>
T load(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

// A region descriptor as it is now: the fields are read before the state
// is checked again, so a region going dead meanwhile is not taken.
bool live_region(const RegionDesc* table, uint32_t idx, RegionDesc* out) {
  const RegionDesc& d = table[idx];
  if (load(&d.state) != persist::kStateLive) return false;
  out->kind = load(&d.kind);
  out->offset = load(&d.offset);
  out->size = load(&d.size);
  out->base = load(&d.base);
  out->role = load(&d.role);
  out->nr_pages = load(&d.nr_pages);
  out->page_size = load(&d.page_size);
  out->pages_off = load(&d.pages_off);
  return load(&d.state) == persist::kStateLive;
}

}  // namespace

SharedBuffer::~SharedBuffer() {
  for (auto& [idx, m] : maps_) munmap(m.at, m.size);
  if (head_) munmap(head_, head_size_);
  if (fd_ >= 0) ::close(fd_);
}

int SharedBuffer::open(int pid, int fd, const std::string& instance, std::string* err) {
  auto fail = [&](int e, const std::string& why) {
    *err = "process " + std::to_string(pid) + "'s buffer in shared memory: " + why;
    return -e;
  };
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  // The process names the descriptor, and can change what it holds while
  // we look: the file is pinned first (O_PATH runs no open of a device),
  // looked at, and opened through the pin only if it is a regular file (a
  // memfd is one), never as a controlling terminal (O_NOCTTY) and never
  // waiting (O_NONBLOCK). A pty named here became the terminal of a
  // recorder started without one (setsid, cron, a service), whose ^\ then
  // killed it; a device's open can act (a tape rewinds). Looking at the
  // path and then opening it would still open whatever the process put
  // there in between.
  const int pinned = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (pinned < 0) return fail(errno, path + ": " + std::strerror(errno));
  struct stat pre {};
  const int stat_rc = ::fstat(pinned, &pre), stat_errno = errno;
  if (stat_rc != 0 || !S_ISREG(pre.st_mode)) {
    ::close(pinned);
    if (stat_rc != 0) return fail(stat_errno, path + ": " + std::strerror(stat_errno));
    return fail(EPERM, path + ": not a memfd (" + base::file_type_name(pre.st_mode) + ")");
  }
  fd_ =
      ::open(("/proc/self/fd/" + std::to_string(pinned)).c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  const int open_errno = errno;
  ::close(pinned);
  if (fd_ < 0) return fail(open_errno, path + ": " + std::strerror(open_errno));
  struct stat now;
  if (::fstat(fd_, &now) != 0 || !S_ISREG(now.st_mode) || now.st_ino != pre.st_ino ||
      now.st_dev != pre.st_dev)
    return fail(EPERM, path + ": changed while opened");
  // Sealed against shrinking: no mapping of it can end in a SIGBUS.
  const int seals = ::fcntl(fd_, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) return fail(EPERM, "not sealed against shrinking");
  struct stat st;
  if (::fstat(fd_, &st) != 0) return fail(errno, std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < persist::kHeaderBytes) return fail(EPROTO, "too short");
  void* h = mmap(nullptr, persist::kHeaderBytes, PROT_READ, MAP_SHARED, fd_, 0);
  if (h == MAP_FAILED) return fail(errno, std::strerror(errno));
  const auto* hdr = static_cast<const FileHeader*>(h);
  const persist::CpuLayout own = persist::cpu_layout();
  const uint64_t table_end = hdr->region_table + uint64_t{hdr->region_capacity} * sizeof(RegionDesc);
  const bool ok =
      std::memcmp(hdr->magic, persist::kMagic, sizeof hdr->magic) == 0 && hdr->version == persist::kVersion &&
      hdr->header_size == sizeof(FileHeader) && std::memcmp(&hdr->cpu_layout, &own, sizeof own) == 0 &&
      hdr->nr_cpus > 0 && hdr->nr_cpus <= 4096 && hdr->region_capacity <= kMaxRegions &&
      hdr->region_table >= persist::kHeaderBytes && table_end <= static_cast<uint64_t>(st.st_size) &&
      hdr->page_size >= rb::kMinPageSize && hdr->page_size <= rb::kMaxPageSize &&
      !(hdr->page_size & (hdr->page_size - 1)) && hdr->pid == pid &&
      std::string(hdr->instance, strnlen(hdr->instance, sizeof hdr->instance)) == instance;
  const uint32_t nr_cpus = hdr->nr_cpus, capacity = hdr->region_capacity, page_size = hdr->page_size;
  munmap(h, persist::kHeaderBytes);
  if (!ok) return fail(EPROTO, "not the buffer of instance '" + instance + "' in this build's layout");
  head_size_ = (table_end + persist::kFileAlign - 1) / persist::kFileAlign * persist::kFileAlign;
  void* m = mmap(nullptr, head_size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    head_size_ = 0;
    return fail(errno, std::strerror(errno));
  }
  head_ = static_cast<uint8_t*>(m);
  hdr_ = reinterpret_cast<const FileHeader*>(head_);
  // The header's own fields were checked above from this same file; the
  // table's place and size are taken from those checked values.
  table_ = reinterpret_cast<const RegionDesc*>(head_ + hdr_->region_table);
  capacity_ = capacity;
  page_size_ = page_size;
  cpus_.resize(nr_cpus);
  return 0;
}

uint8_t* SharedBuffer::map_region(uint32_t idx, RegionDesc* out) {
  RegionDesc& d = *out;
  if (idx >= capacity_ || !live_region(table_, idx, &d)) return nullptr;
  // A table entry is reused once its region is released (a resize frees
  // the old pages, and the next one's pages may take that entry), for a
  // region at another offset: a mapping is the entry's only while the
  // offset and size are the same.
  if (auto it = maps_.find(idx); it != maps_.end()) {
    if (it->second.offset == d.offset && it->second.size == d.size) return it->second.at;
    munmap(it->second.at, it->second.size);
    maps_.erase(it);
  }
  struct stat st;
  if (d.size == 0 || d.offset % persist::kFileAlign || d.size % persist::kFileAlign ||
      ::fstat(fd_, &st) != 0 || d.offset > static_cast<uint64_t>(st.st_size) ||
      d.size > static_cast<uint64_t>(st.st_size) - d.offset)
    return nullptr;
  void* m = mmap(nullptr, d.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(d.offset));
  if (m == MAP_FAILED) return nullptr;
  maps_.emplace(idx, Mapping{static_cast<uint8_t*>(m), d.offset, d.size});
  return static_cast<uint8_t*>(m);
}

// Regions the process released: their blocks are gone, and a read would
// only fault in fresh zeroes.
void SharedBuffer::unmap_dead() {
  for (auto it = maps_.begin(); it != maps_.end();) {
    if (load(&table_[it->first].state) != persist::kStateLive) {
      munmap(it->second.at, it->second.size);
      it = maps_.erase(it);
    } else {
      ++it;
    }
  }
}

// The CpuBuffer at region `idx`, mapped, if it is a live CpuBuffer region.
rb::CpuBuffer* SharedBuffer::cpu_buffer_at(uint32_t idx) {
  RegionDesc d;
  uint8_t* at = map_region(idx, &d);
  if (!at || d.kind != persist::kRegionCpu || d.size < sizeof(rb::CpuBuffer)) return nullptr;
  return reinterpret_cast<rb::CpuBuffer*>(at);
}

uint64_t SharedBuffer::held_bytes() {
  uint64_t n = 0;
  for (uint32_t i = 0; i < capacity_; ++i) {
    RegionDesc d;
    if (!live_region(table_, i, &d) || d.kind != persist::kRegionCpu) continue;
    const uint64_t tag = (d.role >> 32) - 1;  // role 0 (unowned): no tag
    if (d.role == 0 || (tag != 0 && tag != rb::kRetiredTag)) continue;
    rb::CpuBuffer* cb = cpu_buffer_at(i);
    if (!cb) continue;
    if (tag == rb::kRetiredTag &&
        load(reinterpret_cast<const uint64_t*>(&cb->grow_state)) != rb::kGrowRetired)
      continue;
    n += uint64_t{load(&cb->nr_pages)} * page_size_;  // bounded: 2^32 pages of at most 64 KiB
  }
  return n;
}

// Which CpuBuffer to read for `cpu`: the one being read, while it serves
// the CPU (live, or retired by growth and not yet drained); else the
// oldest retired one not drained (epoch order: growth, ring_buffer/grow.cc);
// else the live one.
bool SharedBuffer::find_cpu(int cpu, Cpu& c) {
  const uint64_t live = rb::role_word(0, cpu);
  const uint64_t retired = rb::role_word(rb::kRetiredTag, cpu);
  if (c.region >= 0) {
    RegionDesc d;
    // The same CpuBuffer: live, in the same role, and not another one that
    // took its table entry since (another offset).
    if (live_region(table_, static_cast<uint32_t>(c.region), &d) && (d.role == live || d.role == retired) &&
        d.offset == c.region_offset)
      return true;
  }
  // Gone, drained, or swapped away (a snapshot): the CpuBuffer serving the
  // CPU now is another, with its own pages and counts, read from its oldest
  // page.
  unmap_dead();
  c.region = -1;
  c.reader = rb::ExternalConsumer{};
  int live_at = -1, oldest_at = -1;
  uint64_t oldest = 0;
  for (uint32_t i = 0; i < capacity_; ++i) {
    RegionDesc d;
    if (!live_region(table_, i, &d) || d.kind != persist::kRegionCpu || d.size < sizeof(rb::CpuBuffer))
      continue;
    if (d.role == live && live_at < 0) live_at = static_cast<int>(i);
    if (d.role != retired) continue;
    rb::CpuBuffer* cb = cpu_buffer_at(i);
    if (!cb || load(reinterpret_cast<const uint64_t*>(&cb->grow_state)) != rb::kGrowRetired) continue;
    const uint64_t epoch = load(reinterpret_cast<const uint64_t*>(&cb->grow_epoch));
    if (epoch > c.drained_epoch && (oldest_at < 0 || epoch < oldest)) {
      oldest_at = static_cast<int>(i);
      oldest = epoch;
    }
  }
  const int at = oldest_at >= 0 ? oldest_at : live_at;
  if (at < 0) return false;
  RegionDesc d;
  if (!live_region(table_, static_cast<uint32_t>(at), &d)) return false;
  c.region = at;
  c.region_offset = d.offset;
  return true;
}

uint32_t SharedBuffer::read_page(int cpu, uint8_t* out, bool full_only, uint64_t* missed) {
  *missed = 0;
  if (cpu < 0 || cpu >= nr_cpus()) return 0;
  // From a drained CpuBuffer to the next: at most one pass over the table
  // (epochs only go up, but the process writes them).
  for (uint32_t hop = 0; hop <= capacity_; ++hop) {
    bool next = false;
    const uint32_t len = read_cpu_page(cpu, out, full_only, missed, &next);
    if (!next) return len;
  }
  return 0;
}

uint32_t SharedBuffer::read_cpu_page(int cpu, uint8_t* out, bool full_only, uint64_t* missed, bool* next) {
  Cpu& c = cpus_[static_cast<size_t>(cpu)];
  if (!find_cpu(cpu, c)) return 0;
  // Everything is checked against the descriptor the mapping was made
  // from: the table may change between two reads of it.
  RegionDesc cd;
  uint8_t* at = map_region(static_cast<uint32_t>(c.region), &cd);
  if (!at || cd.kind != persist::kRegionCpu || cd.size < sizeof(rb::CpuBuffer)) return 0;
  auto* cb = reinterpret_cast<rb::CpuBuffer*>(at);
  // The geometry, once; a resize in the process may change it under us.
  const auto meta = reinterpret_cast<uintptr_t>(load(&cb->meta));
  const auto pages = reinterpret_cast<uintptr_t>(load(&cb->pages));
  const uint32_t nr = load(&cb->nr_pages), ps = load(&cb->page_size), shift = load(&cb->page_shift);
  if (ps != page_size_ || shift >= 32 || (1u << shift) != ps || nr == 0) return 0;
  // The region that held them last time first, then all of them.
  for (uint32_t k = 0; k <= capacity_; ++k) {
    const uint32_t i = k == 0 ? static_cast<uint32_t>(c.pages_region) : k - 1;
    if (i >= capacity_) continue;
    RegionDesc d;
    if (!live_region(table_, i, &d) || d.kind != persist::kRegionPages || d.base != meta) continue;
    c.pages_region = static_cast<int>(i);
    uint8_t* local = map_region(i, &d);
    // The region must hold exactly what the CpuBuffer says is in it.
    if (!local || d.kind != persist::kRegionPages || d.base != meta || d.nr_pages != nr ||
        d.page_size != ps || d.pages_off < uint64_t{nr} * sizeof(rb::PageMeta) || d.pages_off > d.size ||
        uint64_t{nr} * ps > d.size - d.pages_off || pages != meta + d.pages_off)
      return 0;
    rb::PagesView v;
    v.pages = local + d.pages_off;
    v.meta = reinterpret_cast<const rb::PageMeta*>(local);
    v.writer_pages = pages;
    v.nr_pages = nr;
    v.page_size = ps;
    v.page_shift = shift;
    // Retired by growth: nothing more will be written to it, so its open
    // page is taken too, and once it gives nothing it is drained. The
    // state is read first (acquire, pairing with the writer's release):
    // what the read below finds is then all there is.
    auto* state = reinterpret_cast<uint64_t*>(&cb->grow_state);
    const bool retired = load(state) == rb::kGrowRetired;
    const uint32_t len = rb::read_page_external(cb, v, &c.reader, out, ps, full_only && !retired);
    if (len) {
      settle_page(out, ps, len, missed);
      return len;
    }
    if (!retired) return 0;
    // Drained: the process may now clear and reuse it (release: our reads
    // of its pages happen before its writes).
    uint64_t expect = rb::kGrowRetired;
    __atomic_compare_exchange_n(state, &expect, uint64_t{rb::kGrowDrained}, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
    c.drained_epoch = std::max(c.drained_epoch, load(reinterpret_cast<const uint64_t*>(&cb->grow_epoch)));
    c.region = -1;
    *next = true;
    return 0;
  }
  return 0;
}

}  // namespace usrtrace::tracedat
