// A probe's bad read under dump-on-crash (src/crash): the crash handler,
// installed on top of the fault fixup's, asks base::fixup_fault() first, so
// the read records (fault) and the program goes on, with no dump; a real
// crash still dumps and dies by its signal.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "crash/crash.h"
#include "probe/fetch.h"

namespace usrtrace::probe {
namespace {

std::string temp_path(const char* name) {
  return std::string(testing::TempDir()) + "/" + name + "." + std::to_string(getpid());
}

off_t size_of(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(ProbeCrash, ABadReadIsNotACrash) {
  Definition d;
  Error e;
  ASSERT_EQ(parse("p /bin/sh:0x10 s=+0(%di):string v=+0(%si):u64 n=%dx", &d, &e), 0);  // the fixup first
  const std::string path = temp_path("probe_crash_dump");
  unlink(path.c_str());
  ASSERT_EQ(crash::set_file(path), 0);
  ASSERT_EQ(crash::set_mode(crash::DumpMode::kTop), 0);  // its handler on top of ours
  void* none = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  patch::Regs regs{};
  regs.di = 0x1000;
  regs.si = reinterpret_cast<uint64_t>(none);
  regs.dx = 5;
  RunContext ctx;
  ctx.regs = &regs;
  alignas(8) uint8_t rec[internal::kMaxRecord];
  const uint32_t len = run(d, 1, ctx, rec, sizeof rec);
  char buf[256];
  const int n = print_record(d, rec, len, buf, sizeof buf);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "(0x0) s=(fault) v=0 n=0x5");
  EXPECT_EQ(size_of(path), 0) << "no dump was written";
  crash::set_mode(crash::DumpMode::kOff);
  munmap(none, 4096);
  unlink(path.c_str());
}

// clang says so with __has_feature, not __SANITIZE_*__.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PROBE_TEST_CLANG_SANITIZER 1
#endif
#endif
#ifndef PROBE_TEST_CLANG_SANITIZER
#define PROBE_TEST_CLANG_SANITIZER 0
#endif

volatile int* g_bad = nullptr;

TEST(ProbeCrashDeathTest, ARealCrashStillDumps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child re-runs this test (threadsafe style): it finds the parent's
  // path in the environment it inherits.
  if (getenv("USRTRACE_PROBE_CRASH_DUMP") == nullptr)
    setenv("USRTRACE_PROBE_CRASH_DUMP", temp_path("probe_crash_real").c_str(), 1);
  const std::string path = getenv("USRTRACE_PROBE_CRASH_DUMP");
  unlink(path.c_str());
  // Under a sanitizer its own SEGV handler is before ours: it reports and
  // exits non-zero; else the default action, SIGSEGV.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || PROBE_TEST_CLANG_SANITIZER
  const auto died = [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); };
#else
  const auto died = testing::KilledBySignal(SIGSEGV);
#endif
  EXPECT_EXIT(
      {
        Definition d;
        Error e;
        if (parse("p /bin/sh:0x10 s=+0(%di):string", &d, &e) != 0) _exit(1);
        if (crash::set_file(path) != 0 || crash::set_mode(crash::DumpMode::kTop) != 0) _exit(2);
        g_bad = reinterpret_cast<volatile int*>(16);
        (void)*g_bad;
        _exit(0);
      },
      died, "");
  EXPECT_GT(size_of(path), 0) << "the crash was dumped";
  unlink(path.c_str());
}

}  // namespace
}  // namespace usrtrace::probe
