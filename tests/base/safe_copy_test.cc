// Fault-safe reads (src/base/safe_copy.h): good memory, unmapped and
// PROT_NONE pages, strings running into them, many threads; faults that are
// not ours still reach the handler that was there before, or kill as they
// would have.
#include "base/safe_copy.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace usrtrace::base {
namespace {

// [good page][PROT_NONE page][unmapped page]
class Pages {
 public:
  Pages() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    base_ = static_cast<char*>(
        mmap(nullptr, 3 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    mprotect(base_ + page_, page_, PROT_NONE);
    munmap(base_ + 2 * page_, page_);
  }
  ~Pages() { munmap(base_, 2 * page_); }
  char* good() const { return base_; }
  char* end_of_good() const { return base_ + page_; }
  char* none() const { return base_ + page_; }
  char* unmapped() const { return base_ + 2 * page_; }

 private:
  size_t page_;
  char* base_;
};

class SafeCopy : public testing::Test {
 protected:
  void SetUp() override { install_fault_fixup(); }
};

TEST_F(SafeCopy, GoodMemory) {
  const char src[] = "0123456789abcdef";
  char dst[sizeof src] = {};
  EXPECT_EQ(safe_copy(dst, src, sizeof src), 0);
  EXPECT_STREQ(dst, src);
  EXPECT_EQ(safe_copy(dst, nullptr, 0), 0) << "nothing to read: no fault";
  char s[8];
  EXPECT_EQ(safe_strncpy(s, "abc", sizeof s), 4) << "the NUL counted";
  EXPECT_STREQ(s, "abc");
  EXPECT_EQ(safe_strncpy(s, "", sizeof s), 1);
  EXPECT_EQ(safe_strncpy(s, "abcdefghij", 4), 4) << "cut: max, no NUL";
  EXPECT_EQ(memcmp(s, "abcd", 4), 0);
  EXPECT_EQ(safe_strncpy(s, "abc", 4), 4) << "exactly max with its NUL";
  EXPECT_EQ(s[3], '\0');
  EXPECT_EQ(safe_strncpy(s, "abc", 0), 0);
}

TEST_F(SafeCopy, UnmappedAndProtNone) {
  Pages p;
  uint64_t v = 7;
  const uint64_t before = fixed_faults();
  EXPECT_EQ(safe_copy(&v, p.unmapped(), 8), -EFAULT);
  EXPECT_EQ(safe_copy(&v, p.none(), 8), -EFAULT);
  EXPECT_EQ(safe_copy(&v, nullptr, 8), -EFAULT);
  EXPECT_EQ(safe_copy(&v, reinterpret_cast<const void*>(uintptr_t{0xffff800000000000}), 8), -EFAULT)
      << "kernel half";
  EXPECT_EQ(safe_copy(&v, reinterpret_cast<const void*>(uintptr_t{0x0000800000000000}), 8), -EFAULT)
      << "non-canonical: #GP, SIGSEGV with SI_KERNEL";
  char s[16];
  EXPECT_EQ(safe_strncpy(s, p.unmapped(), sizeof s), -EFAULT);
  EXPECT_EQ(safe_strncpy(s, p.none(), sizeof s), -EFAULT);
  EXPECT_EQ(safe_strncpy(s, reinterpret_cast<const char*>(1), sizeof s), -EFAULT);
  EXPECT_EQ(fixed_faults() - before, 8u);
}

TEST_F(SafeCopy, ReadsRunningIntoAHole) {
  Pages p;
  char* tail = p.end_of_good() - 4;
  memcpy(tail, "abcd", 4);
  char dst[16] = {};
  // A copy that crosses: -EFAULT; up to the hole: 0.
  EXPECT_EQ(safe_copy(dst, tail, 8), -EFAULT);
  EXPECT_EQ(safe_copy(dst, tail, 5), -EFAULT);
  EXPECT_EQ(safe_copy(dst, tail, 4), 0);
  EXPECT_EQ(memcmp(dst, "abcd", 4), 0);
  EXPECT_EQ(safe_copy(dst, p.end_of_good() - 16, 16), 0) << "two words ending at the hole";
  // A string without its NUL before the hole faults; with it, it does not.
  EXPECT_EQ(safe_strncpy(dst, tail, sizeof dst), -EFAULT);
  tail[3] = '\0';
  EXPECT_EQ(safe_strncpy(dst, tail, sizeof dst), 4);
  EXPECT_STREQ(dst, "abc");
  // Cut before the hole: no fault.
  tail[3] = 'd';
  EXPECT_EQ(safe_strncpy(dst, tail, 4), 4);
}

TEST_F(SafeCopy, StrncpyAgainstAReference) {
  // Every length, alignment and bound, in the middle of a page and ending
  // at the hole (its NUL the page's last byte): what strncpy would copy,
  // nothing written past it, and no fault where the string does not go.
  Pages p;
  for (int at_end = 0; at_end < 2; ++at_end) {
    for (size_t len = 0; len <= 40; ++len) {
      for (size_t align = 0; align < 16; ++align) {
        char* src = at_end ? p.end_of_good() - len - 1 : p.good() + 512 + align;
        for (size_t i = 0; i < len; ++i) src[i] = static_cast<char>('a' + (i + align) % 26);
        src[len] = '\0';
        for (size_t max = 1; max <= 48; ++max) {
          char dst[64];
          memset(dst, '#', sizeof dst);
          const long got = safe_strncpy(dst, src, max);
          const long want = static_cast<long>(len + 1 <= max ? len + 1 : max);
          ASSERT_EQ(got, want) << "len " << len << " align " << align << " max " << max << " end " << at_end;
          ASSERT_EQ(memcmp(dst, src, static_cast<size_t>(want)), 0);
          for (size_t k = static_cast<size_t>(want); k < sizeof dst; ++k) ASSERT_EQ(dst[k], '#') << k;
        }
        if (at_end) break;  // one place per length at the end
      }
    }
  }
  // Without its NUL before the hole: a fault, whatever the alignment.
  for (size_t len = 1; len <= 24; ++len) {
    char* src = p.end_of_good() - len;
    memset(src, 'z', len);
    char dst[64];
    EXPECT_EQ(safe_strncpy(dst, src, sizeof dst), -EFAULT) << len;
    EXPECT_EQ(safe_strncpy(dst, src, len), static_cast<long>(len)) << "cut before the hole: no fault";
  }
}

TEST_F(SafeCopy, ManyThreadsFaulting) {
  Pages p;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t good = uint64_t{0x1122334455667788} + static_cast<uint64_t>(t);
      for (int i = 0; i < 5000; ++i) {
        uint64_t v = 0;
        // Below mmap_min_addr: never mapped, as the freed page of Pages
        // might be once threads make their stacks.
        const char* unmapped = reinterpret_cast<const char*>(uintptr_t{0x1000});
        if (safe_copy(&v, (i + t) % 2 ? p.none() : unmapped, 8) != -EFAULT) wrong.fetch_add(1);
        if (safe_copy(&v, &good, 8) != 0 || v != good) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A handler installed after ours, which asks fixup_fault() first as
// crash/crash.cc does: the faults of the copy routines are still fixed up,
// and others are its own.
std::atomic<int> g_later_handler_calls{0};
struct sigaction g_saved_later;

TEST_F(SafeCopy, AHandlerOnTopAsksTheFixupFirst) {
  struct sigaction sa {};
  sa.sa_sigaction = [](int sig, siginfo_t* info, void* uc) {
    if (fixup_fault(sig, info, uc)) return;
    g_later_handler_calls.fetch_add(1);
    _exit(3);
  };
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &sa, &g_saved_later), 0);
  Pages p;
  uint64_t v;
  EXPECT_EQ(safe_copy(&v, p.none(), 8), -EFAULT);
  EXPECT_EQ(g_later_handler_calls.load(), 0);
  sigaction(SIGSEGV, &g_saved_later, nullptr);
}

TEST_F(SafeCopy, NotAHardwareFault) {
  // kill()'s SIGSEGV (si_code <= 0) is never a fixup, even with rip inside.
  siginfo_t info{};
  info.si_code = SI_USER;
  ucontext_t uc{};
  EXPECT_FALSE(fixup_fault(SIGSEGV, &info, &uc));
  EXPECT_FALSE(fixup_fault(SIGILL, &info, &uc));
}

// Death tests: each in a fresh process (threadsafe style re-runs the
// binary), so that the handler before ours is the one the test installs.
volatile int* g_null = nullptr;

void fault_for_real() {
  // volatile: the compiler may not drop or move the read.
  g_null = reinterpret_cast<volatile int*>(16);
  (void)*g_null;
}

TEST(SafeCopyDeathTest, OtherFaultsReachThePreviousHandler) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction sa {};
        sa.sa_sigaction = [](int, siginfo_t*, void*) { _exit(42); };
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, nullptr);
        install_fault_fixup();
        uint64_t v;
        if (safe_copy(&v, nullptr, 8) != -EFAULT) _exit(1);
        fault_for_real();
        _exit(0);
      },
      testing::ExitedWithCode(42), "");
}

TEST(SafeCopyDeathTest, OtherFaultsStillKillByDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's own SEGV handler is the previous action: it reports and
  // exits non-zero.
  EXPECT_EXIT(
      {
        install_fault_fixup();
        fault_for_real();
        _exit(0);
      },
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }, "");
#else
  EXPECT_EXIT(
      {
        signal(SIGSEGV, SIG_DFL);
        install_fault_fixup();
        uint64_t v;
        if (safe_copy(&v, nullptr, 8) != -EFAULT) _exit(1);
        fault_for_real();
        _exit(0);
      },
      testing::KilledBySignal(SIGSEGV), "");
#endif
}

}  // namespace
}  // namespace usrtrace::base
