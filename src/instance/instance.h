// Instances: the user-space trace_array. The top instance (slot 0) always
// exists once anything asks for it; named ones (instances/NAME) are created
// and removed at run time, up to kMaxInstances in all.
//
// What writers see of an instance is its slot: bit `slot` of an event's
// `enabled` word, and the published pointers in g_slot_state[slot]. Removal
// unpublishes them, waits for a grace period (writers/writers.h), and only
// then frees the buffer, so a writer in flight never touches freed memory and
// writers to other instances are never held up.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "clock/trace_clock.h"
#include "instance/snapshot.h"
#include "ring_buffer/ring_buffer.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::instance {

// One bit of EventDesc::enabled each; its top bit is the control bit.
inline constexpr int kMaxInstances = usrtrace::internal::kControlBit;
// CPUs tracing_cpumask can exclude; a CPU id at or above this is always
// recorded (the kernel's NR_CPUS on Debian).
inline constexpr int kMaxCpus = 8192;

// trace_options / options/: the core options, in the kernel's order of the
// ones we have. A tracer's own options (the kernel's tracer_flags) are not
// here: each tracer registers its block (register_options) and keeps the ids
// it is given, so adding a tracer or an option touches only its folder.
enum Option : int {
  kOptPrintParent,
  kOptSymOffset,
  kOptSymAddr,
  kOptVerbose,
  kOptRaw,
  kOptHex,
  kOptBin,
  kOptBlock,
  kOptFields,
  kOptTracePrintk,
  kOptAnnotate,
  kOptUserstacktrace,
  kOptSymUserobj,
  kOptPrintkMsgOnly,
  kOptContextInfo,
  kOptLatencyFormat,
  kOptRecordCmd,
  kOptRecordTgid,
  kOptOverwrite,
  kOptDisableOnFree,
  kOptIrqInfo,
  kOptMarkers,
  kOptEventFork,
  kNumCoreOptions,
};
// Core and registered options together.
inline constexpr int kMaxOptions = 64;
struct OptionInfo {
  const char* name;
  bool default_on;
};
// Registers a tracer's options as ids first..first+n-1 and returns first.
// `rank` places the block in trace_options and options/ (after the core
// options, lower ranks first, whatever the registration order; a tie goes
// by registration). An instance that already exists takes the defaults.
// Aborts past kMaxOptions or on a name already taken: both are bugs.
// Context: static initialisers at init_priority(101), so every id is known
// before an instance is created by other code or an option is looked up.
int register_options(const OptionInfo* opts, int n, int rank);
// Every option's id, in listing order. Context: control plane.
std::vector<int> listed_options();
const OptionInfo& option_info(int id);
int option_by_name(std::string_view name);  // -1 if unknown

// Pid filters (set_event_pid / set_event_notrace_pid), immutable once
// published; replaced as a whole.
struct PidFilter {
  std::vector<int> trace;    // sorted; empty: no restriction
  std::vector<int> notrace;  // sorted
  bool admits(int tid) const;
};

// What the write path reads per slot. Published with release stores,
// unpublished before a grace period.
class Instance;
struct SlotState {
  std::atomic<rb::RingBuffer*> buffer{nullptr};
  // The instance owning `buffer`, published and unpublished with it, for
  // readers that cannot take the table lock (the crash dump, src/crash).
  std::atomic<Instance*> instance{nullptr};
  std::atomic<const PidFilter*> pids{nullptr};
  // Whether a filter can refuse a write: kSlotCpusOff (a CPU the instance
  // has is off in tracing_cpumask, g_slot_cpus_off), kSlotPids (a pid
  // filter). Zero, the usual case, lets a writer skip both with one load.
  // Written by the control plane with the filters, after them when one is
  // set and before it is taken away; relaxed, as the filters are soft
  // switches.
  std::atomic<uint32_t> filters{0};
};
// 32 bytes: a slot's address is one shift from its number on the write path.
static_assert(sizeof(SlotState) == 32);
// tracing_cpumask of each slot, inverted so that all-zero (the static
// initial state) records everywhere: bit c set = events written on CPU c
// are not recorded. Written by the control plane (Instance::set_cpumask),
// read with one relaxed load per write when SlotState::filters says so
// (instance/slot_write.h admit).
extern std::atomic<uint64_t> g_slot_cpus_off[kMaxInstances][kMaxCpus / 64];
inline constexpr uint32_t kSlotCpusOff = 1;
inline constexpr uint32_t kSlotPids = 2;
extern SlotState g_slot_state[kMaxInstances];

class Instance {
 public:
  // The top instance, created on first use; nullptr if the system lacks rseq.
  static Instance* top();
  // instances/NAME. Returns nullptr with *err = EEXIST, EINVAL (bad name),
  // ENOSPC (no free slot), ENOMEM or ENOSYS.
  static Instance* create(std::string_view name, int* err);
  static Instance* find(std::string_view name);  // "" is the top instance
  // find() and get_reader() in one step under the table lock, so destroy()
  // cannot free the instance in between (tracefs holds a reference for as
  // long as a file of the instance is open). nullptr if there is none.
  static Instance* find_get(std::string_view name);
  // rmdir: EBUSY while a reader holds it, ENOENT, EINVAL for the top.
  static int destroy(std::string_view name);
  static std::vector<std::string> names();  // named instances, sorted

  // trace_array_get_by_name(): looks NAME up ("" is the top) and takes a
  // reference (get_reader()) under the table lock, so that no destroy can
  // free the instance in between. kExisting: ENOENT if missing; kNew:
  // create() (EEXIST if present); kExistingOrNew: create it if missing.
  // Returns nullptr with *err set (EINVAL for a bad name, create()'s).
  enum class GetMode { kExisting, kNew, kExistingOrNew };
  static Instance* get(std::string_view name, GetMode mode, int* err);
  // trace_array_destroy(): removes `inst` if it is still in the table and
  // holds at most `max_refs` references. -EINVAL for the top, -ENODEV if it
  // is not there (a stale pointer is only compared, never read), -EBUSY.
  static int destroy(Instance* inst, int max_refs);
  static bool valid_name(std::string_view name);

  const std::string& name() const { return name_; }
  bool is_top() const { return slot_ == 0; }
  int slot() const { return slot_; }
  // The live buffer. It changes only on set_buffer_file(); a caller holding
  // a reference (get_reader()) may keep using the one it got.
  rb::RingBuffer& buffer() { return *rb_.load(std::memory_order_acquire); }
  const rb::RingBuffer& buffer() const { return *rb_.load(std::memory_order_acquire); }
  // The live buffer's spares and snapshots (snapshot, snapshot_enabled,
  // snapshot_ring_size). Resizes and clock changes go through it, so the
  // spares stay swappable with the live buffer. Replaced with the buffer by
  // set_buffer_file().
  Snapshots& snapshots() { return *snapshots_.load(std::memory_order_acquire); }

  // buffer_file (instance/buffer_file.cc): moves the instance to a new
  // buffer of the same size, mode and clock, kept in a file at `path`
  // (crash-surviving: persist/file_store.h), or in memory for "". Events in
  // the old buffer are not carried over. Writers in flight finish in the old
  // buffer (grace period); it is freed at once when at most `max_refs`
  // references are held (the caller's own), else when the instance goes.
  // Returns 0, or -errno with *why saying what failed.
  // Context: control plane; allocates, system calls, may sleep.
  int set_buffer_file(const std::string& path, int max_refs, std::string* why);
  std::string buffer_file() const;  // "" when in memory

  bool tracing_on() const { return buffer().record_is_on(); }
  void set_tracing_on(bool on);

  bool option(Option o) const { return options_[o].load(std::memory_order_relaxed); }
  void set_option(Option o, bool on);

  // Enables or disables events matching "system:event" globs (set_event
  // syntax; "event" alone means any system). Returns the count matched, or
  // -errno with *why when a dynamic probe's site could not be armed (that
  // event stays disabled; Registry::set_enabled).
  int set_event(std::string_view system_glob, std::string_view event_glob, bool on,
                std::string* why = nullptr);
  void clear_events();
  bool event_enabled(uint16_t id) const;

  // set_event_pid / set_event_notrace_pid (thread ids).
  void set_pid_filter(std::vector<int> trace, std::vector<int> notrace);
  PidFilter pid_filter() const;

  // trace_marker: records `text` as an ftrace:print event (a newline is
  // added if missing), through the instance's triggers on ftrace:print.
  // Returns the bytes taken or -errno: EINVAL when the markers option is
  // off, EBADF when tracing is off (the kernel's "as if not open for
  // write"). printk() below is never refused for the latter.
  long write_marker(std::string_view text);
  // trace_marker_raw: a u32 id followed by binary data (raw_data event).
  long write_marker_raw(std::string_view data);
  // trace_array_printk: like a marker, from code.
  long printk(std::string_view text, uintptr_t ip);

  // error_log: the kernel's per-instance list of recent control errors.
  void log_error(std::string_view subsystem, std::string_view message, std::string_view command,
                 size_t caret);
  std::string error_log() const;
  void clear_error_log();

  // buffer_percent: how full a CPU's buffer must be before a waiting
  // trace_pipe_raw reader wakes (0: any data). 0..100, default 50.
  int buffer_percent() const { return buffer_percent_.load(std::memory_order_relaxed); }
  void set_buffer_percent(int p) { buffer_percent_.store(p, std::memory_order_relaxed); }

  // tracing_cpumask: bit c of word c/64 set = record events written on CPU
  // c. Words past the end count as all ones. Best effort for a thread that
  // migrates between the mask check and its write (instance/slot_write.h).
  void set_cpumask(const std::vector<uint64_t>& words);
  std::vector<uint64_t> cpumask() const;  // nr_cpus bits

  // References that keep the instance alive (trace_pipe readers, API
  // handles): while any is held, destroy() fails with EBUSY.
  void get_reader() { readers_.fetch_add(1, std::memory_order_acq_rel); }
  void put_reader() { readers_.fetch_sub(1, std::memory_order_acq_rel); }

  // Entries ever written into every CPU of the buffer since the last reset.
  uint64_t entries_written();

  ~Instance();

 private:
  Instance(std::string name, int slot, std::unique_ptr<rb::RingBuffer> rb);
  // Unpublishes and frees the first named instance `match` accepts, if at
  // most `max_refs` references are held; `missing` if none matches.
  template <class Match>
  static int remove(Match match, int max_refs, int missing);
  static Instance* create(std::string_view name, int* err, bool get_ref);
  std::string name_;
  int slot_;
  // The USRTRACE_BUFFER_DIR environment variable, at creation.
  void apply_buffer_dir();
  std::atomic<rb::RingBuffer*> rb_{nullptr};
  // rb_'s owner, and buffers replaced while a reader could still use them.
  std::vector<std::unique_ptr<rb::RingBuffer>> buffers_ USRTRACE_GUARDED_BY(mu_);
  std::string buffer_file_ USRTRACE_GUARDED_BY(mu_);
  std::atomic<Snapshots*> snapshots_{nullptr};
  // snapshots_'s owner, and those replaced with their buffers; destroyed
  // before buffers_ (declared after it).
  std::vector<std::unique_ptr<Snapshots>> all_snapshots_ USRTRACE_GUARDED_BY(mu_);
  std::atomic<bool> options_[kMaxOptions] = {};
  friend int register_options(const OptionInfo* opts, int n, int rank);
  std::atomic<int> readers_{0};
  std::atomic<int> buffer_percent_{50};
  mutable base::Mutex mu_;  // pid filter, error log
  std::unique_ptr<PidFilter> pids_ USRTRACE_GUARDED_BY(mu_);
  std::vector<std::string> error_log_ USRTRACE_GUARDED_BY(mu_);
};

// What the levels above an instance do when it goes away or an option they
// own changes (docs/design/layers.md): the trigger layer drops a removed
// instance's filters and triggers, the tracers their configuration, and a
// tracer follows its options (the kernel's tracer_flags). Each registers
// once at load, from a static initialiser of its own control code, so this
// level calls nothing above it. Hooks run in registration order; at most
// kMaxInstanceHooks.
struct InstanceHooks {
  // Under the instance registry's lock, after the instance is unpublished
  // and before its slot can be reused.
  void (*removed)(int slot) = nullptr;
  // After the option's new value is stored.
  void (*option_changed)(Instance& inst, Option o) = nullptr;
};
inline constexpr int kMaxInstanceHooks = 8;
// Context: static initialisers (before any instance is removed or an option
// set from another thread).
void add_instance_hooks(const InstanceHooks& hooks);

}  // namespace usrtrace::instance
