// The trace text: what `cat trace` and `cat trace_pipe` print, as the kernel
// prints it for the nop tracer (see ../shared/ftrace-formats.md section 4),
// with every option the instance has set (latency-format, raw, hex, bin,
// irq-info, record-tgid, context-info, ...).
#pragma once

#include <cstddef>
#include <memory>
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

// The text of `trace`, per_cpu/cpuN/trace, `snapshot` and snapshot.AGE, made
// as it is read, as the kernel's seq_file makes it: the header, then lines,
// a window at a time, so that a reader costs the traced process its window
// (and a page copy per CPU), not the text of the whole buffer. Which events
// it shows is fixed when it is made (RingBuffer::Iterator: up to the tail
// of that moment). function_graph's text pairs each entry with its thread's
// next record anywhere later, so that one is still made whole.
// Context: control plane, one reader thread at a time.
class TraceText {
 public:
  static std::unique_ptr<TraceText> live(instance::Instance& inst, int cpu);
  static std::unique_ptr<TraceText> snapshot(instance::Instance& inst, int age, int cpu);
  ~TraceText();
  // Appends to *out until it holds at least `want` bytes or the text ends.
  // False when the text had ended (nothing appended).
  bool fill(std::string* out, size_t want);

  struct State;

 private:
  explicit TraceText(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// The `snapshot` file (age 0) and snapshot.AGE: a kept snapshot's text,
// with a head saying which one it is, when and why it was taken; the
// kernel's help text when none is there.
std::string read_snapshot(instance::Instance& inst, int age, int cpu);

// trace_pipe: formats and consumes events into `out` until about `max_bytes`
// are there or no event is left. Returns the number of events consumed.
// Never blocks (the tracefs layer waits with RingBuffer::wait).
size_t read_pipe(instance::Instance& inst, int cpu, size_t max_bytes, std::string* out);

// The five latency-format columns of a record's common flags and
// preempt_count bytes (irqs-off, need-resched, hardirq/softirq, preempt
// depth, migrate-disable), as every line of the `trace` file shows them.
// Context: async-signal-safe when `out` has 5 bytes of spare capacity.
void put_flag_columns(std::string* out, uint8_t flags, uint8_t preempt_count);

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
void format_dump_event(instance::Instance& inst, const rb::Event& ev, uint64_t next_ts, std::string* out);

}  // namespace usrtrace::output
