// One event field's value as the exports (JSON, Perfetto) give it: read
// through the event's format (libtraceevent), typed as the format says.
#pragma once

#include <event-parse.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

struct FieldValue {
  enum Kind { kNone, kString, kBytes, kInt, kUint, kPointer } kind = kNone;
  std::string text;  // kString: the characters (trailing newlines dropped); kBytes: hex
  uint64_t u = 0;    // kUint, kPointer
  int64_t i = 0;     // kInt
};

// The value of `fl` in the record `data` (`len` bytes); kNone when the
// record is too short for it or its size is not one a number has.
FieldValue read_field(tep_handle* tep, const tep_format_field* fl, const uint8_t* data, uint32_t len);

// The process each buffer's threads are in, by buffer index: usrtrace
// records one process per buffer, named by the PROCMAPS options it writes
// (the first is the recorded process; `record -c` names the others'
// buffers "COMM-PID" or "COMM-PID:INSTANCE"). A file without them (the
// kernel's) gives pid 0. *names gets each pid's command name.
std::vector<int> buffer_processes(const TraceFile& f, std::map<int, std::string>* names);

}  // namespace usrtrace::tool
