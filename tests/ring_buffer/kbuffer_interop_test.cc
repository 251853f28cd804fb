// Pages taken from our buffers, handed unchanged to libtraceevent's kbuffer
// (the parser trace-cmd and KernelShark use): every entry's payload and
// timestamp must come out as written.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include <kbuffer.h>  // no extern "C" guard of its own (libtraceevent 1.7.1)
}

#include "clock/trace_clock.h"
#include "ring_buffer/ring_buffer.h"
#include "testing/test_util.h"

namespace usrtrace::rb {
namespace {

using testing::Payload;

struct KEvent {
  uint64_t ts;
  std::vector<uint8_t> data;
};

struct KPage {
  std::vector<KEvent> events;
  int missed = 0;
};

KPage parse_with_kbuffer(uint8_t* page) {
  KPage out;
  kbuffer* kb = kbuffer_alloc(KBUFFER_LSIZE_8, KBUFFER_ENDIAN_LITTLE);
  EXPECT_NE(kb, nullptr);
  EXPECT_EQ(kbuffer_load_subbuffer(kb, page), 0);
  out.missed = kbuffer_missed_events(kb);
  unsigned long long ts = 0;
  for (void* d = kbuffer_read_event(kb, &ts); d; d = kbuffer_next_event(kb, &ts)) {
    auto* p = static_cast<uint8_t*>(d);
    int size = kbuffer_event_size(kb);
    out.events.push_back({ts, std::vector<uint8_t>(p, p + size)});
  }
  kbuffer_free(kb);
  return out;
}

// Writes `n` events on CPU 0, recording for each the TSC before and after.
struct Written {
  Payload p;
  uint64_t before, after;
};

class KbufferInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pin_ = std::make_unique<testing::Pinned>(0);
    ASSERT_TRUE(pin_->ok);
    rb_ = testing::make_buffer(64 * 1024);
    ASSERT_NE(rb_, nullptr);
  }
  std::vector<std::vector<uint8_t>> drain_pages() {
    std::vector<std::vector<uint8_t>> pages;
    std::vector<uint8_t> page(rb_->page_size(0));
    while (rb_->read_page(0, page.data(), page.size(), false) > 0) pages.push_back(page);
    return pages;
  }
  std::unique_ptr<testing::Pinned> pin_;
  std::unique_ptr<RingBuffer> rb_;
};

TEST_F(KbufferInteropTest, ShortEventsPayloadAndTimestamps) {
  std::vector<Written> w;
  for (uint32_t i = 0; i < 400; ++i) {  // > 3 pages of 16-byte payloads
    Written x{Payload::make(1, i, 0), clock::rdtsc(), 0};
    ASSERT_TRUE(rb_->write<sizeof(Payload)>(&x.p));
    x.after = clock::rdtsc();
    w.push_back(x);
  }
  size_t i = 0;
  uint64_t prev = 0;
  for (auto& page : drain_pages()) {
    KPage k = parse_with_kbuffer(page.data());
    EXPECT_EQ(k.missed, 0);
    for (auto& e : k.events) {
      ASSERT_LT(i, w.size());
      ASSERT_EQ(e.data.size(), sizeof(Payload));
      EXPECT_EQ(std::memcmp(e.data.data(), &w[i].p, sizeof(Payload)), 0) << "event " << i;
      // The time stamp is the rdtsc read inside the write.
      EXPECT_GE(e.ts, w[i].before) << "event " << i;
      EXPECT_LE(e.ts, w[i].after) << "event " << i;
      EXPECT_GE(e.ts, prev);
      prev = e.ts;
      ++i;
    }
  }
  EXPECT_EQ(i, w.size());
}

TEST_F(KbufferInteropTest, LongFormOddSizesTimeExtendsAndPadding) {
  // Long-form entries (payload > 112 bytes), odd sizes, a gap that needs a
  // time extend (> 2^27 clock ticks, waited for by reading the clock, not by
  // sleeping), and a partially consumed page handed out with padding.
  std::vector<std::vector<uint8_t>> sent;
  std::vector<std::pair<uint64_t, uint64_t>> window;
  auto put = [&](size_t len, uint8_t fill) {
    std::vector<uint8_t> d(len);
    for (size_t j = 0; j < len; ++j) d[j] = static_cast<uint8_t>(fill + j);
    uint64_t b = clock::rdtsc();
    ASSERT_TRUE(rb_->write(d.data(), static_cast<uint32_t>(len)));
    window.push_back({b, clock::rdtsc()});
    sent.push_back(d);
  };
  put(200, 1);
  put(13, 2);
  put(sizeof(Payload), 3);
  uint64_t t0 = clock::rdtsc();
  while (clock::rdtsc() - t0 < (2ull << kTsShift)) {
  }
  put(500, 4);
  put(4, 5);
  put(1000, 6);

  // Consume the first event so that the first page handed out starts with a
  // discarded entry covering it.
  Event ev;
  ASSERT_TRUE(rb_->consume(&ev, 0));
  ASSERT_EQ(ev.len, 200u);

  size_t i = 1;
  bool saw_extend = false;
  for (auto& page : drain_pages()) {
    for (auto& pe : testing::walk_page(page.data()))
      if (pe.type_len == kTypeTimeExtend) saw_extend = true;
    KPage k = parse_with_kbuffer(page.data());
    for (auto& e : k.events) {
      ASSERT_LT(i, sent.size());
      const auto& want = sent[i];
      ASSERT_GE(e.data.size(), want.size());
      EXPECT_LE(e.data.size(), round_up4(static_cast<uint32_t>(want.size())));
      EXPECT_EQ(std::memcmp(e.data.data(), want.data(), want.size()), 0) << "event " << i;
      for (size_t j = want.size(); j < e.data.size(); ++j) EXPECT_EQ(e.data[j], 0) << "tail byte";
      EXPECT_GE(e.ts, window[i].first) << "event " << i;
      EXPECT_LE(e.ts, window[i].second) << "event " << i;
      ++i;
    }
  }
  EXPECT_EQ(i, sent.size());
  EXPECT_TRUE(saw_extend);
}

TEST_F(KbufferInteropTest, AbsoluteTimeStamps) {
  rb_->set_time_stamp_abs(true);
  std::vector<Written> w;
  for (uint32_t i = 0; i < 50; ++i) {
    Written x{Payload::make(2, i, 0), clock::rdtsc(), 0};
    ASSERT_TRUE(rb_->write<sizeof(Payload)>(&x.p));
    x.after = clock::rdtsc();
    w.push_back(x);
  }
  auto pages = drain_pages();
  ASSERT_FALSE(pages.empty());
  int stamps = 0;
  for (auto& pe : testing::walk_page(pages[0].data())) stamps += pe.type_len == kTypeTimeStamp;
  EXPECT_EQ(stamps, 50);
  size_t i = 0;
  for (auto& page : pages)
    for (auto& e : parse_with_kbuffer(page.data()).events) {
      ASSERT_LT(i, w.size());
      EXPECT_EQ(std::memcmp(e.data.data(), &w[i].p, sizeof(Payload)), 0);
      EXPECT_GE(e.ts, w[i].before);
      EXPECT_LE(e.ts, w[i].after);
      ++i;
    }
  EXPECT_EQ(i, w.size());
}

TEST_F(KbufferInteropTest, MissedEventsAreFlaggedWithTheirCount) {
  // Discard mode: fill the buffer, let writes be dropped, consume, write
  // again: the page after the drops carries the count.
  rb_ = testing::make_buffer(8 * 1024, Mode::kDiscard);  // 3 pages
  ASSERT_NE(rb_, nullptr);
  uint32_t seq = 0, dropped = 0;
  while (dropped < 10) {
    Payload p = Payload::make(3, seq++, 0);
    if (!rb_->write<sizeof p>(&p)) ++dropped;
  }
  std::vector<uint8_t> page(4096);
  int pages_read = 0;
  while (rb_->read_page(0, page.data(), page.size(), true) > 0) {
    EXPECT_EQ(parse_with_kbuffer(page.data()).missed, 0);
    ++pages_read;
  }
  EXPECT_GE(pages_read, 2);
  // Fill the tail page and switch to the next, which follows the drops.
  for (int i = 0; i < 300; ++i) {
    Payload p = Payload::make(3, seq++, 0);
    rb_->write<sizeof p>(&p);
  }
  int missed = 0;
  while (rb_->read_page(0, page.data(), page.size(), false) > 0) {
    int m = parse_with_kbuffer(page.data()).missed;
    if (m) missed = m;
  }
  EXPECT_EQ(missed, static_cast<int>(dropped));
}

// The header files we generate are byte-identical to the running kernel's.
TEST(KernelHeaderFilesTest, HeaderPageAndEventMatchTracefs) {
  const char* dir = "/sys/kernel/tracing";
  struct stat st;
  if (stat("/sys/kernel/tracing/events/header_page", &st) != 0) {
    mkdir(dir, 0755);
    mount("nodev", dir, "tracefs", 0, nullptr);
  }
  std::ifstream hp("/sys/kernel/tracing/events/header_page");
  std::ifstream he("/sys/kernel/tracing/events/header_event");
  if (!hp || !he) GTEST_SKIP() << "tracefs not available (needs root and a kernel with tracefs)";
  std::stringstream a, b;
  a << hp.rdbuf();
  b << he.rdbuf();
  EXPECT_EQ(a.str(), header_page_text(4096));
  EXPECT_EQ(b.str(), header_event_text());
}

}  // namespace
}  // namespace usrtrace::rb
