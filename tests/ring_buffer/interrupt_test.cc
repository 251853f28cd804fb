// A signal handler that writes while the interrupted code is mid-write, at
// every instruction boundary of the write, one after the other.
//
// The x86 trap flag makes the CPU raise SIGTRAP after each instruction. For
// k = 1, 2, ... the handler counts k traps, then writes a nested event and
// clears the flag. Whatever k, both the interrupted event and the nested one
// must be in the buffer exactly once and intact; when k falls inside a
// critical section, the kernel aborts it on signal delivery (counted in
// base::usrtrace_rseq_aborts) and the write restarts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ucontext.h>

#include <cstring>
#include <vector>

#include "base/rseq.h"
#include "testing/test_util.h"

#if defined(__SANITIZE_THREAD__)
#define USRTRACE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define USRTRACE_TSAN 1
#endif
#endif

namespace usrtrace::rb {
namespace {

using testing::Payload;

RingBuffer* g_rb;
volatile int g_steps_left;
volatile int g_nested_ok;
volatile int g_nested_tried;
constexpr uint32_t kNestedSeq = 0xfeed;

void on_trap(int, siginfo_t*, void* ctx) {
  auto* uc = static_cast<ucontext_t*>(ctx);
  g_steps_left = g_steps_left - 1;
  if (g_steps_left != 0) return;
  uc->uc_mcontext.gregs[REG_EFL] &= ~0x100LL;  // stop stepping
  Payload p = Payload::make(2, kNestedSeq, 1);
  g_nested_tried = 1;
  g_nested_ok = g_rb->write<sizeof p>(&p);
}

__attribute__((always_inline)) inline void trap_flag_on() {
  asm volatile("pushfq\n\torq $0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc");
}
__attribute__((always_inline)) inline void trap_flag_off() {
  asm volatile("pushfq\n\tandq $-257, (%%rsp)\n\tpopfq" ::: "memory", "cc");
}

enum class Path { kFast, kSlow, kSwitch };

class InterruptTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
#ifdef USRTRACE_TSAN
    GTEST_SKIP() << "ThreadSanitizer defers signal handlers, so no handler runs mid-write";
#endif
    pin_ = std::make_unique<testing::Pinned>(0);
    ASSERT_TRUE(pin_->ok);
    rb_ = testing::make_buffer(16 * 1024);
    ASSERT_NE(rb_, nullptr);
    g_rb = rb_.get();
    struct sigaction sa = {};
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGTRAP, &sa, &old_), 0);
  }
  void TearDown() override {
    if (rb_) sigaction(SIGTRAP, &old_, nullptr);
  }

  // Fills the first page so that the next 16-byte event needs a new page.
  uint32_t fill_page() {
    uint32_t n = 0;
    Payload p = Payload::make(3, 0, 0);
    // 4080 data bytes hold 255 entries of 16; leave 12 bytes free.
    for (; n < 254; ++n) EXPECT_TRUE(rb_->write<sizeof p>(&p));
    uint8_t small[4] = {};
    EXPECT_TRUE(rb_->write(small, 4));  // 8 bytes: 4 left, not enough for 20
    return n + 1;
  }

  std::unique_ptr<testing::Pinned> pin_;
  std::unique_ptr<RingBuffer> rb_;
  struct sigaction old_ = {};
};

TEST_P(InterruptTest, NestedWriteAtEveryInstruction) {
  const Path path = GetParam();
  const uint64_t aborts_before = base::usrtrace_rseq_aborts;
  int interrupted = 0;
  for (int k = 1;; ++k) {
    rb_->reset();
    uint32_t fillers = path == Path::kSwitch ? fill_page() : 0;
    Payload outer = Payload::make(1, static_cast<uint32_t>(k), 0);
    std::vector<uint8_t> var(sizeof outer);
    std::memcpy(var.data(), &outer, sizeof outer);
    g_steps_left = k;
    g_nested_ok = 0;
    g_nested_tried = 0;
    bool ok;
    trap_flag_on();
    if (path == Path::kSlow)
      ok = rb_->write(var.data(), static_cast<uint32_t>(var.size()));
    else
      ok = rb_->write<sizeof outer>(&outer);
    trap_flag_off();
    ASSERT_TRUE(ok) << "k=" << k;
    if (!g_nested_tried) break;  // k is past the end of the write
    ++interrupted;
    ASSERT_TRUE(g_nested_ok) << "k=" << k;

    // Both events, once each, intact, after the fillers.
    Event ev;
    uint32_t seen_fillers = 0, seen_outer = 0, seen_nested = 0;
    while (rb_->consume(&ev, 0)) {
      if (ev.len == 4) {
        ++seen_fillers;
        continue;
      }
      ASSERT_EQ(ev.len, sizeof(Payload)) << "k=" << k;
      Payload p;
      std::memcpy(&p, ev.data, sizeof p);
      ASSERT_TRUE(p.check()) << "torn event, k=" << k;
      if (p.writer == 3) ++seen_fillers;
      else if (p.writer == 1 && p.seq == static_cast<uint32_t>(k)) ++seen_outer;
      else if (p.writer == 2 && p.seq == kNestedSeq && p.nested == 1) ++seen_nested;
      else ADD_FAILURE() << "unexpected event, k=" << k;
    }
    EXPECT_EQ(seen_fillers, fillers) << "k=" << k;
    EXPECT_EQ(seen_outer, 1u) << "k=" << k;
    EXPECT_EQ(seen_nested, 1u) << "k=" << k;
    CpuStats s = rb_->stats(0);
    EXPECT_EQ(s.written, fillers + 2) << "k=" << k;
    ASSERT_LT(k, 20000) << "the write never ended";
  }
  // The sections were really interrupted (the kernel aborted them on signal
  // delivery) at least once per instruction inside the fast path's section.
  EXPECT_GT(interrupted, 20);
  EXPECT_GE(base::usrtrace_rseq_aborts - aborts_before, 15u);
  RecordProperty("instruction_boundaries", interrupted);
}

INSTANTIATE_TEST_SUITE_P(Paths, InterruptTest,
                         ::testing::Values(Path::kFast, Path::kSlow, Path::kSwitch),
                         [](const ::testing::TestParamInfo<Path>& i) {
                           return std::string(i.param == Path::kFast   ? "Fast"
                                              : i.param == Path::kSlow ? "Slow"
                                                                       : "PageSwitch");
                         });

}  // namespace
}  // namespace usrtrace::rb
