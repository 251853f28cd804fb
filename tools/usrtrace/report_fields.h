// One event field's value as the exports (JSON, Perfetto) give it: read
// through the event's format (libtraceevent), typed as the format says.
#pragma once

#include <event-parse.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report_views.h"
#include "tep_session.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

struct FieldValue {
  enum Kind { kNone, kString, kBytes, kInt, kUint, kPointer } kind = kNone;
  std::string text;  // kString: the characters (trailing newlines dropped); kBytes: hex
  uint64_t u = 0;    // kUint, kPointer
  int64_t i = 0;     // kInt
};

// A record's fields are where the file's formats say, and the formats are
// as hostile as the records: every read of a field by the views and the
// exports goes through these two, which read only what lies within the
// record's `len` bytes (offsets and sizes in 64 bits: a field at offset -2
// wrapped a 32-bit check).

// The value of `fl` in the record `data` (`len` bytes); kNone when the
// record does not hold it (nor, for a __data_loc, what it points at) or its
// size is not one a number has.
FieldValue read_field(tep_handle* tep, const tep_format_field* fl, const uint8_t* data, uint32_t len);

// The number field `fl` (1, 2, 4 or 8 bytes) of the record `data` (`len`
// bytes) in *out; false, *out untouched, when the record does not hold it
// or `fl` is null.
bool read_number(tep_handle* tep, const tep_format_field* fl, const uint8_t* data, uint32_t len,
                 uint64_t* out);

// The process each buffer's threads are in, by buffer index: usrtrace
// records one process per buffer, named by the PROCMAPS options it writes
// (the first is the recorded process; `record -c` names the others'
// buffers "COMM-PID" or "COMM-PID:INSTANCE"). A file without them (the
// kernel's) gives pid 0, and so does the buffer "kernel" (`record -K`: the
// kernel's records are about any task), named "kernel". *names gets each
// pid's command name.
std::vector<int> buffer_processes(const TraceFile& f, std::map<int, std::string>* names);

// What the exports do with every record `cursor` gives: `keep` says
// whether it is shown; each kept one goes to fn(record, tep record, tid,
// comm, pid of its buffer's process). `progress` is updated as it goes.
template <typename Keep, typename Fn>
void for_each_kept(const TepSession& session, TraceFile::Cursor& cursor, const std::vector<int>& buffer_pid,
                   const Keep& keep, Progress* progress, const Fn& fn) {
  tep_handle* tep = session.tep();
  TraceFile::Record r;
  uint64_t nrec = 0, done = 0, total = 0;
  if (progress) {
    cursor.progress(&done, &total);
    progress->update(done);
  }
  while (cursor.next(&r)) {
    if (progress && (++nrec & 0xfff) == 0) {
      cursor.progress(&done, &total);
      progress->update(done);
    }
    tep_record rec = session.make_record(r);
    const int tid = r.len >= 8 ? tep_data_pid(tep, &rec) : -1;
    const char* comm = tep_data_comm_from_pid(tep, tid);
    if (!keep(r, comm)) continue;
    fn(r, rec, tid, comm, buffer_pid[static_cast<size_t>(r.buffer)]);
  }
  if (progress) progress->done();
}

}  // namespace usrtrace::tool
