// `trace` and `snapshot` are made as they are read (output::TraceText): a
// reader costs the traced process its window, not the text of the whole
// buffer (issue 19 item 5: before, each open formatted everything: two
// 32 MB buffers, +43 MB RSS per open). The text itself must not change
// with the size of the reads.
#include <fcntl.h>
#include <malloc.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tracefs/tracefs.h"

namespace usrtrace {
namespace {

long wr(const std::string& path, const std::string& text) { return tracefs::write_file(path, text); }

std::string read_in_chunks(const std::string& path, size_t chunk) {
  std::unique_ptr<tracefs::File> f;
  EXPECT_EQ(tracefs::open(path, O_RDONLY, &f), 0);
  std::string all, buf(chunk, '\0');
  if (!f) return all;
  for (;;) {
    const long n = f->read(buf.data(), chunk);
    EXPECT_GE(n, 0);
    if (n <= 0) break;
    all.append(buf.data(), static_cast<size_t>(n));
  }
  return all;
}

// The bytes eight open readers of instances/ts/trace hold, each having
// read its first 4 KiB (the allocator's count of bytes in use, exact unlike
// RSS); SIZE_MAX when the allocator does not count.
size_t held_by_eight_readers() {
  const size_t before = mallinfo2().uordblks;
  if (before == 0) return SIZE_MAX;
  std::vector<std::unique_ptr<tracefs::File>> readers(8);
  char buf[4096];
  for (auto& f : readers) {
    EXPECT_EQ(tracefs::open("instances/ts/trace", O_RDONLY, &f), 0);
    if (f) {
      EXPECT_EQ(f->read(buf, sizeof buf), static_cast<long>(sizeof buf));
    }
  }
  return mallinfo2().uordblks - before;
}

class TraceStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tracefs::rmdir("instances/ts");
    ASSERT_EQ(tracefs::mkdir("instances/ts"), 0);
    ASSERT_GT(wr("instances/ts/buffer_size_kb", "16384"), 0);
    // About 20 MB of text: far more than a window.
    for (int i = 0; i < 200000; ++i)
      ASSERT_GT(wr("instances/ts/trace_marker", "streamed marker number " + std::to_string(i)), 0);
  }
  void TearDown() override { tracefs::rmdir("instances/ts"); }
};

TEST_F(TraceStreamTest, TheTextDoesNotDependOnTheReadSize) {
  for (const char* fmt : {"nolatency-format", "latency-format"}) {
    SCOPED_TRACE(fmt);
    ASSERT_GT(wr("instances/ts/trace_options", fmt), 0);
    const std::string big = read_in_chunks("instances/ts/trace", 1 << 20);
    EXPECT_GT(big.size(), 8u << 20);
    EXPECT_NE(big.find("streamed marker number 199999\n"), std::string::npos);
    EXPECT_EQ(read_in_chunks("instances/ts/trace", 4096), big);
    EXPECT_EQ(read_in_chunks("instances/ts/trace", 4093), big);  // reads that end mid-line
    std::string whole;
    ASSERT_GE(tracefs::read_file("instances/ts/trace", &whole), 0);
    EXPECT_EQ(whole, big);
  }
  ASSERT_GT(wr("instances/ts/trace_options", "nolatency-format"), 0);
  // The snapshot file too.
  ASSERT_GT(wr("instances/ts/snapshot", "1"), 0);
  const std::string snap = read_in_chunks("instances/ts/snapshot", 1 << 20);
  EXPECT_NE(snap.find("streamed marker number 199999\n"), std::string::npos);
  EXPECT_EQ(read_in_chunks("instances/ts/snapshot", 4096), snap);
}

// Eight readers, each having read its first 4 KiB: the process holds eight
// windows, not eight copies of the text. Measured by the allocator's count
// of bytes in use (exact, unlike RSS), against the text's own size.
TEST_F(TraceStreamTest, EachOpenReaderHoldsAWindowNotTheWholeText) {
  std::string whole;
  ASSERT_GE(tracefs::read_file("instances/ts/trace", &whole), 0);
  const size_t text = whole.size();
  whole.clear();
  whole.shrink_to_fit();
  ASSERT_GT(text, 8u << 20);
  const size_t held = held_by_eight_readers();
  if (held == SIZE_MAX) GTEST_SKIP() << "this allocator (a sanitizer's) does not count bytes in use";
  EXPECT_LT(held, text / 2) << "8 readers hold " << held << " bytes; the whole text is " << text;
  RecordProperty("bytes_held_by_8_readers", static_cast<int>(held));
}

// function_graph's layout streams too: a line waits only for its thread's
// next event within a window (output::GraphStream), not for the whole
// buffer (before, a graph-mode open held every event and its text).
TEST_F(TraceStreamTest, TheGraphLayoutStreamsToo) {
  tracefs::rmdir("instances/ts");
  ASSERT_EQ(tracefs::mkdir("instances/ts"), 0);
  ASSERT_GT(wr("instances/ts/buffer_size_kb", "16384"), 0);
  ASSERT_GT(wr("instances/ts/current_tracer", "function_graph"), 0);
  for (int i = 0; i < 200000; ++i)
    ASSERT_GT(wr("instances/ts/trace_marker", "graph marker number " + std::to_string(i)), 0);
  const std::string big = read_in_chunks("instances/ts/trace", 1 << 20);
  ASSERT_NE(big.find("# tracer: function_graph"), std::string::npos) << big.substr(0, 500);
  EXPECT_NE(big.find("/* tracing_mark_write: graph marker number 199999 */"), std::string::npos)
      << big.size() << big.substr(big.size() > 600 ? big.size() - 600 : 0);
  EXPECT_EQ(read_in_chunks("instances/ts/trace", 4093), big);
  const size_t held = held_by_eight_readers();
  if (held == SIZE_MAX) GTEST_SKIP() << "this allocator (a sanitizer's) does not count bytes in use";
  EXPECT_LT(held, big.size() / 2) << "8 readers hold " << held << " bytes; the whole text is " << big.size();
}

}  // namespace
}  // namespace usrtrace
