// Private to src/tracefs: the resolved form of a path, the file kinds, the
// generic file object, the error table and the kernel-style value parsers.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
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

enum class Kind : uint8_t {
  kDir,
  // Instance root files.
  kReadme,
  kAvailableEvents,
  kAvailableTracers,
  kBufferFile,
  kBufferPercent,
  kBufferSizeKb,
  kBufferTotalSizeKb,
  kCurrentTracer,
  kErrorLog,
  kFreeBuffer,
  kFtraceDumpOnOops,
  kFtraceDumpOnOopsFile,
  kSavedCmdlines,
  kSavedTgids,
  kSetEvent,
  kSetEventNotracePid,
  kSetEventPid,
  kTrace,
  kTraceClock,
  kTraceMarker,
  kTraceMarkerRaw,
  kTraceOptions,
  kTracePipe,
  kTracingCpumask,
  kTracingOn,
  kSnapshot,
  kSnapshotEnabled,
  kSnapshotRingSize,
  kSnapshotOld,  // snapshot.AGE
  kCpuSnapshot,
  kCpuSnapshotRaw,
  // Function tracers (function_files.cc).
  kAvailableFilterFunctions,
  kEnabledFunctions,
  kSetFtraceFilter,
  kSetFtraceNotrace,
  kSetGraphFunction,
  kSetGraphNotrace,
  kSetFtracePid,
  kSetFtraceNotracePid,
  kMaxGraphDepth,
  kTracingThresh,
  // Latency tracers (function_files.cc).
  kTracingMaxLatency,
  kTimerlatPeriodUs,
  kFunctionProfileEnabled,
  kFunctionStat,  // trace_stat/functionN
  // options/NAME
  kOption,
  // events/
  kEventsEnable,
  kHeaderPage,
  kHeaderEvent,
  kSystemEnable,
  kSystemFilter,
  kEventEnable,
  kEventFilter,
  kEventFormat,
  kEventHist,
  kEventId,
  kEventTrigger,
  // per_cpu/cpuN/
  kCpuBufferSizeKb,
  kCpuStats,
  kCpuTrace,
  kCpuTracePipe,
  kCpuTracePipeRaw,
};

// What a path names.
struct Node {
  Kind kind = Kind::kDir;
  mode_t mode = 0;
  InstanceRef inst;  // null only for the instances/ directory itself
  bool in_instances_dir = false;  // the path is instances/ or below
  int cpu = -1;                   // per_cpu/cpuN
  int option = -1;                // options/NAME
  int age = 0;                    // snapshot.AGE
  std::string system, event;      // events/SYS[/EVENT]
  std::string dir_path;           // for list(): what directory this is
};

// Resolves a path; -ENOENT, -ENOTDIR, -ENAMETOOLONG, -EINVAL.
// Context: control plane; takes the instance table and registry locks.
int resolve(std::string_view path, Node* node);
// The names in a directory node.
void list_dir(const Node& node, std::vector<std::string>* names);

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

  std::function<std::string()> show;             // null: not readable
  // Instead of show, for the large texts (trace, snapshot): appends at
  // least `want` bytes to the string, or what is left; false at the end.
  // A read then holds about its own size of text, not the whole file.
  std::function<bool(std::string*, size_t want)> stream;
  std::function<long(std::string_view)> store;   // null: not writable
  std::function<void()> on_close;                // the kernel's release

 private:
  InstanceRef inst_;  // destroyed after on_close ran
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

// File constructors by group; each takes the node (and its reference).
std::unique_ptr<File> open_instance_file(Node node, int flags, int* err);
std::unique_ptr<File> open_event_file(Node node, int flags, int* err);
std::unique_ptr<File> open_per_cpu_file(Node node, int flags, int* err);
std::unique_ptr<File> open_snapshot_file(Node node, int flags, int* err);
std::unique_ptr<File> open_function_file(Node node, int flags, int* err);
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

// fail() with a message of the caller's (filter and trigger errors).
long fail_text(Instance& inst, std::string_view subsystem, std::string_view message,
               std::string_view command, size_t pos, int errnum);

// Whitespace-separated tokens with their offsets.
struct Token {
  std::string_view text;
  size_t pos;
};
std::vector<Token> tokens(std::string_view s);
std::string_view strip(std::string_view s);

}  // namespace usrtrace::tracefs::detail
