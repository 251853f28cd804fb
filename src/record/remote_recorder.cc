// Recording another process (RecordOptions::pid): the same trace.dat as the
// in-process recorder, with the pages and the metadata taken through the
// process's control socket (src/control).
//
// One thread and one connection. The connection declares itself a
// recorder (kRecord), so when the process exits it waits (bounded) for us:
// the answer that says kExiting makes the thread take every page left
// (flush), the metadata, and release the process. The metadata is also
// taken at the start, so a process that is killed still leaves a readable
// file of what was taken before.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "control/connection.h"
#include "record/recorder.h"
#include "record/remote_recorder.h"
#include "record/shared_buffers.h"
#include "ring_buffer/page_format.h"

namespace usrtrace::tracedat {
namespace {

constexpr uint32_t kChunk = 1024 * 1024;  // pages per answer, at most
constexpr uint32_t kWaitMs = 100;         // a quiet process is asked again this often
// Buffers in shared memory are read without asking: looked at again this
// long after they had nothing (a default 1.4 MiB per CPU fills in about 5
// ms at the fastest function_graph rate measured, bench/README.md), and
// the process asked whether it is exiting this often.
constexpr auto kSharedIdle = std::chrono::microseconds(500);
constexpr auto kSharedPing = std::chrono::milliseconds(10);
constexpr uint32_t kSharedBatch = 64;  // pages per journal record, at most
// Pages per take_shared() while the process runs: a writer faster than the
// recorder must not keep it from asking whether the process is exiting, or
// from seeing a stop.
constexpr uint32_t kSharedPass = 4096;

// The most a flush takes from an instance once the process is exiting or
// gone: what its buffers hold (their capacity, as the process said while it
// ran, and, shared, what its CpuBuffers can hold now: growth's are larger,
// and the retired ones wait for us) and a chunk, and never more than this
// machine's memory, whatever the process said. Beyond that, what comes is
// new (threads still writing, or a forked child that keeps the shared buffer
// mapped and forges pages after its parent died), and taking it would keep
// the recorder, and a process held at its exit, going without end.
uint64_t flush_budget_of(uint64_t capacity) {
  static const uint64_t ram = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size)
                                 : uint64_t{1} << 40;
  }();
  return std::min(capacity, ram) + kChunk;
}

// The process's name, from /proc.
std::string comm_of(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/comm", pid);
  FILE* f = fopen(path, "re");
  if (!f) return "process";
  char buf[32] = {};
  const bool ok = fgets(buf, sizeof buf, f) != nullptr;
  fclose(f);
  std::string s = ok ? buf : "process";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& ch : s)
    if (ch == ' ' || ch == ':') ch = '_';  // a buffer name, and trace-cmd splits on blanks
  return s.empty() ? "process" : s;
}

// Why a request to process `pid` failed, in one line.
std::string failure(int pid, int rc, const std::string& doing) {
  const std::string who = "process " + std::to_string(pid);
  if (rc == -EPIPE) return who + " exited before its recording began";
  if (rc == -EPROTO)
    return who + ": " + doing +
           "its answer is not what a usrtrace runtime sends (pages of a size no buffer has, more than 4096 "
           "CPUs, or a malformed message)";
  return who + ": " + doing + std::strerror(-rc);
}

}  // namespace

struct RemoteRecording::Instance {
  std::string name;
  uint32_t page_size = 0;
  int nr_cpus = 0;
  uint32_t stream = 0;  // in the journal
  // Its buffer in shared memory (kShare), read here; nullptr: through the
  // socket (kPages).
  std::unique_ptr<SharedBuffer> shared;
  int next_cpu = 0;  // where the next shared read starts, so none starves
  // The pages read from it, before they go to the journal: kept, so that
  // a read does not map and fault in a fresh quarter megabyte each time.
  control::Connection::Pages batch;
  // Bytes the final flush may still take (see finish_remote).
  uint64_t flush_budget = UINT64_MAX;
};

RemoteRecording::RemoteRecording() = default;

RemoteRecording::~RemoteRecording() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

int RemoteRecording::open(const RecordOptions& o, JournalWriter* journal, const std::string& prefix,
                          std::string* err) {
  opts_ = o;
  if (opts_.instances.empty()) opts_.instances.push_back("");
  std::string dir;
  if (int rc = check_options(opts_, &dir, err); rc < 0) return rc;
  first_sample_ = clock::sample_tsc();
  conn_ = control::Connection::open(o.pid, err);
  if (!conn_) return -ESRCH;
  if (!journal) {
    own_journal_ = std::make_unique<JournalWriter>();
    if (int rc = own_journal_->create(opts_, err); rc < 0) return rc;
    journal = own_journal_.get();
  }
  journal_ = journal;
  first_ = prefix.empty();
  if (int rc = journal_->add_process(o.pid, prefix, &process_, err); rc < 0) return rc;
  for (const std::string& name : opts_.instances) {
    auto inst = std::make_unique<Instance>();
    inst->name = name;
    // In shared memory (usrtrace record -- COMMAND made it so): the pages
    // are read from there, not asked for. A process that cannot say where,
    // or a file this side cannot map, is read through the socket.
    int fd = -1;
    const int src = conn_->share(name, &fd);
    if (src == -ENOENT) {
      *err = "process " + std::to_string(o.pid) + " has no instance '" + name + "'";
      return src;
    }
    if (src == 0) {
      auto sb = std::make_unique<SharedBuffer>();
      std::string why;
      if (sb->open(o.pid, fd, name, &why) == 0) inst->shared = std::move(sb);
    }
    if (inst->shared) {
      inst->page_size = inst->shared->page_size();
      inst->nr_cpus = inst->shared->nr_cpus();
      if (int jr = journal_->add_stream(process_, name, inst->page_size, static_cast<uint32_t>(inst->nr_cpus),
                                        &inst->stream, err);
          jr < 0)
        return jr;
      instances_.push_back(std::move(inst));
      continue;
    }
    control::Connection::Pages p;
    // The first answer says whether the instance exists and its shape.
    const int rc = conn_->pages(name, kChunk, 0, false, &p);
    if (rc < 0) {
      *err = rc == -ENOENT ? "process " + std::to_string(o.pid) + " has no instance '" + name + "'"
                           : failure(o.pid, rc, "");
      return rc;
    }
    inst->page_size = p.page_size;
    inst->nr_cpus = p.nr_cpus;
    if (int jr = journal_->add_stream(process_, name, p.page_size, static_cast<uint32_t>(p.nr_cpus),
                                      &inst->stream, err);
        jr < 0)
      return jr;
    instances_.push_back(std::move(inst));
    if (int wr = store(*instances_.back(), p, err); wr < 0) return wr;
  }
  control::Request rec;
  rec.op = control::Op::kRecord;
  rec.on = true;
  std::string payload;
  if (int rc = conn_->call(rec, &payload); rc < 0) {
    *err = failure(o.pid, rc, "");
    return rc;
  }
  if (int rc = conn_->meta(opts_.instances, &meta_); rc < 0) {
    *err = failure(o.pid, rc, "reading its metadata: ");
    return rc;
  }
  have_meta_ = true;
  return journal_->put_meta(process_, meta_, err);
}

// The pages go to the journal before the next answer is asked for; a run
// of one CPU's pages is one record.
int RemoteRecording::store(Instance& inst, const control::Connection::Pages& p, std::string* err) {
  if (p.page_size != inst.page_size || p.nr_cpus != inst.nr_cpus) {
    *err = "the instance '" + inst.name + "' changed shape while recorded";
    return -EPROTO;
  }
  for (size_t i = 0; i < p.cpus.size(); ++i) {
    const char* page = p.data.data() + i * p.page_size;
    uint64_t commit;
    std::memcpy(&commit, page + 8, 8);
    const uint64_t len = commit & rb::kCommitLengthMask;
    if ((commit & rb::kMissedStored) && rb::kPageHeaderSize + len + 8 <= p.page_size) {
      uint64_t missed;
      std::memcpy(&missed, page + rb::kPageHeaderSize + len, 8);
      lost_.fetch_add(missed, std::memory_order_relaxed);
      std::lock_guard<std::mutex> l(mu_);
      lost_where_[{inst.name, p.cpus[i]}] += missed;
    }
  }
  for (size_t i = 0; i < p.cpus.size();) {
    size_t end = i + 1;
    while (end < p.cpus.size() && p.cpus[end] == p.cpus[i]) ++end;
    const size_t bytes = (end - i) * p.page_size;
    if (int rc = journal_->put_pages(inst.stream, static_cast<uint32_t>(p.cpus[i]),
                                     p.data.data() + i * p.page_size, bytes, err);
        rc < 0)
      return rc;
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    pages_.fetch_add(end - i, std::memory_order_relaxed);
    i = end;
  }
  return 0;
}

// Pages of a buffer in shared memory, as many as there are (with `flush`,
// the open tail pages too, within the flush budget), in runs of one CPU's.
int RemoteRecording::take_shared(Instance& inst, bool flush, bool* any, std::string* err) {
  control::Connection::Pages& p = inst.batch;
  p.page_size = inst.page_size;
  p.nr_cpus = inst.nr_cpus;
  p.data.resize(size_t{kSharedBatch} * inst.page_size);
  bool more = true;
  uint64_t taken = 0;
  while (more && (flush || taken < kSharedPass)) {
    more = false;
    for (int k = 0; k < inst.nr_cpus; ++k) {
      const int cpu = (inst.next_cpu + k) % inst.nr_cpus;
      p.cpus.clear();
      uint64_t missed;
      while (p.cpus.size() < kSharedBatch && (!flush || inst.flush_budget > 0)) {
        auto* at = reinterpret_cast<uint8_t*>(p.data.data() + p.cpus.size() * inst.page_size);
        if (!inst.shared->read_page(cpu, at, !flush, &missed)) break;
        p.cpus.push_back(cpu);
        if (flush) inst.flush_budget -= std::min<uint64_t>(inst.flush_budget, inst.page_size);
      }
      if (p.cpus.empty()) continue;
      *any = true;
      taken += p.cpus.size();
      more = more || p.cpus.size() == kSharedBatch;  // a full batch: there may be more
      if (int rc = store(inst, p, err); rc < 0) return rc;
    }
    ++inst.next_cpu;
  }
  return 0;
}

bool RemoteRecording::all_shared() const {
  for (const auto& inst : instances_)
    if (!inst->shared) return false;
  return true;
}

int RemoteRecording::take(bool flush, uint32_t wait_ms, bool* any, std::string* err) {
  *any = false;
  control::Connection::Pages p;
  for (auto& inst : instances_) {
    if (inst->shared) {
      if (int rc = take_shared(*inst, flush, any, err); rc < 0) return rc;
      continue;
    }
    while (!flush || inst->flush_budget > 0) {
      const int rc = conn_->pages(inst->name, kChunk, wait_ms, flush, &p);
      if (rc < 0) {
        *err = "process " + std::to_string(opts_.pid) + ": " + std::strerror(-rc);
        return rc;
      }
      if (int wr = store(*inst, p, err); wr < 0) return wr;
      if (rc > 0) *any = true;
      if (flush) inst->flush_budget -= std::min<uint64_t>(inst->flush_budget, p.data.size());
      // A full answer: there is more now; otherwise on to the next one.
      if (p.data.size() + p.page_size + 8 + 4 <= kChunk) break;
      wait_ms = 0;
    }
    wait_ms = 0;  // only the first asks the server to wait
  }
  return 0;
}

// Everything left, the metadata as it is now, and the process released.
// What the buffers held when the process began to exit is at most their
// capacity: once that much is taken, the rest was written after (threads
// still running while a deferred Ctrl-C waits for us), and a writer faster
// than the socket would otherwise keep the flush, and the process, going.
int RemoteRecording::finish_remote(std::string* err) {
  set_flush_budgets();
  bool any = true;
  while (any)
    if (int rc = take(true, 0, &any, err); rc < 0) return rc;
  refresh_meta();
  release_remote();
  count_unreported_drops();
  return 0;
}

void RemoteRecording::set_flush_budgets() {
  for (auto& inst : instances_) {
    inst->flush_budget = 0;
    for (const control::InstanceMeta& im : meta_.instances)
      if (im.name == inst->name)
        inst->flush_budget = flush_budget_of(im.capacity + (inst->shared ? inst->shared->held_bytes() : 0));
  }
}

// The process is gone and what it had is taken: what the recording holds
// of it goes now, not at the end (record -c follows hundreds of short-lived
// processes, and each held a connection, a mapping of its buffers, page
// files and megabytes of metadata until then). The metadata of a followed
// process is in the journal already; the first process's stays, for the
// TSC line of take_rest(). Context: the recording thread, at its end.
void RemoteRecording::release_resources() {
  conn_.reset();
  for (auto& inst : instances_) {
    inst->shared.reset();
    control::Connection::Pages().data.swap(inst->batch.data);
    journal_->close_stream(inst->stream);
  }
  if (!first_) {
    std::lock_guard<std::mutex> l(mu_);
    meta_.meta = Metadata();
  }
}

// Discard mode reports its drops in the page after them: those after the
// last page a CPU opened are in its stats only ("dropped events", counted
// since the buffer's reset, as the kernel's). What the stats say beyond the
// pages' counts is added, so that the last line says every event lost.
void RemoteRecording::count_unreported_drops() {
  std::lock_guard<std::mutex> l(mu_);
  for (const control::InstanceMeta& im : meta_.instances) {
    for (size_t cpu = 0; cpu < im.stats.size(); ++cpu) {
      const std::string& st = im.stats[cpu];
      const size_t at = st.find("dropped events: ");
      if (at == std::string::npos) continue;
      const uint64_t dropped = std::strtoull(st.c_str() + at + 16, nullptr, 10);
      uint64_t& counted = lost_where_[{im.name, static_cast<int>(cpu)}];
      if (dropped > counted) {
        lost_.fetch_add(dropped - counted, std::memory_order_relaxed);
        counted = dropped;
      }
    }
  }
}

// Tells the process that nobody records it any more: its exit does not wait.
void RemoteRecording::release_remote() {
  control::Request rec;
  rec.op = control::Op::kRecord;
  rec.on = false;
  std::string payload;
  conn_->call(rec, &payload);
}

// A failure to journal it sticks in the journal: the next pages say so.
void RemoteRecording::refresh_meta() {
  control::RemoteMeta m;
  if (conn_->meta(opts_.instances, &m) == 0) {
    keep_departed(meta_.meta, &m.meta);
    meta_ = std::move(m);
    std::string err;
    journal_->put_meta(process_, meta_, &err);
  }
}

// Asks the process something cheap, for the flags of the answer (kExiting,
// kMetaChanged): a recorder of shared buffers sends nothing else while the
// process runs.
int RemoteRecording::ping(std::string* err) {
  control::Request r;
  r.op = control::Op::kStat;
  std::string payload;
  const int rc = conn_->call(r, &payload);
  if (rc < 0) *err = "process " + std::to_string(opts_.pid) + ": " + std::strerror(-rc);
  return rc < 0 ? rc : 0;
}

void RemoteRecording::start_thread() {
  thread_ = std::thread([this] {
    std::string err;
    bool any = false;
    auto last_meta = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    auto last_ping = std::chrono::steady_clock::now();
    const bool shared = all_shared();
    while (!stop_.load(std::memory_order_acquire)) {
      int rc = take(false, shared ? 0 : kWaitMs, &any, &err);
      if (rc == 0 && shared) {
        if (!any) std::this_thread::sleep_for(kSharedIdle);
        if (std::chrono::steady_clock::now() - last_ping >= kSharedPing) {
          rc = ping(&err);
          last_ping = std::chrono::steady_clock::now();
        }
      }
      if (rc < 0) {
        if (rc == -EPIPE && shared) {
          // Killed: its buffers are still mapped here, whole. Everything
          // in them is taken, the open pages too.
          set_flush_budgets();
          for (bool more = true; more;)
            if (int fr = take(true, 0, &more, &err); fr < 0) {
              set_error(fr, err);
              break;
            }
        } else if (rc == -EPIPE) {
          cut_short_.store(true, std::memory_order_release);  // a process killed: keep what came
        } else if (rc == -ETIMEDOUT || rc == -EPROTO) {
          // Hung, or answering what no server of ours would: what came is
          // kept, and the process let go (the connection is closed).
          cut_short_.store(true, std::memory_order_release);
          std::lock_guard<std::mutex> l(mu_);
          broken_ = rc == -ETIMEDOUT ? "did not answer within " +
                                           std::to_string(control::Connection::kAnswerMs / 1000) + " s"
                                     : "answered what its control server never would (" + err + ")";
        } else {
          // Our own failure (a full disk): the process is let go at once,
          // not held at its exit for pages nobody will take.
          set_error(rc, err);
          release_remote();
        }
        release_resources();
        gone_.store(true, std::memory_order_release);
        return;
      }
      // The process loaded an object or registered events: their names and
      // formats are taken now, not only at its exit, which may come too
      // fast for the last metadata (a killed process, an exit wait run out).
      // At once for the first change, then at most once a second: kallsyms
      // of a big program takes a while.
      const auto now = std::chrono::steady_clock::now();
      if ((conn_->flags() & (control::kMetaChanged | control::kExiting)) == control::kMetaChanged &&
          now - last_meta >= std::chrono::seconds(1)) {
        refresh_meta();
        last_meta = now;
      }
      if (conn_->flags() & control::kExiting) {
        exiting_.store(true, std::memory_order_release);
        if (int fr = finish_remote(&err); fr < 0 && fr != -EPIPE) set_error(fr, err);
        release_resources();
        gone_.store(true, std::memory_order_release);
        return;
      }
    }
  });
}

void RemoteRecording::set_error(int rc, const std::string& err) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_ == 0) {
    error_ = rc;
    error_text_ = err;
  }
}

int RemoteRecording::take_rest(std::string* err) {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (error_) {
      *err = error_text_;
      return error_;
    }
  }
  if (!gone_.load(std::memory_order_acquire) && conn_) {
    const int rc = finish_remote(err);
    if (rc < 0 && rc != -EPIPE) return rc;
  }
  if (!have_meta_) {
    *err = "no metadata from process " + std::to_string(opts_.pid);
    return -EPROTO;
  }
  // The TSC clocks' conversion: the process calibrated it over 20 ms or
  // so (about 0.5-5 ppm, microseconds after a few seconds); a line through
  // a sample at the recording's start and one now meets CLOCK_MONOTONIC_RAW
  // at both ends, and in between (it is linear in the TSC) to within the
  // samples' jitter. The last metadata wins, so it is journaled again.
  if (meta_.meta.tsc2nsec.mult != 0) {
    const Metadata::Tsc2Nsec line = tsc2nsec_between(first_sample_, clock::sample_tsc());
    if (line.mult != 0) {
      meta_.meta.tsc2nsec = line;
      if (int rc = journal_->put_meta(process_, meta_, err); rc < 0) return rc;
    }
  }
  return 0;
}

int RemoteRecording::finish(std::string* err) {
  if (int rc = take_rest(err); rc < 0) return rc;
  return finish_journal(*journal_, {}, err);
}

int ProcessTreeRecording::open(const RecordOptions& o, std::string* err) {
  opts_ = o;
  if (opts_.instances.empty()) opts_.instances.push_back("");
  std::string dir;
  if (int rc = check_options(opts_, &dir, err); rc < 0) return rc;
  if (int rc = journal_.create(opts_, err); rc < 0) return rc;
  if (int rc = root_.open(opts_, &journal_, "", err); rc < 0) return rc;
  if (opts_.kernel_events.empty()) return 0;
  kernel_ = std::make_unique<KernelSource>();
  return kernel_->open(opts_.kernel_events, root_.clock(), {opts_.pid}, &journal_, err);
}

void ProcessTreeRecording::start_thread() {
  root_.start_thread();
  if (kernel_) kernel_->start_thread();
}

int ProcessTreeRecording::add_process(int pid, std::string* err) {
  reap();
  RecordOptions o = opts_;
  o.pid = pid;
  auto rec = std::make_unique<RemoteRecording>();
  const std::string comm = comm_of(pid);
  if (int rc = rec->open(o, &journal_, comm + "-" + std::to_string(pid), err); rc < 0) return rc;
  rec->start_thread();
  std::lock_guard<std::mutex> l(mu_);
  followed_.push_back({pid, comm, std::move(rec)});
  return 0;
}

// The followed processes that ended are finished now (their threads joined;
// their connections, mappings, page-file descriptors and metadata were let
// go as they ended): what a recording of many short-lived processes holds
// is what the live ones need.
void ProcessTreeRecording::reap() {
  std::lock_guard<std::mutex> l(mu_);
  for (Followed& f : followed_) {
    if (f.done || !f.rec->process_gone()) continue;
    finish_followed(f);
  }
}

void ProcessTreeRecording::finish_followed(Followed& f) {
  std::string e;
  // One process's failure costs its own buffers, not the file.
  if (f.rec->take_rest(&e) < 0) {
    warnings_ += "process " + std::to_string(f.pid) + ": " + e + "\n";
    skip_.push_back(f.rec->process());
  }
  f.done = true;
}

int ProcessTreeRecording::finish(std::string* err) {
  if (int rc = root_.take_rest(err); rc < 0) return rc;
  std::lock_guard<std::mutex> l(mu_);
  for (Followed& f : followed_)
    if (!f.done) finish_followed(f);
  std::vector<uint32_t> skip = skip_;
  if (kernel_) {
    std::string e;
    // Nor does the kernel's: the process's pages are the file's point.
    if (kernel_->take_rest(&e) < 0) {
      warnings_ += "kernel events: " + e + "\n";
      skip.push_back(kernel_->process());
    }
  }
  return finish_journal(journal_, skip, err);
}

RecordStats ProcessTreeRecording::stats() const {
  RecordStats st = root_.stats();
  std::lock_guard<std::mutex> l(mu_);
  for (const Followed& f : followed_) {
    const RecordStats s = f.rec->stats();
    st.pages += s.pages;
    st.bytes += s.bytes;
    st.lost_events += s.lost_events;
  }
  if (kernel_) {
    const RecordStats s = kernel_->stats();
    st.pages += s.pages;
    st.bytes += s.bytes;
    st.lost_events += s.lost_events;
  }
  st.pages_dropped = journal_.pages_dropped();  // one journal for all
  return st;
}

// "N on CPU k of the top instance, ..." and the buffer size that was not
// enough, or "" when nothing was lost.
std::string RemoteRecording::lost_where() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string w;
  for (const auto& [at, n] : lost_where_) {
    if (n == 0) continue;
    w += w.empty() ? "" : ", ";
    w += std::to_string(n) + " on CPU " + std::to_string(at.second) + " of " +
         (at.first.empty() ? std::string("the top instance") : "instance " + at.first);
    for (const control::InstanceMeta& im : meta_.instances)
      if (im.name == at.first && im.nr_cpus > 0)
        w += " (" + std::to_string(im.capacity / static_cast<uint64_t>(im.nr_cpus) / 1024) +
             " KiB of pages per CPU)";
  }
  return w;
}

std::string ProcessTreeRecording::warnings() const {
  std::string w;
  if (const std::string lost = root_.lost_where(); !lost.empty())
    w +=
        "events lost: " + lost +
        ": the buffers filled before the recorder took their pages (a loaded machine, or buffers "
        "too small for the rate); -b KB makes each CPU's buffer larger, and with -- COMMAND, --buffer-cap KB "
        "lets it grow further before it overwrites\n";
  if (const std::string b = root_.broken(); !b.empty())
    w += "process " + std::to_string(opts_.pid) + " " + b +
         ": its recording stopped there, and what was taken before is in the file\n";
  else if (root_.cut_short())
    w += "process " + std::to_string(opts_.pid) +
         " went away before its last pages were taken: the end of its trace is missing (killed, or its exit "
         "wait, USRTRACE_EXIT_WAIT_MS, ran out)\n";
  if (kernel_) w += kernel_->warnings();
  std::lock_guard<std::mutex> l(mu_);
  for (const Followed& f : followed_) {
    if (const std::string lost = f.rec->lost_where(); !lost.empty())
      w += "process " + std::to_string(f.pid) + ": events lost: " + lost + "\n";
    if (const std::string b = f.rec->broken(); !b.empty())
      w += "process " + std::to_string(f.pid) + " " + b + ": its recording stopped there\n";
  }
  return w + warnings_;
}

std::string RemoteRecording::clock() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!meta_.instances.empty() && !meta_.instances[0].clock.empty()) return meta_.instances[0].clock;
  return clock_name(meta_.meta.trace_clock);
}

RecordStats RemoteRecording::stats() const {
  RecordStats st;
  st.pages = pages_.load(std::memory_order_relaxed);
  st.bytes = bytes_.load(std::memory_order_relaxed);
  st.lost_events = lost_.load(std::memory_order_relaxed);
  st.pages_dropped = journal_ ? journal_->pages_dropped() : 0;
  return st;
}

}  // namespace usrtrace::tracedat
