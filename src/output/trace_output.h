// The trace text: what `cat trace` and `cat trace_pipe` print, as the kernel
// prints it for the nop tracer (see ../shared/ftrace-formats.md section 4),
// with every option the instance has set (latency-format, raw, hex, bin,
// irq-info, record-tgid, context-info, ...).
#pragma once

#include <cstddef>
#include <string>

#include "instance/instance.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::output {

// The header of the `trace` file ("# tracer: nop" ... column legend).
// `cpu` < 0: all CPUs (per_cpu/cpuN/trace passes N). Context: control plane.
std::string trace_header(instance::Instance& inst, int cpu);

// Appends one event as a line (ending in '\n') as `trace` prints it, with
// the instance's options. `next_ts` is the raw time of the event that
// follows (latency-format's delay mark), or ev.ts if none.
// Context: reader threads.
void format_event(instance::Instance& inst, const rb::Event& ev, uint64_t next_ts, std::string* out);

// The whole `trace` file (header + every event, not consumed).
std::string read_trace(instance::Instance& inst, int cpu);

// The `snapshot` file (age 0) and snapshot.AGE: a kept snapshot's text,
// with a head saying which one it is, when and why it was taken; the
// kernel's help text when none is there.
std::string read_snapshot(instance::Instance& inst, int age, int cpu);

// trace_pipe: formats and consumes events into `out` until about `max_bytes`
// are there or no event is left. Returns the number of events consumed.
// Never blocks (the tracefs layer waits with RingBuffer::wait).
size_t read_pipe(instance::Instance& inst, int cpu, size_t max_bytes, std::string* out);

// ftrace_dump()'s line for one event (src/crash): the latency format, which
// the kernel's dump forces (TRACE_FILE_LAT_FMT), with the instance's
// irq-info, record-tgid, context-info and printk-msg-only options; raw, hex,
// bin and fields are left out (the dump is read by people, on a terminal),
// which bounds a line (the LOST line included) to kDumpLineMax bytes.
// Context: async-signal-safe, with no allocation and no lock, when `out` has
// kDumpLineMax bytes of spare capacity and raw_to_ns() was called once for
// the buffer's clock (a TSC clock's calibration). The event printers run
// vsnprintf, which glibc does not allocate for the conversions events
// use (integers, %s, %c, %p, no wide strings, no positional arguments).
inline constexpr size_t kDumpLineMax = 8192;
void format_dump_event(instance::Instance& inst, const rb::Event& ev, uint64_t next_ts,
                       std::string* out);

}  // namespace usrtrace::output
