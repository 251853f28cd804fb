// Where a RingBuffer's memory comes from: its CpuBuffers, their PageMeta
// arrays and their pages. The default store is anonymous memory; a
// file-backed store (persist/file_store.h) places all three in a MAP_SHARED
// file so that the committed state survives the process.
//
// Every CpuBuffer remembers its store (CpuBuffer::store) and is freed through
// it, whichever RingBuffer holds it at the end (CpuBuffers move on swaps).
#pragma once

#include <cstdint>

#include "clock/trace_clock.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::rb {

class BufferStore {
 public:
  virtual ~BufferStore() = default;

  // A default-constructed CpuBuffer with `store` (and, file-backed, `role`)
  // set; nullptr when out of memory or space.
  // Context: control plane; allocates.
  virtual CpuBuffer* new_cpu_buffer() = 0;
  virtual void delete_cpu_buffer(CpuBuffer* cb) = 0;

  // Zeroed memory for `nr` pages of cb->page_size bytes (aligned to the page
  // size, which the write path relies on) and `nr` PageMetas, into
  // cb->pages, cb->meta and cb->nr_pages. False when out of memory or space;
  // cb is then unchanged. Context: control plane; allocates.
  virtual bool alloc_pages(CpuBuffer* cb, uint32_t nr) = 0;
  // Frees what alloc_pages() returned.
  virtual void free_pages(uint8_t* pages, PageMeta* meta, uint32_t nr, uint32_t page_size) = 0;

  // The clock of the buffers changed (a file records it, with the TSC
  // calibration, so that a recovery prints the right times).
  virtual void clock_changed(clock::ClockId /*id*/) {}

  // The anonymous-memory store (never freed).
  static BufferStore* heap();
};

}  // namespace usrtrace::rb
