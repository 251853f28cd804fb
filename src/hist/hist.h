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
  // For onmax()/onchange() .snapshot(): takes a snapshot of the instance
  // (`scored`: onmax's, whose `score` is the value: an instance that keeps
  // several keeps the N worst; else the newest are kept) and says how many
  // the instance keeps. For common_stacktrace
  // keys: the writing thread's return addresses, up to `max`; returns the
  // count. Each may be null (then nothing is taken, the stack is empty).
  // Context: the write path (async-signal-safe, lock-free).
  int (*snapshot)(const void* arg, const char* reason, uint64_t score, bool scored) = nullptr;
  int (*snapshot_ring)(const void* arg) = nullptr;
  int (*stack)(const void* arg, uint64_t* out, int max) = nullptr;
  const void* action_arg = nullptr;
};

// Where a histogram lives: its instance's slot (variables are shared
// between the histograms of one instance, as the kernel's within one
// trace_array), and whether the command is a '!' removal (whose variables
// may repeat those of the histogram it removes).
struct Scope {
  int slot = 0;
  bool remove = false;
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
  static std::unique_ptr<Histogram> create(const internal::EventDesc& ev, std::string_view cmd, Error* err,
                                           Scope scope = {});
  ~Histogram();

  // The trigger is in place: its variables become visible to the other
  // histograms of its instance. Undone by the destructor. (The synthetic
  // events it generates are held from create() on: their removal fails
  // with EBUSY while a histogram may generate them.)
  // Context: control plane.
  void publish();
  // Another histogram reads this one's variables: its removal fails with
  // EBUSY, as the kernel's hist_trigger_check_refs().
  bool referenced() const;
  // Has an onmax()/onchange() .snapshot() action: the instance's snapshot
  // buffer is allocated with the trigger, as the kernel's action parser does.
  bool takes_snapshots() const;
  // Reads common_timestamp: the writer passes the record's time stamp
  // (RecordContext::now_ns), read once with the record's.
  bool needs_time() const;

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

  struct Impl;  // defined in hist.cc

 private:
  Histogram();
  std::unique_ptr<Impl> impl_;
};

}  // namespace usrtrace::hist
