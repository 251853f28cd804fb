// Helpers shared by the ring buffer tests.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ring_buffer/page_format.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::testing {

// Pins the calling thread to one CPU; returns false if that CPU is not allowed.
inline bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<size_t>(cpu), &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

inline void unpin() {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (size_t i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// RAII pinning for a test body.
struct Pinned {
  explicit Pinned(int cpu) { ok = pin_to_cpu(cpu); }
  ~Pinned() { unpin(); }
  bool ok;
};

inline std::unique_ptr<rb::RingBuffer> make_buffer(uint64_t size_per_cpu = 64 * 1024,
                                                   rb::Mode mode = rb::Mode::kOverwrite,
                                                   uint32_t page_size = 4096) {
  rb::Options o;
  o.size_per_cpu = size_per_cpu;
  o.mode = mode;
  o.page_size = page_size;
  int err = 0;
  return rb::RingBuffer::create(o, &err);
}

// A self-checking payload: any torn or mixed-up event fails check().
struct Payload {
  uint32_t writer;
  uint32_t seq;
  uint32_t nested;
  uint32_t sum;

  static Payload make(uint32_t writer, uint32_t seq, uint32_t nested) {
    Payload p{writer, seq, nested, 0};
    p.sum = p.expected_sum();
    return p;
  }
  uint32_t expected_sum() const { return (writer * 2654435761u) ^ (seq * 40503u) ^ (nested + 0x9e3779b9u); }
  bool check() const { return sum == expected_sum(); }
};

struct PageEntry {
  uint32_t type_len;
  uint64_t ts;
  std::vector<uint8_t> payload;
};

// Every entry of a page handed out by read_page, by our own walker.
inline std::vector<PageEntry> walk_page(const uint8_t* page, bool* corrupt = nullptr) {
  rb::PageHeader h;
  std::memcpy(&h, page, sizeof h);
  uint32_t len = static_cast<uint32_t>(h.commit & rb::kCommitLengthMask);
  rb::PageWalker w(page + rb::kPageHeaderSize, len, h.timestamp);
  std::vector<PageEntry> out;
  rb::Entry e;
  for (;;) {
    auto s = w.next(&e);
    if (s == rb::PageWalker::Step::kEnd) break;
    if (s == rb::PageWalker::Step::kCorrupt) {
      if (corrupt) *corrupt = true;
      break;
    }
    PageEntry pe{e.type_len, e.ts, {}};
    if (s == rb::PageWalker::Step::kData) pe.payload.assign(e.payload, e.payload + e.payload_len);
    out.push_back(std::move(pe));
  }
  return out;
}

}  // namespace usrtrace::testing
