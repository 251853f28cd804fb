// The latency tracers with injected latencies: one section (or wake-up, or
// timer) made long on purpose among many short ones must be the one kept,
// with exactly its own events, and the latency reported must lie between
// what the test itself measured inside and outside the section.
#include "latency/latency.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/sys.h"
#include "clock/trace_clock.h"
#include "function/control.h"
#include "instance/instance.h"
#include "testing/instance_fixture.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"
#include "usrtrace/latency.h"

USRTRACE_EVENT(lattest, step, (uint32_t, id)(uint32_t, seq), "id=%u seq=%u", REC->id, REC->seq)

namespace usrtrace::latency {
namespace {

std::string rd(const std::string& path) {
  std::string out;
  EXPECT_GE(tracefs::read_file(path, &out), 0) << path;
  return out;
}
long wr(const std::string& path, std::string_view text) { return tracefs::write_file(path, text, false); }

std::string writers_comm() {
  char name[17] = {};
  prctl(PR_GET_NAME, name);
  return name;
}

uint64_t num(const std::string& path) { return std::stoull(rd(path)); }

// TSC ticks as microseconds (the calibration the tracer uses).
double ticks_us(uint64_t ticks) {
  const clock::TscCalibration& c = clock::tsc_calibration();
  return static_cast<double>(ticks) * static_cast<double>(c.mult) / 4294967296.0 / 1000.0;
}

void spin_us(uint64_t us) {
  const uint64_t end =
      clock::rdtsc() + static_cast<uint64_t>(static_cast<double>(us) / ticks_us(1000000) * 1000000.0);
  while (clock::rdtsc() < end) {
  }
}

// The (id, seq) of every lattest:step line of a trace text.
std::vector<std::pair<unsigned, unsigned>> steps(const std::string& text) {
  std::vector<std::pair<unsigned, unsigned>> out;
  static const std::regex re("step: id=([0-9]+) seq=([0-9]+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stoul((*it)[1]), std::stoul((*it)[2]));
  return out;
}

// The "latency: N us" of a latency header.
long header_latency(const std::string& text) {
  std::smatch m;
  static const std::regex re("# latency: ([0-9]+) us");
  return std::regex_search(text, m, re) ? std::stol(m[1]) : -1;
}

// One measured section: what the test saw inside and around it.
struct Seen {
  double inner_us = 0, outer_us = 0;
};

// A section of `kind` with three step events, spinning `spin` us inside.
[[gnu::noinline]] Seen run_section(usrtrace_section_kind* kind, unsigned id, uint64_t spin) {
  const uint64_t t0 = clock::rdtsc();
  const uint64_t tok = usrtrace_section_begin(kind);
  const uint64_t t1 = clock::rdtsc();
  for (unsigned seq = 0; seq < 3; ++seq) {
    trace_lattest_step(id, seq);
    if (seq == 1 && spin != 0) spin_us(spin);
  }
  const uint64_t t2 = clock::rdtsc();
  usrtrace_section_end(kind, tok);
  const uint64_t t3 = clock::rdtsc();
  return {ticks_us(t2 - t1), ticks_us(t3 - t0)};
}

// Every test runs on the top instance and on a new one.
class LatencyTest : public testing::InstanceTest {
 protected:
  void SetUp() override {
    InstanceTest::SetUp();
    if (HasFatalFailure()) return;
    inst_ = inst();
    ASSERT_GT(wr(p("events/lattest/enable"), "1"), 0);
  }
  void TearDown() override {
    wr(p("current_tracer"), "nop");
    InstanceTest::TearDown();
  }
  std::string p(const std::string& file) const { return path(file); }
  instance::Instance* inst_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(TopAndNew, LatencyTest, ::testing::Values("", "lat"), testing::top_or_new);

// Never called: its kind is registered when the program loads, so a tracer
// can be set for it before the first such section runs (as `usrtrace record`
// sets tracing up before main()).
[[gnu::noinline]] void never_run() { USRTRACE_SECTION("lt_never_run"); }

TEST_P(LatencyTest, ASectionsKindExistsFromTheStart) {
  EXPECT_NE(rd(p("available_tracers")).find(" section_lt_never_run "), std::string::npos)
      << rd(p("available_tracers"));
  EXPECT_GT(wr(p("current_tracer"), "section_lt_never_run"), 0);
  (void)&never_run;
}

// No instance involved: the kinds are the process's.
TEST(LatencyKindTest, AKindShowsAsATracerAndIsFreeWhileUnwatched) {
  usrtrace_section_kind* k = usrtrace_section_kind_get("lt_free");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(usrtrace_section_kind_get("lt_free"), k);  // one kind per name
  EXPECT_NE(rd("available_tracers").find(" section_lt_free "), std::string::npos) << rd("available_tracers");
  EXPECT_EQ(k->watched.load(), 0u);
  EXPECT_EQ(usrtrace_section_begin(k), 0u);  // no tracer: nothing measured
  errno = 0;
  EXPECT_EQ(usrtrace_section_kind_get("has space"), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(usrtrace_section_kind_get("much_too_long_a_kind_name_x"), nullptr);
  EXPECT_EQ(usrtrace_section_kind_get(""), nullptr);
}

TEST_P(LatencyTest, TheLongestSectionIsKeptWithExactlyItsEvents) {
  usrtrace_section_kind* k = usrtrace_section_kind_get("lt_lock");
  ASSERT_NE(k, nullptr);
  ASSERT_GT(wr(p("current_tracer"), "section_lt_lock"), 0);
  EXPECT_EQ(rd(p("current_tracer")), "section_lt_lock\n");
  EXPECT_NE(k->watched.load() & (uint64_t{1} << inst_->slot()), 0u);
  EXPECT_EQ(num(p("tracing_max_latency")), 0u);
  EXPECT_EQ(rd(p("options/latency-format")), "1\n");  // set by the tracer, as irqsoff does

  constexpr unsigned kLong = 137;
  std::vector<Seen> seen;
  for (unsigned id = 0; id < 300; ++id) seen.push_back(run_section(k, id, id == kLong ? 3000 : 0));

  const uint64_t max_us = num(p("tracing_max_latency"));
  const std::string trace = rd(p("trace"));
  const auto st = steps(trace);
  if (getenv("LT_SHOW")) fputs(trace.c_str(), stderr);
  ASSERT_EQ(st.size(), 3u) << trace;
  const unsigned kept = st[0].first;
  for (unsigned seq = 0; seq < 3; ++seq) EXPECT_EQ(st[seq], std::make_pair(kept, seq)) << trace;
  // The kept section's latency lies between what the test saw inside it and
  // around it (rounded down to microseconds), and no other section was
  // longer inside than it.
  EXPECT_LE(seen[kept].inner_us, static_cast<double>(max_us) + 1.0);
  EXPECT_GE(seen[kept].outer_us + 1.0, static_cast<double>(max_us));
  for (unsigned id = 0; id < seen.size(); ++id)
    EXPECT_LE(seen[id].inner_us, static_cast<double>(max_us) + 1.0) << id;
  // The injected one unless another was stretched as long (a preemption).
  bool rival = false;
  for (unsigned id = 0; id < seen.size(); ++id)
    rival |= id != kLong && seen[id].outer_us >= seen[kLong].inner_us;
  if (!rival) {
    EXPECT_EQ(kept, kLong);
  }
  EXPECT_GE(max_us, 3000u);

  // The kernel's latency header.
  EXPECT_NE(trace.find("# tracer: section_lt_lock\n"), std::string::npos) << trace;
  EXPECT_NE(trace.find("# section_lt_lock latency trace v1.1.5 on "), std::string::npos) << trace;
  EXPECT_EQ(header_latency(trace), static_cast<long>(max_us)) << trace;
  EXPECT_NE(trace.find(", #3/3, CPU#"), std::string::npos) << trace;
  const std::string task =
      "| task: " + writers_comm() + "-" + std::to_string(base::gettid_cached()) + " (uid:";
  EXPECT_NE(trace.find(task), std::string::npos) << trace;
  EXPECT_NE(trace.find("#  => started at: "), std::string::npos) << trace;
  EXPECT_NE(trace.find("run_section"), std::string::npos) << trace;  // both ends are in it
}

TEST_P(LatencyTest, SectionsNestPerKindAndAcrossKindsForTheSectionTracer) {
  usrtrace_section_kind* a = usrtrace_section_kind_get("lt_outer");
  usrtrace_section_kind* b = usrtrace_section_kind_get("lt_inner");
  ASSERT_GT(wr(p("current_tracer"), "section"), 0);
  // lt_outer [ step 1, lt_inner [ step 2, spin, lt_outer again [ step 3 ] ], step 4 ]
  const uint64_t t0 = clock::rdtsc();
  const uint64_t ta = usrtrace_section_begin(a);
  const uint64_t t1 = clock::rdtsc();
  trace_lattest_step(1, 0);
  const uint64_t tb = usrtrace_section_begin(b);
  trace_lattest_step(2, 0);
  spin_us(1500);
  const uint64_t ta2 = usrtrace_section_begin(a);
  trace_lattest_step(3, 0);
  usrtrace_section_end(a, ta2);  // the inner lt_outer: not an end of the outer one
  usrtrace_section_end(b, tb);
  trace_lattest_step(4, 0);
  const uint64_t t2 = clock::rdtsc();
  usrtrace_section_end(a, ta);
  const uint64_t t3 = clock::rdtsc();
  const std::string trace = rd(p("trace"));
  const auto st = steps(trace);
  ASSERT_EQ(st.size(), 4u) << trace;
  for (unsigned i = 0; i < 4; ++i) EXPECT_EQ(st[i].first, i + 1);
  const double max_us = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_LE(ticks_us(t2 - t1), max_us + 1.0);
  EXPECT_GE(ticks_us(t3 - t0) + 1.0, max_us);
  EXPECT_NE(trace.find("# tracer: section\n"), std::string::npos);

  // section_lt_inner measures only the inner one: step 2 and 3.
  ASSERT_GT(wr(p("current_tracer"), "section_lt_inner"), 0);
  const uint64_t tc = usrtrace_section_begin(a);
  trace_lattest_step(1, 1);
  const uint64_t t4 = clock::rdtsc();
  const uint64_t td = usrtrace_section_begin(b);
  const uint64_t t5 = clock::rdtsc();
  trace_lattest_step(2, 1);
  spin_us(500);
  const uint64_t t6 = clock::rdtsc();
  usrtrace_section_end(b, td);
  const uint64_t t7 = clock::rdtsc();
  trace_lattest_step(3, 1);
  spin_us(2000);
  usrtrace_section_end(a, tc);
  const auto st2 = steps(rd(p("trace")));
  ASSERT_EQ(st2.size(), 1u);
  EXPECT_EQ(st2[0], std::make_pair(2u, 1u));
  // The inner section's length, bounded by the stamps taken around its
  // begin and end (not by how long the spin took: a loaded machine
  // preempts it), which the outer one exceeds by its own 2000 us spin.
  const double inner_us = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_LE(ticks_us(t6 - t5), inner_us + 1.0);
  EXPECT_GE(ticks_us(t7 - t4) + 1.0, inner_us);
}

TEST_P(LatencyTest, ThreshKeepsEverySectionOverIt) {
  usrtrace_section_kind* k = usrtrace_section_kind_get("lt_req");
  ASSERT_GT(wr(p("snapshot_ring_size"), "8"), 0);
  ASSERT_GT(wr(p("tracing_thresh"), "1000"), 0);
  ASSERT_GT(wr(p("current_tracer"), "section_lt_req"), 0);
  const std::set<unsigned> injected{20, 50, 90};
  std::vector<Seen> seen;
  for (unsigned id = 0; id < 120; ++id) seen.push_back(run_section(k, id, injected.count(id) ? 1600 : 0));
  // Every kept max trace holds one section; newest first.
  std::vector<unsigned> kept;
  for (int age = 0; age < 8; ++age) {
    const std::string text = rd(p(age == 0 ? "snapshot" : "snapshot." + std::to_string(age)));
    const auto st = steps(text);
    if (st.empty()) continue;
    ASSERT_EQ(st.size(), 3u) << text;
    kept.insert(kept.begin(), st[0].first);
  }
  // The injected ones, and perhaps one a preemption stretched past the
  // threshold, never one the test saw shorter than it.
  for (unsigned id : injected) EXPECT_NE(std::find(kept.begin(), kept.end(), id), kept.end()) << id;
  for (unsigned id : kept) EXPECT_GE(seen[id].outer_us + 1.0, 1000.0) << id;
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
  EXPECT_EQ(inst_->snapshots().taken(), kept.size());
  // tracing_max_latency is the last one's (the kernel's, with a threshold).
  const double last = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_LE(seen[kept.back()].inner_us, last + 1.0);
  EXPECT_GE(seen[kept.back()].outer_us + 1.0, last);
  ASSERT_GT(wr(p("tracing_thresh"), "0"), 0);
}

TEST_P(LatencyTest, WritingTheMaxRestartsTheSearch) {
  usrtrace_section_kind* k = usrtrace_section_kind_get("lt_frame");
  ASSERT_GT(wr(p("current_tracer"), "section_lt_frame"), 0);
  const Seen s1 = run_section(k, 1, 3000);
  EXPECT_GE(num(p("tracing_max_latency")), 3000u);
  const Seen s2 = run_section(k, 2, 500);
  // Not a new max, unless a preemption stretched the 500 us spin past the
  // first section (seen under load): then it must be.
  const unsigned kept = steps(rd(p("trace")))[0].first;
  if (s2.outer_us < s1.inner_us)
    EXPECT_EQ(kept, 1u);
  else if (s2.inner_us > s1.outer_us + 1.0)
    EXPECT_EQ(kept, 2u);
  else
    EXPECT_TRUE(kept == 1u || kept == 2u) << kept;
  ASSERT_GT(wr(p("tracing_max_latency"), "0"), 0);
  EXPECT_EQ(num(p("tracing_max_latency")), 0u);
  const Seen s = run_section(k, 3, 500);
  const uint64_t now = num(p("tracing_max_latency"));
  EXPECT_LE(s.inner_us, static_cast<double>(now) + 1.0);
  EXPECT_GE(s.outer_us + 1.0, static_cast<double>(now));
  EXPECT_EQ(steps(rd(p("trace")))[0].first, 3u);
  // A bar written by hand: a section under it is not kept.
  ASSERT_GT(wr(p("tracing_max_latency"), "100000"), 0);
  run_section(k, 4, 200);
  EXPECT_EQ(steps(rd(p("trace")))[0].first, 3u);
  EXPECT_EQ(num(p("tracing_max_latency")), 100000u);
  // Truncating `trace` empties the max trace (the kernel's max buffer).
  std::unique_ptr<tracefs::File> f;
  ASSERT_EQ(tracefs::open(p("trace"), O_WRONLY | O_TRUNC, &f), 0);
  f.reset();
  EXPECT_TRUE(steps(rd(p("trace"))).empty());
}

TEST_P(LatencyTest, TheMaxBufferIsBusyAndTheClockMustBeTsc) {
  usrtrace_section_kind_get("lt_busy");
  ASSERT_GT(wr(p("trace_clock"), "mono"), 0);
  EXPECT_EQ(wr(p("current_tracer"), "section_lt_busy"), -EINVAL);
  EXPECT_NE(rd(p("error_log")).find("Latency tracers need a TSC trace_clock"), std::string::npos);
  ASSERT_GT(wr(p("trace_clock"), "local"), 0);
  ASSERT_GT(wr(p("current_tracer"), "section_lt_busy"), 0);
  EXPECT_EQ(wr(p("snapshot"), "1"), -EBUSY);
  EXPECT_EQ(wr(p("snapshot"), "0"), -EBUSY);
  EXPECT_EQ(wr(p("snapshot_enabled"), "0"), -EBUSY);  // the max buffer stays
  EXPECT_EQ(rd(p("snapshot_enabled")), "1\n");
  EXPECT_EQ(wr(p("trace_clock"), "mono"), -EBUSY);
  EXPECT_EQ(wr(p("trace_clock"), "global") > 0, true);  // another TSC clock is fine
  EXPECT_NE(rd(p("error_log")).find("A latency tracer uses the max buffer"), std::string::npos);
  EXPECT_EQ(wr(p("current_tracer"), "section_lt_nosuchkind"), -EINVAL);
  EXPECT_EQ(rd(p("current_tracer")), "section_lt_busy\n");
  // Back to nop: the snapshot file is the user's again, latency-format off.
  ASSERT_GT(wr(p("current_tracer"), "nop"), 0);
  EXPECT_EQ(rd(p("options/latency-format")), "0\n");
  EXPECT_GT(wr(p("snapshot"), "1"), 0);
}

TEST_P(LatencyTest, FunctionTraceAndEventsRecordMeanwhile) {
  usrtrace_section_kind* k = usrtrace_section_kind_get("lt_fn");
  ASSERT_GT(wr(p("current_tracer"), "section_lt_fn"), 0);
  EXPECT_EQ(rd(p("options/function-trace")), "1\n");
  EXPECT_EQ(function::tracer(*inst_), function::Tracer::kFunction);
  ASSERT_GT(wr(p("options/function-trace"), "0"), 0);
  EXPECT_EQ(function::tracer(*inst_), function::Tracer::kNop);
  EXPECT_EQ(rd(p("current_tracer")), "section_lt_fn\n");
  run_section(k, 7, 100);
  // The live buffer goes on: trace_pipe reads it (empty after the swap, then
  // the events that came since).
  trace_lattest_step(99, 0);
  std::string pipe;
  std::unique_ptr<tracefs::File> f;
  ASSERT_EQ(tracefs::open(p("trace_pipe"), O_RDONLY | O_NONBLOCK, &f), 0);
  char buf[4096];
  long n = 0;
  while ((n = f->read(buf, sizeof buf)) > 0) pipe.append(buf, static_cast<size_t>(n));
  const auto st = steps(pipe);
  ASSERT_FALSE(st.empty()) << pipe;
  EXPECT_EQ(st.back().first, 99u);
}

// wakeup: the notifier holds the mutex for a while after notifying, so the
// woken thread runs that much later.
struct Pair {
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
};

// One round: a waiter thread waits, the notifier notifies then holds the
// mutex `hold` us. Returns what the test saw from notify to the waiter
// running (outer bound) and the hold (inner bound).
Seen wake_round(uint64_t hold, int policy) {
  Pair pr;
  std::atomic<bool> waiting{false};
  std::atomic<uint64_t> woke{0};
  std::thread waiter([&] {
    if (policy != SCHED_OTHER) {
      sched_param sp{};
      sp.sched_priority = 1;
      pthread_setschedparam(pthread_self(), policy, &sp);
    }
    std::unique_lock<std::mutex> l(pr.mu);
    const uint64_t tok = usrtrace_wait_begin(&pr.cv);
    waiting = true;
    pr.cv.wait(l, [&] { return pr.ready; });
    usrtrace_wait_end(&pr.cv, tok);
    woke = clock::rdtsc();
  });
  while (!waiting) std::this_thread::yield();
  uint64_t t0, t1, t2;
  {
    std::lock_guard<std::mutex> l(pr.mu);  // the waiter is in wait() once this is free
    pr.ready = true;
    t0 = clock::rdtsc();
    usrtrace_wake(&pr.cv);
    t1 = clock::rdtsc();
    pr.cv.notify_one();
    spin_us(hold);
    t2 = clock::rdtsc();
  }
  waiter.join();
  return {ticks_us(t2 - t1), ticks_us(woke - t0)};
}

TEST_P(LatencyTest, WakeupKeepsTheLongestWakeToRun) {
  ASSERT_GT(wr(p("current_tracer"), "wakeup"), 0);
  std::vector<Seen> seen;
  for (int i = 0; i < 20; ++i) seen.push_back(wake_round(i == 11 ? 3000 : 0, SCHED_OTHER));
  const double max_us = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_GE(max_us + 1.0, seen[11].inner_us);
  double outer = 0;
  for (const Seen& s : seen) outer = std::max(outer, s.outer_us);
  EXPECT_LE(max_us, outer + 1.0);
  const std::string trace = rd(p("trace"));
  EXPECT_NE(trace.find("# tracer: wakeup\n"), std::string::npos) << trace;
  EXPECT_EQ(header_latency(trace), static_cast<long>(max_us));
}

TEST_P(LatencyTest, WakeupMeasuresTheFutexWrappers) {
  ASSERT_GT(wr(p("current_tracer"), "wakeup"), 0);
  uint32_t word = 0;
  std::atomic<int> tid{0};
  std::atomic<uint64_t> woke{0};
  std::thread waiter([&] {
    tid = base::gettid_cached();
    while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) == 0) usrtrace_futex_wait(&word, 0, nullptr);
    woke = clock::rdtsc();
  });
  while (tid == 0) std::this_thread::yield();
  // Woken only once it sleeps in the kernel (else the wait would not block).
  const std::string stat = "/proc/self/task/" + std::to_string(tid.load()) + "/stat";
  for (;;) {
    FILE* f = fopen(stat.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[512] = {};
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    const char* cp = strrchr(buf, ')');
    if (n > 0 && cp != nullptr && cp[1] == ' ' && cp[2] == 'S') break;
    std::this_thread::yield();
  }
  const uint64_t t0 = clock::rdtsc();
  __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
  EXPECT_GE(usrtrace_futex_wake(&word, 1), 0);
  waiter.join();
  const double max_us = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_LE(max_us, ticks_us(woke - t0) + 1.0);
  const std::string trace = rd(p("trace"));
  EXPECT_NE(trace.find("# latency: "), std::string::npos) << trace;
  EXPECT_NE(trace.find("| task: "), std::string::npos) << trace;
  EXPECT_EQ(inst_->snapshots().taken(), 1u);  // the one wake-up, measured once
}

TEST_P(LatencyTest, WakeupRtCountsOnlyRealTimeWaiters) {
  ASSERT_GT(wr(p("current_tracer"), "wakeup_rt"), 0);
  wake_round(2000, SCHED_OTHER);
  EXPECT_EQ(num(p("tracing_max_latency")), 0u);
  sched_param sp{};
  sp.sched_priority = 1;
  if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) != 0)
    GTEST_SKIP() << "SCHED_FIFO is not allowed here (needs CAP_SYS_NICE)";
  sp.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
  const Seen s = wake_round(2000, SCHED_FIFO);
  const double max_us = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_GE(max_us + 1.0, s.inner_us);
  EXPECT_LE(max_us, s.outer_us + 1.0);
  const std::string trace = rd(p("trace"));
  EXPECT_NE(trace.find("policy:1 rt_prio:1)"), std::string::npos) << trace;
}

TEST_P(LatencyTest, TimerlatReportsHowLateAThreadWoke) {
  ASSERT_EQ(wr(p("timerlat_period_us"), "50"), -EINVAL);
  ASSERT_GT(wr(p("timerlat_period_us"), "2000"), 0);
  ASSERT_GT(wr(p("current_tracer"), "timerlat"), 0);
  // The program's own periodic thread, woken 40 ms after its deadline
  // (a deadline in the past: clock_nanosleep returns at once).
  timespec due;
  clock_gettime(CLOCK_MONOTONIC, &due);
  due.tv_nsec -= 40000000;
  if (due.tv_nsec < 0) {
    due.tv_nsec += 1000000000;
    due.tv_sec -= 1;
  }
  EXPECT_EQ(usrtrace_timerlat_sleep_until(&due), 0);
  const uint64_t max_us = num(p("tracing_max_latency"));
  EXPECT_GE(max_us, 40000u);
  const std::string trace = rd(p("trace"));
  // The window may hold the tracer's own thread's samples too: the kept
  // one is the latest of them all.
  static const std::regex re("context thread timer_latency +([0-9]+) ns");
  uint64_t worst_ns = 0;
  for (auto it = std::sregex_iterator(trace.begin(), trace.end(), re); it != std::sregex_iterator(); ++it)
    worst_ns = std::max<uint64_t>(worst_ns, std::stoull((*it)[1]));
  EXPECT_EQ(worst_ns / 1000, max_us) << trace;
  EXPECT_EQ(header_latency(trace), static_cast<long>(max_us)) << trace;
  // The tracer's own thread samples too: its lines reach the live buffer.
  std::string pipe;
  std::unique_ptr<tracefs::File> f;
  ASSERT_EQ(tracefs::open(p("trace_pipe"), O_RDONLY, &f), 0);
  char buf[4096];
  while (pipe.find("timerlat-") == std::string::npos) {
    const long n = f->read(buf, sizeof buf);  // blocks until data
    ASSERT_GT(n, 0);
    pipe.append(buf, static_cast<size_t>(n));
  }
  ASSERT_GT(wr(p("current_tracer"), "nop"), 0);  // stops the thread
}

TEST_P(LatencyTest, SigsoffMeasuresBlockedSignals) {
  ASSERT_GT(wr(p("current_tracer"), "sigsoff"), 0);
  // What the preloaded pthread_sigmask hook reports: a block that grows
  // the mask starts it, a return to the mask before ends it; nested
  // blocks inside do neither.
  const uint64_t t0 = clock::rdtsc();
  signals_changed(0x1, 0x3, 0x1000);
  const uint64_t t1 = clock::rdtsc();
  trace_lattest_step(1, 0);
  signals_changed(0x3, 0x7, 0x2000);
  spin_us(1200);
  signals_changed(0x7, 0x3, 0x3000);
  trace_lattest_step(2, 0);
  const uint64_t t2 = clock::rdtsc();
  signals_changed(0x3, 0x1, 0x4000);
  const uint64_t t3 = clock::rdtsc();
  const double max_us = static_cast<double>(num(p("tracing_max_latency")));
  EXPECT_LE(ticks_us(t2 - t1), max_us + 1.0);
  EXPECT_GE(ticks_us(t3 - t0) + 1.0, max_us);
  const auto st = steps(rd(p("trace")));
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, 1u);
  EXPECT_EQ(st[1].first, 2u);
}

}  // namespace
}  // namespace usrtrace::latency
