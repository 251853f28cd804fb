// Bad input to every control file: the kernel's errno, an error_log line,
// no crash, and what was recorded before is still there. Runs in the top
// instance and in a new one.
#include <cerrno>
#include <string>

#include "tracefs/tracefs_test_util.h"

namespace usrtrace::tracefs_test {
namespace {

using instance::Instance;

struct Case {
  const char* file;
  std::string input;
  int err;
};

const std::string kJunk("\x00\xff\x01\x7f\x80garbage\x1b[0m", 16);
const std::string kHuge = "18446744073709551617";  // 2^64 + 1
const std::string kLong(5000, 'a');

std::vector<Case> cases(int ncpus) {
  std::vector<Case> c = {
      {"tracing_on", "", EINVAL},
      {"tracing_on", "abc", EINVAL},
      {"tracing_on", "1x", EINVAL},
      {"tracing_on", " 1", EINVAL},
      {"tracing_on", "-1", EINVAL},
      {"tracing_on", kHuge, ERANGE},
      {"tracing_on", kJunk, EINVAL},
      {"buffer_size_kb", "0", EINVAL},
      {"buffer_size_kb", "1000000000000000", ENOMEM},   // 10^15 KiB
      {"buffer_size_kb", "18014398509481984", ENOMEM},  // 2^54: kb << 10 would overflow
      {"buffer_size_kb", kHuge, ERANGE},
      {"buffer_size_kb", "12k", EINVAL},
      {"buffer_size_kb", kJunk, EINVAL},
      {"buffer_size_kb", kLong, EINVAL},
      {"per_cpu/cpu0/buffer_size_kb", "1000000000000000", ENOMEM},
      {"per_cpu/cpu0/buffer_size_kb", "", EINVAL},
      {"buffer_percent", "101", EINVAL},
      {"buffer_percent", kHuge, ERANGE},
      {"buffer_percent", "5%", EINVAL},
      {"trace_clock", "sundial", EINVAL},
      {"trace_clock", "", EINVAL},
      {"trace_clock", kLong, EINVAL},
      {"trace_clock", kJunk, EINVAL},
      {"trace_options", "nosuchoption", EINVAL},
      {"trace_options", "no", EINVAL},
      {"trace_options", kLong, EINVAL},
      {"trace_options", kJunk, EINVAL},
      {"options/overwrite", "2", EINVAL},
      {"options/overwrite", "", EINVAL},
      {"options/overwrite", kJunk, EINVAL},
      {"current_tracer", "blk", EINVAL},
      {"set_ftrace_filter", "no_such_function_here", EINVAL},
      {"set_ftrace_pid", "-3", EINVAL},
      {"max_graph_depth", "deep", EINVAL},
      {"tracing_thresh", "99999999999999999999999", ERANGE},
      {"current_tracer", kJunk, EINVAL},
      {"current_tracer", kLong, EINVAL},
      {"set_event", "nosys:noevent", EINVAL},
      {"set_event", "!nosuchevent", EINVAL},
      {"set_event", "tfstest:nosuch", EINVAL},
      {"set_event", "!", EINVAL},
      {"set_event", "tfstest:ping:extra", EINVAL},
      {"set_event", kLong, EINVAL},
      {"set_event", kJunk, EINVAL},
      {"set_event_pid", "abc", EINVAL},
      {"set_event_pid", "12x", EINVAL},
      {"set_event_pid", "99999999", EINVAL},
      {"set_event_pid", kHuge, EINVAL},
      {"set_event_pid", kJunk, EINVAL},
      {"set_event_notrace_pid", "-5", EINVAL},
      {"tracing_cpumask", "xyz", EINVAL},
      {"tracing_cpumask", "", EINVAL},
      {"tracing_cpumask", "123456789", EOVERFLOW},
      {"tracing_cpumask", "1,,1", EINVAL},
      {"tracing_cpumask", kJunk, EINVAL},
      {"events/enable", "2", EINVAL},
      {"events/enable", kJunk, EINVAL},
      {"events/tfstest/enable", "x", EINVAL},
      {"events/tfstest/ping/enable", "5", EINVAL},
      {"events/tfstest/ping/enable", kHuge, ERANGE},
      {"events/tfstest/ping/filter", "n >", EINVAL},
      {"events/tfstest/ping/filter", "nosuch > 1", EINVAL},
      {"events/tfstest/filter", "nosuch > 1", EINVAL},
      {"events/tfstest/ping/filter", kJunk, EINVAL},
      {"events/tfstest/ping/trigger", "traceoff:x", EINVAL},
      {"events/tfstest/ping/trigger", "traceoff junk", EINVAL},
      {"events/tfstest/ping/trigger", "enable_event:tfstest:nosuch", EINVAL},
      {"events/tfstest/ping/trigger", "hist:keys=nosuch", EINVAL},
      {"events/tfstest/ping/trigger", kJunk, EINVAL},
      {"trace_marker_raw", "ab", EINVAL},
      {"trace_marker_raw", std::string(4096, 'r'), EINVAL},
  };
  // A bit past the last CPU (when the mask's first chunk has room for one).
  if (ncpus < 32) c.push_back({"tracing_cpumask", "ffffffff", EOVERFLOW});
  // More chunks than the CPUs need, the top one set.
  std::string wide = "1";
  for (int i = 0; i <= ncpus / 32; ++i) wide += ",0";
  c.push_back({"tracing_cpumask", wide, EOVERFLOW});
  return c;
}

class TracefsMalformedTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_NE(Instance::top(), nullptr);
    if (GetParam()) {
      ASSERT_EQ(tracefs::mkdir("instances/tfs_bad"), 0);
      p_ = "instances/tfs_bad/";
      inst_ = Instance::find("tfs_bad");
    } else {
      inst_ = Instance::top();
    }
    inst_->buffer().reset();
    inst_->clear_error_log();
  }
  void TearDown() override {
    inst_->clear_events();
    inst_->set_pid_filter({}, {});
    inst_->set_cpumask({});
    inst_->set_tracing_on(true);
    if (GetParam()) {
      EXPECT_EQ(tracefs::rmdir("instances/tfs_bad"), 0);
    }
  }
  std::string p_;
  Instance* inst_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Instances, TracefsMalformedTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "NewInstance" : "Top";
                         });

TEST_P(TracefsMalformedTest, EveryFileRejectsBadInputAndKeepsData) {
  const std::string size_before = rd(p_ + "buffer_size_kb");
  const std::string clock_before = rd(p_ + "trace_clock");
  int n = 0;
  for (const Case& c : cases(inst_->buffer().nr_cpus())) {
    SCOPED_TRACE(std::string(c.file) + " <- " + c.input.substr(0, 40));
    const std::string marker = "keep-" + std::to_string(n++);
    ASSERT_GT(wr(p_ + "trace_marker", marker), 0);
    const size_t lines = count(rd(p_ + "error_log"), ": error: ");
    // One write(2), opened both ways: echo > and echo >>.
    std::unique_ptr<tracefs::File> f;
    ASSERT_EQ(tracefs::open(p_ + c.file, O_WRONLY | (n % 2 ? O_TRUNC : O_APPEND), &f), 0);
    EXPECT_EQ(f->write(c.input.data(), c.input.size()), -c.err);
    f.reset();
    const std::string log = rd(p_ + "error_log");
    EXPECT_EQ(count(log, ": error: "), std::min<size_t>(lines + 1, 16)) << log;
    EXPECT_TRUE(has_marker(inst_, marker));
    // The error_log is text, whatever was written.
    for (char ch : log) {
      EXPECT_TRUE(ch == '\n' || (ch >= 0x20 && ch < 0x7f)) << static_cast<int>(ch);
    }
  }
  // Nothing was changed by the failed writes.
  EXPECT_EQ(rd(p_ + "buffer_size_kb"), size_before);
  EXPECT_EQ(rd(p_ + "trace_clock"), clock_before);
  EXPECT_EQ(rd(p_ + "tracing_on"), "1\n");
  EXPECT_EQ(rd(p_ + "set_event"), "");
  EXPECT_EQ(rd(p_ + "set_event_pid"), "");
  EXPECT_EQ(rd(p_ + "options/overwrite"), "1\n");
  EXPECT_EQ(rd(p_ + "buffer_percent"), "50\n");
}

TEST_P(TracefsMalformedTest, EmptyAndOddWritesThroughFileObjects) {
  ASSERT_GT(wr(p_ + "trace_marker", "survivor"), 0);
  for (const char* f : {"tracing_on", "buffer_size_kb", "buffer_percent", "trace_clock", "trace_options",
                        "current_tracer", "options/raw", "tracing_cpumask", "events/enable"}) {
    std::unique_ptr<tracefs::File> file;
    ASSERT_EQ(tracefs::open(p_ + f, O_WRONLY, &file), 0) << f;
    EXPECT_EQ(file->write("", 0), -EINVAL) << f;
    EXPECT_EQ(file->write("\n", 1), -EINVAL) << f;
    EXPECT_EQ(file->write("\0", 1), -EINVAL) << f;
  }
  // Writes that are no-ops: accepted.
  for (const char* f :
       {"set_event", "set_event_pid", "events/tfstest/ping/filter", "events/tfstest/ping/trigger"}) {
    std::unique_ptr<tracefs::File> file;
    ASSERT_EQ(tracefs::open(p_ + f, O_WRONLY | O_APPEND, &file), 0) << f;
    EXPECT_EQ(file->write("  \n", 3), 3) << f;
  }
  // Files that take any text: junk is accepted and clears nothing
  // (trace and error_log clear only when opened with O_TRUNC).
  ASSERT_GT(wr(p_ + "trace_marker", kJunk), 0);
  EXPECT_EQ(wr(p_ + "trace", kJunk, true), static_cast<long>(kJunk.size()));
  wr(p_ + "tracing_on", "bad");  // leaves an error_log line
  EXPECT_EQ(wr(p_ + "error_log", kJunk, true), static_cast<long>(kJunk.size()));
  EXPECT_NE(rd(p_ + "error_log"), "");
  // Reads of write-only files and writes of read-only ones.
  std::unique_ptr<tracefs::File> file;
  EXPECT_EQ(tracefs::open(p_ + "buffer_total_size_kb", O_RDWR, &file), -EACCES);
  EXPECT_EQ(tracefs::open(p_ + "free_buffer", O_RDONLY, &file), -EACCES);
  EXPECT_EQ(tracefs::open(p_ + "trace", O_ACCMODE, &file), -EINVAL);
  // Paths with junk.
  tracefs::Stat st;
  EXPECT_EQ(tracefs::stat(p_ + std::string("tr\0ace", 6), &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(p_ + "../trace", &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(p_ + "per_cpu/cpu-1", &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(p_ + "per_cpu/cpu00", &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(p_ + "per_cpu/cpu99999999999999999999", &st), -ENOENT);
  EXPECT_EQ(tracefs::stat(p_ + "options/" + kLong.substr(0, 255), &st), -ENOENT);
  EXPECT_TRUE(has_marker(inst_, "survivor"));
}

}  // namespace
}  // namespace usrtrace::tracefs_test
