// trace.dat end to end: the program writes events (every field type,
// several threads and instances, a time extend, absolute time stamps, lost
// events), the recorder writes the file, and the real tools read it:
// trace-cmd report must print what `usrtrace report` prints, libtracecmd
// must give the recorded timestamps and field values, trace-cmd convert to
// v7 and back must change nothing, and TraceFile must give back exactly the
// records the buffers held.
#include "usrtrace/tracedat.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "clock/trace_clock.h"
#include "instance/instance.h"
#include "record/journal.h"
#include "record/recorder.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"
#include "usrtrace/usrtrace.h"

enum class Color : uint8_t { kRed = 1, kBlue = 7 };

USRTRACE_EVENT(tdtest, every,
               (int32_t, thread)(uint32_t, seq)(uint8_t, u8)(int8_t, s8)(uint16_t, u16)(int16_t, s16)(int32_t,
                                                                                                      s32)(
                   uint64_t, u64)(int64_t, s64)(bool, ok)(Color, color)(void*, ptr)(char[12],
                                                                                    name)(const char*, text),
               "thread=%d seq=%u u8=%u s8=%d u16=%u s16=%d s32=%d u64=%llu s64=%lld ok=%d color=%u "
               "ptr=%p name=%s text=%s",
               REC->thread, REC->seq, REC->u8, REC->s8, REC->u16, REC->s16, REC->s32, REC->u64, REC->s64,
               REC->ok, REC->color, REC->ptr, REC->name, __get_str(text))
USRTRACE_EVENT(tdtest, tick, (int32_t, thread)(uint32_t, seq), "thread=%d seq=%u", REC->thread, REC->seq)

namespace usrtrace {
namespace {

using instance::Instance;

struct Proc {
  int rc = -1;
  std::string out;
};

Proc run(const std::string& cmd) {
  Proc r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool have_trace_cmd() {
  return run("trace-cmd --help >/dev/null").rc != 127 && access("/usr/bin/trace-cmd", X_OK) == 0;
}

long wr(const std::string& path, const std::string& text) { return tracefs::write_file(path, text); }

std::string tmpdir() {
  char t[] = "/tmp/usrtrace-tracedat-XXXXXX";
  const char* d = mkdtemp(t);
  return d ? d : "/tmp";
}

// A write to a kernel tracefs file: bytes written, or -errno.
long kwr(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const long rc = n < 0 ? -errno : n;
  close(fd);
  return rc;
}

// The first line where two texts differ, with its number, from both.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream ia(a), ib(b);
  std::string la, lb;
  for (int n = 1;; ++n) {
    const bool ga = static_cast<bool>(std::getline(ia, la)), gb = static_cast<bool>(std::getline(ib, lb));
    if (!ga && !gb) return "(no difference)";
    if (!ga || !gb || la != lb)
      return "line " + std::to_string(n) + ":\n  trace-cmd: " + (ga ? la : "(end)") +
             "\n  usrtrace:  " + (gb ? lb : "(end)");
  }
}

int lines_with(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

void marker_function_for_kallsyms() {}

// The char[12] field: "t<thread>-<seq>" cut to 11 characters, as the event stores it.
std::array<char, 12> name_of(int t, uint32_t i) {
  // Appended, not "t" + to_string(t): g++ 12 -O3 warns of a false overlap in
  // operator+(const char*, string&&) (-Wrestrict; a known false positive).
  const std::string full = std::string("t").append(std::to_string(t)).append("-").append(std::to_string(i));
  std::array<char, 12> name{};
  full.copy(name.data(), name.size() - 1);
  return name;
}

// Writes seq [from, to) of tdtest:every and tdtest:tick from thread `t`.
void write_events(int t, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; ++i) {
    const auto name = name_of(t, i);
    const std::string text = "text " + std::string(i % 7, 'x') + " of " + std::to_string(t);
    trace_tdtest_every(t, i, static_cast<uint8_t>(i), static_cast<int8_t>(-static_cast<int>(i % 100)),
                       static_cast<uint16_t>(1000 + i), static_cast<int16_t>(-1000 - static_cast<int>(i)),
                       -static_cast<int32_t>(i), (1ull << 40) + i, -(1ll << 40) - i, i % 2 == 1,
                       i % 2 ? Color::kRed : Color::kBlue,
                       reinterpret_cast<void*>(&marker_function_for_kallsyms), name.data(), text);
    trace_tdtest_tick(t, i);
  }
}

// The expected field text of tdtest:every as tracecmd_dump prints it.
std::string every_fields(int t, uint32_t i) {
  const auto name = name_of(t, i);
  std::ostringstream o;
  o << " thread=" << t << " seq=" << i << " u8=" << (i & 0xff) << " s8=" << -static_cast<int>(i % 100)
    << " u16=" << 1000 + i << " s16=" << -1000 - static_cast<int>(i) << " s32=" << -static_cast<int64_t>(i)
    << " u64=" << (1ull << 40) + i << " s64=" << -(1ll << 40) - static_cast<int64_t>(i) << " ok=" << (i % 2)
    << " color=" << (i % 2 ? 1 : 7) << " ptr=" << reinterpret_cast<uintptr_t>(&marker_function_for_kallsyms)
    << " name=" << name.data() << " text=text " << std::string(i % 7, 'x') << " of " << t;
  return o.str();
}

struct Expected {
  int cpu;
  uint64_t raw_ts;
  std::vector<uint8_t> bytes;
};

// What an instance's buffer holds now, oldest first (not consumed).
std::vector<Expected> snapshot_of(Instance* inst) {
  std::vector<Expected> out;
  rb::RingBuffer::Iterator it(inst->buffer());
  rb::Event ev;
  while (it.next(&ev)) out.push_back({ev.cpu, ev.ts, std::vector<uint8_t>(ev.data, ev.data + ev.len)});
  return out;
}

class TraceDatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Instance::top(), nullptr);
    dir_ = tmpdir();
    for (const char* n : {"tdt_b", "tdt_ow"}) tracefs::rmdir(std::string("instances/") + n);
    wr("events/enable", "0");
    wr("trace", "");
    ASSERT_EQ(tracefs::mkdir("instances/tdt_b"), 0);
    ASSERT_EQ(tracefs::mkdir("instances/tdt_ow"), 0);
  }
  void TearDown() override {
    wr("events/enable", "0");
    for (const char* n : {"tdt_b", "tdt_ow"}) tracefs::rmdir(std::string("instances/") + n);
    if (!HasFailure()) run("rm -rf " + dir_);
  }
  std::string dir_;
};

// Scenario: three named threads write both events into the top instance,
// tdt_b (absolute time stamps) gets the ticks, tdt_ow (a small buffer in
// overwrite mode) gets far more ticks than it holds; a pause longer than
// 2^27 ns forces time extends; a trace_marker write and a printk with a
// function address. Returns the ticks written to tdt_ow.
int write_scenario() {
  EXPECT_GT(wr("set_event", "tdtest:*"), 0);
  EXPECT_GT(wr("instances/tdt_b/set_event", "tdtest:tick"), 0);
  EXPECT_GT(wr("instances/tdt_ow/set_event", "tdtest:tick"), 0);
  EXPECT_GT(wr("instances/tdt_ow/buffer_size_kb", "8"), 0);
  Instance::find("tdt_b")->buffer().set_time_stamp_abs(true);
  auto batch = [](uint32_t from, uint32_t to) {
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t)
      ts.emplace_back([t, from, to] {
        char n[16];
        snprintf(n, sizeof n, "tdt-worker-%d", t);
        pthread_setname_np(pthread_self(), n);
        cpu_set_t one;  // spread over the CPUs, so that every CPU has data
        CPU_ZERO(&one);
        CPU_SET(static_cast<unsigned>(t) % std::thread::hardware_concurrency(), &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        write_events(t, from, to);
      });
    for (auto& th : ts) th.join();
  };
  batch(0, 300);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // > 2^27 ns: a time extend follows
  batch(300, 400);
  EXPECT_GT(wr("trace_marker", "hello from the marker"), 0);
  usrtrace_array* top = usrtrace_array_get_by_name("");
  EXPECT_GT(usrtrace_array_printk(top, "printk %d", 42), 0);
  usrtrace_array_put(top);
  return 3 * 400;
}

// trace-cmd reads TSC2NSEC's mult into an int and sign-extends it: a TSC
// slower than 2 GHz (1.996 GHz: the CI machines) made every stamp of
// `trace-cmd report` wrap below zero. The mult written stays below 2^31 and
// converts as the calibration does, at 2 GHz and on either side of it.
TEST(Tsc2Nsec, TheMultFitsTraceCmdsIntAtAnyTscFrequency) {
  for (const double ghz : {0.8, 1.0, 1.99625, 2.0, 2.0001, 3.7, 5.2}) {
    SCOPED_TRACE(ghz);
    clock::TscCalibration c{};
    c.tsc0 = 3'000'000'000'000ull;  // 25 minutes of a 2 GHz TSC
    c.ns0 = 1'500'000'000'000ull;
    c.mult = static_cast<uint64_t>(4294967296.0 / ghz);
    const auto t = tracedat::tsc2nsec_from(c);
    ASSERT_NE(t.mult, 0u);
    EXPECT_LE(t.mult, static_cast<uint32_t>(INT32_MAX));
    // trace-cmd's conversion (trace-input.c: mul_u64_u32_shr, then the
    // OFFSET), with the mult as the int it keeps, against the calibration's.
    const int32_t as_int = static_cast<int32_t>(t.mult);
    const uint64_t mul = static_cast<uint64_t>(static_cast<int64_t>(as_int));
    for (const uint64_t dt : {0ull, 1'000'000ull, 7'200'000'000'000ull}) {
      const uint64_t raw = c.tsc0 + dt;
      const uint64_t al = raw & 0xffffffffu, ah = raw >> 32;
      uint64_t ns = (al * mul) >> t.shift;
      if (ah) ns += (ah * mul) << (32 - t.shift);
      ns += static_cast<uint64_t>(t.offset);
      __extension__ typedef unsigned __int128 u128;
      const auto want = c.ns0 + static_cast<uint64_t>((static_cast<u128>(dt) * c.mult) >> 32);
      // A mult below 2^31 rounds by up to 1/2^31 of the cycles elapsed.
      EXPECT_NEAR(static_cast<double>(ns), static_cast<double>(want),
                  2.0 + static_cast<double>(dt) / 2147483648.0)
          << "dt " << dt;
    }
  }
}

TEST_F(TraceDatTest, ExtractGivesBackExactlyWhatTheBuffersHeld) {
  const int ow_written = write_scenario();
  const std::vector<std::string> names = {"", "tdt_b", "tdt_ow"};
  std::vector<std::vector<Expected>> want;
  for (const std::string& n : names) want.push_back(snapshot_of(Instance::find(n)));
  ASSERT_EQ(want[0].size(), 2u * 1200 + 2);
  std::set<int> cpus;
  for (const Expected& e : want[0]) cpus.insert(e.cpu);
  EXPECT_EQ(cpus.size(), std::min(3u, std::thread::hardware_concurrency()));
  ASSERT_EQ(want[1].size(), 1200u);
  ASSERT_LT(want[2].size(), 1200u);  // overwritten
  const uint64_t ow_overrun =
      Instance::find("tdt_ow")->buffer().stats(0).overrun +
      (Instance::find("tdt_ow")->buffer().nr_cpus() > 1 ? Instance::find("tdt_ow")->buffer().stats(1).overrun
                                                        : 0);

  RecordOptions o;
  o.output = dir_ + "/x.dat";
  o.instances = names;
  o.file_version = 6;
  std::string err;
  RecordStats st;
  ASSERT_EQ(extract_trace(o, &err, &st), 0) << err;
  EXPECT_GT(st.pages, 0u);

  auto f = TraceFile::open(o.output, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->version(), 6);
  ASSERT_EQ(f->buffers().size(), 3u);
  EXPECT_EQ(f->buffers()[1].name, "tdt_b");
  const auto tsc = tracedat::tsc2nsec_for(Instance::top()->buffer().clock());
  auto to_ns = [&tsc](uint64_t raw) {  // the file's conversion: ns = raw * mult >> shift + offset
    return ((raw & 0xffffffffu) * tsc.mult >> tsc.shift) + ((raw >> 32) * tsc.mult << (32 - tsc.shift)) +
           static_cast<uint64_t>(tsc.offset);
  };
  // A reader of the file merges the CPUs by ns, lowest CPU first at a tie,
  // as trace-cmd does; two CPUs' raw stamps a cycle apart can share a ns
  // (the in-process iterator merged them by raw stamp). Same order here.
  for (std::vector<Expected>& w : want) {
    std::vector<std::pair<std::tuple<uint64_t, int, size_t>, Expected>> keyed;
    for (size_t i = 0; i < w.size(); ++i) keyed.push_back({{to_ns(w[i].raw_ts), w[i].cpu, i}, w[i]});
    std::sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (size_t i = 0; i < w.size(); ++i) w[i] = keyed[i].second;
  }
  for (size_t b = 0; b < names.size(); ++b) {
    TraceFile::Cursor c(*f, {static_cast<int>(b)});
    TraceFile::Record r;
    std::vector<Expected> got;
    int64_t missed = 0;
    while (c.next(&r)) {
      got.push_back({r.cpu, r.ts, std::vector<uint8_t>(r.data, r.data + r.len)});
      missed += r.missed;
    }
    ASSERT_EQ(got.size(), want[b].size()) << "buffer " << names[b];
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].cpu, want[b][i].cpu) << "buffer " << names[b] << " event " << i;
      ASSERT_EQ(got[i].bytes, want[b][i].bytes) << i;
      // The file's conversion, and within a ns of the trace file's own.
      const uint64_t raw = want[b][i].raw_ts;
      const uint64_t conv = to_ns(raw);
      ASSERT_EQ(got[i].raw_ts, conv) << i;
      const uint64_t ns = clock::raw_to_ns(Instance::top()->buffer().clock(), raw);
      ASSERT_LE(conv > ns ? conv - ns : ns - conv, 1u) << i;
    }
    if (b == 2) {
      EXPECT_EQ(static_cast<uint64_t>(missed), ow_overrun) << "lost events counted in the pages";
      EXPECT_EQ(got.size() + static_cast<uint64_t>(missed), static_cast<uint64_t>(ow_written));
    }
  }
  EXPECT_TRUE(f->warnings().empty());
  // The buffers were consumed.
  EXPECT_TRUE(snapshot_of(Instance::top()).empty());
}

// Streaming: the recorder drains the buffer while the program writes, as
// the buffer_percent watermark is reached, so a run writing many times the
// buffer's size loses nothing in discard mode as long as the recorder keeps
// up; whatever it could not take is counted, never silently lost.
TEST_F(TraceDatTest, StreamingDrainsAtTheWatermarkAndAccountsForEverything) {
  ASSERT_GT(wr("instances/tdt_b/set_event", "tdtest:tick"), 0);
  ASSERT_GT(wr("instances/tdt_b/buffer_size_kb", "16"), 0);
  ASSERT_GT(wr("instances/tdt_b/options/overwrite", "0"), 0);  // discard mode
  ASSERT_GT(wr("instances/tdt_b/buffer_percent", "25"), 0);
  RecordOptions o;
  o.output = dir_ + "/stream.dat";
  o.instances = {"tdt_b"};
  o.compress = true;
  std::string err;
  auto rec = TraceRecorder::start(o, &err);
  ASSERT_TRUE(rec) << err;
  // Fill past the watermark, then wait (bounded) until the recorder took
  // pages while we are still running.
  uint32_t seq = 0;
  for (; seq < 2000; ++seq) trace_tdtest_tick(7, seq);
  for (int i = 0; i < 2000 && rec->stats().pages == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GT(rec->stats().pages, 0u) << "nothing was drained while the program ran";
  // Many buffers' worth, in bursts of about a page (the watermark), each
  // followed by a (bounded) wait until the recorder took a page more.
  for (int burst = 0; burst < 50; ++burst) {
    const uint64_t before = rec->stats().pages;
    for (int k = 0; k < 210; ++k, ++seq) trace_tdtest_tick(7, seq);
    for (int i = 0; i < 2000 && rec->stats().pages == before; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Instance* b = Instance::find("tdt_b");
  uint64_t dropped = 0;
  for (int c = 0; c < b->buffer().nr_cpus(); ++c) dropped += b->buffer().stats(c).dropped_events;
  ASSERT_EQ(rec->stop(&err), 0) << err;
  auto f = TraceFile::open(o.output, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->version(), 7);
  EXPECT_EQ(f->compression(), "zstd");
  ASSERT_EQ(f->buffers().size(), 2u);  // the empty top, and tdt_b
  TraceFile::Cursor c(*f, {1});
  TraceFile::Record r;
  uint64_t n = 0, last = 0;
  bool ordered = true;
  while (c.next(&r)) {
    uint32_t s;
    std::memcpy(&s, r.data + 12, 4);
    if (n > 0 && s <= last) ordered = false;
    last = s;
    ++n;
  }
  EXPECT_TRUE(ordered);
  EXPECT_EQ(n + dropped, seq) << n << " recorded, " << dropped << " dropped";
  EXPECT_GT(n, 50u * 210) << "many buffers' worth was recorded";
  EXPECT_TRUE(f->warnings().empty());
}

TEST_F(TraceDatTest, RecorderErrorsSayWhat) {
  std::string err;
  RecordOptions o;
  o.output = dir_ + "/x.dat";
  auto expect = [&](const RecordOptions& opts, int want, const char* msg) {
    err.clear();
    EXPECT_EQ(TraceRecorder::start(opts, &err), nullptr);
    EXPECT_NE(err.find(msg), std::string::npos) << err;
    err.clear();
    EXPECT_EQ(extract_trace(opts, &err), -want);
    EXPECT_NE(err.find(msg), std::string::npos) << err;
  };
  RecordOptions bad = o;
  bad.instances = {"nosuch"};
  expect(bad, ENOENT, "no instance 'nosuch'");
  bad = o;
  bad.file_version = 5;
  expect(bad, EINVAL, "file version must be 6 or 7");
  bad = o;
  bad.file_version = 6;
  bad.compress = true;
  expect(bad, EINVAL, "compression needs file version 7");
  bad = o;
  bad.instances = {"tdt_b", "tdt_b"};
  expect(bad, EINVAL, "given twice");
  bad = o;
  bad.kernel_events = {"sched:sched_switch"};  // record -K is from outside the process only
  expect(bad, EINVAL, "kernel events");
  bad = o;
  bad.output = dir_ + "/no/such/dir/x.dat";
  expect(bad, ENOENT, "/no/such/dir: No such file or directory");
  // What the output would fail at in the end fails at the start.
  bad.output = dir_;
  expect(bad, EISDIR, "a directory, not a regular file");
  bad.output = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(bad.output.c_str(), 0600), 0);
  expect(bad, EINVAL, "a FIFO, not a regular file");
  bad.output = dir_ + "/";
  expect(bad, EINVAL, "no output file name");
  // A recorded instance cannot be removed while it is recorded.
  auto rec = TraceRecorder::start(
      [&] {
        RecordOptions r = o;
        r.instances = {"tdt_b"};
        return r;
      }(),
      &err);
  ASSERT_TRUE(rec) << err;
  EXPECT_EQ(tracefs::rmdir("instances/tdt_b"), -EBUSY);
  EXPECT_EQ(rec->stop(&err), 0) << err;
  EXPECT_EQ(access(o.output.c_str(), R_OK), 0);
}

// The output is written beside itself and renamed over: a full disk leaves
// the previous file as it was, and no half-written file behind (before:
// O_TRUNC first, then a torn file). A small tmpfs is the disk, in two
// sizes: one that the recorded pages do not fit in (the staging files
// fail), one that they fit in but not the output as well (the output's
// write fails: what O_TRUNC used to turn into a lost previous file). Either
// way the pages taken are kept in the recording's journal, from which the
// trace.dat is made once there is room.
TEST_F(TraceDatTest, AFullDiskKeepsThePreviousOutputWhole) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  std::string size_kb;
  ASSERT_GE(tracefs::read_file("buffer_size_kb", &size_kb), 0);
  struct Restore {
    std::string kb;
    ~Restore() { wr("buffer_size_kb", kb); }
  } restore{size_kb};
  ASSERT_GT(wr("buffer_size_kb", "8192"), 0);
  auto fill = [] {
    for (int i = 0; i < 60000; ++i)
      ASSERT_GT(wr("trace_marker", "a marker that fills the disk " + std::to_string(i)), 0);
  };
  // The size of this recording's file, on a disk with room.
  fill();
  RecordOptions probe;
  probe.output = dir_ + "/probe.dat";
  std::string err;
  RecordStats st;
  ASSERT_EQ(extract_trace(probe, &err, &st), 0) << err;
  struct stat ps;
  ASSERT_EQ(stat(probe.output.c_str(), &ps), 0);
  // The second size holds the journal (the pages, and the metadata twice:
  // at the start and at the end) and half the metadata more, not the output
  // as well: the metadata (kallsyms of this binary, larger under a
  // sanitizer) must leave room for tmpfs's rounding.
  const uint64_t meta = static_cast<uint64_t>(ps.st_size) - st.bytes;
  ASSERT_GE(meta, 64u * 1024) << "too little metadata for the second size to fit the journal with room";
  // The first holds the metadata and half the pages.
  const uint64_t pages_do_not_fit = (meta + st.bytes / 2) / 1024,
                 output_does_not_fit = (st.bytes + meta * 5 / 2) / 1024;
  for (const uint64_t kb : {pages_do_not_fit, output_does_not_fit}) {
    SCOPED_TRACE("a tmpfs of " + std::to_string(kb) + " KiB");
    const std::string mnt = dir_ + "/small" + std::to_string(kb);
    ASSERT_EQ(mkdir(mnt.c_str(), 0700), 0);
    if (run("mount -t tmpfs -o size=" + std::to_string(kb) + "k tmpfs " + mnt).rc != 0)
      GTEST_SKIP() << "cannot mount a tmpfs";
    struct Unmount {
      std::string m;
      ~Unmount() { run("umount " + m); }
    } unmount{mnt};
    const std::string out = mnt + "/trace.dat";
    {
      std::ofstream f(out);
      f << "the previous recording";
    }
    fill();
    RecordOptions o;
    o.output = out;
    EXPECT_EQ(extract_trace(o, &err), -ENOSPC) << err;
    EXPECT_NE(err.find(out + ", if any, is unchanged"), std::string::npos) << err;
    EXPECT_EQ(err.find("writing the recorded pages") == std::string::npos, kb == output_does_not_fit) << err;
    {
      std::ifstream f(out);
      std::string text((std::istreambuf_iterator<char>(f)), {});
      EXPECT_TRUE(text == "the previous recording")
          << "the previous file was replaced: " << text.size() << " bytes";
    }
    // What was taken is kept in the journal, which the error names; once
    // there is room, it gives the trace.dat back: every marker in it whole,
    // each CPU's in the order they were written.
    const size_t at = err.find("`usrtrace recover "), end = err.find('`', at + 1);
    ASSERT_NE(at, std::string::npos) << err;
    const std::string journal = err.substr(at + 18, end - at - 18);
    // Beside the output, only the journal and its page files (JOURNAL.S.C).
    const std::string jname = journal.substr(mnt.size() + 1);
    std::vector<std::string> page_files;
    bool have_journal = false;
    std::istringstream ls(run("ls -A " + mnt).out);
    for (std::string name; std::getline(ls, name);) {
      if (name == "trace.dat") continue;
      if (name == jname) {
        have_journal = true;
        continue;
      }
      EXPECT_EQ(name.rfind(jname + ".", 0), 0u) << name << ": neither the output nor of the journal";
      page_files.push_back(mnt + "/" + name);
    }
    EXPECT_TRUE(have_journal);
    ASSERT_EQ(run("mount -o remount,size=" + std::to_string(kb * 8) + "k " + mnt).rc, 0);
    const int jfd = ::open(journal.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(jfd, 0);
    tracedat::Journal j;
    ASSERT_EQ(tracedat::read_journal(jfd, &j, &err), 0) << err;
    EXPECT_EQ(j.output, out);
    EXPECT_GT(j.pages, 0u);
    ASSERT_EQ(tracedat::write_from_journal(j, j.output, {}, &err), 0) << err;
    ::close(jfd);
    auto f = TraceFile::open(out, &err);
    ASSERT_TRUE(f) << err;
    TraceFile::Cursor c(*f, {0});
    TraceFile::Record r;
    std::map<int, long> last;  // per CPU
    std::set<long> seen;
    while (c.next(&r)) {
      const std::string_view data(reinterpret_cast<const char*>(r.data), r.len);
      const size_t m = data.find("fills the disk ");
      if (m == std::string_view::npos) continue;
      const long n = std::strtol(std::string(data.substr(m + 15, 12)).c_str(), nullptr, 10);
      auto it = last.find(r.cpu);
      if (it != last.end()) {
        EXPECT_GT(n, it->second) << "CPU " << r.cpu;
      }
      last[r.cpu] = n;
      EXPECT_TRUE(seen.insert(n).second) << n;
    }
    if (kb == pages_do_not_fit) {
      EXPECT_GT(seen.size(), 1000u) << "the journal's pages did not come back";
      EXPECT_LT(seen.size(), 60000u) << "more than fit on the disk";
    } else {
      EXPECT_EQ(seen.size(), 60000u) << "the journal held every page";
    }
    ::unlink(journal.c_str());
    for (const std::string& p : page_files) ::unlink(p.c_str());
    wr("trace", "");
  }
}

#ifdef USRTRACE_CLI
TEST_F(TraceDatTest, TraceCmdPrintsWhatUsrtraceReportPrints) {
  if (!have_trace_cmd()) GTEST_SKIP() << "trace-cmd is not installed (apt-get install trace-cmd)";
  const std::string u = USRTRACE_CLI;
  auto same = [&](const std::string& opts, const std::string& file) {
    SCOPED_TRACE(opts + " " + file);
    const Proc t = run("trace-cmd report " + opts + " " + file);
    const Proc m = run(u + " report " + opts + " " + file);
    ASSERT_EQ(t.rc, 0) << t.out.substr(0, 2000);
    ASSERT_EQ(m.rc, 0) << m.out.substr(0, 2000);
    EXPECT_TRUE(t.out == m.out) << "trace-cmd and usrtrace report differ (" << t.out.size() << " and "
                                << m.out.size() << " bytes); run them on " << file;
    EXPECT_EQ(t.out.find("UNKNOWN"), std::string::npos);
    EXPECT_EQ(t.out.find("FAILED TO PARSE"), std::string::npos);
  };
  // One buffer: every report option. (trace-cmd 3.1.6 applies --cpu to the
  // top buffer only and crashes on -F when a file has instances.)
  write_scenario();
  RecordOptions o;
  o.output = dir_ + "/one.dat";
  o.file_version = 6;
  std::string err;
  ASSERT_EQ(extract_trace(o, &err), 0) << err;
  for (const char* opts :
       {"", "-l", "-t", "-R", "--cpu 0", "--cpu 1", "-F tdtest/tick",
        "-F 'tdtest/every: seq > 390 && thread != 1'", "-F 'every: u16 >= 1390 || thread == 2'"})
    same(opts, o.output);
  {
    const Proc t = run("trace-cmd report --stat " + o.output), m = run(u + " report --stat " + o.output);
    EXPECT_EQ(t.out, m.out);
    EXPECT_NE(t.out.find("entries:"), std::string::npos) << t.out;
  }
  const Proc filtered = run(u + " report -F 'tdtest/every: seq > 390 && name ~ \"t1*\"' " + o.output);
  EXPECT_EQ(lines_with(filtered.out, " every: "), 9);
  // Where the languages differ, ours is the kernel's: '~' is a glob, and
  // narrow signed fields compare signed (libtraceevent's filter reads s8
  // as unsigned).
  EXPECT_EQ(lines_with(run(u + " report -F 'every: s8 < -50' " + o.output).out, " every: "), 3 * 4 * 49);

  // --format=json: the Chrome/Perfetto trace-event format, read back by
  // Python's json module: every event with its fields as args, thread names.
  {
    const std::string json = dir_ + "/one.json";
    ASSERT_EQ(run(u + " report --format=json " + o.output + " > " + json).rc, 0);
    const Proc py =
        run("python3 -c 'import json,sys\n"
            "d = json.load(open(sys.argv[1]))\n"
            "ev = d[\"traceEvents\"]\n"
            "every = [e for e in ev if e[\"name\"] == \"every\"]\n"
            "e = [e for e in every if e[\"args\"][\"thread\"] == 1 and e[\"args\"][\"seq\"] == 57][0]\n"
            "a = e[\"args\"]\n"
            "print(len(every), e[\"ph\"], e[\"cat\"], a[\"s8\"], a[\"s64\"], a[\"name\"], repr(a[\"text\"]), "
            "a[\"ok\"])\n"
            "names = sorted(set(m[\"args\"][\"name\"] for m in ev if m[\"name\"] == \"thread_name\"))\n"
            "print(\" \".join(n for n in names if n.startswith(\"tdt\")))\n"
            "ts = [e[\"ts\"] for e in ev if e[\"ph\"] == \"i\"]\n"
            "print(ts == sorted(ts))\n"
            "print(sorted(set(e[\"pid\"] for e in ev)))\n"
            "print([m[\"args\"][\"name\"] for m in ev if m[\"name\"] == \"process_name\"])' " +
            json);
    ASSERT_EQ(py.rc, 0) << py.out;
    // Every event in this process, named as /proc names it: the file's
    // PROCMAPS option says which process recorded it.
    EXPECT_EQ(py.out,
              "1200 i tdtest -57 -1099511627833 t1-57 'text x of 1' 1\n"
              "tdt-worker-0 tdt-worker-1 tdt-worker-2\nTrue\n[" +
                  std::to_string(getpid()) + "]\n['tracedat_test']\n");
    // trace-cmd reads the option as its own --proc-map writes it.
    const Proc dump = run("trace-cmd dump --options " + o.output);
    char head[64];
    snprintf(head, sizeof head, "\n%x ", static_cast<unsigned>(getpid()));
    const size_t at = dump.out.find("[Option PROCMAPS");
    ASSERT_NE(at, std::string::npos) << dump.out;
    EXPECT_NE(dump.out.find(head, at), std::string::npos) << dump.out;
    EXPECT_NE(dump.out.find("libc.so.6\n", at), std::string::npos) << dump.out;
  }
  // Bad arguments: one clear line and a non-zero exit.
  for (const auto& [args, msg] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent.dat", "No such file"},
           {"/etc/hostname", "not a trace.dat file"},
           {"-F 'tdtest/every: seq >' " + o.output, "parse_error"},
           {"-F 'nosuch/event' " + o.output, "no event matches"},
           {"-B nosuch " + o.output, "no buffer 'nosuch'"},
           {"--cpu 9 " + o.output, "the file has CPUs"},
           {"--format xml " + o.output, "--format must be"}}) {
    const Proc p = run(u + " report " + args);
    EXPECT_NE(p.rc, 0) << args;
    EXPECT_NE(p.out.find(msg), std::string::npos) << args << ": " << p.out;
  }

  // Three instances, in one file as trace-cmd's BUFFER sections.
  for (const char* f : {"trace", "instances/tdt_b/trace", "instances/tdt_ow/trace"}) wr(f, "");
  write_scenario();
  o.output = dir_ + "/v6.dat";
  o.instances = {"", "tdt_b", "tdt_ow"};
  ASSERT_EQ(extract_trace(o, &err), 0) << err;
  const std::string v6 = o.output, v7 = dir_ + "/v7.dat", back = dir_ + "/back6.dat";
  for (const char* opts : {"", "-l", "-t", "-R"}) same(opts, v6);
  const Proc all = run("trace-cmd report " + v6);
  EXPECT_EQ(lines_with(all.out, " every: "), 1200);
  EXPECT_EQ(lines_with(all.out, " tdt_b: "), 1200);
  EXPECT_GT(lines_with(all.out, "EVENTS DROPPED]"), 0);
  EXPECT_NE(all.out.find("tdt-worker-1"), std::string::npos);  // saved cmdlines
  EXPECT_NE(all.out.find("hello from the marker"), std::string::npos);
  EXPECT_NE(all.out.find("write_scenario(): printk 42"), std::string::npos);  // printk's ip, by our kallsyms

  // trace-cmd convert to v7 and back changes nothing.
  ASSERT_EQ(run("trace-cmd convert -i " + v6 + " -o " + v7 + " --file-version 7 --compression none").rc, 0);
  ASSERT_EQ(run("trace-cmd convert -i " + v7 + " -o " + back + " --file-version 6").rc, 0);
  EXPECT_TRUE(run("trace-cmd report " + v7).out == all.out);
  EXPECT_TRUE(run("trace-cmd report " + back).out == all.out);
  EXPECT_TRUE(run(u + " report " + v7).out == all.out);
}
#endif

#ifdef USRTRACE_CLI
// The kernel's own trace.dat files, as trace-cmd writes them on this
// machine (v7 with zstd by default, and v6): usrtrace report prints what
// trace-cmd report prints. The events go into a private kernel instance set
// up through tracefs, and trace-cmd extract writes the file once tracing is
// off. (trace-cmd record's per-CPU readers race a short command on a loaded
// machine: 2 runs in 20 beside two busy loops kept no events at all, and
// trace-cmd start crashes on this kernel.)
TEST(KernelTraceDat, UsrtraceReportPrintsWhatTraceCmdPrints) {
  if (!have_trace_cmd()) GTEST_SKIP() << "trace-cmd is not installed (apt-get install trace-cmd)";
  if (geteuid() != 0) GTEST_SKIP() << "recording the kernel needs root";
  if (access("/sys/kernel/tracing/instances", F_OK) != 0) run("mount -t tracefs nodev /sys/kernel/tracing");
  if (access("/sys/kernel/tracing/instances", F_OK) != 0) GTEST_SKIP() << "no tracefs at /sys/kernel/tracing";
  const std::string dir = tmpdir();
  const std::string inst = "usrtrace_kt_" + std::to_string(getpid());
  const std::string kdir = "/sys/kernel/tracing/instances/" + inst;
  ASSERT_EQ(mkdir(kdir.c_str(), 0755), 0) << kdir << ": " << strerror(errno);
  struct Remove {
    std::string path;
    ~Remove() { rmdir(path.c_str()); }  // extract may have removed it already
  } remove{kdir};
  for (const char* e : {"sched_switch", "sched_process_exec", "sched_process_exit"})
    ASSERT_GT(kwr(kdir + "/events/sched/" + e + "/enable", "1"), 0) << e;
  ASSERT_GT(kwr(kdir + "/tracing_on", "1"), 0);
  const Proc cmd = run("/bin/sh -c 'for i in 1 2 3; do /bin/true; done'");
  ASSERT_GT(kwr(kdir + "/tracing_on", "0"), 0);
  const std::string v7 = dir + "/k7.dat", v6 = dir + "/k6.dat";
  const Proc ext = run("timeout 60 trace-cmd extract -B " + inst + " -o " + v7);
  ASSERT_EQ(cmd.rc, 0) << cmd.out;
  ASSERT_EQ(ext.rc, 0) << ext.out;
  const Proc conv = run("trace-cmd convert -i " + v7 + " -o " + v6 + " --file-version 6 --compression none");
  ASSERT_EQ(conv.rc, 0) << conv.out;
  for (const std::string& file : {v7, v6}) {
    SCOPED_TRACE(file);
    for (const char* opts : {"", "-l", "-t", "-R"}) {
      SCOPED_TRACE(opts);
      const Proc t = run("trace-cmd report " + std::string(opts) + " " + file);
      const Proc m = run(std::string(USRTRACE_CLI) + " report " + opts + " " + file);
      ASSERT_EQ(t.rc, 0) << t.out.substr(0, 2000);
      EXPECT_EQ(m.rc, 0);
      EXPECT_TRUE(t.out == m.out) << "differ on " << file << ":\n" << first_difference(t.out, m.out);
      EXPECT_GE(lines_with(t.out, "sched_process_exec:"), 3) << t.out.substr(0, 2000);
    }
  }
  run("rm -rf " + dir);
}
#endif

#ifdef TRACECMD_DUMP
TEST_F(TraceDatTest, LibtracecmdGivesTheRecordedTimestampsAndValues) {
  write_scenario();
  for (int version : {6, 7}) {
    SCOPED_TRACE(version);
    if (version == 7) write_scenario();
    RecordOptions o;
    o.output = dir_ + "/lib" + std::to_string(version) + ".dat";
    o.instances = {"", "tdt_b", "tdt_ow"};
    o.file_version = version;
    o.compress = version == 7;
    std::string err;
    ASSERT_EQ(extract_trace(o, &err), 0) << err;
    auto f = TraceFile::open(o.output, &err);
    ASSERT_TRUE(f) << err;
    // What our reader gives (proven equal to the buffers above), per buffer.
    std::map<std::string, std::vector<std::string>> want;
    for (size_t b = 0; b < f->buffers().size(); ++b) {
      TraceFile::Cursor c(*f, {static_cast<int>(b)});
      TraceFile::Record r;
      while (c.next(&r)) {
        const std::string name = b == 0 ? "top" : f->buffers()[b].name;
        want[name].push_back(name + " " + std::to_string(r.cpu) + " " + std::to_string(r.ts));
      }
    }
    const Proc d = run(std::string(TRACECMD_DUMP) + " " + o.output);
    ASSERT_EQ(d.rc, 0) << d.out;
    std::map<std::string, std::vector<std::string>> got;
    std::istringstream in(d.out);
    std::string line;
    int every = 0, ticks = 0;
    while (std::getline(in, line)) {
      std::istringstream l(line);
      std::string buf, cpu, ts, ev;
      l >> buf >> cpu >> ts >> ev;
      got[buf].push_back(buf + " " + cpu + " " + ts);
      ASSERT_NE(ev, "UNKNOWN") << line;
      std::string rest;
      std::getline(l, rest);
      int t = -1;
      unsigned seq = 0;
      if (ev == "tdtest:every") {
        ASSERT_EQ(sscanf(rest.c_str(), " thread=%d seq=%u", &t, &seq), 2) << line;
        EXPECT_EQ(rest, every_fields(t, seq)) << line;
        ++every;
      } else if (ev == "tdtest:tick") {
        ASSERT_EQ(sscanf(rest.c_str(), " thread=%d seq=%u", &t, &seq), 2) << line;
        EXPECT_EQ(rest, " thread=" + std::to_string(t) + " seq=" + std::to_string(seq)) << line;
        ++ticks;
      }
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(every, 1200);
#ifdef USRTRACE_CLI
    // Our v7 (zstd) file too prints the same in both tools.
    const Proc t = run("trace-cmd report " + o.output),
               m = run(std::string(USRTRACE_CLI) + " report " + o.output);
    EXPECT_EQ(t.rc, 0);
    EXPECT_TRUE(t.out == m.out) << "trace-cmd and usrtrace report differ on " << o.output;
    EXPECT_EQ(t.out.find("UNKNOWN"), std::string::npos);
#endif
    EXPECT_GT(ticks, 2 * 1200);  // top and tdt_b whole, tdt_ow's survivors
  }
}
#endif

}  // namespace
}  // namespace usrtrace
