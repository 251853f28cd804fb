// A libtraceevent handle loaded with a trace.dat's metadata (formats,
// kallsyms, printk formats, thread names), as trace-cmd loads it, so that
// records print exactly as `trace-cmd report` prints them.
#pragma once

#include <event-parse.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

class TepSession {
 public:
  // Loads `f`'s metadata; formats libtraceevent cannot parse are reported
  // in *warnings (their records then print as trace-cmd prints unknown ones).
  static std::unique_ptr<TepSession> load(const TraceFile& f, std::string* warnings);
  // The same for formats alone ({system, text}), as a recovered buffer
  // holds them (`usrtrace recover`): 8-byte longs, pages of `page_size`.
  static std::unique_ptr<TepSession> from_formats(
      const std::vector<std::pair<std::string, std::string>>& formats, uint32_t page_size, int nr_cpus,
      std::string* warnings);
  ~TepSession();

  tep_handle* tep() const { return tep_; }
  // The format file text of event `id`, "" if the file has none.
  const std::string& format_of(int id) const;
  // A libtraceevent record for `r`: its bytes copied, then zeros as far
  // as a field can make libtraceevent read past a record's start (reach_):
  // a field past the record, a __data_loc that points past it, a string
  // without its NUL, an index or a length a print format computes (see
  // fence_fields()) read zeros, never what follows the record. Valid until
  // the next make_record. Context: allocates only when a record is longer
  // than any before.
  tep_record make_record(const TraceFile::Record& r) const;
  tep_record make_record(const uint8_t* data, uint32_t len, uint64_t ts, int cpu) const;

 private:
  // Parses one format file, unless libtraceevent 1.7 would crash on it.
  void add_format(const std::string& system, const std::string& text, std::string* warnings);
  void fence_fields(int64_t page, std::string* warnings);

  tep_handle* tep_ = nullptr;
  tep_plugin_list* plugins_ = nullptr;
  std::map<int, std::string> formats_;
  // How far past a record's start libtraceevent reads, at most: the end of
  // the farthest field of any format (each within the file's largest page,
  // see fence_fields()), then what a __data_loc word or a print format can
  // name from there (64 KiB at up to 64 KiB past it; 64 Ki elements of 8
  // bytes).
  size_t reach_ = 0;
  mutable std::vector<uint8_t> scratch_;  // the record, then zeros
  mutable size_t dirty_ = 0;              // scratch_'s bytes that may not be zero
};

// Whether the trace clock's times are ns (printed as seconds.micros), as
// trace-cmd decides it; other clocks print raw counts.
bool clock_in_ns(const std::string& clock);

}  // namespace usrtrace::tool
