// Reading a crash-surviving buffer file (an instance's `buffer_file`, or a
// file made by USRTRACE_BUFFER_DIR) after the process that wrote it died.
//
//   std::string err;
//   auto rec = usrtrace::Recovery::open("usrtrace-4242-top.buf", &err);
//   if (!rec) { fprintf(stderr, "%s\n", err.c_str()); ... }
//   for (const auto& ev : rec->events(0)) ...   // the live buffer, merged by time
//
// The file is untrusted input: every region, page and entry is checked
// against the ring's own metadata (the committed write position, the pages'
// sequence numbers and commit lengths). What does not check out is left out
// and described in warnings(); an event past the last commit (half written
// at the death) is never returned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "usrtrace/usrtrace.h"

namespace usrtrace {

class USRTRACE_EXPORT Recovery {
 public:
  // Reads and checks the file at `path`. nullptr with *error set when it is
  // not a regular file (a FIFO, a device, a directory: refused at once,
  // never waited on), not a usrtrace buffer file, truncated before its
  // tables, or cannot be read. Reads no more than the file's size.
  // Context: any thread; allocates (reads the whole file).
  static std::unique_ptr<Recovery> open(const std::string& path, std::string* error);
  // The same from a file's bytes.
  static std::unique_ptr<Recovery> parse(std::vector<uint8_t> bytes, std::string* error);
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  struct Info {
    int pid = 0;              // of the process that wrote the file
    std::string program;      // its comm
    std::string instance;     // "" for the top instance
    std::string clock;        // trace_clock name
    bool clock_in_ns = true;  // false: times are raw counts (counter, uptime, x86-tsc)
    uint32_t page_size = 0;
    int nr_cpus = 0;
    uint64_t created_ns = 0;  // CLOCK_REALTIME when the file was made
  };
  const Info& info() const;

  // The event formats of the program (events/SYS/NAME/format text).
  struct Format {
    uint16_t id = 0;
    std::string system;
    std::string text;
  };
  const std::vector<Format>& formats() const;
  const std::string& header_page() const;   // events/header_page text
  const std::string& header_event() const;  // events/header_event text
  // saved_cmdlines: thread id and name.
  const std::vector<std::pair<int, std::string>>& cmdlines() const;

  // The buffers in the file, by tag: 0 is the instance's live buffer, other
  // tags are snapshot buffers.
  std::vector<uint32_t> tags() const;

  struct Event {
    int cpu = 0;
    uint64_t ts_raw = 0;            // as recorded
    uint64_t ts = 0;                // in ns for ns clocks (info().clock_in_ns), else raw
    const uint8_t* data = nullptr;  // the record (common fields first); valid
    uint32_t len = 0;               // while the Recovery lives
    uint64_t lost_before = 0;       // events lost on this CPU right before this one
  };
  // Every valid event of the buffer with `tag`, merged across CPUs by time.
  std::vector<Event> events(uint32_t tag) const;

  // Writes the live buffer (tag 0) as a trace.dat (version 6 or 7, zstd if
  // `compress`), with the file's event formats and thread names, so that
  // trace-cmd report and KernelShark read what a dead process left. 0, or
  // -errno with *error set. Context: control plane.
  int write_tracedat(const std::string& path, int file_version, bool compress, std::string* error) const;

  // What was left out, and why (one line each).
  const std::vector<std::string>& warnings() const;

  struct Impl;

 private:
  explicit Recovery(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace usrtrace
