// trace.dat v7's compressed chunks (chunks.h).
#include "tracedat/chunks.h"

#include <algorithm>
#include <cstring>

namespace usrtrace::tracedat {

bool chunk_head_ok(uint32_t csize, uint32_t size, uint32_t page_size) {
  if (page_size == 0 || (page_size & (page_size - 1)) != 0) return false;
  return size > 0 && size % page_size == 0 && size / page_size <= kChunkPages && csize > 0 &&
         csize <= ZSTD_compressBound(size);
}

ChunkCompressor::~ChunkCompressor() { ZSTD_freeCCtx(cctx_); }

bool ChunkCompressor::block(const char* in, size_t n, std::string* out) {
  if (n > UINT32_MAX) return false;
  if (!cctx_) {
    cctx_ = ZSTD_createCCtx();
    if (!cctx_) return false;
    // With a checksum (4 bytes a frame): a frame garbled on disk then fails
    // to decompress, in recover's check and in every reader, instead of
    // giving other pages.
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 1);
  }
  const size_t bound = ZSTD_compressBound(n);
  const size_t head = out->size();
  out->resize(head + kChunkHead + bound);
  const size_t c = ZSTD_compress2(cctx_, out->data() + head + kChunkHead, bound, in, n);
  if (ZSTD_isError(c) || c > UINT32_MAX) {
    out->resize(head);
    return false;
  }
  const uint32_t sizes[2] = {static_cast<uint32_t>(c), static_cast<uint32_t>(n)};
  std::memcpy(out->data() + head, sizes, kChunkHead);
  out->resize(head + kChunkHead + c);
  return true;
}

int64_t ChunkCompressor::pages(const char* in, size_t n, uint32_t page_size, std::string* out) {
  const size_t before = out->size();
  const size_t chunk = size_t{page_size} * kChunkPages;
  int64_t count = 0;
  for (size_t done = 0; done < n; done += chunk, ++count)
    if (!block(in + done, std::min(chunk, n - done), out)) {
      out->resize(before);
      return -1;
    }
  return count;
}

ChunkDecompressor::~ChunkDecompressor() { ZSTD_freeDCtx(dctx_); }

bool ChunkDecompressor::decompress(const void* in, size_t csize, void* out, size_t size) {
  if (!dctx_) dctx_ = ZSTD_createDCtx();
  if (!dctx_) return false;
  const size_t r = ZSTD_decompressDCtx(dctx_, out, size, in, csize);
  return !ZSTD_isError(r) && r == size;
}

}  // namespace usrtrace::tracedat
