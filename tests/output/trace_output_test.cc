// The trace text: our lines against the kernel's own (a private tracefs
// instance of this machine), and exact lines for records we know.
#include "output/trace_output.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "events/flags.h"
#include "events/registry.h"
#include "instance/instance.h"
#include "testing/test_util.h"
#include "usrtrace/event.h"
#include "writers/writers.h"

USRTRACE_EVENT(outtest, request, (uint64_t, id)(uint32_t, bytes)(char[16], name), "id=%llu bytes=%u name=%s",
               REC->id, REC->bytes, REC->name)
USRTRACE_EVENT(outtest, newline, (int32_t, v), "v=%d\n", REC->v)

namespace usrtrace::output {
namespace {

using instance::Instance;

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// An instance of ours, removed at the end of the test.
struct OurInstance {
  explicit OurInstance(const std::string& n) : name(n) {
    int err = 0;
    inst = Instance::create(name, &err);
    EXPECT_NE(inst, nullptr) << "create " << name << ": " << err;
  }
  ~OurInstance() {
    if (inst) {
      EXPECT_EQ(Instance::destroy(name), 0);
    }
  }
  std::string name;
  Instance* inst = nullptr;
};

// ---------------------------------------------------------------------------
// The kernel's text as the oracle.

constexpr const char* kTracefs = "/sys/kernel/tracing";

bool write_file(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A private instance of the machine's tracefs (never the shared top buffer).
class KernelInstance {
 public:
  // Empty error: ready. Else why not (the test skips).
  std::string open() {
    struct stat st;
    if (stat((std::string(kTracefs) + "/instances").c_str(), &st) != 0 &&
        mount("nodev", kTracefs, "tracefs", 0, nullptr) != 0)
      return std::string("cannot mount tracefs at ") + kTracefs + ": " + strerror(errno);
    dir_ = std::string(kTracefs) + "/instances/usrtrace_output_test_" + std::to_string(getpid());
    if (mkdir(dir_.c_str(), 0755) != 0) {
      std::string e = "cannot create " + dir_ + ": " + strerror(errno);
      dir_.clear();
      return e;
    }
    return "";
  }
  ~KernelInstance() {
    if (!dir_.empty()) rmdir(dir_.c_str());
  }
  bool set_option(const std::string& name, bool on) {
    return write_file(dir_ + "/options/" + name, on ? "1" : "0");
  }
  bool marker(const std::string& text) { return write_file(dir_ + "/trace_marker", text); }
  std::string trace() { return read_file(dir_ + "/trace"); }
  void clear() { write_file(dir_ + "/trace", ""); }

 private:
  std::string dir_;
};

// Header lines must be identical but for the numbers that differ between
// the kernel and us: entry counts, #P, the release and the preempt model.
std::string normalize_header(std::string l) {
  static const std::regex kEntries(R"(entries-written: \d+/\d+   #P:\d+)");
  static const std::regex kRelease(R"(latency trace v1\.1\.5 on .*)");
  static const std::regex kLatency(R"(#\d+/\d+, CPU#\d+ \| \(M:\S+ (.*) #P:\d+\))");
  l = std::regex_replace(l, kEntries, "entries-written: E/W   #P:N");
  l = std::regex_replace(l, kRelease, "latency trace v1.1.5 on RELEASE");
  l = std::regex_replace(l, kLatency, "#E/W, CPU#C | (M:MODEL $1 #P:N)");
  return l;
}

// An event line's shape: the comm-pid column (comm and pid differ) is
// checked for its width and form, then digits become 'D' and the rest
// must match character for character, so every column sits where the
// kernel's does. The latency time (µs since a reset, any width) and the
// TGID (the kernel does not know ours) are reduced to their form.
std::string line_shape(const std::string& line, bool latency) {
  const size_t prefix = latency ? 16 : 25;  // "%8.8s-%-7d" / "%16s-%-7d "
  static const std::regex kDefaultPrefix(R"(^ *\S+-\d+ *$)");
  static const std::regex kLatPrefix(R"(^.{0,8}-\d+ *$)");
  if (line.size() < prefix) return "SHORT: " + line;
  std::string head = line.substr(0, prefix);
  if (!std::regex_match(head, latency ? kLatPrefix : kDefaultPrefix)) return "BAD PREFIX: " + line;
  if (head[latency ? 7 : 15] == ' ') return "COMM NOT RIGHT-ALIGNED: " + line;
  std::string rest = line.substr(prefix);
  static const std::regex kTgid(R"(^\((-------| *\d+)\) )");
  if (std::regex_search(rest, kTgid)) rest = std::regex_replace(rest, kTgid, "(TGID) ");
  static const std::regex kLatTime(R"(^( *\d+)(\S{5}) +\d+us([ +!#*@$]): )");
  // The delay mark depends on how long the writes were apart, which no
  // test controls: only its column is compared (exact marks are tested on
  // hand-made records below).
  if (latency) rest = std::regex_replace(rest, kLatTime, "$1$2 TusM: ");
  // The kernel's need-resched flag (N, n, p, ...) says whether the writer
  // was about to be preempted when it wrote, which no test controls: the
  // column is compared, its letter is not.
  static const std::regex kNeedResched(R"((\[\d+\] )([.dX])[.NnpLlBb])");
  static const std::regex kLatNeedResched(R"(^( *\d+)([.dX])[.NnpLlBb])");
  rest = std::regex_replace(rest, latency ? kLatNeedResched : kNeedResched, "$1$2.",
                            std::regex_constants::format_first_only);
  for (char& c : rest)
    if (c >= '0' && c <= '9') c = 'D';
  return "COMM-PID" + rest;
}

struct Variant {
  const char* name;
  const char* option;  // nullptr: defaults
  bool on;
};

class KernelConformanceTest : public ::testing::TestWithParam<Variant> {};

TEST_P(KernelConformanceTest, SameHeaderAndLineShapesAsTheKernel) {
  const Variant v = GetParam();
  KernelInstance k;
  if (std::string why = k.open(); !why.empty()) GTEST_SKIP() << why << " (needs root and tracefs)";
  OurInstance ours(std::string("conf_") + v.name);
  ASSERT_NE(ours.inst, nullptr);
  Instance& inst = *ours.inst;
  if (v.option) {
    ASSERT_TRUE(k.set_option(v.option, v.on)) << v.option;
    inst.set_option(static_cast<instance::Option>(instance::option_by_name(v.option)), v.on);
  }
  const bool latency = v.option && std::string(v.option) == "latency-format";

  // Empty buffer: headers identical (latency: nothing after "#").
  std::vector<std::string> kh = split_lines(k.trace()), oh = split_lines(read_trace(inst, -1));
  ASSERT_EQ(oh.size(), kh.size()) << read_trace(inst, -1);
  for (size_t i = 0; i < kh.size(); ++i)
    EXPECT_EQ(normalize_header(oh[i]), normalize_header(kh[i])) << "empty header line " << i;

  // Same content on both sides: two markers, one with its own newline.
  for (const char* m : {"hello marker", "second one\n"}) {
    ASSERT_TRUE(k.marker(m));
    ASSERT_GT(inst.write_marker(m), 0);
  }
  std::vector<std::string> kl = split_lines(k.trace()), ol = split_lines(read_trace(inst, -1));
  if (getenv("USRTRACE_TEST_DUMP"))
    printf("kernel:\n%sours:\n%s", k.trace().c_str(), read_trace(inst, -1).c_str());
  ASSERT_EQ(ol.size(), kl.size()) << "ours:\n" << read_trace(inst, -1) << "kernel:\n" << k.trace();
  size_t events = 0;
  for (size_t i = 0; i < kl.size(); ++i) {
    if (!kl[i].empty() && kl[i][0] == '#') {
      EXPECT_EQ(normalize_header(ol[i]), normalize_header(kl[i])) << "header line " << i;
    } else if (v.option && std::string(v.option) == "context-info") {
      ++events;
      EXPECT_EQ(ol[i], kl[i]);
    } else {
      ++events;
      EXPECT_EQ(line_shape(ol[i], latency), line_shape(kl[i], latency))
          << "ours:   " << ol[i] << "\nkernel: " << kl[i];
      // The event text itself is identical.
      const size_t kt = kl[i].find(": tracing_mark_write:"), ot = ol[i].find(": tracing_mark_write:");
      ASSERT_NE(kt, std::string::npos) << kl[i];
      ASSERT_NE(ot, std::string::npos) << ol[i];
      EXPECT_EQ(ol[i].substr(ot), kl[i].substr(kt));
    }
  }
  EXPECT_EQ(events, 2u);
  // The entry counts are ours: 2 of 2.
  if (!latency && v.option == nullptr) {
    EXPECT_NE(read_trace(inst, -1).find("entries-in-buffer/entries-written: 2/2   #P:"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Options, KernelConformanceTest,
                         ::testing::Values(Variant{"default", nullptr, false},
                                           Variant{"noirq", "irq-info", false},
                                           Variant{"tgid", "record-tgid", true},
                                           Variant{"latency", "latency-format", true},
                                           Variant{"noctx", "context-info", false}),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(KernelConformance, RecordTgidWithoutIrqInfo) {
  KernelInstance k;
  if (std::string why = k.open(); !why.empty()) GTEST_SKIP() << why;
  OurInstance ours("conf_tgid_noirq2");
  ASSERT_NE(ours.inst, nullptr);
  ASSERT_TRUE(k.set_option("record-tgid", true));
  ASSERT_TRUE(k.set_option("irq-info", false));
  ours.inst->set_option(instance::kOptRecordTgid, true);
  ours.inst->set_option(instance::kOptIrqInfo, false);
  ASSERT_TRUE(k.marker("x"));
  ASSERT_GT(ours.inst->write_marker("x"), 0);
  std::vector<std::string> kl = split_lines(k.trace()), ol = split_lines(read_trace(*ours.inst, -1));
  ASSERT_EQ(ol.size(), kl.size());
  for (size_t i = 0; i + 1 < kl.size(); ++i) EXPECT_EQ(normalize_header(ol[i]), normalize_header(kl[i]));
  EXPECT_EQ(line_shape(ol.back(), false), line_shape(kl.back(), false))
      << "ours:   " << ol.back() << "\nkernel: " << kl.back();
}

// ---------------------------------------------------------------------------
// Exact lines for records we build.

const internal::EventDesc& request_desc() { return usrtrace_event_outtest_request::desc; }

// A hand-made record of outtest:request.
struct Crafted {
  alignas(8) uint8_t bytes[64] = {};
  rb::Event ev;
  Crafted(int cpu, uint64_t ts, int pid, uint8_t flags, uint8_t pc, uint64_t id, uint32_t nbytes,
          const char* name) {
    usrtrace_record_outtest_request r{};
    r.common.type = request_desc().id;
    r.common.flags = flags;
    r.common.preempt_count = pc;
    r.common.pid = pid;
    r.id = id;
    r.bytes = nbytes;
    std::strncpy(r.name, name, sizeof r.name - 1);
    static_assert(sizeof r <= sizeof bytes);
    std::memcpy(bytes, &r, sizeof r);
    ev.cpu = cpu;
    ev.ts = ts;
    ev.data = bytes;
    ev.len = (sizeof r + 3) & ~3u;
  }
};

class OwnLinesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    (void)&usrtrace_event_outtest_request::registrar;  // registered before use
    (void)&usrtrace_event_outtest_newline::registrar;
    inst_ = std::make_unique<OurInstance>("own_lines");
    ASSERT_NE(inst_->inst, nullptr);
    // mono: raw values are nanoseconds, so times are exact.
    inst_->inst->buffer().set_clock(clock::ClockId::kMono);
    writers::save_comm(kPid, "worker");
  }
  std::string line(const rb::Event& ev, uint64_t next_ts) {
    std::string out;
    format_event(*inst_->inst, ev, next_ts, &out);
    return out;
  }
  Instance& inst() { return *inst_->inst; }
  static constexpr int kPid = 4242;
  std::unique_ptr<OurInstance> inst_;
};

TEST_F(OwnLinesTest, DefaultLine) {
  Crafted c(1, 1234567891234ull, kPid, 0, 0, 42, 512, "alpha");
  EXPECT_EQ(line(c.ev, c.ev.ts),
            "          worker-4242    [001] .....  1234.567891: request: id=42 bytes=512 name=alpha\n");
}

TEST_F(OwnLinesTest, MicrosecondsRoundToNearestAsTheKernel) {
  Crafted c(0, 5000000999500ull, kPid, 0, 0, 1, 2, "r");  // 5000000999.5 us
  EXPECT_EQ(line(c.ev, c.ev.ts).substr(25), "[000] .....  5000.001000: request: id=1 bytes=2 name=r\n");
}

TEST_F(OwnLinesTest, NestedWriteFromASignalHandler) {
  // What write_event records for a write that interrupted another one on
  // the same thread: 'h' and nesting depth 1.
  Crafted c(3, 2000000000ull, kPid, kFlagHardirq, 1, 7, 8, "nested");
  EXPECT_EQ(line(c.ev, c.ev.ts),
            "          worker-4242    [003] ..h1.     2.000000: request: id=7 bytes=8 name=nested\n");
}

TEST_F(OwnLinesTest, EveryFlagLetter) {
  struct Case {
    uint8_t flags, pc;
    const char* want;
  } cases[] = {
      {0, 0, "....."},
      {kFlagIrqsOff, 0, "d...."},
      {kFlagIrqsOff | kFlagBhOff, 0, "D...."},
      {kFlagBhOff, 0, "b...."},
      {kFlagNeedResched | kFlagPreemptResched, 0, ".N..."},
      {kFlagNeedResched, 0, ".n..."},
      {kFlagPreemptResched, 0, ".p..."},
      {kFlagNeedReschedLazy, 0, ".l..."},
      {kFlagNeedReschedLazy | kFlagPreemptResched, 0, ".L..."},
      {kFlagNeedResched | kFlagNeedReschedLazy, 0, ".b..."},
      {kFlagNeedResched | kFlagNeedReschedLazy | kFlagPreemptResched, 0, ".B..."},
      {kFlagNmi | kFlagHardirq, 0, "..Z.."},
      {kFlagNmi, 0, "..z.."},
      {kFlagHardirq | kFlagSoftirq, 0, "..H.."},
      {kFlagSoftirq, 0, "..s.."},
      {0, 0x0f, "...f."},
      {0, 0x31, "...13"},
  };
  for (const Case& k : cases) {
    Crafted c(0, 1000, kPid, k.flags, k.pc, 1, 1, "f");
    EXPECT_EQ(line(c.ev, c.ev.ts).substr(31, 5), k.want) << int(k.flags) << " " << int(k.pc);
  }
}

TEST_F(OwnLinesTest, UnknownCommAndTgid) {
  Crafted known(0, 1000000, kPid, 0, 0, 1, 1, "a");
  Crafted unknown(0, 1000000, 999999, 0, 0, 1, 1, "a");  // no such writer
  EXPECT_EQ(line(unknown.ev, 0).rfind("           <...>-999999  [000] .....", 0), 0u) << line(unknown.ev, 0);
  inst().set_option(instance::kOptRecordTgid, true);
  char want[64];
  snprintf(want, sizeof want, "          worker-4242    (%7d) [000] .....", getpid());
  EXPECT_EQ(line(known.ev, 0).rfind(want, 0), 0u) << line(known.ev, 0);
  EXPECT_EQ(line(unknown.ev, 0).rfind("           <...>-999999  (-------) [000] .....", 0), 0u)
      << line(unknown.ev, 0);
}

TEST_F(OwnLinesTest, IrqInfoOffAndContextInfoOff) {
  Crafted c(1, 572603742000ull, kPid, kFlagIrqsOff, 1, 1, 2, "x");
  inst().set_option(instance::kOptIrqInfo, false);
  EXPECT_EQ(line(c.ev, 0), "          worker-4242    [001]    572.603742: request: id=1 bytes=2 name=x\n");
  inst().set_option(instance::kOptContextInfo, false);
  EXPECT_EQ(line(c.ev, 0), "request: id=1 bytes=2 name=x\n");
}

TEST_F(OwnLinesTest, LatencyFormatTimesAndDelayMarks) {
  inst().buffer().reset();  // time_start = now (mono)
  const uint64_t t0 = inst().buffer().time_start();
  ASSERT_GT(t0, 0u);
  inst().set_option(instance::kOptLatencyFormat, true);
  Crafted c(1, t0 + 6092000, kPid, kFlagIrqsOff, 1, 1, 2, "x");
  EXPECT_EQ(line(c.ev, c.ev.ts + 739000),
            "  worker-4242      1d..1. 6092us!: request: id=1 bytes=2 name=x\n");
  struct Case {
    uint64_t delta_ns;
    char mark;
  } cases[] = {{0, ' '},       {10000, ' '},    {11000, '+'},     {100000, '+'},    {101000, '!'},
               {1001000, '#'}, {10001000, '*'}, {100001000, '@'}, {1000001000, '$'}};
  for (const Case& k : cases)
    EXPECT_EQ(line(c.ev, c.ev.ts + k.delta_ns).substr(26, 9), std::string("6092us") + k.mark + ": ")
        << k.delta_ns;
  // Long comms are cut to 8 in this format.
  writers::save_comm(4343, "a-long-thread-nm");
  Crafted l(0, t0 + 5, 4343, 0, 0, 1, 2, "x");
  EXPECT_EQ(line(l.ev, l.ev.ts).substr(0, 16), "a-long-t-4343   ");
}

// ftrace_dump()'s line (src/crash): the latency format whatever the
// latency-format option says, and the human-readable text even with raw,
// hex, bin or fields set.
TEST_F(OwnLinesTest, DumpLineIsTheLatencyFormat) {
  inst().buffer().reset();
  const uint64_t t0 = inst().buffer().time_start();
  Crafted c(1, t0 + 6092000, kPid, kFlagIrqsOff, 1, 1, 2, "x");
  const std::string want = "  worker-4242      1d..1. 6092us!: request: id=1 bytes=2 name=x\n";
  auto dump_line = [&] {
    std::string out;
    out.reserve(kDumpLineMax);
    const char* before = out.data();
    format_dump_event(inst(), c.ev, c.ev.ts + 739000, &out);
    EXPECT_EQ(out.data(), before) << "the reserved buffer was replaced";
    return out;
  };
  EXPECT_EQ(dump_line(), want);
  for (auto o : {instance::kOptRaw, instance::kOptHex, instance::kOptBin, instance::kOptFields})
    inst().set_option(o, true);
  EXPECT_EQ(dump_line(), want);
  inst().set_option(instance::kOptIrqInfo, false);  // the latency format shows flags regardless
  EXPECT_EQ(dump_line(), want);
  c.ev.lost_before = true;
  c.ev.missed_before = 3;
  EXPECT_EQ(dump_line(), "CPU:1 [LOST 3 EVENTS]\n" + want);
}

TEST_F(OwnLinesTest, RawHexBin) {
  Crafted c(1, 0x13ec695d2e8ull, kPid, 0, 0, 1, 2, "x");
  inst().set_option(instance::kOptRaw, true);
  EXPECT_EQ(line(c.ev, 0), "4242 1 1369131307752 type: " + std::to_string(request_desc().id) + "\n");
  inst().set_option(instance::kOptHex, true);  // hex wins over raw
  EXPECT_EQ(line(c.ev, 0),
            "00001092 00000001 0000013ec695d2e8 type: " + std::to_string(request_desc().id) + "\n\n");
  inst().set_option(instance::kOptBin, true);  // bin wins over both
  std::string b = line(c.ev, 0);
  ASSERT_EQ(b.size(), 16u + std::string("type: \n").size() + std::to_string(request_desc().id).size());
  int32_t pid, cpu;
  uint64_t ts;
  std::memcpy(&pid, b.data(), 4);
  std::memcpy(&cpu, b.data() + 4, 4);
  std::memcpy(&ts, b.data() + 8, 8);
  EXPECT_EQ(pid, kPid);
  EXPECT_EQ(cpu, 1);
  EXPECT_EQ(ts, 0x13ec695d2e8ull);
  EXPECT_EQ(b.substr(16), "type: " + std::to_string(request_desc().id) + "\n");
}

TEST_F(OwnLinesTest, FieldsOption) {
  Crafted c(1, 1000, kPid, 0, 0, 0x3c89, 65, "alpha");
  inst().set_option(instance::kOptFields, true);
  const std::string l = line(c.ev, 0);
  EXPECT_EQ(l.substr(l.find("request:")), "request: id=0x3c89 (15497) bytes=0x41 (65) name=alpha\n");
}

TEST_F(OwnLinesTest, UnknownTypeAndShortRecord) {
  alignas(8) uint8_t rec[8] = {};
  internal::CommonHeader h{999, 0, 0, kPid};
  std::memcpy(rec, &h, sizeof h);
  rb::Event ev;
  ev.cpu = 0;
  ev.ts = 1000000;
  ev.data = rec;
  ev.len = 8;
  ASSERT_EQ(events::Registry::get().by_id(999), nullptr);
  EXPECT_EQ(line(ev, 0), "          worker-4242    [000] .....     0.001000: Unknown type 999\n");
  inst().set_option(instance::kOptRaw, true);
  EXPECT_EQ(line(ev, 0), "4242 0 1000000 999 ?\n");
  inst().set_option(instance::kOptRaw, false);
  ev.len = 4;  // not even a common header: printed, never read past
  EXPECT_NE(line(ev, 0).find("Unknown type 999\n"), std::string::npos);
}

TEST_F(OwnLinesTest, LostEventsLine) {
  Crafted c(1, 1000, kPid, 0, 0, 1, 2, "x");
  c.ev.lost_before = true;
  c.ev.missed_before = 5;
  EXPECT_EQ(line(c.ev, 0).substr(0, 23), "CPU:1 [LOST 5 EVENTS]\n ");
  c.ev.missed_before = 0;
  EXPECT_EQ(line(c.ev, 0).substr(0, 21), "CPU:1 [LOST EVENTS]\n ");
}

TEST_F(OwnLinesTest, CounterClockPrintsRawCounts) {
  inst().buffer().set_clock(clock::ClockId::kCounter);
  const uint64_t start = inst().buffer().time_start();  // the count at the reset
  Crafted c(0, start + 12345, kPid, 0, 0, 1, 2, "x");
  char want[128];
  snprintf(want, sizeof want, "          worker-4242    [000] ..... %12llu: request: id=1 bytes=2 name=x\n",
           static_cast<unsigned long long>(start + 12345));
  EXPECT_EQ(line(c.ev, 0), want);
  inst().set_option(instance::kOptLatencyFormat, true);
  EXPECT_EQ(line(c.ev, 0).substr(16), "   0..... 12345: request: id=1 bytes=2 name=x\n");
}

// ---------------------------------------------------------------------------
// Through the real write path.

std::string my_comm() {
  char comm[17] = {};
  prctl(PR_GET_NAME, comm, 0, 0, 0);
  return comm;
}

TEST(WrittenLinesTest, TypedEventsAndMarkersAsWritten) {
  testing::Pinned pin(0);
  ASSERT_TRUE(pin.ok);
  OurInstance o("written_lines");
  ASSERT_NE(o.inst, nullptr);
  Instance& inst = *o.inst;
  ASSERT_EQ(inst.set_event("outtest", "*", true), 2);
  trace_outtest_request(42, 512, "alpha");
  trace_outtest_newline(-3);  // print fmt ends in \n: still one line
  ASSERT_EQ(inst.write_marker("hello marker\n"), 13);
  inst.clear_events();

  std::string text = read_trace(inst, -1);
  std::vector<std::string> lines = split_lines(text);
  ASSERT_EQ(lines.size(), 12u + 3u) << text;
  EXPECT_EQ(lines[2],
            "# entries-in-buffer/entries-written: 3/3   #P:" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)));
  char prefix[64];
  std::string comm = my_comm();
  snprintf(prefix, sizeof prefix, "%16s-%-7d [000] ", comm.c_str(), static_cast<int>(syscall(SYS_gettid)));
  const std::regex time(R"( *\d+\.\d{6}: )");
  auto check = [&](const std::string& l, const char* flags, const std::string& body) {
    ASSERT_EQ(l.rfind(prefix, 0), 0u) << l;
    EXPECT_EQ(l.substr(strlen(prefix), 5), flags) << l;
    std::string rest = l.substr(strlen(prefix) + 5);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(rest, m, time)) << l;
    EXPECT_EQ(m.position(0), 0) << l;
    EXPECT_EQ(rest.substr(static_cast<size_t>(m.length(0))), body);
  };
  check(lines[12], ".....", "request: id=42 bytes=512 name=alpha");
  check(lines[13], ".....", "newline: v=-3");
  check(lines[14], "...1.", "tracing_mark_write: hello marker");
  EXPECT_EQ(text.find("\n\n"), std::string::npos);

  // Per-CPU view: all on CPU 0.
  EXPECT_EQ(read_trace(inst, 0), text);
  if (inst.buffer().nr_cpus() > 1) {
    EXPECT_EQ(split_lines(read_trace(inst, 1)).size(), 12u);
  }
  EXPECT_EQ(split_lines(read_trace(inst, 4096)).size(), 12u);  // no such CPU: header only

  // trace_pipe: the same lines, consumed; then the header counts 0/0.
  std::string pipe;
  EXPECT_EQ(read_pipe(inst, -1, 1 << 20, &pipe), 3u);
  EXPECT_EQ(pipe, text.substr(text.find(lines[12])));
  std::string again;
  EXPECT_EQ(read_pipe(inst, -1, 1 << 20, &again), 0u);
  EXPECT_TRUE(again.empty());
  EXPECT_NE(read_trace(inst, -1).find("entries-written: 0/0 "), std::string::npos);
}

TEST(WrittenLinesTest, PipeStopsAtMaxBytesWithoutLosingEvents) {
  OurInstance o("pipe_chunks");
  ASSERT_NE(o.inst, nullptr);
  // Appended, not "m" + to_string(i): g++ 12 -O3 warns of a false overlap in
  // operator+(const char*, string&&) (-Wrestrict; a known false positive).
  for (int i = 0; i < 50; ++i) ASSERT_GT(o.inst->write_marker(std::string("m").append(std::to_string(i))), 0);
  std::string all;
  size_t total = 0;
  for (int round = 0; round < 100; ++round) {
    std::string chunk;
    size_t n = read_pipe(*o.inst, -1, 200, &chunk);
    if (n == 0) break;
    EXPECT_LT(chunk.size(), 200u + 200u);  // stops at the first line past the limit
    total += n;
    all += chunk;
  }
  EXPECT_EQ(total, 50u);
  std::vector<std::string> lines = split_lines(all);
  ASSERT_EQ(lines.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    const std::string want = "tracing_mark_write: m" + std::to_string(i);
    EXPECT_EQ(lines[static_cast<size_t>(i)].substr(lines[static_cast<size_t>(i)].size() - want.size()), want);
  }
}

TEST(WrittenLinesTest, OverwrittenEventsShowAsLostAndInTheCounts) {
  testing::Pinned pin(0);
  ASSERT_TRUE(pin.ok);
  OurInstance o("lost_lines");
  ASSERT_NE(o.inst, nullptr);
  Instance& inst = *o.inst;
  ASSERT_EQ(inst.buffer().resize(-1, 8192), 0);
  const int kWritten = 2000;
  for (int i = 0; i < kWritten; ++i) ASSERT_GT(inst.write_marker("event " + std::to_string(i)), 0);

  // `trace`: entries < entries-written, and the difference is the overrun.
  std::string text = read_trace(inst, -1);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(entries-written: (\d+)/(\d+) )")));
  const uint64_t entries = std::stoull(m[1]), written = std::stoull(m[2]);
  EXPECT_LT(entries, written);
  EXPECT_EQ(written, static_cast<uint64_t>(kWritten));

  // trace_pipe: a LOST line, and lost + read == written.
  std::string pipe;
  size_t n = read_pipe(inst, -1, 1 << 22, &pipe);
  EXPECT_EQ(n, entries);
  ASSERT_TRUE(std::regex_search(pipe, m, std::regex(R"(^CPU:0 \[LOST (\d+) EVENTS\]\n)")));
  EXPECT_EQ(std::stoull(m[1]) + n, static_cast<uint64_t>(kWritten));
  // The last line is the last marker.
  EXPECT_NE(pipe.find("tracing_mark_write: event " + std::to_string(kWritten - 1) + "\n"), std::string::npos);
}

TEST(WrittenLinesTest, LatencyFormatRelativeToReset) {
  testing::Pinned pin(0);
  ASSERT_TRUE(pin.ok);
  OurInstance o("lat_written");
  ASSERT_NE(o.inst, nullptr);
  Instance& inst = *o.inst;
  inst.set_option(instance::kOptLatencyFormat, true);
  EXPECT_EQ(read_trace(inst, -1), "# tracer: nop\n#\n");  // empty: no header
  inst.buffer().reset();
  ASSERT_GT(inst.write_marker("a"), 0);
  ASSERT_GT(inst.write_marker("b"), 0);
  std::vector<std::string> lines = split_lines(read_trace(inst, -1));
  ASSERT_EQ(lines.size(), 18u + 2u);
  const std::regex lat(R"(^.{8}-\d+ *   0\.\.\.1\. +(\d+)us[ +!#*@$]: tracing_mark_write: [ab]$)");
  for (size_t i = lines.size() - 2; i < lines.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, lat)) << lines[i];
    EXPECT_LT(std::stoull(m[1]), 60u * 1000000u) << "µs since the reset";
  }
  // trace_pipe uses the latency format too (as the kernel's does).
  std::string pipe;
  EXPECT_EQ(read_pipe(inst, -1, 1 << 20, &pipe), 2u);
  EXPECT_EQ(pipe, lines[lines.size() - 2] + "\n" + lines.back() + "\n");
}

}  // namespace
}  // namespace usrtrace::output
