// A BufferStore in a file: CpuBuffers, PageMetas and pages in MAP_SHARED
// mappings of one file, laid out as persist/file_format.h says, so that the
// file holds every committed event when the process dies (SIGKILL included:
// the stores are in the page cache, which outlives the process).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "base/mutex.h"
#include "persist/file_format.h"
#include "ring_buffer/buffer_store.h"

namespace usrtrace::persist {

// FileStore::create's path for a store in anonymous shared memory; also
// what an instance's buffer_file reads then. Not a file name: no path a
// user means starts with "memfd:" and has nothing after it.
inline constexpr char kSharedMemory[] = "memfd:";

class FileStore final : public rb::BufferStore {
 public:
  // Creates `path` for buffers of `page_size`-byte pages on `nr_cpus` CPUs,
  // for the instance named `instance` ("" = top). The file is new or empty,
  // and this store its one owner for as long as it lives:
  //   * it is opened by base::open_for_write (0600, another user's symlink
  //     not followed, regular files only);
  //   * it is locked (flock, LOCK_EX): a second store on the same file, in
  //     this process or another, fails with EBUSY. Two stores on one file
  //     would map each other's offsets, and a release punches holes there
  //     (SIGBUS on the write path);
  //   * a file that already holds something is never truncated: it may be
  //     a crashed program's trace that nobody recovered yet (EEXIST), or a
  //     file the process did not create for itself (EPERM if another user
  //     owns it).
  // Returns nullptr with *err an errno and *why (if given) the reason in
  // words. Context: control plane; allocates, system calls.
  // `path` kSharedMemory makes the store an anonymous memfd instead
  // (sealed against shrinking), for a recorder in another process to map
  // (record/shared_buffers.cc); fd() is then the way to it.
  // `extra_cpu_buffers`: room in the region table for that many more
  // CpuBuffers with their pages (a growth pool, rb::RingBuffer::enable_growth),
  // at most kMaxExtraCpuBuffers.
  static std::shared_ptr<FileStore> create(const std::string& path, uint32_t page_size, int nr_cpus,
                                           std::string_view instance, int* err, std::string* why = nullptr,
                                           uint32_t extra_cpu_buffers = 0);
  static constexpr uint32_t kMaxExtraCpuBuffers = 16384;
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  rb::CpuBuffer* new_cpu_buffer() override;
  void delete_cpu_buffer(rb::CpuBuffer* cb) override;
  bool alloc_pages(rb::CpuBuffer* cb, uint32_t nr) override;
  void free_pages(uint8_t* pages, rb::PageMeta* meta, uint32_t nr, uint32_t page_size) override;
  void clock_changed(clock::ClockId id) override;

  // Replaces the format blob (file_format.h) with `bytes`: written to a new
  // region first, then published by one store of formats_cur, so a death at
  // any point leaves the old or the new one. Returns 0 or -errno.
  // Context: control plane.
  int write_formats(const std::string& bytes);

  // Called first thing in the destructor (to detach the cmdline mirror
  // while the mapping is still there). Context: control plane.
  void set_close_hook(std::function<void(FileStore*)> hook) { close_hook_ = std::move(hook); }

  // The saved_cmdlines mirror area (header.cmdline_count slots).
  CmdlineSlot* cmdlines() { return cmdlines_; }
  uint32_t cmdline_count() const { return hdr_->cmdline_count; }
  const std::string& path() const { return path_; }
  // The file's descriptor in this process, for a recorder to open through
  // /proc/PID/fd; only a kSharedMemory store says it (-1 otherwise: a path
  // on disk has no seal, and a recorder mapping it could be cut short by a
  // truncate).
  int shared_fd() const { return shared_memory_ ? fd_ : -1; }
  uint32_t page_size() const { return hdr_->page_size; }
  // Last error of an allocation (errno), for the caller's error message.
  int last_error() const { return last_error_.load(std::memory_order_relaxed); }

 private:
  FileStore() = default;
  // Appends a region of `size` bytes, mapped at an address aligned to
  // `align`; returns its table index or -1 (last_error_ set).
  int add_region(uint32_t kind, uint64_t size, uint64_t align, void** base) USRTRACE_REQUIRES(mu_);
  void release_region(int idx) USRTRACE_REQUIRES(mu_);
  int region_at(const void* base) USRTRACE_REQUIRES(mu_);
  void remap_private();  // in a forked child
  static void atfork_child();

  std::string path_;
  int fd_ = -1;
  bool shared_memory_ = false;
  FileHeader* hdr_ = nullptr;  // mapping of header + table + cmdlines
  size_t head_bytes_ = 0;
  RegionDesc* table_ = nullptr;
  CmdlineSlot* cmdlines_ = nullptr;
  std::atomic<int> last_error_{0};
  std::function<void(FileStore*)> close_hook_;
  base::Mutex mu_;
  std::map<uintptr_t, int> by_base_ USRTRACE_GUARDED_BY(mu_);
};

}  // namespace usrtrace::persist
