// record -K's page rewrite: the kernel's event ids in a page as
// trace_pipe_raw hands it out, turned into the file's, and nothing else of
// the page touched.
#include "record/kernel_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ring_buffer/page_format.h"

namespace usrtrace::tracedat {
namespace {

class Page {
 public:
  explicit Page(uint32_t size = 4096) : bytes_(size, 0) {
    const uint64_t ts = 1000;
    std::memcpy(bytes_.data(), &ts, 8);
  }
  // A data entry of `payload` bytes (a multiple of 4) whose common_type is
  // `id`; the rest of its payload 0xAB. Returns the offset of its type.
  size_t data(uint16_t id, uint32_t payload) {
    const bool long_form = payload > rb::kMaxShortPayload;
    word(rb::encode_header(long_form ? 0 : payload / 4, 7));
    if (long_form) word(payload + 4);
    const size_t at = rb::kPageHeaderSize + len_;
    for (uint32_t i = 0; i < payload; ++i) bytes_[at + i] = 0xAB;
    std::memcpy(&bytes_[at], &id, 2);
    len_ += payload;
    commit();
    return at;
  }
  void extend() {
    word(rb::encode_header(rb::kTypeTimeExtend, 5));
    word(3);
  }
  // A discarded entry: its bytes look like a record of `id`, and are not one.
  void padding(uint16_t id) {
    word(rb::encode_header(rb::kTypePadding, 1));
    word(12);  // 4 + 12 bytes in all
    word(id);
    word(0);
  }
  void word(uint32_t w) {
    std::memcpy(&bytes_[rb::kPageHeaderSize + len_], &w, 4);
    len_ += 4;
    commit();
  }
  void commit() {
    const uint64_t c = len_;
    std::memcpy(&bytes_[8], &c, 8);
  }
  uint16_t type_at(size_t at) const {
    uint16_t id;
    std::memcpy(&id, &bytes_[at], 2);
    return id;
  }
  std::vector<uint8_t> bytes_;
  uint32_t len_ = 0;
};

std::vector<uint16_t> table() {
  std::vector<uint16_t> ids(65536, kKernelIdUnknown);
  ids[372] = kKernelIdFirst;
  ids[373] = kKernelIdFirst + 1;
  ids[5] = 5;
  return ids;
}

TEST(KernelSource, RemapRewritesEachRecordsTypeAndNothingElse) {
  Page p;
  const size_t a = p.data(372, 8);
  p.extend();
  const size_t b = p.data(373, 120);  // the long form
  p.padding(372);
  const size_t c = p.data(5, 16);
  const size_t d = p.data(400, 4);  // not one we enabled
  std::vector<uint8_t> before = p.bytes_;
  ASSERT_TRUE(remap_page_ids(p.bytes_.data(), 4096, table()));
  EXPECT_EQ(p.type_at(a), kKernelIdFirst);
  EXPECT_EQ(p.type_at(b), kKernelIdFirst + 1);
  EXPECT_EQ(p.type_at(c), 5);
  EXPECT_EQ(p.type_at(d), kKernelIdUnknown);
  for (size_t at : {a, b, c, d}) std::memcpy(&before[at], &p.bytes_[at], 2);
  EXPECT_EQ(before, p.bytes_) << "only the four types changed (not the padding's bytes)";
}

TEST(KernelSource, APageThatDoesNotWalkIsRefusedFromTheBadEntryOn) {
  Page p;
  const size_t a = p.data(372, 8);
  p.word(rb::encode_header(0, 1));
  p.word(5000);  // a long entry longer than the page
  EXPECT_FALSE(remap_page_ids(p.bytes_.data(), 4096, table()));
  EXPECT_EQ(p.type_at(a), kKernelIdFirst) << "what came before it is rewritten";

  Page q;
  const uint64_t too_long = 5000;
  std::memcpy(&q.bytes_[8], &too_long, 8);
  EXPECT_FALSE(remap_page_ids(q.bytes_.data(), 4096, table()));
  EXPECT_FALSE(remap_page_ids(q.bytes_.data(), 8, table()));
}

TEST(KernelSource, TheKernelClockIsTheOneWhoseValuesAreOurs) {
  for (const char* tsc : {"local", "global", "perf", "x86-tsc"}) EXPECT_EQ(kernel_clock_for(tsc), "x86-tsc");
  for (const char* same : {"mono", "mono_raw", "boot", "tai"}) EXPECT_EQ(kernel_clock_for(same), same);
  EXPECT_EQ(kernel_clock_for("counter"), "");
  EXPECT_EQ(kernel_clock_for("uptime"), "");
}

}  // namespace
}  // namespace usrtrace::tracedat
