// The record journal: what a recording has taken so far, in a file beside
// its output that outlives the recorder (docs/design/record-journal.md).
//
// A recording appends every page it takes to the journal at once, before it
// takes the next ones, and the metadata whenever it reads it; the trace.dat
// is built from the journal when the recording stops, and the journal then
// removed. A recorder that is killed, or stopped by a full disk, leaves the
// journal: `usrtrace recover JOURNAL` builds the same trace.dat from it.
//
// Layout (little endian; version 1):
//   header   "USRTREC1", u32 version, u32 header bytes (32), u64 created
//            (CLOCK_REALTIME ns), u64 reserved
//   records  back to back, each u32 kind, u32 reserved, u64 payload bytes,
//            then the payload padded to 8 bytes:
//     kOutput   u32 file version, u32 compress, str output
//     kProcess  u32 process, i32 pid, str buffer-name prefix ("" for the first)
//     kStream   u32 stream, u32 process, u32 page size, u32 CPUs, str instance
//     kMeta     u32 process, then control/meta.h's encoding (the last wins)
//     kPages    u32 stream, u32 CPU, then whole pages as trace_pipe_raw gives them
//     kPagesIn  u32 stream, u32 CPU, u64 offset, u64 bytes: whole pages
//               written at `offset` of the stream's CPU's page file
//     kPagesGone u32 stream, u32 CPU, u64 offset, u64 bytes: the pages
//               there no longer count (about to be overwritten)
//     kChunks   u32 stream, u32 CPU, then the CPU's next pages compressed,
//               as trace.dat v7 holds them: chunks back to back, each u32
//               compressed size, u32 size, a zstd frame of `size` bytes
//               (whole pages, at most kChunkPages)
//   (str: u32 length, then the bytes.) A record cut short by a death or a
// full disk ends the journal; of a kPages record cut short, its whole pages
// count, and of a kChunks record its whole chunks.
//
// Compression while recording: a recording that writes a compressed
// trace.dat (without a size limit) hands each batch of pages to a thread of
// the journal's, through a queue of at most kCompressQueueBytes (the
// recorder waits when it is full; the traced program never does: its
// buffers hold the pages meanwhile). That thread cuts each CPU's pages into
// chunks as the trace.dat writer does and appends them as kChunks records,
// or, when it is behind (a recorder waits for room), writes them as they
// are (kPages), so that the recorder waits on a write and not on zstd; a
// CPU's data is then runs of both (Extent::chunks). The end of the
// recording copies the chunks into the file as they are and compresses
// the rest on every CPU. A killed recorder loses, besides what it had not
// taken, what was queued: at most kCompressQueueBytes of pages.
//
// Page files: a recording that writes a trace.dat v7 without compression
// puts each CPU's pages of each stream in a file of its own, JOURNAL.S.C
// (stream S, CPU C; O_EXCL, 0600), from offset max(4096, page size) on, in
// the order taken; the journal says how far each is written (kPagesIn,
// appended after the pages). At the end the largest of them becomes the
// trace.dat: its pages stay where they are, the file gets the header in its
// first page and the rest after its pages (finish_journal). The copy of
// every page into a new file that this saves took 0.09 s of a 0.5 s
// recording of 150 MB, most of it on one CPU (bench/whole_job.py).
//
// A size limit (RecordOptions::max_cpu_bytes, trace-cmd's -m) makes each
// page file a ring of that many bytes from max(4096, page size): when it
// is full the next pages go back to its start, each run announced first
// by kPagesGone for the pages it replaces. A reader keeps a CPU's pages as
// extents in the order written and cuts what kPagesGone names out of them,
// so what is left is the newest pages, oldest first. It needs page files
// whatever the output (they are then copied as v6's or compressed data).
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control/meta.h"
#include "tracedat/writer.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tracedat {

inline constexpr char kJournalMagic[8] = {'U', 'S', 'R', 'T', 'R', 'E', 'C', '1'};

// Appends to a new journal. Every append is one positioned write, made
// under a mutex (the recorder threads of several instances and processes
// share the file); nothing here is on the program's write path.
class JournalWriter {
 public:
  JournalWriter() = default;
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;
  // Writes what is queued for compression, closes; removes the file if it
  // holds no pages (nothing to recover).
  ~JournalWriter();

  // Creates DIR/.NAME.usrtrace-rec-XXXXXX beside opts.output (a new name,
  // O_EXCL, 0600) and records the output's name and options. 0 or -errno
  // with *err set.
  int create(const RecordOptions& opts, std::string* err);
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // The output it was created for (RecordOptions::output, as given).
  const std::string& output() const { return output_; }

  // Each appends one record: 0, or -errno with *err set (the first failure
  // sticks: later appends fail the same way).
  int add_process(int pid, const std::string& prefix, uint32_t* process, std::string* err);
  int add_stream(uint32_t process, const std::string& instance, uint32_t page_size, uint32_t nr_cpus,
                 uint32_t* stream, std::string* err);
  int put_meta(uint32_t process, const control::RemoteMeta& meta, std::string* err);
  // `bytes` of whole pages of `cpu`. With compression they are queued
  // (copied) for the compressor, and a failure to write them is said by a
  // later call, or by drain(). Context: a recorder thread; with
  // compression, waits while kCompressQueueBytes are queued.
  int put_pages(uint32_t stream, uint32_t cpu, const void* pages, size_t bytes, std::string* err);
  // Waits until every page put is in the journal (the compressor's queue
  // is empty). 0, or the first failure as put_pages says it.
  int drain(std::string* err);
  // The page file of stream's CPU (see the layout) and its descriptor
  // (O_RDWR), or -1 if it has none (no page files, or no pages yet). A
  // page file closed by close_stream() is opened again (and must be the
  // file it wrote: same device and inode).
  std::string page_file(uint32_t stream, uint32_t cpu) const;
  int page_file_fd(uint32_t stream, uint32_t cpu);
  // The stream takes no more pages (its process is gone): its page files'
  // descriptors are closed, so that a recording of hundreds of processes
  // does not hold a descriptor per CPU of each until its end. Pages put
  // later fail (EBADF).
  void close_stream(uint32_t stream);
  // That page file is now the output: remove() leaves its old name alone.
  void installed(uint32_t stream, uint32_t cpu);

  uint64_t page_bytes() const;
  // Pages given up to RecordOptions::max_cpu_bytes (oldest first).
  uint64_t pages_dropped() const;
  // Removes the file and its page files (its trace.dat was written).
  void remove();
  // Keeps the file whatever it holds (a recording that failed says where).
  void keep() { keep_ = true; }

 private:
  int append(uint32_t kind, const std::string& head, const void* data, size_t bytes, std::string* err);
  int append_locked(uint32_t kind, const std::string& head, const void* data, size_t bytes, std::string* err);
  int put_in_page_file(uint32_t stream, uint32_t cpu, const void* pages, size_t bytes, std::string* err);
  int check_pages_locked(uint32_t stream, size_t bytes, uint32_t* unit, std::string* err);  // mu_ held
  void fail_locked(int e, const std::string& what);

  struct PageFile {
    int fd = -1;
    bool closed = false;  // by close_stream()
    dev_t dev = 0;        // what it is, to open it again
    ino_t ino = 0;
    uint64_t end = 0;      // where the next page goes
    bool wrapped = false;  // a ring (max_cpu_bytes_) that came round: the next pages overwrite
    bool installed = false;
  };
  int write_pages_locked(PageFile& f, uint32_t stream, uint32_t cpu, uint32_t unit, const char* c, uint64_t n,
                         std::string* err);
  // With a size limit: the journal rewritten with what still counts (see
  // "Compaction" in journal.cc). Under mu_.
  void compact_locked();
  void maybe_compact_locked() {
    if (compact_at_ && !error_ && end_ > compact_at_) compact_locked();
  }

  // Compression while recording (the layout's comment). The compressor
  // thread takes batches off queue_, compresses them and appends kChunks
  // records under mu_. Lock order: never mu_ and qmu_ together.
  struct Batch {
    uint32_t stream = 0, cpu = 0;
    std::string pages;
  };
  void compress_loop();
  bool compress_ = false;  // set by create()
  std::thread compressor_;
  std::mutex qmu_;
  std::condition_variable q_put_;    // queue_ not empty, or stopping_
  std::condition_variable q_space_;  // queued_ went down
  std::deque<Batch> queue_;          // under qmu_
  std::vector<std::string> spare_;   // under qmu_: batch buffers to reuse
  size_t queued_ = 0;                // under qmu_: bytes put and not yet in the journal
  size_t waiting_ = 0;               // under qmu_: recorders waiting for room
  bool stopping_ = false;            // under qmu_

  mutable std::mutex mu_;
  int fd_ = -1;
  std::string path_;
  std::string output_;
  uint64_t end_ = 0;                        // under mu_
  uint64_t page_bytes_ = 0;                 // under mu_
  uint64_t pages_dropped_ = 0;              // under mu_
  uint64_t max_cpu_bytes_ = 0;              // set by create(): 0, or each page file is a ring of this size
  uint32_t processes_ = 0, streams_ = 0;    // under mu_
  std::vector<uint32_t> stream_page_size_;  // under mu_
  int error_ = 0;                           // under mu_: the first failure
  std::string error_text_;                  // under mu_
  bool keep_ = false;
  bool page_files_ = false;                                  // set by create()
  std::map<std::pair<uint32_t, uint32_t>, PageFile> files_;  // under mu_, by (stream, CPU)

  // What compaction writes again, under mu_: the records that say what the
  // journal is, and where each process's last metadata is.
  std::string header_;                        // the file's first kHeaderBytes
  std::string output_record_;                 // kOutput's payload
  std::vector<std::string> process_records_;  // kProcess payloads, by id
  std::vector<std::string> stream_records_;   // kStream payloads, by id
  struct MetaAt {
    uint64_t offset = 0, bytes = 0;  // the last kMeta payload in the file; bytes 0: none
    size_t hash = 0;                 // of that payload: the same metadata is not journaled twice
  };
  std::vector<MetaAt> meta_at_;  // by process
  uint64_t compact_at_ = 0;      // compact once end_ passes this (0: never; no size limit)
};

// The streams a journal holds: pages of a power of two from 64 bytes (the
// kernel's subbuffers for record -K among them) to 1 MiB, 1 to 4096 CPUs.
// One rule for the writer and the reader: a stream the writer took and the
// reader then refused would end the journal there, and every page of every
// process recorded after it would be lost from the file.
inline constexpr uint32_t kJournalMaxCpus = 4096;
inline bool journal_stream_ok(uint32_t page_size, uint32_t nr_cpus) {
  return page_size >= 64 && page_size <= (1u << 20) && (page_size & (page_size - 1)) == 0 && nr_cpus > 0 &&
         nr_cpus <= kJournalMaxCpus;
}

// Where a stream's CPU's pages begin in its page file: the first page is
// kept for the trace.dat header.
inline uint64_t page_file_start(uint32_t page_size) { return page_size > 4096 ? page_size : 4096; }

// A journal read back. Untrusted: every length, index and count is checked
// against the file; what does not check out ends the journal there.
struct Journal {
  std::string output;
  int file_version = 7;
  bool compress = false;
  struct Process {
    int pid = 0;
    std::string prefix;
    bool have_meta = false;
    control::RemoteMeta meta;
  };
  struct Stream {
    uint32_t process = 0;
    std::string instance;
    uint32_t page_size = 0;
    std::vector<CpuData> cpus;
  };
  std::vector<Process> processes;
  std::vector<Stream> streams;
  uint64_t pages = 0;
  uint64_t pages_gone = 0;    // given up by kPagesGone (a size limit's ring)
  uint64_t bytes = 0;         // the file's size
  std::string damage;         // why the journal ended early, "" if it ended at a record's end
  std::vector<int> page_fds;  // the page files read (CpuData::fd), closed with the Journal

  Journal() = default;
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();
};

// True if the `n` bytes at `p` begin a journal.
bool is_journal(const void* p, size_t n);

// Reads the journal open at `fd` (its CpuData keep `fd`, or the page
// files', found beside `path`: "" for the name /proc/self/fd gives `fd`).
// 0, or -errno with *err set when it is not a journal or holds no output
// record. A page file missing or shorter than its records ends the journal
// there (Journal::damage), as a record cut short does. Every compressed
// chunk's sizes are checked; with `check_chunks`, each is decompressed too
// (bounded by its declared size), so that a chunk that does not
// decompress ends the journal there instead of going into a trace.dat
// (recover; a recording's own end skips it: it wrote the chunks itself).
int read_journal(int fd, Journal* out, std::string* err, const std::string& path = "",
                 bool check_chunks = true);

// Writes `output` as a trace.dat from the journal (never the output the
// journal names: a journal is input, maybe another user's, and the path
// written comes from the command line or the recorder that wrote it): the first process's metadata, the
// others' events and thread names joined to it, their buffers named PREFIX and PREFIX:INSTANCE. Processes in
// `skip` are left out. 0, or -errno with *err set.
int write_from_journal(const Journal& j, const std::string& output, const std::vector<uint32_t>& skip,
                       std::string* err);

// The output a journal's own name says, beside it: DIR/NAME for
// DIR/.NAME.usrtrace-rec-XXXXXX (what JournalWriter::create names it);
// "" for any other name. What `usrtrace recover JOURNAL` writes without -o.
std::string output_beside_journal(const std::string& journal);

// The journals beside `output` that no live recording holds (each
// JournalWriter holds an flock on its file while it lives): what killed or
// failed recordings of that output left.
std::vector<std::string> abandoned_journals(const std::string& output);

// A recording's end: reads back the journal `w` wrote, writes its output
// from it (write_from_journal), and removes the journal. If that fails
// the journal is kept, and *err says where it is and how to recover it.
int finish_journal(JournalWriter& w, const std::vector<uint32_t>& skip, std::string* err);

}  // namespace usrtrace::tracedat
