// Writes trace.dat files (trace-cmd's format, version 6 or 7, v7 optionally
// zstd-compressed), so trace-cmd report, libtracecmd and KernelShark read
// what usrtrace records. The writer does no per-event work: CPU data is
// whole ring-buffer pages (as trace_pipe_raw hands them out) copied from
// file descriptors, in chunks when compressing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace usrtrace::tracedat {

// Everything about the traced program that is not buffer data.
struct Metadata {
  uint32_t page_size = 4096;  // of the top buffer (the file header's)
  int nr_cpus = 0;
  std::string header_page;                  // events/header_page text
  std::string header_event;                 // events/header_event text
  std::vector<std::string> ftrace_formats;  // events/ftrace/*/format
  // events/SYS/*/format, by system (ftrace excluded)
  std::vector<std::pair<std::string, std::vector<std::string>>> systems;
  std::string kallsyms;     // "ADDR TYPE NAME[\t[MOD]]\n" lines
  std::string printk;       // printk_formats
  std::string cmdlines;     // saved_cmdlines ("PID COMM\n")
  std::string trace_clock;  // the trace_clock file ("[local] global ...")
  std::string uname;
  std::string version;  // of the recording tool
  // trace-cmd's PROCMAPS options, one per recorded process: "PID NR COMM\n"
  // (hex, hex, text) then NR "START END PATH\n" lines (hex), the objects
  // mapped in it. Readers learn from them which process a buffer's threads
  // are in, and where its objects were.
  std::vector<std::string> procmaps;
  // Raw TSC timestamps (the local, global and perf clocks store them):
  // readers compute ns = ((ts * mult) >> shift) + offset, from the TSC2NSEC
  // option (mult, shift; trace-cmd ignores its offset) and the OFFSET option.
  struct Tsc2Nsec {
    uint32_t mult = 0;  // 0: timestamps are written in the clock's unit
    uint32_t shift = 0;
    int64_t offset = 0;
  } tsc2nsec;
};

// A run of whole pages: `size` bytes at `offset`; or, if `chunks` is not
// 0, that many compressed chunks of them (CpuData::chunks).
struct Extent {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t chunks = 0;
};

// Pages per compressed chunk of CPU data, at most: the writer's chunks, and
// a recording's (record/journal.h), which a compressed file takes as they
// are. A chunk of more is refused where chunks are read back.
inline constexpr uint32_t kChunkPages = 16;

// One CPU's pages: its extents of `fd`, in order (a recording's journal
// holds each CPU's pages in runs between other CPUs' runs).
struct CpuData {
  int fd = -1;
  std::vector<Extent> extents;
  // The pages are already in the file being written, as extents[0] (one
  // page-aligned extent, before WriteOptions::append_at): the file only
  // names them (v7 without compression; a recording's largest CPU stream).
  bool in_place = false;
  // The chunks of the extents that hold their pages already compressed
  // (Extent::chunks), back to back as trace.dat v7 holds them (each u32
  // compressed size, u32 size, a zstd frame of `size` bytes: whole pages,
  // at most kChunkPages), one chunk never across two extents; 0: every
  // extent holds pages. A zstd file takes the chunks as they are
  // (copy_file_range) and compresses the other extents; any other file
  // gets them decompressed, each chunk checked against its sizes (a
  // journal is untrusted input). size() counts a chunked extent's
  // compressed bytes.
  uint64_t chunks = 0;
  uint64_t size() const {
    uint64_t n = 0;
    for (const Extent& e : extents) n += e.size;
    return n;
  }
};

// One instance's data. cpus[i] is CPU i; stats[i], if there, is the text
// of per_cpu/cpuI/stats (for `trace-cmd report --stat`).
struct BufferData {
  std::string name;   // "" for the top instance
  std::string clock;  // its trace clock ("local")
  uint32_t page_size = 4096;
  std::vector<CpuData> cpus;
  std::vector<std::string> stats;
};

enum class Compression { kNone, kZstd };

struct WriteOptions {
  int version = 7;                               // 6 or 7
  Compression compression = Compression::kNone;  // kZstd needs version 7
  // 1, not zstd's default 3: on a function_graph recording (bench/whole_job.py's
  // 152 MB) the zstd command took 0.70 s at level 3 and 0.50 s at level 1, for
  // a file 2% larger.
  int zstd_level = 1;
  // Where the sections go when some CPU data is in place (CpuData::in_place):
  // past the end of that data, page-aligned. 0: right after the header.
  uint64_t append_at = 0;
};

// Writes the file to `fd` (positioned at 0, seekable; with in-place CPU
// data, the file that holds it, of which only the first page before that
// data and what follows append_at are written). buffers[0] must be
// the top instance (name ""; it may have no data), the others are written
// as trace-cmd's BUFFER instances. Returns 0, or -errno with *err set.
// Context: control plane; allocates; blocks on I/O.
int write_file(int fd, const Metadata& meta, const std::vector<BufferData>& buffers, const WriteOptions& opts,
               std::string* err);

}  // namespace usrtrace::tracedat
