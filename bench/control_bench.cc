// The write path while a client of the control socket reads the same
// instance at full speed, in one run so the ratios hold (bench/README.md):
//
//   BM_WriteUnread     trace_ctlbench_tick(...), enabled in instance
//                      ctl_bench, nobody reading
//   BM_WriteTracePipe  the same while another thread reads the instance's
//                      trace_pipe through control::Client (text, 64 KiB a read)
//   BM_WriteRawPages   ... reads per_cpu/cpuN/trace_pipe_raw of the
//                      writer's CPU through control::Client (a page a read)
//   BM_WritePages      ... takes whole pages with kPages
//                      (Connection::pages, up to 1 MiB a call), as the
//                      out-of-process recorder (usrtrace record -p) does
//
// The writer is pinned to the first CPU; the reader and the server thread
// (usrtrace-ctl, back at nice 0 here) to the second, when there is one, so
// that the writer's CPU is its own and what the ratios show is the
// reader's effect on the buffer (reader-page swaps, shared cache lines),
// not a shared time slice.
// Counters: read_events_per_s, the events the reader got per second of the
// timed loop (it keeps reading: the buffer overwrites what it cannot take),
// and read_pct, those events in percent of the ones written.
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/connection.h"
#include "pin.h"
#include "ring_buffer/page_format.h"
#include "server/server.h"
#include "tracefs/tracefs.h"
#include "usrtrace/control.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(ctlbench, tick, (uint64_t, seq)(uint64_t, value), "seq=%llu value=%llu", REC->seq, REC->value)

namespace {

// The writer's CPU and the reader's, taken once before anything is pinned;
// the same CPU when there is only one.
struct Cpus {
  int writer, reader;
};
const Cpus& cpus() {
  static const Cpus c{usrtrace::bench::nth_cpu(0), usrtrace::bench::nth_cpu(1)};
  return c;
}

namespace control = usrtrace::control;
namespace rb = usrtrace::rb;
namespace tracefs = usrtrace::tracefs;

constexpr const char* kInst = "ctl_bench";
constexpr int kWaitMs = 10;  // a read that finds nothing waits on the server this long

enum class ReadMode { kTracePipe, kRawPages, kPages };

// The data events of `n` bytes of whole pages of `page_size` bytes each.
uint64_t count_events(const uint8_t* p, size_t n, uint32_t page_size) {
  uint64_t events = 0;
  for (size_t at = 0; at + page_size <= n; at += page_size) {
    rb::PageHeader h;
    std::memcpy(&h, p + at, sizeof h);
    const auto len = static_cast<uint32_t>(
        std::min<uint64_t>(h.commit & rb::kCommitLengthMask, page_size - rb::kPageHeaderSize));
    rb::PageWalker w(p + at + rb::kPageHeaderSize, len, h.timestamp);
    rb::Entry e;
    for (rb::PageWalker::Step s;
         (s = w.next(&e)) != rb::PageWalker::Step::kEnd && s != rb::PageWalker::Step::kCorrupt;)
      events += s == rb::PageWalker::Step::kData;
  }
  return events;
}

// Moves the server thread to `cpu` and back to nice 0 (found by its name).
// It runs at nice 19 so that a program's threads come first; here it is
// the reader's other half, and at nice 19 on a machine with other jobs it
// would get next to no time: the counters would show the machine's load,
// not a reader at full speed. Lowering nice needs root (or
// RLIMIT_NICE); without it read_events_per_s shows the difference.
void pin_server_thread(int cpu) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string comm;
    std::getline(f, comm);
    if (comm != "usrtrace-ctl") continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(static_cast<size_t>(cpu), &one);
    const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
    sched_setaffinity(tid, sizeof one, &one);
    setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 0);
  }
  closedir(d);
}

// A thread reading instance kInst through the control socket as fast as
// it can, until destroyed.
class Reader {
 public:
  explicit Reader(ReadMode mode) : mode_(mode) {
    thread_ = std::thread([this] { run(); });
    while (!ready_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  ~Reader() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  // order: relaxed; a count, read for a rate.
  uint64_t events() const { return events_.load(std::memory_order_relaxed); }
  const std::string& error() const { return error_; }  // once constructed

 private:
  void run() {
    usrtrace::bench::Pin pin(cpus().reader);
    const std::string inst = std::string("instances/") + kInst;
    std::string err;
    std::unique_ptr<control::Client> client;
    std::unique_ptr<control::Connection> conn;
    int h = -1;
    if (mode_ == ReadMode::kPages) {
      conn = control::Connection::open(getpid(), &err);
    } else {
      client = control::Client::connect(getpid(), &err);
      const std::string path =
          mode_ == ReadMode::kTracePipe
              ? inst + "/trace_pipe"
              : inst + "/per_cpu/cpu" + std::to_string(cpus().writer) + "/trace_pipe_raw";
      if (client && (h = client->open(path, O_RDONLY)) < 0) err = path + ": " + std::strerror(-h);
    }
    if (!err.empty()) error_ = err;
    ready_.store(true, std::memory_order_release);
    if (!err.empty()) return;
    std::vector<char> buf(64 * 1024);
    control::Connection::Pages pages;
    while (!stop_.load(std::memory_order_relaxed)) {
      uint64_t got = 0;
      if (mode_ == ReadMode::kTracePipe) {
        const long n = client->read(h, buf.data(), buf.size(), kWaitMs);
        if (n > 0) got = static_cast<uint64_t>(std::count(buf.data(), buf.data() + n, '\n'));
      } else if (mode_ == ReadMode::kRawPages) {
        // One page a read, whatever the size asked.
        const long n = client->read(h, buf.data(), buf.size(), kWaitMs);
        if (n > 0)
          got = count_events(reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(n),
                             static_cast<uint32_t>(n));
      } else if (conn->pages(kInst, 1u << 20, kWaitMs, false, &pages) > 0) {
        got = count_events(reinterpret_cast<const uint8_t*>(pages.data.data()), pages.data.size(),
                           pages.page_size);
      }
      events_.fetch_add(got, std::memory_order_relaxed);
    }
  }

  ReadMode mode_;
  std::thread thread_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> events_{0};
  std::string error_;  // written before ready_, read after
};

bool setup() {
  static const bool ok = [] {
    std::string err;
    if (control::start_server(&err) != 0) return false;
    pin_server_thread(cpus().reader);
    const std::string p = std::string("instances/") + kInst;
    return tracefs::mkdir(p) == 0 && tracefs::write_file(p + "/set_event", "ctlbench:tick") > 0;
  }();
  if (ok) tracefs::write_file(std::string("instances/") + kInst + "/trace", "");
  return ok;
}

void run_write(benchmark::State& state, const ReadMode* mode) {
  usrtrace::bench::Pin pin(cpus().writer);
  if (!setup()) return state.SkipWithError("no control server or instance");
  std::unique_ptr<Reader> reader;
  if (mode) {
    reader = std::make_unique<Reader>(*mode);
    if (!reader->error().empty()) return state.SkipWithError(reader->error().c_str());
  }
  const uint64_t r0 = reader ? reader->events() : 0;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t i = 0;
  for (auto _ : state) {
    trace_ctlbench_tick(i, i * 3);
    ++i;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double read = static_cast<double>(reader ? reader->events() - r0 : 0);
  state.counters["read_events_per_s"] = read / secs;
  state.counters["read_pct"] = 100.0 * read / static_cast<double>(std::max<uint64_t>(i, 1));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_WriteUnread(benchmark::State& state) { run_write(state, nullptr); }
void BM_WriteTracePipe(benchmark::State& state) {
  const ReadMode m = ReadMode::kTracePipe;
  run_write(state, &m);
}
void BM_WriteRawPages(benchmark::State& state) {
  const ReadMode m = ReadMode::kRawPages;
  run_write(state, &m);
}
void BM_WritePages(benchmark::State& state) {
  const ReadMode m = ReadMode::kPages;
  run_write(state, &m);
}
BENCHMARK(BM_WriteUnread);
BENCHMARK(BM_WriteTracePipe);
BENCHMARK(BM_WriteRawPages);
BENCHMARK(BM_WritePages);

}  // namespace

BENCHMARK_MAIN();
