// Private to src/output: what the trace text (trace_output.cc) and the
// function_graph layout (graph_output.cc) share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "clock/trace_clock.h"
#include "function/control.h"
#include "ring_buffer/ring_buffer.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::output::detail {

using internal::CommonHeader;
using internal::EventDesc;

// The options a read uses, taken once per read (the kernel also samples
// tr->trace_flags per line, but a read of ours is one consistent view).
struct Opts {
  bool raw, hex, bin, fields, context, latency, tgid, irq_info, printk, msg_only;
  bool in_ns;
  clock::ClockId clock;
  uint64_t time_start_ns;  // latency-format base, in the clock's unit
  int self_pid;
  function::Tracer tracer;
  bool graph_text;  // function_graph's layout (not with raw/hex/bin)
  bool fg_cpu, fg_overhead, fg_duration, fg_proc, fg_abstime, fg_tail, fg_irqs;
};

// An event whose data outlives the next read on its CPU (latency format
// looks one event ahead before printing the current one; the graph layout
// looks at a thread's next event).
struct HeldEvent {
  rb::Event ev;
  std::vector<uint8_t> bytes;
  void hold(const rb::Event& e) {
    ev = e;
    bytes.assign(e.data, e.data + e.len);
    ev.data = bytes.data();
  }
};

// The record's common header; false (type only, if any) for a short one.
bool read_header(const rb::Event& ev, CommonHeader* h);
// Kernel: trace_find_cmdline(); comm is at most 15 bytes.
std::string comm_for(int pid);
// Kernel: trace_find_mark(): the mark of a duration or a delay of `ns`
// (latency-format's delay column, function_graph's durations).
char time_mark(uint64_t ns);
// The event's text as the `trace` file shows it (kernel: event->funcs->trace).
void put_event_text(const EventDesc& d, const rb::Event& ev, std::string* out);

// ---- function_graph's layout (graph_output.cc).
void put_graph_header(const Opts& o, std::string* out);
// The graph layout of a stream of events in time order, made as they come
// (the `trace` file streams: a window at a time, as seq_file does). A
// line waits until its thread's next event is known, looked for among the
// next kGraphWindow events: an entry whose exit comes within them prints
// as a leaf ("func();"); one whose exit comes later prints as "func() {"
// and the exit as "}", which is what the kernel prints when the exit is
// not the next event of its CPU. Memory: the window's events.
inline constexpr size_t kGraphWindow = 4096;
class GraphStream {
 public:
  GraphStream(const Opts& o, int nr_cpus, size_t window = kGraphWindow);
  ~GraphStream();
  // Takes the next event; appends the lines of events that left the window.
  void push(const rb::Event& ev, std::string* out);
  // Appends the lines of the events still in the window.
  void finish(std::string* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace usrtrace::output::detail
