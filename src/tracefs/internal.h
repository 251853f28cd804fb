// Private to src/tracefs: the resolved form of a path, the file spec tables,
// the generic file object, the error table and the kernel-style value parsers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "instance/instance.h"
#include "tracefs/tracefs.h"

namespace usrtrace::tracefs::detail {

using instance::Instance;

// A reference on an instance (Instance::find_get / put_reader), held for as
// long as a file of the instance is open, so that rmdir returns EBUSY
// instead of freeing it under the file (the kernel's trace_array_get).
class InstanceRef {
 public:
  InstanceRef() = default;
  explicit InstanceRef(Instance* inst) : inst_(inst) {}
  InstanceRef(InstanceRef&& o) noexcept : inst_(std::exchange(o.inst_, nullptr)) {}
  InstanceRef& operator=(InstanceRef&& o) noexcept {
    if (this != &o) {
      reset();
      inst_ = std::exchange(o.inst_, nullptr);
    }
    return *this;
  }
  ~InstanceRef() { reset(); }
  void reset() {
    if (inst_) inst_->put_reader();
    inst_ = nullptr;
  }
  Instance* get() const { return inst_; }
  Instance* operator->() const { return inst_; }
  Instance& operator*() const { return *inst_; }
  explicit operator bool() const { return inst_ != nullptr; }

 private:
  Instance* inst_ = nullptr;
};

// ---- The tree: each file described once, in its group's table.
//
// A FileSpec is the kernel's trace_create_file(name, mode, parent, data,
// fops) call as data: the file's name, mode, directory and open function.
// Each group of files keeps its table beside its open functions (the
// tables below); tracefs.cc walks them all to resolve a path, to list a
// directory and to open a file, and knows no file by name.

// The directories of an instance; where a file is.
enum class Dir : uint8_t {
  kRoot,       // an instance directory, the top one included
  kInstances,  // instances/ (top only)
  kOptions,    // options/
  kTraceStat,  // trace_stat/ (top only)
  kPerCpu,     // per_cpu/
  kCpu,        // per_cpu/cpuN/
  kEvents,     // events/
  kSystem,     // events/SYS/
  kEvent,      // events/SYS/EVENT/
};

struct FileSpec;

// What a path names.
struct Node {
  const FileSpec* spec = nullptr;  // the file; null for a directory
  Dir dir = Dir::kRoot;            // the directory, or the file's directory
  mode_t mode = 0;
  InstanceRef inst;               // null only for the instances/ directory itself
  bool in_instances_dir = false;  // the path is instances/ or below
  int cpu = -1;                   // per_cpu/cpuN, trace_stat/functionN
  int option = -1;                // options/NAME
  int age = 0;                    // snapshot.AGE
  std::string system, event;      // events/SYS[/EVENT]
};

// Opens the file of `node` (taking over its instance reference) with the
// open(2) flags, which were checked against the file's mode; null with
// *err set (or left 0: ENOENT) when it cannot.
// Context: control plane; may allocate and take locks.
using OpenFn = std::unique_ptr<File> (*)(Node node, int flags, int* err);

// The kernel's modes since 5.17: TRACE_MODE_WRITE 0640, TRACE_MODE_READ
// 0440; trace_marker(_raw) 0220, free_buffer 0200; directories 0750.
inline constexpr mode_t kRW = 0640, kRO = 0440, kDirMode = 0750;

// FileSpec::flags: where else a file does not show.
enum SpecFlag : uint8_t {
  kTopOnly = 1 << 0,    // only in the top instance (the kernel's global files)
  kNoFtrace = 1 << 1,   // not in events/ftrace/ (its events are written by
                        // trace_marker and printk only, as in the kernel)
  kNoSubpath = 1 << 2,  // NAME/more is ENOENT, not ENOTDIR (snapshot.AGE,
                        // which was only ever matched as the last component)
  // With kNoFtrace: the file is in events/ftrace/print/ after all
  // (trigger, id), or in events/ftrace/function/ (id), as in the kernel.
  kFtracePrint = 1 << 3,
  kFtraceFunction = 1 << 4,
};

// One file, or one family of files named by a parameter (options/NAME,
// snapshot.AGE, trace_stat/functionN), which `match` and `names` handle.
struct FileSpec {
  const char* name;  // null for a family
  mode_t mode;
  Dir dir;
  uint8_t flags;  // SpecFlag bits
  OpenFn open;
  // A family: whether `name` is one of it, setting its parameter in *n
  // (which holds the instance and the directory's parameters).
  bool (*match)(std::string_view name, Node* n) = nullptr;
  // A family: the names there are now in the directory of `n`.
  void (*names)(const Node& n, std::vector<std::string>* out) = nullptr;
};

// The groups' tables, walked by tracefs.cc.
extern const std::span<const FileSpec> kInstanceFiles;  // instance_files.cc: trace.c's, options/NAME
extern const std::span<const FileSpec> kEventFiles;     // event_files.cc: set_event*, events/
extern const std::span<const FileSpec> kSnapshotFiles;  // snapshot_files.cc
extern const std::span<const FileSpec> kPerCpuFiles;    // per_cpu_files.cc: per_cpu/cpuN/
extern const std::span<const FileSpec> kFunctionFiles;  // function_files.cc, trace_stat/
extern const std::span<const FileSpec> kLatencyFiles;   // latency_files.cc
extern const std::span<const FileSpec> kProbeFiles;     // probe_files.cc: uprobe_events, dynamic_events
extern const std::span<const FileSpec> kSynthFiles;     // synth_files.cc: synthetic_events

// Resolves a path; -ENOENT, -ENOTDIR, -ENAMETOOLONG, -EINVAL.
// Context: control plane; takes the instance table and registry locks.
int resolve(std::string_view path, Node* node);
// The names in a directory node.
void list_dir(const Node& node, std::vector<std::string>* names);

// "cpu12" -> 12 if below nr_cpus, else -1 (no leading zeros, as the names
// are made).
int parse_cpu_dir(std::string_view name, int nr_cpus);

// A file whose read side is a text generated on the first read and whose
// write side is a callback, the shape of most of the kernel's tracefs files
// (seq_file show + write handler).
class SimpleFile : public File {
 public:
  explicit SimpleFile(InstanceRef inst) : inst_(std::move(inst)) {}
  ~SimpleFile() override {
    if (on_close) on_close();
  }
  long read(char* buf, size_t size) override;
  long write(const char* buf, size_t size) override;

  std::function<std::string()> show;  // null: not readable
  // Instead of show, for the large texts (trace, snapshot): appends at
  // least `want` bytes to the string, or what is left; false at the end.
  // A read then holds about its own size of text, not the whole file.
  std::function<bool(std::string*, size_t want)> stream;
  std::function<long(std::string_view)> store;  // null: not writable
  std::function<void()> on_close;               // the kernel's release

 private:
  InstanceRef inst_;    // destroyed after on_close ran
  bool ended_ = false;  // stream: nothing more to come
  bool shown_ = false;
  std::string text_;
  size_t off_ = 0;
};

// Serializes buffer resizes with the readers of buffer sizes, which the
// ring buffer reads without its control lock.
base::Mutex& size_mu();
// buffer_size_kb writes: parses, checks and resizes (cpu < 0: every CPU).
long write_buffer_size(Instance& inst, int cpu, std::string_view s);
std::string show_buffer_size(Instance& inst, int cpu);

// trace_pipe (cpu < 0) and per_cpu/cpuN/trace_pipe.
std::unique_ptr<File> make_trace_pipe(InstanceRef inst, int cpu, bool nonblock);

// trace_pipe_raw of `rb`, consumed; `keep` holds what keeps `rb` alive.
std::unique_ptr<File> make_pipe_raw(InstanceRef inst, rb::RingBuffer* rb, int cpu, bool nonblock,
                                    std::shared_ptr<void> keep);

// ---- Errors: one table of texts, logged the kernel's way.

enum class Err : uint8_t {
  kEmpty,
  kNotNumber,
  kNumberRange,
  kNotBool,
  kPercentRange,
  kSizeZero,
  kSizeTooLarge,
  kNoMemory,
  kUnknownClock,
  kUnknownOption,
  kUnknownTracer,
  kNoSuchEvent,
  kBadPid,
  kBadCpumask,
  kCpumaskOverflow,
  kMarkersOff,
  kRawTooShort,
  kRawTooLong,
  kTooLong,
  kSnapshotBusy,
  kSnapshotFreeCpu,
  kSnapshotRing,
  kBadPath,
  kBufferFileOpen,
  kBufferFileAlloc,
  kBadDumpMode,
  kDumpFileOpen,
  kNoFunction,
  kFunctionCommand,
  kBadModule,
  kCommandCount,
  kCommandNotHere,
  kLatencyClock,
  kMaxBufferBusy,
  kTimerlatPeriod,
  kCount,
};
const char* err_text(Err e);

// Logs `e` to the instance's error_log with `command` (made printable, cut
// to a bounded length) and the caret under byte `pos`; returns -errnum.
long fail(Instance& inst, std::string_view subsystem, Err e, std::string_view command, size_t pos,
          int errnum);

// The kernel's kstrtoull: an optional '+', digits in `base` (0: C prefixes
// 0x / 0), then at most one '\n'. Returns 0, -EINVAL (with *bad at the
// offending byte) or -ERANGE (*bad at the first digit that overflowed).
int parse_u64(std::string_view s, int base, uint64_t* v, size_t* bad);

// A decimal number up to `max` written to a numeric file (the function and
// latency tracers' files): returns the size taken, or logs under
// `subsystem` and returns -ERANGE / -EINVAL.
long write_u64(Instance& inst, std::string_view subsystem, std::string_view s, uint64_t max, uint64_t* v);

// fail() with a message of the caller's (filter and trigger errors).
long fail_text(Instance& inst, std::string_view subsystem, std::string_view message, std::string_view command,
               size_t pos, int errnum);

// Whitespace-separated tokens with their offsets.
struct Token {
  std::string_view text;
  size_t pos;
};
std::vector<Token> tokens(std::string_view s);
std::string_view strip(std::string_view s);

}  // namespace usrtrace::tracefs::detail
