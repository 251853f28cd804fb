// A libtraceevent handle loaded with a trace.dat's metadata (formats,
// kallsyms, printk formats, thread names), as trace-cmd loads it, so that
// records print exactly as `trace-cmd report` prints them.
#pragma once

#include <event-parse.h>

#include <map>
#include <memory>
#include <string>

#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

class TepSession {
 public:
  // Loads `f`'s metadata; formats libtraceevent cannot parse are reported
  // in *warnings (their records then print as trace-cmd prints unknown ones).
  static std::unique_ptr<TepSession> load(const TraceFile& f, std::string* warnings);
  ~TepSession();

  tep_handle* tep() const { return tep_; }
  // The format file text of event `id`, "" if the file has none.
  const std::string& format_of(int id) const;
  // A libtraceevent record for `r` (pointing into the file's data).
  tep_record make_record(const TraceFile::Record& r) const;

 private:
  tep_handle* tep_ = nullptr;
  tep_plugin_list* plugins_ = nullptr;
  std::map<int, std::string> formats_;
};

// Whether the trace clock's times are ns (printed as seconds.micros), as
// trace-cmd decides it; other clocks print raw counts.
bool clock_in_ns(const std::string& clock);

}  // namespace usrtrace::tool
