// The kernel's tracefs events beside a process's, in the same file
// (`usrtrace record -K SYS:EVENT`; RecordOptions::kernel_events).
//
// A kernel instance of our own (instances/usrtrace-PID-START-NS-N) records the named
// events on the clock the kernel shares with the file's, filtered to the
// recorded process's threads (set_event_pid, with event-fork for the
// threads and children it starts). Its full pages are spliced out of
// per_cpu/cpuN/trace_pipe_raw as the recording goes and journaled as one
// more "process", named "kernel", so the trace.dat holds them as a buffer
// of that name and a killed recorder's journal recovers them too.
//
// Plain system calls, not libtracefs: this is in libusrtrace, which is
// preloaded into every traced program and links nothing it does not need.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control/meta.h"
#include "record/journal.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tracedat {

// The kernel's event ids collide with ours (both are dynamic and share
// 16 bits), so its records get ids from a range our registry never hands
// out (events/registry.h: built-ins below 14, the rest from 1000 up):
// [kKernelIdFirst, kKernelIdUnknown), one per event enabled, in order.
// A record whose id was not enabled by us (none should be) gets
// kKernelIdUnknown, which has no format.
inline constexpr uint16_t kKernelIdFirst = 100;
inline constexpr uint16_t kKernelIdUnknown = 999;

// Rewrites the common_type of every record of one kernel page (as
// trace_pipe_raw gives it) through `ids` (65536 entries: kernel id to
// ours). False when the page does not walk (then it is left as it was
// from the bad entry on: a reader stops there too).
bool remap_page_ids(uint8_t* page, uint32_t page_size, const std::vector<uint16_t>& ids);

// The kernel clock whose values equal those of our clock `ours` (trace_clock
// name): x86-tsc for the TSC clocks (same counter; the file's TSC2NSEC
// converts both alike), the same name for mono, mono_raw, boot and tai;
// "" for counter and uptime, which the kernel does not share.
std::string kernel_clock_for(const std::string& ours);

class KernelSource {
 public:
  KernelSource() = default;
  KernelSource(const KernelSource&) = delete;
  KernelSource& operator=(const KernelSource&) = delete;
  // Removes the kernel instance if take_rest() did not.
  ~KernelSource();

  // What open() needs before it starts, checked without changing anything
  // (but mounting tracefs where nothing is): tracefs (its mount point in
  // *tracefs), the right to create instances, and an event for each of
  // `specs`. 0, or -errno with *err saying what is missing.
  static int check(const std::vector<std::string>& specs, std::string* tracefs, std::string* err);

  // Creates the instance, sets it up (clock `clock`, the file's; events
  // `specs`: SYS:EVENT, SYS or EVENT, globs as -e; pids `pids` and what they
  // start), journals the kernel as a process with its formats, and turns
  // tracing on. 0, or -errno with *err naming what is missing (tracefs not
  // mounted, not root, no such event, a clock the kernel lacks).
  int open(const std::vector<std::string>& specs, const std::string& clock, const std::vector<int>& pids,
           JournalWriter* journal, std::string* err);
  // Drains full pages every 100 ms until take_rest().
  void start_thread();
  // Stops the instance, takes every page left (partial ones too), journals
  // the last metadata (its per-CPU stats) and removes the instance.
  int take_rest(std::string* err);
  RecordStats stats() const;
  uint32_t process() const { return process_; }  // in the journal
  // "kernel events lost: ..." when the kernel's buffer overflowed, else "".
  std::string warnings() const;

 private:
  int enable_events(const std::vector<std::string>& specs, std::string* err);
  int open_readers(std::string* err);
  int drain(bool flush, std::string* err);
  int put(int cpu, uint8_t* pages, size_t bytes, std::string* err);
  void remove_instance();
  control::RemoteMeta meta(bool with_stats) const;

  std::string tracefs_;  // where the kernel's tracefs is mounted
  std::string dir_;      // the instance's directory, "" once removed
  JournalWriter* journal_ = nullptr;
  uint32_t process_ = 0, stream_ = 0;
  uint32_t page_size_ = 4096;
  std::vector<int> raw_fds_;   // per CPU: trace_pipe_raw (O_NONBLOCK)
  int pipe_[2] = {-1, -1};     // splice goes through it
  std::vector<uint16_t> ids_;  // kernel id -> ours
  std::thread thread_;
  std::mutex mu_;  // drain() against itself (thread and take_rest)
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // under wake_mu_
  std::atomic<uint64_t> pages_{0}, bytes_{0}, lost_{0};
  std::string clock_;                                                      // the kernel's clock name
  std::vector<std::pair<std::string, std::vector<std::string>>> systems_;  // formats, ids ours
  int error_ = 0;           // under mu_: the drain thread's first failure
  std::string error_text_;  // under mu_
};

}  // namespace usrtrace::tracedat
