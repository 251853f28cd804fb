// Hist triggers (Documentation/trace/histogram.rst): an aggregation of an
// event's records into a bounded table, keyed by fields, summing values,
// updated on the writing thread and printed by the event's hist file.
//
//   echo 'hist:keys=id.hex:vals=hitcount,bytes:sort=bytes.descending:size=256' >
//       events/demo/request/trigger
//   cat events/demo/request/hist
//
// The trigger layer (src/trigger) parses "hist..." commands with this
// module, attaches the histogram to one event in one instance, evaluates the
// trigger's "if FILTER" itself and calls record() for every record that
// passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "usrtrace/internal/event_impl.h"

namespace usrtrace::hist {

// What a record does not hold and keys or values may use.
struct RecordContext {
  int cpu = -1;
  // The writing thread's name (.execname keeps it with the entry it makes);
  // nullptr: looked up in saved_cmdlines when printed.
  const char* comm = nullptr;
  // The event's time in ns on the instance's trace clock (common_timestamp);
  // called at most once per record, only by histograms that use it.
  uint64_t (*now_ns)(const void* arg) = nullptr;
  const void* now_arg = nullptr;
};

struct Error {
  std::string message;  // the kernel's hist error text, e.g. "Couldn't find field"
  size_t pos = 0;       // byte offset in the command where the caret goes
};

class Histogram {
 public:
  // Parses one hist command: "hist:keys=...[:vals=...][:sort=...][:size=N]
  // [:name=NAME][:pause|:cont|:continue|:clear]", without the " if FILTER"
  // part (the caller strips it and passes it back through trigger_text()'s
  // `filter`). Returns nullptr with *err set on a bad command.
  // A `name=` histogram shares its table with every other live histogram of
  // that name (their keys and values must match: an error otherwise).
  // Context: control plane; allocates the whole table (bounded by size=).
  static std::unique_ptr<Histogram> create(const internal::EventDesc& ev, std::string_view cmd, Error* err);
  ~Histogram();

  // Aggregates one record (`len` bytes, common header first; never read
  // outside it). Does nothing while paused. A full table counts the record
  // as Dropped.
  // Context: any thread, signal handlers included; lock-free, no
  // allocation, no system call.
  void record(const void* rec, uint32_t len, const RecordContext& ctx);

  // The command's pause / cont / clear flags. A command with one of them
  // that names an existing histogram (same_spec) acts on it instead of
  // adding a new one, as the kernel does.
  bool wants_pause() const;
  bool wants_cont() const;
  bool wants_clear() const;
  // Same keys, values, sort and name as `other`: the kernel's test for "the
  // same hist trigger" ('!' removal, pause/cont/clear).
  bool same_spec(const Histogram& other) const;

  // Context: control plane.
  void pause();
  void cont();
  void clear();  // empties the table (the shared one for a named histogram)
  bool paused() const;

  // The line the trigger file lists, as the kernel prints it, e.g.
  //   "hist:keys=id.hex:vals=hitcount:sort=hitcount:size=2048 if id > 3 [active]"
  // `filter` is the trigger's filter text ("" for none).
  std::string trigger_text(std::string_view filter) const;
  // This histogram's part of the event's hist file, as the kernel prints it:
  // "# event histogram\n#\n# trigger info: <trigger_text>\n#\n\n{ ... } ...
  // \nTotals:\n    Hits: N\n    Entries: N\n    Dropped: N\n"
  std::string print(std::string_view filter) const;

 private:
  Histogram();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace usrtrace::hist
