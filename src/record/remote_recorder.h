// Recording another process through its control socket
// (RecordOptions::pid); see remote_recorder.cc.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clock/trace_clock.h"
#include "control/connection.h"
#include "control/meta.h"
#include "record/journal.h"
#include "record/kernel_source.h"
#include "tracedat/writer.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tracedat {

class RemoteRecording {
 public:
  RemoteRecording();
  ~RemoteRecording();
  // Connects, checks the instances, takes the metadata. What it takes goes
  // to `journal` as process PREFIX ("" for the first), or, with no journal,
  // to one of its own. 0 or -errno, *err set.
  int open(const RecordOptions& o, JournalWriter* journal, const std::string& prefix, std::string* err);
  // Drains while the process runs, until finish() or the process exits.
  void start_thread();
  // Takes what is left (if the process is still there) and writes the file
  // from its own journal.
  int finish(std::string* err);
  // Takes what is left into the journal, and the last metadata, for a file
  // written by the journal's owner. 0 or -errno with *err.
  int take_rest(std::string* err);
  uint32_t process() const { return process_; }
  // The clock of the first instance (trace_clock name), once open.
  std::string clock() const;
  RecordStats stats() const;
  // The process exited (or was killed): what it had is taken.
  bool process_gone() const { return gone_.load(std::memory_order_acquire); }
  // It is exiting, or holds a deadly signal until its last pages are
  // taken (its server said kExiting), or is gone.
  bool process_exiting() const { return exiting_.load(std::memory_order_acquire) || process_gone(); }
  // It went before we took what it had at its exit (killed, or its exit
  // wait ran out): the end of its trace is missing.
  bool cut_short() const { return cut_short_.load(std::memory_order_acquire); }
  // Where events were lost, in words; "" when none were.
  std::string lost_where() const;
  // Why the recording of the process stopped before its end, when it hung
  // or answered garbage ("did not answer within 30 s"); "" otherwise.
  std::string broken() const {
    std::lock_guard<std::mutex> l(mu_);
    return broken_;
  }

 private:
  struct Instance;
  int store(Instance& inst, const control::Connection::Pages& p, std::string* err);
  int take(bool flush, uint32_t wait_ms, bool* any, std::string* err);
  int take_shared(Instance& inst, bool flush, bool* any, std::string* err);
  bool all_shared() const;
  int ping(std::string* err);
  int finish_remote(std::string* err);
  void release_remote();
  // Takes the metadata again (kallsyms, formats) and keeps what departed.
  void refresh_meta();
  // Each instance's flush_budget (flush_budget_of its capacity).
  void set_flush_budgets();
  void release_resources();
  void count_unreported_drops();
  void set_error(int rc, const std::string& err);

  RecordOptions opts_;
  std::unique_ptr<JournalWriter> own_journal_;
  JournalWriter* journal_ = nullptr;
  uint32_t process_ = 0;
  bool first_ = true;  // the recording's first process (its metadata is the file's)
  std::unique_ptr<control::Connection> conn_;
  std::vector<std::unique_ptr<Instance>> instances_;
  control::RemoteMeta meta_;
  bool have_meta_ = false;
  clock::TscSample first_sample_;  // at open(): the start of the TSC line (take_rest)
  std::thread thread_;
  std::atomic<bool> stop_{false}, gone_{false}, cut_short_{false}, exiting_{false};
  std::atomic<uint64_t> pages_{0}, bytes_{0}, lost_{0};
  mutable std::mutex mu_;
  int error_ = 0;
  std::string error_text_;
  std::string broken_;                                          // under mu_
  std::map<std::pair<std::string, int>, uint64_t> lost_where_;  // by instance and CPU, under mu_
};

// A process and the processes it starts (`usrtrace record -c`), into one
// file: the first process's buffers as they are named, each other one's
// as "COMM-PID" (its top instance) and "COMM-PID:NAME".
class ProcessTreeRecording {
 public:
  int open(const RecordOptions& o, std::string* err);
  void start_thread();
  // Records process `pid` too, the same instances. 0 or -errno with *err.
  // Context: any thread but finish()'s.
  int add_process(int pid, std::string* err);
  int finish(std::string* err);
  RecordStats stats() const;
  bool process_gone() const { return root_.process_gone(); }
  bool process_exiting() const { return root_.process_exiting(); }
  // One line per followed process whose recording failed.
  std::string warnings() const;

 private:
  struct Followed {
    int pid;
    std::string comm;
    std::unique_ptr<RemoteRecording> rec;
    bool done = false;  // take_rest() was called
  };
  void reap();
  void finish_followed(Followed& f);  // under mu_
  RecordOptions opts_;
  JournalWriter journal_;  // outlives the recordings that write to it
  RemoteRecording root_;
  std::unique_ptr<KernelSource> kernel_;  // -K
  mutable std::mutex mu_;
  std::vector<Followed> followed_;  // under mu_
  std::string warnings_;            // under mu_
  std::vector<uint32_t> skip_;      // under mu_: processes left out of the file
};

}  // namespace usrtrace::tracedat
