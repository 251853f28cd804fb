// The summary views of `usrtrace report`, over the function_graph records
// of a trace.dat (ours, or trace-cmd's of the kernel where the events
// allow): what uftrace users read with `uftrace report`, `uftrace graph` and
// `uftrace dump --flame-graph`.
//
//   --profile      per function: calls, total, self, avg, min, max; sorted,
//                  with a threshold (per event: the count, for files without
//                  function_graph records)
//   --graph        the call graph merged by path, with calls and total time
//                  per path (uftrace graph's shape)
//   --flame-graph  folded stacks weighted by self time in ns, one line per
//                  path ("main;parse;lex 1234"), for flamegraph.pl,
//                  speedscope and Perfetto
//
// Times come from each funcgraph_exit's calltime and rettime (ns), so they
// need no entry: a recording with tracing_thresh (exits only) profiles too.
// Self time is a call's time less its children's, as recorded (children
// under a threshold or past max_graph_depth count as self, as in uftrace);
// a recursive function's total counts its outermost calls only, as
// uftrace's does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "tep_session.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

enum class View { kProfile, kGraph, kFlame };

struct ViewOptions {
  View view = View::kProfile;
  std::string sort = "total";  // total, self, calls, avg, min, max, name
  uint64_t threshold_ns = 0;   // --profile: hide functions whose total is less
  bool progress = false;       // show progress on stderr (a terminal)
  std::string file;            // the input's name, for the progress line
};

// Reads `cursor` to its end and writes the view. 0, or 1 after saying why.
int write_view(const TepSession& session, TraceFile::Cursor& cursor,
               const std::function<bool(const TraceFile::Record&, const char*)>& keep, const ViewOptions& o,
               FILE* out);

// "1.234 ms": ns in the largest unit that keeps it at least 1, uftrace's way.
std::string format_ns(uint64_t ns);

// Progress of a long read on a terminal: "reading FILE: 45% (1.2 of 2.7
// GB)" on stderr, redrawn at most four times a second, erased by done().
// Quiet unless enabled (stderr a terminal) and the file holds at least
// 64 MiB of data (USRTRACE_REPORT_PROGRESS_BYTES sets another floor).
class Progress {
 public:
  Progress(bool enabled, const std::string& file, uint64_t total);
  void update(uint64_t done);
  void done();

 private:
  bool on_;
  std::string file_;
  uint64_t total_;
  uint64_t next_check_ = 0;
  int64_t last_ms_ = 0;
  bool drawn_ = false;
};

}  // namespace usrtrace::tool
