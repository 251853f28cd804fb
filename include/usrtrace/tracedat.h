// trace.dat files: recording a program's buffers into trace-cmd's file
// format, and reading such files back (ours and the kernel's).
//
//   usrtrace::RecordOptions o;
//   o.output = "trace.dat";
//   o.instances = {"", "errors"};          // the top instance and one more
//   std::string err;
//   auto rec = usrtrace::TraceRecorder::start(o, &err);   // drains as they fill
//   ... run ...
//   rec->stop(&err);                                       // writes trace.dat
//
//   // the flight-recorder case: what the buffers hold now, in one go
//   usrtrace::extract_trace(o, &err);
//
// `trace-cmd report trace.dat`, KernelShark and libtracecmd read the files;
// so does `usrtrace report` (and TraceFile below).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "usrtrace/usrtrace.h"

namespace usrtrace {

struct RecordOptions {
  std::string output = "trace.dat";
  // Instances to record, by name; "" is the top instance. Empty: the top
  // instance only.
  std::vector<std::string> instances;
  int file_version = 7;   // 6 or 7 (trace-cmd's default)
  bool compress = false;  // zstd, version 7 only
  // How full a CPU's buffer gets before the recorder drains it, in percent;
  // -1: each instance's buffer_percent file.
  int buffer_percent = -1;
  // The process whose instances are recorded: 0 is this one; another pid
  // is recorded from outside, through its control socket
  // (usrtrace/control.h), as `usrtrace record -P PID` does.
  int pid = 0;
  // 0: the file keeps every page taken. Else each CPU of each instance
  // keeps its newest pages that fit in this many bytes (whole pages, at
  // least one), the older ones given up as the recording goes: a flight
  // recorder on disk, as trace-cmd record -m (KiB there).
  uint64_t max_cpu_bytes = 0;
  // Kernel tracefs events recorded into the same file (usrtrace record
  // -K): SYS:EVENT, SYS or EVENT, globs as for -e. A kernel instance of the
  // recorder's own records them on the clock the kernel shares with the
  // file's, limited to the recorded process's threads and what they start,
  // as the buffer "kernel". Needs the kernel's tracefs and root; recording
  // another process (pid) only.
  std::vector<std::string> kernel_events;
};

struct RecordStats {
  uint64_t pages = 0;          // pages taken from the buffers
  uint64_t bytes = 0;          // of CPU data
  uint64_t lost_events = 0;    // reported by the buffers (overwritten or dropped)
  uint64_t pages_dropped = 0;  // of `pages`, given up to max_cpu_bytes (oldest first)
};

// Drains instances' buffers while the program runs: a thread per instance
// waits until a CPU's buffer reaches buffer_percent, then moves the full
// pages, as trace_pipe_raw hands them out, to a journal beside the output
// (.OUTPUT.usrtrace-rec-XXXXXX; no per-event work); stop() takes what is
// left, writes the trace.dat from the journal and removes it. A recorder
// that dies or meets a full disk leaves the journal, from which
// `usrtrace recover JOURNAL` writes the trace.dat. In discard mode nothing is lost while the recorder keeps
// up; in overwrite mode what it could not take in time is overwritten, and the file says how many events were
// lost where.
class USRTRACE_EXPORT TraceRecorder {
 public:
  // Starts recording. nullptr with *err set: an unknown instance, a bad
  // option, or the output's directory cannot hold the journal.
  // Context: control plane; starts threads.
  static std::unique_ptr<TraceRecorder> start(const RecordOptions& opts, std::string* err);
  // Stops, drains the rest and writes the file. 0, or -errno with *err set.
  int stop(std::string* err);
  RecordStats stats() const;
  // Recording another process (RecordOptions::pid): it exited, or was
  // killed, and what it had is taken; stop() writes the file.
  bool process_exited() const;
  // Recording another process: it is exiting, or its runtime holds a
  // deadly signal (Ctrl-C) until the recorder has taken its last pages;
  // process_exited() follows once they are. False for a process that
  // caught or ignored the signal and goes on.
  bool process_exiting() const;
  // Recording another process: records process `pid` (one it started,
  // say) into the same file, from now on, with the same instances. Its
  // buffers are named "COMM-PID" (its top instance) and "COMM-PID:NAME";
  // its events' formats and its threads' names join the file's. Its time
  // stamps must be on the same clock (trace_clock) as the first process's.
  // 0, or -errno with *err set. Context: control plane; not concurrently
  // with stop().
  int add_process(int pid, std::string* err);
  // After stop(): a line for each added process whose data could not be
  // taken (the file has the others).
  std::string warnings() const;
  // Stops and writes the file if stop() was not called.
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  struct Impl;

 private:
  explicit TraceRecorder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes what the instances' buffers hold now to a trace.dat, consuming it
// (trace-cmd extract). 0, or -errno with *err set. `stats`, if not null,
// gets what was written. Context: control plane.
USRTRACE_EXPORT int extract_trace(const RecordOptions& opts, std::string* err, RecordStats* stats = nullptr);

// A trace.dat file read back: version 6 or 7, compressed or not, written by
// usrtrace or by trace-cmd for the kernel. The file is untrusted input:
// every size and offset is checked against the file; what does not check
// out is either refused (open() fails with a message saying what and where)
// or, for CPU data, skipped with a line in warnings() while every valid
// record is still returned.
//
//   std::string err;
//   auto f = usrtrace::TraceFile::open("trace.dat", &err);
//   usrtrace::TraceFile::Cursor c(*f);
//   usrtrace::TraceFile::Record r;
//   while (c.next(&r)) { ... r.ts, r.cpu, r.data, r.len ... }
class USRTRACE_EXPORT TraceFile {
 public:
  static std::unique_ptr<TraceFile> open(const std::string& path, std::string* err);
  // The same from a file's bytes (kept by the TraceFile).
  static std::unique_ptr<TraceFile> parse(std::vector<uint8_t> bytes, std::string* err);
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  int version() const;                     // 6 or 7
  const std::string& compression() const;  // "none", "zstd", ...
  int long_size() const;                   // 8 or 4
  uint32_t page_size() const;
  int nr_cpus() const;
  const std::string& header_page() const;
  const std::string& header_event() const;
  struct Format {
    std::string system;  // "ftrace" for the ftrace formats
    std::string text;    // the format file
  };
  const std::vector<Format>& formats() const;
  const std::string& kallsyms() const;
  const std::string& printk_formats() const;
  const std::string& cmdlines() const;
  const std::string& trace_clock() const;  // the trace_clock file, if recorded
  const std::string& uname() const;
  const std::string& tool_version() const;
  // The PROCMAPS options (trace-cmd record --proc-map writes them; usrtrace
  // record one per recorded process): each process's pid, name and mapped
  // objects. A malformed one is left out, with a warning.
  struct ProcMap {
    int pid = 0;
    std::string comm;
    struct Object {
      uint64_t start = 0, end = 0;
      std::string path;
    };
    std::vector<Object> objects;
  };
  const std::vector<ProcMap>& procmaps() const;
  const std::vector<std::string>& cpu_stats() const;  // "CPU: N\n" + per_cpu/cpuN/stats
  // A latency-format file's text ("latency" data instead of flyrecord).
  const std::string& latency_text() const;

  struct Buffer {
    std::string name;   // "" for the top instance
    std::string clock;  // "local", "x86-tsc", ...
    uint32_t page_size = 0;
    int nr_cpus = 0;  // CPU data slots
    struct Extent {
      uint64_t offset = 0, size = 0;  // of a CPU's data in the file
    };
    std::vector<Extent> cpus;
  };
  const std::vector<Buffer>& buffers() const;  // [0] is the top instance

  struct Record {
    int buffer = 0;  // index into buffers()
    int cpu = 0;
    uint64_t ts = 0;                // in the buffer clock's units (ns for ns clocks)
    const uint8_t* data = nullptr;  // the record, common fields first; valid
    uint32_t len = 0;               // while the TraceFile lives
    // Events lost right before this one on its CPU (the page's missed
    // events): 0 none, -1 lost but not counted.
    int64_t missed = 0;
  };

  // Iterates the records of the chosen buffers and CPUs, merged by time
  // (ties: lower buffer, then lower CPU first, as trace-cmd does).
  class USRTRACE_EXPORT Cursor {
   public:
    // `buffers`/`cpus` empty: all of them.
    explicit Cursor(const TraceFile& f, std::vector<int> buffers = {}, std::vector<int> cpus = {});
    ~Cursor();
    bool next(Record* r);
    // Bytes of CPU data read so far and in all, over the chosen buffers
    // and CPUs (for a progress display).
    void progress(uint64_t* done, uint64_t* total) const;

   private:
    struct State;
    std::unique_ptr<State> st_;
  };

  // A filter in the language of the events' filter files, on one event of
  // the file (usrtrace report -F).
  class USRTRACE_EXPORT EventFilter {
   public:
    // Compiles `expr` against the event whose format file text is `format`.
    // nullptr with *err set: the expression with a caret under the error
    // and the kernel's message, as a filter file shows it.
    static std::unique_ptr<EventFilter> compile(const std::string& format, const std::string& expr,
                                                std::string* err);
    ~EventFilter();
    uint16_t id() const;  // the event's
    // Whether the record passes; `comm` is its thread's name (for `comm`).
    bool match(const Record& r, const char* comm) const;

    struct Impl;

   private:
    explicit EventFilter(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };

  // What was skipped, and why (a corrupt page, data cut short).
  std::vector<std::string> warnings() const;

  struct Impl;

 private:
  explicit TraceFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace usrtrace
