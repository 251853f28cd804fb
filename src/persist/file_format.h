// The layout of a crash-surviving buffer file (ABI, version 1). Written by
// file_store.cc while the traced process runs, read by recover.cc after it
// died. Long form: docs/design/persistent-buffers.md.
//
//   offset 0         FileHeader (kHeaderBytes, one page)
//   region_table     RegionDesc[region_capacity]
//   cmdlines         CmdlineSlot[cmdline_count] (saved_cmdlines mirror)
//   then regions     each a multiple of 4096 bytes, at 4096-aligned offsets:
//     kRegionCpu     one CpuBuffer (its WriterState first), placement-new'd
//     kRegionPages   PageMeta[nr_pages], padded to page_size, then the pages
//     kRegionBlob    the event formats (FormatRecord list)
//
// Every region is mapped MAP_SHARED at its own address in the process, which
// is stored in the region's `base`: w0 and the CpuBuffer's `pages` / `meta`
// fields are addresses in the dead process, translated back to file offsets
// through these bases. Nothing in the file is trusted by the reader: every
// offset, size, address and length is checked against the file and the
// ring's own metadata.
#pragma once

#include <cstddef>
#include <cstdint>

namespace usrtrace::persist {

inline constexpr char kMagic[8] = {'U', 'S', 'R', 'T', 'B', 'U', 'F', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderBytes = 4096;
inline constexpr uint32_t kFileAlign = 4096;

enum RegionKind : uint32_t { kRegionFree = 0, kRegionCpu = 1, kRegionPages = 2, kRegionBlob = 3 };
enum RegionState : uint32_t { kStateUnused = 0, kStateLive = 1, kStateDead = 2 };

// ABI. Written by the control plane of the traced process, except `role`
// (adopt_cpu(), any thread, plain store).
struct RegionDesc {
  uint32_t kind;       // RegionKind
  uint32_t state;      // RegionState; set last when a region goes live
  uint64_t offset;     // in the file, multiple of kFileAlign
  uint64_t size;       // bytes, multiple of kFileAlign
  uint64_t base;       // address of the region's first byte in the process
  uint64_t role;       // kRegionCpu: rb::role_word(tag, cpu), 0 = unowned
  uint32_t nr_pages;   // kRegionPages
  uint32_t page_size;  // kRegionPages
  uint64_t pages_off;  // kRegionPages: offset of the pages within the region
  uint64_t reserved;
};
static_assert(sizeof(RegionDesc) == 64);

// Where a CpuBuffer's fields are, so a reader built from other sources can
// tell it cannot decode this file (it must match its own layout exactly).
struct CpuLayout {
  uint32_t size;  // sizeof(CpuBuffer)
  uint32_t w0, last_ts, pages, meta, nr_pages, page_size, page_shift, cpu;
  uint32_t meta_size;  // sizeof(PageMeta)
  uint32_t meta_seq, meta_first_index, meta_missed, meta_entries;
  uint32_t reserved[2];
};
static_assert(sizeof(CpuLayout) == 64);

// The format blob, pointed at by FileHeader::formats[formats_cur & 1].
struct BlobRef {
  uint64_t offset;
  uint64_t size;
};

// ABI. Context: written by the control plane; the header is its own mapping.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;  // sizeof(FileHeader)
  uint32_t page_size;    // ring pages ("sub-buffers")
  uint32_t nr_cpus;
  uint32_t region_capacity;  // entries in the region table
  uint32_t cmdline_count;
  uint64_t region_table;  // file offset
  uint64_t cmdlines;      // file offset
  uint64_t file_end;      // next free offset (allocation is append-only)
  // The clock, with the TSC calibration of the process (raw -> ns:
  // ns0 + ((raw - tsc0) * mult) >> 32 when clock_tsc and clock_in_ns).
  uint32_t clock_id;
  uint8_t clock_tsc;
  uint8_t clock_in_ns;
  uint16_t reserved0;
  char clock_name[16];
  uint64_t tsc0;
  uint64_t ns0;
  uint64_t mult;
  int32_t pid;
  uint32_t reserved1;
  uint64_t created_ns;  // CLOCK_REALTIME at creation
  char program[256];
  char instance[64];  // "" for the top instance
  CpuLayout cpu_layout;
  uint64_t formats_cur;  // index into formats[] (& 1) of the current blob
  BlobRef formats[2];
};
static_assert(sizeof(FileHeader) <= kHeaderBytes);

// One entry of the cmdlines area (the saved_cmdlines mirror).
struct CmdlineSlot {
  uint32_t seq;  // odd while written; 0 = empty
  int32_t tid;
  char comm[16];
};
static_assert(sizeof(CmdlineSlot) == 24);

// The format blob: records back to back, each 8-byte aligned.
//   u32 kind, u32 len, then `len` bytes
//   kind 1: header_page text     kind 2: header_event text
//   kind 3: event: u16 id, u16 system_len, system, then the format text
inline constexpr uint32_t kRecHeaderPage = 1;
inline constexpr uint32_t kRecHeaderEvent = 2;
inline constexpr uint32_t kRecEvent = 3;

}  // namespace usrtrace::persist

namespace usrtrace::persist {
// This build's CpuBuffer/PageMeta layout (file_store.cc); a reader decodes a
// file only if the file's is the same.
CpuLayout cpu_layout();
}  // namespace usrtrace::persist
