// trace.dat v7's compressed CPU data: chunks of whole pages, back to back,
// each "u32 compressed size, u32 size, zstd frame" (trace-cmd's
// tracecmd_compress_copy_from; docs/formats/trace-dat.md). The writer
// makes them at the end of a recording, or a recording's journal makes them
// while it records (record/journal.h), and the writer then copies them as
// they are; both cut at kChunkPages pages (writer.h).
#pragma once

#include <zstd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tracedat/writer.h"

namespace usrtrace::tracedat {

inline constexpr uint32_t kChunkHead = 8;  // u32 compressed size, u32 size

// True if a chunk whose head says `csize` and `size` may hold CPU data of
// pages of `page_size` (a power of two): whole pages, at most kChunkPages
// of them, and a compressed size zstd could have made of them. Untrusted
// heads (a journal's) are checked with this before anything is read.
bool chunk_head_ok(uint32_t csize, uint32_t size, uint32_t page_size);

// Compresses with zstd at one level. Not thread-safe (one context).
class ChunkCompressor {
 public:
  // zstd at `level`, each frame with its checksum.
  explicit ChunkCompressor(int level) : level_(level) {}
  ~ChunkCompressor();
  ChunkCompressor(const ChunkCompressor&) = delete;
  ChunkCompressor& operator=(const ChunkCompressor&) = delete;

  // Appends one chunk of the `n` bytes at `in` to *out. False on a zstd
  // failure (no memory), *out then as it was.
  bool block(const char* in, size_t n, std::string* out);
  // Appends the chunks of `n` bytes of whole pages of `page_size` to *out,
  // kChunkPages pages each (the last one fewer). The count, or -1 on a
  // zstd failure (*out as it was).
  int64_t pages(const char* in, size_t n, uint32_t page_size, std::string* out);

 private:
  int level_;
  ZSTD_CCtx* cctx_ = nullptr;
};

// Decompresses chunks. Not thread-safe (one context).
class ChunkDecompressor {
 public:
  ChunkDecompressor() = default;
  ~ChunkDecompressor();
  ChunkDecompressor(const ChunkDecompressor&) = delete;
  ChunkDecompressor& operator=(const ChunkDecompressor&) = delete;

  // The `csize` bytes at `in` (a chunk's frame) into the `size` bytes at
  // `out`. True only if the frame decompresses to exactly `size` bytes: a
  // frame that would make more stops at `size` (a zstd bomb costs no more
  // than its head declares, which chunk_head_ok bounds).
  bool decompress(const void* in, size_t csize, void* out, size_t size);

 private:
  ZSTD_DCtx* dctx_ = nullptr;
};

}  // namespace usrtrace::tracedat
