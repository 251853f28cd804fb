// usrtrace report --format=json: the Chrome trace-event JSON format
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU),
// which ui.perfetto.dev and chrome://tracing open. Each record is an
// instant event ("ph":"i", thread scope) named after its event, with the
// event's fields as args, under its process's pid (the file's PROCMAPS
// options) and its thread's tid; processes and threads are named with "M"
// metadata events.
#pragma once

#include <cstdio>
#include <functional>

#include "report_views.h"
#include "tep_session.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

// Writes every record `cursor` gives that `keep` accepts. Timestamps in
// microseconds (ns clocks) or raw counts. `progress`: a progress line on
// stderr for a large file (report_views.h). Returns the exit status.
int write_json(const TraceFile& f, const TepSession& session, TraceFile::Cursor& cursor, bool in_ns,
               const std::function<bool(const TraceFile::Record&, const char*)>& keep, FILE* out,
               Progress* progress = nullptr);

}  // namespace usrtrace::tool
