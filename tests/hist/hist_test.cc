// Hist triggers alone, on hand-built records: the examples of
// histogram.rst rewritten against test events, with the whole hist text
// checked line by line; every modifier; sorting; Dropped when the table is
// full; pause and clear; named tables; threads and a signal handler
// recording at once with exact totals; and the Malformed suite.
#include "hist/hist.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "usrtrace/event.h"
#include "writers/writers.h"

// kmem:kmalloc's fields, as histogram.rst's examples use them.
USRTRACE_EVENT(hst, kmalloc,
               (void*, call_site)(void*, ptr)(uint64_t, bytes_req)(uint64_t, bytes_alloc)(uint32_t,
                                                                                          gfp_flags),
               "bytes_req=%llu", REC->bytes_req)
USRTRACE_EVENT(hst, sys_enter, (int64_t, id)(char[16], comm)(const char*, path), "id=%lld", REC->id)

extern "C" __attribute__((visibility("default"), noinline)) int hst_some_function(int n) {
  volatile int sum = 0;  // a body of a few instructions, so that +1 is inside
  for (int i = 0; i < n; ++i) sum = sum + i;
  return sum;
}

namespace usrtrace::hist {
namespace {

using Kmalloc = usrtrace_record_hst_kmalloc;
using SysEnter = usrtrace_record_hst_sys_enter;

const internal::EventDesc& kmalloc_desc() { return usrtrace_event_hst_kmalloc::desc; }
const internal::EventDesc& sys_desc() { return usrtrace_event_hst_sys_enter::desc; }

std::unique_ptr<Histogram> make(const internal::EventDesc& ev, const std::string& cmd) {
  Error err;
  auto h = Histogram::create(ev, cmd, &err);
  EXPECT_NE(h, nullptr) << cmd << ": " << err.message << " at " << err.pos;
  return h;
}

void kmalloc(Histogram& h, uint64_t req, uint64_t alloc, int pid = 1, uintptr_t site = 0x1000) {
  Kmalloc r{};
  r.common.pid = pid;
  r.call_site = site;
  r.bytes_req = req;
  r.bytes_alloc = alloc;
  h.record(&r, sizeof r, RecordContext{});
}

void sys_enter(Histogram& h, int64_t id, const char* comm, std::string_view path, int pid = 1,
               uint64_t ts = 0) {
  alignas(8) char buf[internal::kMaxRecord] = {};
  auto* r = reinterpret_cast<SysEnter*>(buf);
  uint32_t len = sizeof *r;
  r->common.pid = pid;
  r->id = id;
  std::strncpy(r->comm, comm, sizeof r->comm - 1);
  r->path = internal::append_dynamic(buf, len, path.data(), path.size(), true);
  RecordContext ctx;
  ctx.cpu = 1;
  ctx.now_ns = [](const void* a) { return *static_cast<const uint64_t*>(a); };
  ctx.now_arg = &ts;
  h.record(buf, len, ctx);
}

// The body lines of a hist text (between the head and "Totals:").
std::vector<std::string> body(const std::string& text) {
  std::vector<std::string> out;
  size_t at = text.find("#\n\n");
  if (at == std::string::npos) return out;
  at += 3;
  while (at < text.size() && text[at] != '\n') {
    const size_t nl = text.find('\n', at);
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

TEST(HistTest, BytesReqKeyWholeText) {
  // histogram.rst: echo 'hist:key=bytes_req:val=bytes_alloc' (we spell it
  // values= / vals=), sorted by hitcount, ascending.
  auto h = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc");
  for (int i = 0; i < 3; ++i) kmalloc(*h, 240, 256);
  kmalloc(*h, 8, 8);
  for (int i = 0; i < 2; ++i) kmalloc(*h, 32, 32);
  EXPECT_EQ(h->print(""),
            "# event histogram\n"
            "#\n"
            "# trigger info: hist:keys=bytes_req:vals=hitcount,bytes_alloc:sort=hitcount:size=2048 [active]\n"
            "#\n"
            "\n"
            "{ bytes_req:          8 } hitcount:          1  bytes_alloc:          8\n"
            "{ bytes_req:         32 } hitcount:          2  bytes_alloc:         64\n"
            "{ bytes_req:        240 } hitcount:          3  bytes_alloc:        768\n"
            "\n"
            "Totals:\n"
            "    Hits: 6\n"
            "    Entries: 3\n"
            "    Dropped: 0\n");
}

TEST(HistTest, SortDescendingByAValueAndTwoSortKeys) {
  auto h =
      make(kmalloc_desc(), "hist:keys=call_site.hex:vals=bytes_req,bytes_alloc:sort=bytes_alloc.descending");
  EXPECT_EQ(
      h->trigger_text(""),
      "hist:keys=call_site.hex:vals=hitcount,bytes_req,bytes_alloc:sort=bytes_alloc.descending:size=2048 "
      "[active]");
  kmalloc(*h, 10, 16, 1, 0xa0);
  kmalloc(*h, 100, 128, 1, 0xb0);
  kmalloc(*h, 100, 128, 1, 0xb0);
  kmalloc(*h, 50, 64, 1, 0xff);
  EXPECT_EQ(body(h->print("")),
            (std::vector<std::string>{
                "{ call_site: b0 } hitcount:          2  bytes_req:        200  bytes_alloc:        256",
                "{ call_site: ff } hitcount:          1  bytes_req:         50  bytes_alloc:         64",
                "{ call_site: a0 } hitcount:          1  bytes_req:         10  bytes_alloc:         16"}));
  auto two = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc:sort=hitcount.descending,bytes_req");
  for (uint64_t req : {5u, 3u, 3u, 9u, 9u, 1u}) kmalloc(*two, req, 1);
  EXPECT_EQ(
      body(two->print("")),
      (std::vector<std::string>{"{ bytes_req:          3 } hitcount:          2  bytes_alloc:          2",
                                "{ bytes_req:          9 } hitcount:          2  bytes_alloc:          2",
                                "{ bytes_req:          1 } hitcount:          1  bytes_alloc:          1",
                                "{ bytes_req:          5 } hitcount:          1  bytes_alloc:          1"}));
}

TEST(HistTest, CompoundKeysStringsExecnameAndSyscall) {
  writers::save_comm(4242, "kworker/0:1");
  auto h = make(sys_desc(), "hist:keys=common_pid.execname,id.syscall:vals=hitcount");
  sys_enter(*h, SYS_read, "a", "", 4242);
  sys_enter(*h, SYS_read, "a", "", 4242);
  sys_enter(*h, SYS_openat, "a", "", 4242);
  sys_enter(*h, 4000, "a", "", 4242);
  EXPECT_EQ(body(h->print("")),
            (std::vector<std::string>{
                "{ common_pid: kworker/0:1     [      4242], id: openat                        [257] } "
                "hitcount:          1",
                "{ common_pid: kworker/0:1     [      4242], id: unknown_syscall               [4000] } "
                "hitcount:          1",
                "{ common_pid: kworker/0:1     [      4242], id: read                          [  0] } "
                "hitcount:          2"}));
  auto s = make(sys_desc(), "hist:keys=comm,path:sort=comm");
  sys_enter(*s, 1, "bash", "/etc/passwd");
  sys_enter(*s, 1, "awk", "/tmp/x");
  sys_enter(*s, 1, "bash", "/etc/passwd");
  const auto lines = body(s->print(""));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "{ comm: " + std::string("awk") + std::string(47, ' ') + ", path: /tmp/x" +
                          std::string(44, ' ') + " } hitcount:          1");
  EXPECT_EQ(lines[1].rfind("{ comm: bash", 0), 0u);
  EXPECT_NE(lines[1].find("} hitcount:          2"), std::string::npos);
}

TEST(HistTest, Log2BucketsPercentAndTimestamps) {
  auto lg = make(kmalloc_desc(), "hist:keys=bytes_req.log2:vals=bytes_alloc.percent:sort=bytes_req");
  for (uint64_t v : {1u, 2u, 3u, 4u, 5u, 1000u}) kmalloc(*lg, v, v);
  EXPECT_EQ(body(lg->print("")), (std::vector<std::string>{
                                     "{ bytes_req: ~ 2^0  } hitcount:          1  bytes_alloc (%):   0.09",
                                     "{ bytes_req: ~ 2^1  } hitcount:          1  bytes_alloc (%):   0.19",
                                     "{ bytes_req: ~ 2^2  } hitcount:          2  bytes_alloc (%):   0.68",
                                     "{ bytes_req: ~ 2^3  } hitcount:          1  bytes_alloc (%):   0.49",
                                     "{ bytes_req: ~ 2^10 } hitcount:          1  bytes_alloc (%):  98.52"}));
  auto bk = make(kmalloc_desc(), "hist:keys=bytes_req.buckets=100:sort=bytes_req");
  for (uint64_t v : {5u, 99u, 100u, 250u}) kmalloc(*bk, v, 0);
  EXPECT_EQ(body(bk->print("")), (std::vector<std::string>{"{ bytes_req: ~ 0-99 } hitcount:          2",
                                                           "{ bytes_req: ~ 100-199 } hitcount:          1",
                                                           "{ bytes_req: ~ 200-299 } hitcount:          1"}));
  auto ts = make(sys_desc(), "hist:keys=cpu:vals=common_timestamp.usecs");
  sys_enter(*ts, 0, "x", "", 1, 5'000'000);
  sys_enter(*ts, 0, "x", "", 1, 7'000'000);
  EXPECT_EQ(
      body(ts->print("")),
      (std::vector<std::string>{"{ cpu:          1 } hitcount:          2  common_timestamp:      12000"}));
  EXPECT_NE(ts->trigger_text("").find("vals=hitcount,common_timestamp.usecs"), std::string::npos);
}

TEST(HistTest, SymbolsOfTheProgram) {
  auto h = make(kmalloc_desc(), "hist:keys=call_site.sym");
  kmalloc(*h, 1, 1, 1, reinterpret_cast<uintptr_t>(&hst_some_function));
  const auto lines = body(h->print(""));
  ASSERT_EQ(lines.size(), 1u);
  char addr[32];
  snprintf(addr, sizeof addr, "[%llx] ",
           static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&hst_some_function)));
  EXPECT_EQ(lines[0].rfind(std::string("{ call_site: ") + addr + "hst_some_function", 0), 0u) << lines[0];
  auto off = make(kmalloc_desc(), "hist:keys=call_site.sym-offset");
  kmalloc(*off, 1, 1, 1, reinterpret_cast<uintptr_t>(&hst_some_function) + 1);
  EXPECT_NE(body(off->print(""))[0].find("hst_some_function+0x1/0x"), std::string::npos) << off->print("");
}

TEST(HistTest, FullTableDropsAndCounts) {
  auto h = make(kmalloc_desc(), "hist:keys=bytes_req:size=128");
  for (uint64_t v = 0; v < 200; ++v) kmalloc(*h, v, 0);
  kmalloc(*h, 5, 0);  // an existing key still counts
  const std::string t = h->print("");
  EXPECT_NE(t.find("Totals:\n    Hits: 201\n    Entries: 128\n    Dropped: 72\n"), std::string::npos) << t;
}

TEST(HistTest, PauseAndClear) {
  auto h = make(kmalloc_desc(), "hist:keys=bytes_req");
  kmalloc(*h, 1, 0);
  h->pause();
  EXPECT_TRUE(h->paused());
  kmalloc(*h, 1, 0);
  EXPECT_NE(h->trigger_text("").find("[paused]"), std::string::npos);
  h->cont();
  kmalloc(*h, 1, 0);
  EXPECT_NE(h->print("").find("Hits: 2\n"), std::string::npos);
  h->clear();
  EXPECT_FALSE(h->paused());
  EXPECT_NE(h->print("").find("Hits: 0\n    Entries: 0\n"), std::string::npos);
  kmalloc(*h, 3, 0);
  EXPECT_EQ(body(h->print("")), (std::vector<std::string>{"{ bytes_req:          3 } hitcount:          1"}));
}

TEST(HistTest, NamedTablesAreSharedAndMustMatch) {
  auto a = make(kmalloc_desc(), "hist:name=shared:keys=bytes_req");
  auto b = make(kmalloc_desc(), "hist:name=shared:keys=bytes_req");
  kmalloc(*a, 1, 0);
  kmalloc(*b, 1, 0);
  EXPECT_NE(a->print("").find("hitcount:          2"), std::string::npos);
  EXPECT_EQ(a->trigger_text(""),
            "hist:name=shared:keys=bytes_req:vals=hitcount:sort=hitcount:size=2048 [active]");
  Error err;
  EXPECT_EQ(Histogram::create(kmalloc_desc(), "hist:name=shared:keys=bytes_alloc", &err), nullptr);
  EXPECT_EQ(err.message, "Named hist trigger doesn't match existing named trigger (includes variables)");
  a.reset();
  b.reset();
  // The name is free again once its histograms are gone.
  auto c = make(kmalloc_desc(), "hist:name=shared:keys=bytes_alloc");
  EXPECT_NE(c->print("").find("Hits: 0\n"), std::string::npos);
}

TEST(HistTest, SameSpecAndFlags) {
  auto a = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc");
  auto b = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc:pause");
  auto c = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc:sort=bytes_alloc");
  EXPECT_TRUE(a->same_spec(*b));
  EXPECT_FALSE(a->same_spec(*c));
  EXPECT_TRUE(b->wants_pause());
  EXPECT_FALSE(a->wants_pause() || a->wants_cont() || a->wants_clear());
  EXPECT_TRUE(make(kmalloc_desc(), "hist:keys=bytes_req:continue")->wants_cont());
  EXPECT_TRUE(make(kmalloc_desc(), "hist:keys=bytes_req:cont")->wants_cont());
  EXPECT_TRUE(make(kmalloc_desc(), "hist:keys=bytes_req:clear")->wants_clear());
}

std::unique_ptr<Histogram> g_sig_hist;
std::atomic<int> g_sig_count{0};
void on_signal(int) {
  kmalloc(*g_sig_hist, 7, 1);
  g_sig_count.fetch_add(1);
}

TEST(HistTest, ThreadsAndSignalHandlersAggregateExactly) {
  g_sig_hist = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc:size=256");
  g_sig_count.store(0);  // a --gtest_repeat run counted into it before
  struct sigaction sa = {}, old = {};
  sa.sa_handler = &on_signal;
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  constexpr int kThreads = 3, kEach = 50000;
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  std::vector<pthread_t> ids(kThreads);
  std::atomic<int> started{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      ids[static_cast<size_t>(t)] = pthread_self();
      started.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kEach; ++i) kmalloc(*g_sig_hist, static_cast<uint64_t>(i % 100), 2);
    });
  while (started.load() < kThreads) std::this_thread::yield();
  go = true;
  for (int k = 0; k < 300; ++k) pthread_kill(ids[static_cast<size_t>(k % kThreads)], SIGUSR2);
  for (auto& th : ts) th.join();
  sigaction(SIGUSR2, &old, nullptr);
  const int sigs = g_sig_count.load();
  const std::string t = g_sig_hist->print("");
  EXPECT_NE(
      t.find("Hits: " + std::to_string(kThreads * kEach + sigs) + "\n    Entries: 100\n    Dropped: 0\n"),
      std::string::npos)
      << t;
  EXPECT_NE(t.find("{ bytes_req:          7 } hitcount: " +
                   std::string(10 - std::to_string(1500 + sigs).size(), ' ') + std::to_string(1500 + sigs) +
                   "  bytes_alloc: " + std::string(10 - std::to_string(3000 + sigs).size(), ' ') +
                   std::to_string(3000 + sigs)),
            std::string::npos)
      << t;
  g_sig_hist.reset();
}

// onmax() on one entry from three threads and a signal handler at once
// (the handler interrupting its own thread's update of the entry): the max
// is never lost (compare-and-swap), every record is counted, and the saved
// field is one a record wrote with its value (bytes_alloc = 2 * bytes_req),
// never torn; the snapshot callback's kept values are distinct values that
// were written, worst first, none lower than a value it left out.
std::atomic<Histogram*> g_max_hist{nullptr};
std::atomic<uint64_t> g_max_sigs{0};
std::atomic<int> g_snaps{0};
void on_max_signal(int) {
  if (Histogram* h = g_max_hist.load()) {
    const uint64_t v = 7000000 + g_max_sigs.fetch_add(1);
    Kmalloc r{};
    r.common.pid = 1;
    r.bytes_req = v;
    r.bytes_alloc = 2 * v;
    RecordContext ctx;
    ctx.snapshot = [](const void*, const char*, uint64_t, bool) {
      g_snaps.fetch_add(1);
      return 0;
    };
    ctx.snapshot_ring = [](const void*) { return 4; };
    h->record(&r, sizeof r, ctx);
  }
}

TEST(HistTest, OnmaxOnOneEntryFromThreadsAndSignalHandlersKeepsTheMax) {
  auto h = make(kmalloc_desc(),
                "hist:keys=common_pid:v=bytes_req:onmax($v).save(bytes_alloc):onmax($v).snapshot()");
  ASSERT_NE(h, nullptr);
  g_max_sigs.store(0);
  g_snaps.store(0);
  g_max_hist.store(h.get());
  struct sigaction sa = {}, old = {};
  sa.sa_handler = &on_max_signal;
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  constexpr int kThreads = 3, kEach = 40000;
  std::atomic<bool> go{false};
  std::atomic<int> started{0};
  std::vector<pthread_t> ids(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      ids[static_cast<size_t>(t)] = pthread_self();
      started.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      RecordContext ctx;
      ctx.snapshot = [](const void*, const char*, uint64_t, bool) {
        g_snaps.fetch_add(1);
        return 0;
      };
      ctx.snapshot_ring = [](const void*) { return 4; };
      for (int i = 0; i < kEach; ++i) {
        // Rising values per thread, interleaved across threads.
        const uint64_t v = static_cast<uint64_t>(i) * kThreads + static_cast<uint64_t>(t);
        Kmalloc r{};
        r.common.pid = 1;
        r.bytes_req = v;
        r.bytes_alloc = 2 * v;
        h->record(&r, sizeof r, ctx);
      }
    });
  while (started.load() < kThreads) std::this_thread::yield();
  go = true;
  for (int k = 0; k < 200; ++k) pthread_kill(ids[static_cast<size_t>(k % kThreads)], SIGUSR2);
  for (auto& th : ts) th.join();
  g_max_hist.store(nullptr);
  sigaction(SIGUSR2, &old, nullptr);
  const uint64_t sigs = g_max_sigs.load();
  const uint64_t max = sigs ? 7000000 + sigs - 1 : uint64_t{kEach} * kThreads - 1;
  const std::string t = h->print("");
  EXPECT_NE(t.find("hitcount: " + std::string(10 - std::to_string(kThreads * kEach + sigs).size(), ' ') +
                   std::to_string(kThreads * kEach + sigs) +
                   "\n\tmax: " + std::string(10 - std::to_string(max).size(), ' ') + std::to_string(max)),
            std::string::npos)
      << t;
  // The saved field: twice some value written, at most twice the max.
  const size_t at = t.find("bytes_alloc: ");
  ASSERT_NE(at, std::string::npos) << t;
  const uint64_t saved = std::stoull(t.substr(at + 13));
  EXPECT_EQ(saved % 2, 0u) << t;
  EXPECT_LE(saved, 2 * max) << t;
  // The kept snapshots: worst first, at most 4, the first the max (the
  // last value of the run that raised it found the list free or was
  // counted as not taken).
  EXPECT_LE(g_snaps.load(), kThreads * kEach + static_cast<int>(sigs));
  EXPECT_NE(t.find("Snapshots taken"), std::string::npos) << t;
}

// Signal handlers interrupting inserts of new keys and inserting the very
// key their thread is inserting, from a high-resolution timer per thread,
// while other threads on the same CPU insert the same keys: no record is
// dropped while the table has room. (A table that claimed a bucket before
// it published the element made the handler, and any thread the scheduler
// ran meanwhile, wait for an inserter that could not go on, then drop.)
std::atomic<Histogram*> g_race_hist{nullptr};
std::atomic<uint64_t> g_race_sigs{0};
thread_local volatile uint64_t t_race_key = 0;
void on_race_signal(int) {
  if (Histogram* h = g_race_hist.load()) {
    kmalloc(*h, t_race_key, 1);
    g_race_sigs.fetch_add(1);
  }
}

TEST(HistTest, InsertsInterruptedBySignalsAndPreemptionNeverDrop) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(static_cast<size_t>(sched_getcpu()), &one);
  struct sigaction sa = {}, old = {};
  sa.sa_handler = &on_race_signal;
  sa.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  constexpr int kThreads = 3, kRounds = 200, kKeys = 3000;
  uint64_t total_sigs = 0;
  for (int round = 0; round < kRounds; ++round) {
    auto h = make(kmalloc_desc(), "hist:keys=bytes_req:vals=bytes_alloc:size=4096");
    g_race_sigs = 0;
    g_race_hist = h.get();
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        sigevent sev = {};
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = SIGUSR1;
        sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
        timer_t timer;
        ASSERT_EQ(timer_create(CLOCK_MONOTONIC, &sev, &timer), 0);
        const long ns = 20000 + 7000 * t;
        const itimerspec every{{0, ns}, {0, ns}}, off{};
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        timer_settime(timer, 0, &every, nullptr);
        for (int i = 0; i < kKeys; ++i) {
          t_race_key = static_cast<uint64_t>((i + t * 1000) % kKeys);
          kmalloc(*h, t_race_key, 2);
        }
        timer_settime(timer, 0, &off, nullptr);
        timer_delete(timer);
      });
    for (auto& th : ts) th.join();
    g_race_hist = nullptr;
    const uint64_t hits = uint64_t{kThreads} * kKeys + g_race_sigs.load();
    total_sigs += g_race_sigs.load();
    const std::string text = h->print("");
    ASSERT_NE(text.find("Hits: " + std::to_string(hits) + "\n    Entries: " + std::to_string(kKeys) +
                        "\n    Dropped: 0\n"),
              std::string::npos)
        << "round " << round << ":\n"
        << text.substr(text.find("Totals"));
  }
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_GT(total_sigs, uint64_t{kRounds} * 10);  // the handlers did interrupt inserts
}

TEST(HistMalformedTest, EveryBadCommandWithItsCaret) {
  struct Case {
    const char* cmd;
    const char* message;
    size_t pos;
  };
  const Case cases[] = {
      {"hist", "No keys given", 0},
      {"hist:", "Empty assignment", 5},
      {"hist:vals=bytes_req", "No keys given", 0},
      {"hist:keys=", "Empty assignment", 5},
      {"hist:keys=nosuch", "Couldn't find field", 10},
      {"hist:keys=bytes_req,nosuch", "Couldn't find field", 20},
      {"hist:keys=bytes_req.bogus", "Invalid field modifier", 20},
      {"hist:keys=bytes_req.usecs", "Invalid field modifier", 20},
      {"hist:keys=bytes_req.execname", "Invalid field modifier", 20},
      {"hist:keys=bytes_req.buckets=0", "Invalid field modifier", 20},
      {"hist:keys=bytes_req.hex.log2", "Invalid field modifier", 10},
      {"hist:keys=bytes_req.percent", "Invalid field modifier", 20},
      {"hist:keys=a,b,c,d", "Couldn't find field", 10},
      {"hist:keys=bytes_req,bytes_alloc,ptr,call_site", "Too many keys (3 max)", 36},
      {"hist:keys=bytes_req:vals=nosuch", "Couldn't find field", 25},
      {"hist:keys=bytes_req:sort=nosuch", "Sort field must be a key or a val", 25},
      {"hist:keys=bytes_req:sort=bytes_req.up", "Invalid sort modifier", 35},
      {"hist:keys=bytes_req:sort=hitcount,bytes_req,hitcount", "Too many sort fields (Max = 2)", 44},
      {"hist:keys=bytes_req:sort=", "Empty sort field", 25},
      {"hist:keys=bytes_req:size=64", "Invalid size: 128..131072, rounded up to a power of 2", 25},
      {"hist:keys=bytes_req:size=1000000", "Invalid size: 128..131072, rounded up to a power of 2", 25},
      {"hist:keys=bytes_req:size=12x", "Invalid size: 128..131072, rounded up to a power of 2", 25},
      {"hist:keys=bytes_req:bogus", "Invalid hist attribute", 20},
      {"hist:keys=bytes_req::pause", "Empty assignment", 20},
      {"histo:keys=bytes_req", "Not a hist trigger", 0},
      {"hist:keys=gfp_flags:vals=bytes_req.sym", "Invalid field modifier", 35},
  };
  for (const Case& c : cases) {
    Error err;
    EXPECT_EQ(Histogram::create(kmalloc_desc(), c.cmd, &err), nullptr) << c.cmd;
    EXPECT_EQ(err.message, c.message) << c.cmd;
    EXPECT_EQ(err.pos, c.pos) << c.cmd;
  }
  Error err;
  EXPECT_EQ(Histogram::create(sys_desc(), "hist:keys=id:vals=comm", &err), nullptr);
  EXPECT_EQ(err.message, "String type can not be a value");
}

// The parser's steps (hist_parse.cc) decide which error a command with two
// gets: keys= and vals= fields as their attribute comes, then "No keys
// given", then the sort keys, then the named table. Each caret is a byte of
// the command as given, leading blanks included.
TEST(HistMalformedTest, FirstErrorInCommandOrder) {
  struct Case {
    const char* cmd;
    const char* message;
    size_t pos;
  };
  const Case cases[] = {
      {"hist:keys=nosuch:bogus", "Couldn't find field", 10},
      {"hist:keys=bytes_req:bogus:vals=nosuch", "Invalid hist attribute", 20},
      {"hist:vals=nosuch", "Couldn't find field", 10},
      {"hist:sort=nosuch", "No keys given", 0},
      {"hist:keys=bytes_req:sort=nosuch:vals=nosuch", "Couldn't find field", 37},
      {"hist:keys=bytes_req:sort=nosuch:size=1", "Invalid size: 128..131072, rounded up to a power of 2", 37},
      {"hist:keys=bytes_req:sort=a,b:sort=c", "Too many sort fields (Max = 2)", 34},
      {"hist:keys=bytes_req:keys=nosuch", "Keys already given", 20},
      {"hist:keys=bytes_req:size", "Invalid size: 128..131072, rounded up to a power of 2", 25},
      {"hist:keys=bytes_req:sort", "Empty sort field", 25},
      {"hist:keys=bytes_req:name", "Empty assignment", 20},
      {"hist:keys=bytes_req..hex", "Invalid field modifier", 20},
      {"hist:keys=.hex", "Empty field name", 10},
      {"hist:keys=bytes_req:sort=bytes_req.log2.descending", "Sort field must be a key or a val", 25},
      {"  hist:keys=nosuch", "Couldn't find field", 12},
      {" \thistogram", "Not a hist trigger", 2},
  };
  for (const Case& c : cases) {
    Error err;
    EXPECT_EQ(Histogram::create(kmalloc_desc(), c.cmd, &err), nullptr) << c.cmd;
    EXPECT_EQ(err.message, c.message) << c.cmd;
    EXPECT_EQ(err.pos, c.pos) << c.cmd;
  }
  // A sort key may name a value given after it.
  EXPECT_EQ(make(kmalloc_desc(), "hist:sort=bytes_alloc.descending:keys=bytes_req:vals=bytes_alloc")
                ->trigger_text(""),
            "hist:keys=bytes_req:vals=hitcount,bytes_alloc:sort=bytes_alloc.descending:size=2048 [active]");
  auto a = make(kmalloc_desc(), "hist:name=order:keys=bytes_req");
  Error err;
  EXPECT_EQ(Histogram::create(kmalloc_desc(), "  hist:name=order:keys=bytes_alloc", &err), nullptr);
  EXPECT_EQ(err.message, "Named hist trigger doesn't match existing named trigger (includes variables)");
  EXPECT_EQ(err.pos, 2u);
  // A bad command is refused before its name is looked at.
  EXPECT_EQ(Histogram::create(kmalloc_desc(), "hist:name=order:keys=bytes_req:size=1", &err), nullptr);
  EXPECT_EQ(err.message, "Invalid size: 128..131072, rounded up to a power of 2");
}

}  // namespace
}  // namespace usrtrace::hist
