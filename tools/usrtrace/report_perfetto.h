// usrtrace report --format=perfetto: a Perfetto protobuf trace
// (perfetto_trace.proto's Trace: a stream of TracePacket), which the
// Perfetto UI and trace_processor open natively. Written without the
// Perfetto SDK: the few messages it needs are encoded here.
//
// One track per thread (a TrackDescriptor with its pid, tid and comm, under
// one per process named by the file's PROCMAPS options); function_graph's
// entries and exits become slices named by the function; every other event
// is an instant event named SYSTEM:EVENT, its fields as debug annotations.
// Event names, categories and annotation names are interned (each string
// once per file). Time stamps are the file's, in its clock's domain: boot,
// mono and mono_raw are Perfetto's builtin clocks of the same names (local,
// global and perf, calibrated against CLOCK_MONOTONIC_RAW, are given as
// that); other clocks are a clock of the file's own, mapped 1:1 to BOOTTIME.
// A ClockSnapshot at the start names the domain as the trace's primary
// clock. Streamed: memory holds the interning tables, not the events.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "report_views.h"
#include "tep_session.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tool {

// Writes every record `cursor` gives that `keep` accepts, the file's clock
// being `clock` ("local", "boot", ...). `counters` ("SYS:EVENT:FIELD"):
// those events are samples of a counter track per process, FIELD's value
// over time, instead of instant events. Returns the exit status (2: a
// counter the file's formats do not have, said on stderr).
int write_perfetto(const TraceFile& f, const TepSession& session, TraceFile::Cursor& cursor,
                   const std::string& clock, const std::vector<std::string>& counters,
                   const std::function<bool(const TraceFile::Record&, const char*)>& keep, FILE* out,
                   Progress* progress = nullptr);

}  // namespace usrtrace::tool
