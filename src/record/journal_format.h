// The record journal's on-disk format, shared by its writer (journal.cc)
// and its reader (journal_read.cc): record kinds, the bounds a reader
// accepts, and the little helpers both use. Private to src/record.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tracedat/writer.h"

namespace usrtrace::tracedat::journal_format {

constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 32;
constexpr uint32_t kRecordHead = 16;

enum Kind : uint32_t {
  kOutput = 1,
  kProcess = 2,
  kStream = 3,
  kMeta = 4,
  kPages = 5,
  kPagesIn = 6,
  kPagesGone = 7,
  kChunks = 8
};

// What a reader accepts (a journal is untrusted input).
constexpr uint64_t kMaxSmallRecord = 1 << 16;  // every record but kMeta and kPages
constexpr uint64_t kMaxMeta = 1ull << 30;      // kallsyms of a very big program
constexpr uint32_t kMaxIds = 1 << 16;          // processes, streams
constexpr size_t kMaxRuns = 64;                // runs of one page file (CpuData::extents)
// A process's prefix or a stream's instance name: well inside
// kMaxSmallRecord, whose records the reader would otherwise refuse.
constexpr size_t kMaxName = 4096;
// With a size limit the journal is compacted once it passes this, or twice
// its size after the last compaction, whichever is more (amortized: each
// byte of the live state is written again at most once per byte appended).
constexpr uint64_t kCompactFloor = 4u << 20;
// With compression, the pages put and not yet in the journal (queued for
// the compressor, or being compressed): what a killed recorder loses
// beyond what it had not taken. The compressor takes half of it at a time,
// so that the recorder can queue the next half meanwhile.
constexpr size_t kCompressQueueBytes = 4u << 20;

inline void put32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
inline void put64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

inline std::string page_file_name(const std::string& journal, uint32_t stream, uint32_t cpu) {
  return journal + "." + std::to_string(stream) + "." + std::to_string(cpu);
}
inline void put_str(std::string* s, const std::string& v) {
  put32(s, static_cast<uint32_t>(v.size()));
  s->append(v);
}

inline std::string mib(uint64_t bytes) {
  char b[32];
  snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}

// Reads exactly n bytes at off; false at EOF or on an error (errno set).
inline bool read_at(int fd, uint64_t off, void* buf, size_t n) {
  char* c = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, c, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return false;
    }
    c += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<size_t>(r);
  }
  return true;
}

// A payload being decoded.
struct Cursor {
  const uint8_t* p;
  size_t n;
  bool ok = true;
  uint32_t u32() {
    uint32_t v = 0;
    if (n < 4) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, p, 4);
    p += 4;
    n -= 4;
    return v;
  }
  std::string str() {
    const uint32_t len = u32();
    if (!ok || len > n) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
};

// Takes [off, off + n) out of a CPU's extents (in the order written),
// keeping what is left of each in place: a ring's oldest pages go, the
// rest stay in order. The bytes taken.
inline uint64_t cut_extents(std::vector<Extent>* extents, uint64_t off, uint64_t n) {
  const uint64_t end = off + n;
  uint64_t cut = 0;
  std::vector<Extent> kept;
  kept.reserve(extents->size() + 1);
  for (const Extent& e : *extents) {
    const uint64_t e_end = e.offset + e.size;
    if (e_end <= off || e.offset >= end) {
      kept.push_back(e);
      continue;
    }
    if (e.offset < off) kept.push_back({e.offset, off - e.offset});
    if (e_end > end) kept.push_back({end, e_end - end});
    cut += std::min(e_end, end) - std::max(e.offset, off);
  }
  *extents = std::move(kept);
  return cut;
}

inline bool overlaps(const std::vector<Extent>& extents, uint64_t off, uint64_t n) {
  for (const Extent& e : extents)
    if (e.offset < off + n && off < e.offset + e.size) return true;
  return false;
}

}  // namespace usrtrace::tracedat::journal_format
