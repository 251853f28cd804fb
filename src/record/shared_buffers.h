// A recorder's view of a traced process's buffer in shared memory: the
// instance's FileStore is a sealed memfd (persist::kSharedMemory, asked for
// by `usrtrace record -- COMMAND` through USRTRACE_SHARED_BUFFERS=1), the
// server says its descriptor number (kShare), and the recorder maps the
// file through /proc/PID/fd/N and takes pages from it directly, with the
// ring buffer's own seqlock reader (rb::read_page_external). The traced
// process does no work per page; the pages cross once, from the mapping to
// the journal's write().
//
// The mapping outlives the process: a SIGKILLed process's last pages are
// still read.
//
// Nothing in the file is trusted beyond the bounds it is mapped with:
// every region is checked against the file's size (the seal keeps it from
// shrinking), the CpuBuffer layout must be this build's, and a CpuBuffer's
// page geometry must match the region that holds its pages. The process can
// still write anything into its pages; what is taken from them is then
// garbage in the file, as it would be through the socket.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "persist/file_format.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::tracedat {

class SharedBuffer {
 public:
  SharedBuffer() = default;
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  // Opens process `pid`'s descriptor `fd` (what kShare answered for
  // `instance`) and checks that it is that instance's buffer, sealed, in
  // this build's layout. 0 or -errno with *err.
  int open(int pid, int fd, const std::string& instance, std::string* err);
  uint32_t page_size() const { return page_size_; }
  int nr_cpus() const { return static_cast<int>(cpus_.size()); }
  // The next page of `cpu`'s live buffer into `out` (page_size() bytes,
  // zeroed past what it holds): its data length, 0 when there is none (or
  // only the open tail page, with `full_only`). *missed: events lost
  // right before it, as the page's missed-events field says.
  uint32_t read_page(int cpu, uint8_t* out, bool full_only, uint64_t* missed);
  // What the live CpuBuffers and those growth retired and nobody drained
  // yet can hold, in bytes of pages (ring_buffer/grow.cc): the most a last
  // flush has to take (a live CpuBuffer that growth installed may be larger
  // than the rings the process reported).
  uint64_t held_bytes();

 private:
  struct Cpu {
    int region = -1;             // the CpuBuffer's region in the table, -1: not found yet
    uint64_t region_offset = 0;  // and where it is in the file
    int pages_region = -1;       // where its pages were last time
    rb::ExternalConsumer reader;
    uint64_t drained_epoch = 0;  // growth: the CpuBuffers up to it are read
  };
  rb::CpuBuffer* cpu_buffer_at(uint32_t idx);
  // read_page() from the CpuBuffer find_cpu() names; *next when that one
  // was retired and is now drained (read the next).
  uint32_t read_cpu_page(int cpu, uint8_t* out, bool full_only, uint64_t* missed, bool* next);
  // The region `idx` mapped in this process, with *d the descriptor the
  // mapping was made from, or nullptr if it is not a live region inside
  // the file.
  uint8_t* map_region(uint32_t idx, persist::RegionDesc* d);
  void unmap_dead();
  bool find_cpu(int cpu, Cpu& c);

  int fd_ = -1;
  uint8_t* head_ = nullptr;  // header and region table
  size_t head_size_ = 0;
  const persist::FileHeader* hdr_ = nullptr;
  const persist::RegionDesc* table_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t page_size_ = 0;
  struct Mapping {
    uint8_t* at;
    uint64_t offset, size;  // of the region it maps, in the file
  };
  std::map<uint32_t, Mapping> maps_;  // by region table entry
  std::vector<Cpu> cpus_;
};

}  // namespace usrtrace::tracedat
