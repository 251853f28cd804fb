#include "ring_buffer/page_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace usrtrace::rb {
namespace {

// Builds pages by hand, entry by entry, as a reference independent of the
// writer.
class PageBuilder {
 public:
  explicit PageBuilder(uint64_t ts, uint32_t size = 4096) : page_(size, 0) { put64(0, ts); }
  void word(uint32_t w) { put32(w); }
  void data(uint32_t delta, const std::vector<uint8_t>& payload) {
    EntryLayout L = entry_layout(static_cast<uint32_t>(payload.size()));
    put32(encode_header(L.type_len, delta));
    if (L.type_len == 0) put32(L.payload + 4);
    size_t at = off_;
    off_ += L.payload;
    std::memcpy(&page_[16 + at], payload.data(), payload.size());
  }
  uint8_t* finish(uint64_t flags = 0) {
    put64(8, off_ | flags);
    return page_.data();
  }
  uint32_t len() const { return off_; }

 private:
  void put32(uint32_t v) {
    std::memcpy(&page_[16 + off_], &v, 4);
    off_ += 4;
  }
  void put64(size_t at, uint64_t v) { std::memcpy(&page_[at], &v, 8); }
  std::vector<uint8_t> page_;
  uint32_t off_ = 0;
};

TEST(EntryLayoutTest, ShortLongAndRounding) {
  EXPECT_EQ(entry_layout(0).size, 8u);  // a 0-byte payload counts as 4, as in the kernel
  EXPECT_EQ(entry_layout(1).type_len, 1u);
  EXPECT_EQ(entry_layout(28).size, 32u);
  EXPECT_EQ(entry_layout(112).type_len, 28u);
  EXPECT_EQ(entry_layout(113).type_len, 0u);
  EXPECT_EQ(entry_layout(113).header, 8u);
  EXPECT_EQ(entry_layout(113).size, 8u + 116u);
}

TEST(PageWalkerTest, AllEntryKinds) {
  PageBuilder b(1000);
  b.data(0, {1, 2, 3, 4});                    // at 1000
  b.word(encode_header(kTypeTimeExtend, 5));  // +5 + (2 << 27)
  b.word(2);
  b.data(0, std::vector<uint8_t>(200, 7));  // long form
  b.word(encode_header(kTypePadding, 3));   // discarded entry: 4 + array[0] bytes
  b.word(8);                                // array[0] counts itself
  b.word(0xdeadbeef);
  b.data(10, {9, 9, 9, 9});
  b.word(encode_header(kTypeTimeStamp, 77));  // absolute: (1 << 27) + 77
  b.word(1);
  b.data(0, {5, 5, 5, 5});
  uint8_t* page = b.finish();
  PageWalker w(page + 16, b.len(), 1000);
  Entry e;
  ASSERT_EQ(w.next(&e), PageWalker::Step::kData);
  EXPECT_EQ(e.ts, 1000u);
  ASSERT_EQ(w.next(&e), PageWalker::Step::kOther);
  EXPECT_EQ(e.type_len, kTypeTimeExtend);
  ASSERT_EQ(w.next(&e), PageWalker::Step::kData);
  EXPECT_EQ(e.ts, 1005u + (2ull << 27));
  EXPECT_EQ(e.payload_len, 200u);
  EXPECT_EQ(e.payload[199], 7);
  ASSERT_EQ(w.next(&e), PageWalker::Step::kOther);
  EXPECT_EQ(e.size, 12u);
  ASSERT_EQ(w.next(&e), PageWalker::Step::kData);
  EXPECT_EQ(e.ts, 1005u + (2ull << 27) + 3 + 10);
  ASSERT_EQ(w.next(&e), PageWalker::Step::kOther);
  ASSERT_EQ(w.next(&e), PageWalker::Step::kData);
  EXPECT_EQ(e.ts, (1ull << 27) + 77);
  EXPECT_EQ(w.next(&e), PageWalker::Step::kEnd);
}

TEST(PageWalkerTest, PaddingWithZeroDeltaEndsThePage) {
  PageBuilder b(0);
  b.data(0, {1, 1, 1, 1});
  b.word(encode_header(kTypePadding, 0));
  b.data(0, {2, 2, 2, 2});  // never reached
  uint8_t* page = b.finish();
  PageWalker w(page + 16, b.len(), 0);
  Entry e;
  EXPECT_TRUE(w.next_data(&e));
  EXPECT_FALSE(w.next_data(&e));
  EXPECT_FALSE(w.corrupt());
}

// Untrusted input: every length that points outside the data is refused.
TEST(PageWalkerMalformed, LengthsPastTheEnd) {
  const uint32_t cases[][2] = {
      {encode_header(0, 0), 5000},             // long form past the end
      {encode_header(0, 0), 2},                // long form shorter than itself
      {encode_header(kTypePadding, 1), 4000},  // discarded entry past the end
      {encode_header(28, 0), 0},               // short form of 116 bytes in 8
  };
  for (const auto& c : cases) {
    uint8_t data[8];
    std::memcpy(data, &c[0], 4);
    std::memcpy(data + 4, &c[1], 4);
    PageWalker w(data, sizeof data, 0);
    Entry e;
    EXPECT_FALSE(w.next_data(&e));
    EXPECT_TRUE(w.corrupt()) << std::hex << c[0];
  }
  uint8_t three[3] = {1, 0, 0};
  PageWalker w(three, sizeof three, 0);
  Entry e;
  EXPECT_EQ(w.next(&e), PageWalker::Step::kCorrupt);
  uint32_t ext = encode_header(kTypeTimeExtend, 1);
  PageWalker w2(reinterpret_cast<uint8_t*>(&ext), 4, 0);
  EXPECT_EQ(w2.next(&e), PageWalker::Step::kCorrupt);
}

TEST(HeaderTextTest, MatchesTheKernelFiles) {
  EXPECT_EQ(header_page_text(4096),
            "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
            "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
            "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
            "\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n");
  EXPECT_NE(header_page_text(8192).find("size:8176;"), std::string::npos);
  EXPECT_NE(header_event_text().find("\ttime_stamp : type == 31\n"), std::string::npos);
}

}  // namespace
}  // namespace usrtrace::rb
