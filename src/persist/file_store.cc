#include "persist/file_store.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "base/files.h"
#include "ring_buffer/page_format.h"

#if defined(__SANITIZE_ADDRESS__)
#define USRTRACE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define USRTRACE_LSAN 1
#endif
#endif
#ifdef USRTRACE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace usrtrace::persist {
namespace {

// The CpuBuffers of a file live in its mappings, and hold heap pointers
// (the consuming reader's page copy): LeakSanitizer scans the heap,
// stacks and globals, not file mappings, and would call what they point
// to leaked. Their regions are made roots of its scan while mapped.
void lsan_root(void* at, uint64_t size, bool on) {
#ifdef USRTRACE_LSAN
  if (on)
    __lsan_register_root_region(at, size);
  else
    __lsan_unregister_root_region(at, size);
#else
  (void)at, (void)size, (void)on;
#endif
}

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Live stores, for the fork handler (which must not take locks).
constexpr int kMaxStores = 256;
std::atomic<FileStore*> g_stores[kMaxStores];

CpuLayout own_cpu_layout() {
  using rb::CpuBuffer;
  using rb::PageMeta;
  CpuLayout l{};
  l.size = sizeof(CpuBuffer);
  l.w0 = offsetof(CpuBuffer, ws) + offsetof(rb::WriterState, w0);
  l.last_ts = offsetof(CpuBuffer, ws) + offsetof(rb::WriterState, last_ts);
  l.pages = offsetof(CpuBuffer, pages);
  l.meta = offsetof(CpuBuffer, meta);
  l.nr_pages = offsetof(CpuBuffer, nr_pages);
  l.page_size = offsetof(CpuBuffer, page_size);
  l.page_shift = offsetof(CpuBuffer, page_shift);
  l.cpu = offsetof(CpuBuffer, cpu);
  l.meta_size = sizeof(PageMeta);
  l.meta_seq = offsetof(PageMeta, seq);
  l.meta_first_index = offsetof(PageMeta, first_index);
  l.meta_missed = offsetof(PageMeta, missed);
  l.meta_entries = offsetof(PageMeta, entries);
  return l;
}

void copy_str(char* dst, size_t cap, std::string_view s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

}  // namespace

CpuLayout cpu_layout() { return own_cpu_layout(); }

std::shared_ptr<FileStore> FileStore::create(const std::string& path, uint32_t page_size, int nr_cpus,
                                             std::string_view instance, int* err, std::string* why,
                                             uint32_t extra_cpu_buffers) {
  auto fail = [&](int e, const std::string& text = {}) {
    if (err) *err = e;
    if (why) *why = text.empty() ? path + ": " + std::strerror(e) : text;
    return std::shared_ptr<FileStore>();
  };
  if (page_size < rb::kMinPageSize || page_size > rb::kMaxPageSize || (page_size & (page_size - 1)) ||
      nr_cpus <= 0)
    return fail(EINVAL);
  std::shared_ptr<FileStore> fs(new (std::nothrow) FileStore);
  if (!fs) return fail(ENOMEM);
  fs->path_ = path;
  if (path == kSharedMemory) {
    // Anonymous shared memory: nothing on disk to survive the process, but
    // a recorder that maps it (record/shared_buffers.cc) keeps it readable
    // after a SIGKILL. The recorder maps what it is told: sealed against
    // shrinking, the file cannot become shorter than a mapping of it (a
    // SIGBUS in the recorder).
    fs->fd_ = ::memfd_create("usrtrace-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fs->fd_ < 0) return fail(errno);
    if (::fcntl(fs->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) return fail(errno);
    fs->shared_memory_ = true;
  } else {
    std::string open_why;
    fs->fd_ = base::open_for_write(path, {O_RDWR}, &open_why);
    if (fs->fd_ < 0) return fail(-fs->fd_, open_why);
  }
  // One owner (see the header). The lock goes with the descriptor: with
  // the process's death, or the store's.
  if (::flock(fs->fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return fail(EBUSY, path + ": in use by another buffer (of this process or another)");
    return fail(errno);
  }
  struct stat st;
  if (::fstat(fs->fd_, &st) != 0) return fail(errno);
  if (st.st_uid != geteuid())
    return fail(EPERM, path + ": owned by uid " + std::to_string(st.st_uid) + ", not by this process's user");
  if (st.st_size != 0)
    return fail(EEXIST,
                path + ": already holds data (a trace to recover with `usrtrace recover`?): remove it first");
  // Per CPU: a CpuBuffer and its pages, for the live buffer, a snapshot and
  // a resize in progress; plus format blobs; plus a growth pool's spares,
  // two regions each.
  if (extra_cpu_buffers > kMaxExtraCpuBuffers) return fail(EINVAL, "too many spare buffers");
  const uint32_t capacity = static_cast<uint32_t>(nr_cpus) * 6 + 64 + 2 * extra_cpu_buffers;
  const uint64_t table_off = kHeaderBytes;
  const uint64_t cmd_off = round_up(table_off + uint64_t{capacity} * sizeof(RegionDesc), kFileAlign);
  constexpr uint32_t kCmdlines = 1024;
  const uint64_t end = round_up(cmd_off + kCmdlines * sizeof(CmdlineSlot), kFileAlign);
  // From here the file is ours and was empty: a failure empties it again,
  // so that the same path can be tried once more (it is not a trace).
  auto fail_empty = [&](int e) {
    (void)!::ftruncate(fs->fd_, 0);
    return fail(e);
  };
  if (int e = posix_fallocate(fs->fd_, 0, static_cast<off_t>(end))) return fail_empty(e);
  void* m = mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, fs->fd_, 0);
  if (m == MAP_FAILED) return fail_empty(errno);
  fs->head_bytes_ = end;
  fs->hdr_ = static_cast<FileHeader*>(m);
  fs->table_ = reinterpret_cast<RegionDesc*>(static_cast<char*>(m) + table_off);
  fs->cmdlines_ = reinterpret_cast<CmdlineSlot*>(static_cast<char*>(m) + cmd_off);
  FileHeader* h = fs->hdr_;
  h->version = kVersion;
  h->header_size = sizeof(FileHeader);
  h->page_size = page_size;
  h->nr_cpus = static_cast<uint32_t>(nr_cpus);
  h->region_capacity = capacity;
  h->cmdline_count = kCmdlines;
  h->region_table = table_off;
  h->cmdlines = cmd_off;
  h->file_end = end;
  h->pid = getpid();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  h->created_ns = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  char comm[64] = {};
  int cfd = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (cfd >= 0) {
    ssize_t n = ::read(cfd, comm, sizeof comm - 1);
    ::close(cfd);
    if (n > 0 && comm[n - 1] == '\n') comm[n - 1] = '\0';
  }
  copy_str(h->program, sizeof h->program, comm);
  copy_str(h->instance, sizeof h->instance, instance);
  h->cpu_layout = own_cpu_layout();
  // The magic last: a file without it was never set up.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kMagic, sizeof kMagic);

  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] { pthread_atfork(nullptr, nullptr, &FileStore::atfork_child); });
  for (auto& s : g_stores) {
    FileStore* expected = nullptr;
    if (s.compare_exchange_strong(expected, fs.get())) break;
  }
  return fs;
}

FileStore::~FileStore() {
  if (close_hook_) close_hook_(this);
  for (auto& s : g_stores) {
    FileStore* self = this;
    if (s.compare_exchange_strong(self, nullptr)) break;
  }
  if (hdr_) munmap(hdr_, head_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

// A forked child must not write into its parent's file: its writers would
// race with the parent's on the same per-CPU state (rseq serializes within a
// process only). Each region becomes a private copy of the file at the same
// address. Context: the child right after fork; async-signal-safe.
void FileStore::atfork_child() {
  for (auto& s : g_stores)
    if (FileStore* fs = s.load(std::memory_order_acquire)) fs->remap_private();
}

void FileStore::remap_private() {
  for (uint32_t i = 0; i < hdr_->region_capacity; ++i) {
    const RegionDesc& d = table_[i];
    if (d.state != kStateLive || d.kind == kRegionBlob) continue;
    // A failure (ENOMEM: the child is out of mappings) leaves the region
    // shared with the parent: the child's writes may then mix into the
    // parent's file. Zero pages instead could crash the child's writers,
    // which read their own state from the region; the trace is the lesser
    // loss, and there is no one to tell in an async-signal-safe child.
    // NOLINTNEXTLINE(bugprone-unused-return-value)
    mmap(reinterpret_cast<void*>(d.base), d.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd_,
         static_cast<off_t>(d.offset));
  }
  void* m = mmap(hdr_, head_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd_, 0);
  (void)m;
}

int FileStore::add_region(uint32_t kind, uint64_t size, uint64_t align, void** base) {
  int idx = -1;
  for (uint32_t i = 0; i < hdr_->region_capacity; ++i) {
    if (table_[i].state != kStateLive) {
      idx = static_cast<int>(i);
      break;
    }
  }
  auto fail = [&](int e) {
    last_error_.store(e, std::memory_order_relaxed);
    return -1;
  };
  if (idx < 0) return fail(ENOSPC);
  size = round_up(size, kFileAlign);
  const uint64_t off = hdr_->file_end;
  // Blocks are allocated now: a full disk fails here, not with a SIGBUS on
  // the write path. Shared memory is allocated as it is written, as
  // anonymous memory is: fallocate would take the whole ring of every
  // possible CPU at once, and running out of memory there is the OOM
  // killer's either way.
  if (shared_memory_) {
    if (::ftruncate(fd_, static_cast<off_t>(off + size)) != 0) return fail(errno);
  } else if (int e = posix_fallocate(fd_, static_cast<off_t>(off), static_cast<off_t>(size))) {
    return fail(e);
  }
  void* at = nullptr;
  if (kind != kRegionBlob) {
    // Reserve room to align, then map the file over the aligned part.
    const uint64_t total = size + align;
    void* r = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return fail(errno);
    const auto rbase = reinterpret_cast<uintptr_t>(r);
    const uintptr_t aligned = (rbase + align - 1) & ~(uintptr_t{align} - 1);
    at = mmap(reinterpret_cast<void*>(aligned), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd_,
              static_cast<off_t>(off));
    if (at == MAP_FAILED) {
      int e = errno;
      munmap(r, total);
      return fail(e);
    }
    if (aligned > rbase) munmap(r, aligned - rbase);
    if (rbase + total > aligned + size)
      munmap(reinterpret_cast<void*>(aligned + size), rbase + total - (aligned + size));
  }
  hdr_->file_end = off + size;
  RegionDesc& d = table_[idx];
  d.state = kStateUnused;
  std::atomic_thread_fence(std::memory_order_release);
  d.kind = kind;
  d.offset = off;
  d.size = size;
  d.base = reinterpret_cast<uint64_t>(at);
  d.role = 0;
  d.nr_pages = 0;
  d.page_size = 0;
  d.pages_off = 0;
  if (at) {
    by_base_[reinterpret_cast<uintptr_t>(at)] = idx;
    if (kind == kRegionCpu) lsan_root(at, size, true);
  }
  *base = at;
  return idx;
}

// Publishes a region set up by add_region. order: release; a reader of the
// file after a death sees the fields (all earlier stores reach the page
// cache before the process can die past this one, on x86's TSO).
static void publish(RegionDesc& d) {
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint32_t>*>(&d.state)->store(kStateLive, std::memory_order_release);
}

void FileStore::release_region(int idx) {
  RegionDesc& d = table_[idx];
  reinterpret_cast<std::atomic<uint32_t>*>(&d.state)->store(kStateDead, std::memory_order_release);
  if (d.base) {
    if (d.kind == kRegionCpu) lsan_root(reinterpret_cast<void*>(d.base), d.size, false);
    munmap(reinterpret_cast<void*>(d.base), d.size);
    by_base_.erase(static_cast<uintptr_t>(d.base));
  }
  // Give the blocks back; the offsets are not reused (append-only).
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(d.offset),
            static_cast<off_t>(d.size));
}

int FileStore::region_at(const void* base) {
  auto it = by_base_.find(reinterpret_cast<uintptr_t>(base));
  return it == by_base_.end() ? -1 : it->second;
}

rb::CpuBuffer* FileStore::new_cpu_buffer() {
  base::MutexLock l(&mu_);
  void* at = nullptr;
  int idx = add_region(kRegionCpu, sizeof(rb::CpuBuffer), kFileAlign, &at);
  if (idx < 0) return nullptr;
  auto* cb = new (at) rb::CpuBuffer;
  cb->store = this;
  static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));
  cb->role = reinterpret_cast<std::atomic<uint64_t>*>(&table_[idx].role);
  publish(table_[idx]);
  return cb;
}

void FileStore::delete_cpu_buffer(rb::CpuBuffer* cb) {
  base::MutexLock l(&mu_);
  int idx = region_at(cb);
  cb->~CpuBuffer();
  if (idx >= 0) release_region(idx);
}

bool FileStore::alloc_pages(rb::CpuBuffer* cb, uint32_t nr) {
  base::MutexLock l(&mu_);
  const uint64_t ps = cb->page_size;
  const uint64_t meta_bytes = round_up(uint64_t{nr} * sizeof(rb::PageMeta), ps);
  void* at = nullptr;
  int idx = add_region(kRegionPages, meta_bytes + uint64_t{nr} * ps, ps, &at);
  if (idx < 0) return false;
  RegionDesc& d = table_[idx];
  d.nr_pages = nr;
  d.page_size = cb->page_size;
  d.pages_off = meta_bytes;
  // The file is zeroed (regions are appended, never reused): every PageMeta
  // already reads as seq 0, never written. Not constructed, so nothing is
  // written to them: a growth pool's spares (rb::RingBuffer::enable_growth)
  // in a sparse memfd then cost no memory for their metas until used (48 MiB
  // for a 6 GiB pool, when the construction wrote their zeroes). Readers
  // take the same bytes as PageMetas (record/shared_buffers.cc, recover.cc).
  cb->meta = std::launder(reinterpret_cast<rb::PageMeta*>(at));
  cb->pages = static_cast<uint8_t*>(at) + meta_bytes;
  cb->nr_pages = nr;
  publish(d);
  return true;
}

void FileStore::free_pages(uint8_t* /*pages*/, rb::PageMeta* meta, uint32_t /*nr*/, uint32_t /*page_size*/) {
  base::MutexLock l(&mu_);
  int idx = region_at(meta);
  if (idx >= 0) release_region(idx);
}

void FileStore::clock_changed(clock::ClockId id) {
  base::MutexLock l(&mu_);
  const clock::ClockDesc& d = clock::describe(id);
  FileHeader* h = hdr_;
  if (d.tsc && d.in_ns) {
    const clock::TscCalibration& c = clock::tsc_calibration();
    h->tsc0 = c.tsc0;
    h->ns0 = c.ns0;
    h->mult = c.mult;
  }
  h->clock_id = static_cast<uint32_t>(id);
  h->clock_tsc = d.tsc;
  h->clock_in_ns = d.in_ns;
  copy_str(h->clock_name, sizeof h->clock_name, d.name);
}

int FileStore::write_formats(const std::string& bytes) {
  base::MutexLock l(&mu_);
  void* unused = nullptr;
  int idx = add_region(kRegionBlob, bytes.size() ? bytes.size() : 1, kFileAlign, &unused);
  if (idx < 0) return -last_error();
  RegionDesc& d = table_[idx];
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(d.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      release_region(idx);
      return -e;
    }
    done += static_cast<size_t>(n);
  }
  publish(d);
  const uint64_t cur = hdr_->formats_cur;
  const uint64_t next = cur + 1;
  const BlobRef old = hdr_->formats[cur & 1];
  hdr_->formats[next & 1] = BlobRef{d.offset, bytes.size()};
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint64_t>*>(&hdr_->formats_cur)->store(next, std::memory_order_release);
  // The previous blob is no longer referenced.
  if (old.size)
    for (uint32_t i = 0; i < hdr_->region_capacity; ++i)
      if (table_[i].kind == kRegionBlob && table_[i].state == kStateLive && table_[i].offset == old.offset)
        release_region(static_cast<int>(i));
  return 0;
}

}  // namespace usrtrace::persist
