// The -fpatchable-function-entry engine on its own: discovery, patching,
// the trampoline and the return hook, the int3 protocol under concurrent
// callers, and the exception/longjmp/dlopen hooks, against the stand-in core
// (standin_core.cc) rather than src/function/core.cc.
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures/patchable_fixture.h"
#include "function/function.h"
#include "function/patch_internal.h"
#include "standin_core.h"

namespace patch = usrtrace::function::patch;
namespace internal = usrtrace::function::patch::internal;

namespace {

template <typename F>
uint64_t addr(F* f) {
  return reinterpret_cast<uint64_t>(reinterpret_cast<void*>(f));
}

const void* object_of(uint64_t a) {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(a), &info) ? info.dli_fbase : nullptr;
}

// The patchable functions of the object holding `anchor`.
std::vector<uint64_t> sites_in_object_of(uint64_t anchor) {
  std::vector<uint64_t> out;
  for (uint64_t fn : patch::patchable_functions())
    if (object_of(fn) == object_of(anchor)) out.push_back(fn);
  return out;
}

int apply(std::vector<uint64_t> wanted) {
  std::sort(wanted.begin(), wanted.end());
  std::string why;
  const int rc = patch::apply(wanted, &why);
  EXPECT_EQ(rc, 0) << why;
  return rc;
}

bool is_call_to_stub(uint64_t fn) {
  const std::vector<uint8_t> b = internal::read_site(fn, 5);
  if (b[0] != 0xe8) return false;
  int32_t rel;
  std::memcpy(&rel, b.data() + 1, 4);
  const uint64_t stub = internal::stub_for(fn);
  return stub != 0 && fn + 5 + static_cast<uint64_t>(static_cast<int64_t>(rel)) == stub;
}

class PatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    standin::reset();
    standin::set_redirect(false);
  }
  void TearDown() override {
    // Every test leaves every site a nop, and this thread's shadow stack empty.
    std::string why;
    EXPECT_EQ(patch::apply({}, &why), 0) << why;
    for (uint64_t fn : sites_in_object_of(addr(&fixture_count)))
      EXPECT_EQ(internal::classify(internal::read_site(fn, 5).data(), 5).len, 5) << std::hex << fn;
    EXPECT_EQ(standin::depth(), 0);
    EXPECT_EQ(standin::misaligned_calls(), 0u);
    standin::set_redirect(false);
    standin::set_clobber(false);
    internal::set_vector_mode(internal::detect_vector_mode());
  }
};

// The vector modes this CPU can run (trampoline.cc): 0 (xmm) always, 1
// (ymm) with AVX, 2 (zmm) with AVX-512.
std::vector<uint8_t> runnable_vector_modes() {
  std::vector<uint8_t> modes{0};
  if (internal::detect_vector_mode() >= 1) modes.push_back(1);
  if (internal::detect_vector_mode() >= 2) modes.push_back(2);
  return modes;
}
// Whether mode `m` keeps arguments of `bytes`-byte vectors whole.
bool mode_keeps(uint8_t m, int bytes) { return (bytes == 32 && m >= 1) || (bytes == 64 && m == 2); }

// ---- Nop decoding --------------------------------------------------------

TEST(PatchNops, DecodesTheCompilersForms) {
  const uint8_t gcc[] = {0x90, 0x90, 0x90, 0x90, 0x90, 0xc3};
  const uint8_t clang5[] = {0x0f, 0x1f, 0x44, 0x00, 0x08, 0xc3};
  const uint8_t clang6[] = {0x66, 0x0f, 0x1f, 0x44, 0x00, 0x08, 0xc3};
  const uint8_t clang8[] = {0x0f, 0x1f, 0x84, 0x00, 0x00, 0x02, 0x00, 0x00, 0xc3};
  const uint8_t clang11[] = {0x2e, 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x02, 0x00, 0x00, 0x90, 0xc3};
  const uint8_t three_three[] = {0x0f, 0x1f, 0x00, 0x0f, 0x1f, 0x00, 0xc3};
  internal::SiteShape s = internal::classify(gcc, sizeof gcc);
  EXPECT_EQ(s.len, 5);
  EXPECT_EQ(s.insns, 5);
  s = internal::classify(clang5, sizeof clang5);
  EXPECT_EQ(s.len, 5);
  EXPECT_EQ(s.insns, 1);
  s = internal::classify(clang6, sizeof clang6);
  EXPECT_EQ(s.len, 6);
  EXPECT_EQ(s.insns, 1);
  s = internal::classify(clang8, sizeof clang8);
  EXPECT_EQ(s.len, 8);
  s = internal::classify(clang11, sizeof clang11);
  EXPECT_EQ(s.len, 10);
  EXPECT_EQ(s.insns, 1);
  s = internal::classify(three_three, sizeof three_three);
  EXPECT_EQ(s.len, 6);
  EXPECT_EQ(s.insns, 2);
  EXPECT_EQ(internal::nop_length(internal::kNop5, 5), 5u);
}

TEST(PatchNopsMalformed, RefusesWhatIsNotANop) {
  const uint8_t call[] = {0xe8, 0x00, 0x00, 0x00, 0x00};
  const uint8_t push[] = {0x55, 0x48, 0x89, 0xe5, 0x90};
  const uint8_t short_run[] = {0x90, 0x90, 0x90, 0x55, 0x90};
  const uint8_t rex_xchg[] = {0x41, 0x90, 0x90, 0x90, 0x90, 0x90};  // xchg %eax,%r8d
  const uint8_t nop_reg1[] = {0x0f, 0x1f, 0x48, 0x00, 0x90};        // 0f 1f /1: not a nop
  const uint8_t truncated[] = {0x0f, 0x1f, 0x44};
  for (auto [p, n] : {std::pair{call, sizeof call},
                      {push, sizeof push},
                      {short_run, sizeof short_run},
                      {rex_xchg, sizeof rex_xchg},
                      {nop_reg1, sizeof nop_reg1},
                      {truncated, sizeof truncated}}) {
    const internal::SiteShape s = internal::classify(p, n);
    EXPECT_EQ(s.len, 0) << std::hex << int(p[0]);
    EXPECT_NE(s.why, nullptr);
  }
}

// ---- Discovery and patching ---------------------------------------------

TEST_F(PatchTest, DiscoveryFindsExactlyTheFixtureFunctions) {
  std::set<uint64_t> expected;
  for (const char* name : kFixtureFunctions) {
    void* f = dlsym(RTLD_DEFAULT, name);
    ASSERT_NE(f, nullptr) << name;
    expected.insert(addr(f));
  }
  const std::vector<uint64_t> found = sites_in_object_of(addr(&fixture_count));
  EXPECT_EQ(std::set<uint64_t>(found.begin(), found.end()), expected);
  EXPECT_TRUE(std::is_sorted(found.begin(), found.end()));
  // Nothing of the test program itself (not compiled with the flag), nor of
  // usrtrace.
  EXPECT_TRUE(sites_in_object_of(addr(&internal::classify)).empty());
  for (const internal::Refused& r : internal::refused_sites()) ADD_FAILURE() << r.object << ": " << r.why;
}

TEST_F(PatchTest, ApplyPatchesAndUnpatches) {
  const uint64_t fn = addr(&fixture_add);
  const std::vector<uint8_t> before = internal::read_site(fn, 5);
  standin::watch(fn);
  ASSERT_EQ(apply({fn}), 0);
  EXPECT_TRUE(is_call_to_stub(fn));
  // The neighbours were left alone.
  EXPECT_FALSE(is_call_to_stub(addr(&fixture_count)));
  EXPECT_EQ(fixture_add(2, 3), 5);
  EXPECT_EQ(standin::entries(fn), 1u);
  ASSERT_EQ(apply({}), 0);
  const std::vector<uint8_t> after = internal::read_site(fn, 5);
  // One 5-byte nop: the compiler's own when it was one (clang), else ours.
  EXPECT_EQ(internal::nop_length(after.data(), 5), 5u);
  if (internal::nop_length(before.data(), 5) == 5) {
    EXPECT_EQ(after, before);
  } else {
    EXPECT_EQ(after, std::vector<uint8_t>(internal::kNop5, internal::kNop5 + 5));
  }
  EXPECT_EQ(fixture_add(2, 3), 5);
  EXPECT_EQ(standin::entries(fn), 1u);
  // And again: a converted site flips the same way.
  ASSERT_EQ(apply({fn}), 0);
  EXPECT_TRUE(is_call_to_stub(fn));
  EXPECT_EQ(fixture_add(4, 5), 9);
  EXPECT_EQ(standin::entries(fn), 2u);
}

TEST_F(PatchTest, StubIsWithinReachAndJumpsToTheTrampoline) {
  const uint64_t fn = addr(&fixture_add);
  ASSERT_EQ(apply({fn}), 0);
  const uint64_t stub = internal::stub_for(fn);
  ASSERT_NE(stub, 0u);
  const int64_t dist = static_cast<int64_t>(stub) - static_cast<int64_t>(fn + 5);
  EXPECT_LT(dist, int64_t{1} << 31);
  EXPECT_GE(dist, -(int64_t{1} << 31));
  const auto* b = reinterpret_cast<const uint8_t*>(stub);
  EXPECT_EQ(b[0], 0xff);
  EXPECT_EQ(b[1], 0x25);
  uint64_t target;
  std::memcpy(&target, b + 6, 8);
  EXPECT_EQ(target, addr(&usrtrace_function_trampoline));
}

TEST_F(PatchTest, ApplyRejectsWhatIsNotPatchable) {
  std::string why;
  EXPECT_EQ(patch::apply({addr(&internal::classify)}, &why), -EINVAL);
  EXPECT_NE(why.find("not a patchable function"), std::string::npos) << why;
  EXPECT_FALSE(is_call_to_stub(addr(&fixture_add)));
  std::vector<uint64_t> unsorted = {addr(&fixture_count), addr(&fixture_add)};
  std::sort(unsorted.rbegin(), unsorted.rend());
  EXPECT_EQ(patch::apply(unsorted, &why), -EINVAL);
}

// ---- The trampoline and the return hook --------------------------------

TEST_F(PatchTest, TrampolineKeepsArgumentsAndResults) {
  const std::vector<uint64_t> all = sites_in_object_of(addr(&fixture_count));
  for (uint64_t fn :
       {addr(&fixture_pair), addr(&fixture_mix), addr(&fixture_sum_variadic), addr(&fixture_ld)})
    standin::watch(fn);
  for (bool redirect : {false, true}) {
    SCOPED_TRACE(redirect ? "return hook" : "entry only");
    standin::set_redirect(redirect);
    ASSERT_EQ(apply(all), 0);
    const FixturePair p = fixture_pair(7, 11);
    EXPECT_EQ(p.a, 21);
    EXPECT_EQ(p.b, 55);
    EXPECT_DOUBLE_EQ(fixture_mix(1, 2, 3, 4, 5, 6, 7, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5),
                     7654321 + 0.5 + 3 + 10 + 28 + 72 + 176 + 416 + 960 + 2176);
    EXPECT_DOUBLE_EQ(fixture_sum_variadic(4, 1.25, 2.5, 3.75, 5.0), 12.5);
    EXPECT_EQ(fixture_ld(1.5L), 4.5L);
    ASSERT_EQ(apply({}), 0);
  }
  EXPECT_EQ(standin::entries(addr(&fixture_pair)), 2u);
  EXPECT_EQ(standin::exits(addr(&fixture_pair)), 1u);
  EXPECT_EQ(standin::exits(addr(&fixture_ld)), 1u);
  // The parent is the return address in this test.
  EXPECT_EQ(object_of(standin::last_parent()), object_of(addr(&internal::classify)));
}

// Calls fn(a, b) with rsp = 0 mod 16 at fn's entry, where the ABI has 8:
// what gcc's -fipa-stack-alignment does for a leaf of the same unit, so
// that the leaf's patched entry reaches the trampoline "misaligned".
extern "C" int misaligned_call2(int (*fn)(int, int), int a, int b);
asm(R"(
    .pushsection .text
    .globl misaligned_call2
    .hidden misaligned_call2
    .type misaligned_call2, @function
misaligned_call2:
    .cfi_startproc
    pushq %rbx
    .cfi_adjust_cfa_offset 8
    .cfi_rel_offset rbx, 0
    movq %rsp, %rbx
    .cfi_def_cfa_register rbx
    andq $-16, %rsp
    subq $8, %rsp
    movq %rdi, %rax
    movl %esi, %edi
    movl %edx, %esi
    call *%rax
    movq %rbx, %rsp
    .cfi_def_cfa_register rsp
    popq %rbx
    .cfi_adjust_cfa_offset -8
    .cfi_restore rbx
    ret
    .cfi_endproc
    .size misaligned_call2, .-misaligned_call2
    .popsection
)");

TEST_F(PatchTest, EntryWithTheStackMisalignedAsGccLeavesIt) {
  const uint64_t fn = addr(&fixture_add);
  standin::watch(fn);
  standin::set_redirect(true);
  standin::set_clobber(true);
  ASSERT_EQ(apply({fn}), 0);
  uint64_t calls = 0;
  for (uint8_t m : runnable_vector_modes()) {
    SCOPED_TRACE("vector mode " + std::to_string(m));
    internal::set_vector_mode(m);
    EXPECT_EQ(misaligned_call2(&fixture_add, 40, 2), 42);
    EXPECT_EQ(fixture_add(1, 2), 3);  // and aligned, as the ABI has it
    calls += 2;
  }
  ASSERT_EQ(apply({}), 0);
  EXPECT_EQ(standin::entries(fn), calls);
  EXPECT_EQ(standin::exits(fn), calls);
  // The core was called with the stack the ABI promises it (TearDown).
}

// Whole vector registers: the core may clobber every call-clobbered bit of
// them (the stand-in does, as glibc's AVX2 functions would), and the
// function must still get its __m256 / __m512 arguments and its caller the
// result, in every mode that the CPU's features select.
__attribute__((target("avx2"), noinline)) bool check_v256() {
  FixtureV4 v[8];
  FixtureV4 want = {0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) {
    for (unsigned l = 0; l < 4; ++l) v[i][l] = 0x0101010101010101ULL * unsigned(i + 1) + l * 0x100000001ULL;
    want += v[i] << i;
  }
  const FixtureV4 got = fixture_v256(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
  bool ok = true;
  for (int l = 0; l < 4; ++l) ok = ok && got[l] == want[l];
  return ok;
}
__attribute__((target("avx512f"), noinline)) bool check_v512() {
  FixtureV8 v[8];
  FixtureV8 want = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) {
    for (unsigned l = 0; l < 8; ++l) v[i][l] = 0x0101010101010101ULL * unsigned(i + 1) + l * 0x100000001ULL;
    want += v[i] << i;
  }
  const FixtureV8 got = fixture_v512(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
  bool ok = true;
  for (int l = 0; l < 8; ++l) ok = ok && got[l] == want[l];
  return ok;
}

TEST_F(PatchTest, TrampolineKeepsWholeVectorRegistersInEveryMode) {
  const bool avx2 = __builtin_cpu_supports("avx2"), avx512 = __builtin_cpu_supports("avx512f");
  if (!avx2) GTEST_SKIP() << "this CPU has no AVX2: no __m256 argument can be passed in a register";
  const std::vector<uint64_t> all = sites_in_object_of(addr(&fixture_count));
  standin::watch(addr(&fixture_v256));
  standin::watch(addr(&fixture_v512));
  standin::set_clobber(true);
  // The clobber itself is real: a plain call after it would see garbage.
  // Without the return hook the results are the function's own, so only
  // arguments are at stake; with it, results too.
  for (bool redirect : {false, true}) {
    standin::set_redirect(redirect);
    ASSERT_EQ(apply(all), 0);
    for (uint8_t m : runnable_vector_modes()) {
      SCOPED_TRACE(std::string(redirect ? "return hook" : "entry only") + ", vector mode " +
                   std::to_string(m));
      internal::set_vector_mode(m);
      if (mode_keeps(m, 32)) {
        EXPECT_TRUE(check_v256());
      }
      if (avx512 && mode_keeps(m, 64)) {
        EXPECT_TRUE(check_v512());
      }
      // And the scalar contract in the same mode.
      EXPECT_DOUBLE_EQ(fixture_mix(1, 2, 3, 4, 5, 6, 7, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5),
                       7654321 + 0.5 + 3 + 10 + 28 + 72 + 176 + 416 + 960 + 2176);
      EXPECT_DOUBLE_EQ(fixture_sum_variadic(4, 1.25, 2.5, 3.75, 5.0), 12.5);
      EXPECT_EQ(fixture_ld(1.5L), 4.5L);
    }
    ASSERT_EQ(apply({}), 0);
  }
  EXPECT_GT(standin::entries(addr(&fixture_v256)), 0u);
  EXPECT_GT(standin::exits(addr(&fixture_v256)), 0u);
  if (avx512) {
    EXPECT_GT(standin::exits(addr(&fixture_v512)), 0u);
  }
}

// The test above would pass with a trampoline that saved nothing if the
// clobber did not reach the registers: show that it does, with the mode
// that saves only xmm (the one a CPU without AVX runs).
TEST_F(PatchTest, TheClobberReachesWhatXmmModeDoesNotSave) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
  standin::watch(addr(&fixture_v256));
  standin::set_clobber(true);
  standin::set_redirect(true);
  ASSERT_EQ(apply({addr(&fixture_v256)}), 0);
  internal::set_vector_mode(0);
  EXPECT_FALSE(check_v256());
  ASSERT_EQ(apply({}), 0);
}

// XINUSE (XGETBV with ECX=1): which state components are not in their
// initial state; bit 2: the upper halves of ymm0-15, bit 6: of zmm0-15.
// ~0 where the CPU cannot say.
uint64_t xinuse() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1) || __get_cpuid_max(0, nullptr) < 0xd) return ~0ull;
  __cpuid_count(0xd, 1, a, b, c, d);
  if (!(a & (1u << 2))) return ~0ull;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (uint64_t{hi} << 32) | lo;
}
__attribute__((target("avx"), noinline)) void zero_uppers() { __asm__ volatile("vzeroupper" ::: "memory"); }

// A program that never used AVX must not be left with a dirty upper state
// by the ymm/zmm saves (Intel cores would make its SSE code pay a merge per
// instruction): the trampoline and the return hook end with vzeroupper when
// the upper bits they saved were all zero.
TEST_F(PatchTest, WideSavesLeaveACleanUpperStateClean) {
  if (xinuse() == ~0ull) GTEST_SKIP() << "this CPU cannot tell which state is in use (XGETBV ECX=1)";
  const uint64_t fn = addr(&fixture_add);
  standin::watch(fn);
  standin::set_redirect(true);
  ASSERT_EQ(apply({fn}), 0);
  for (uint8_t m : runnable_vector_modes()) {
    SCOPED_TRACE("vector mode " + std::to_string(m));
    internal::set_vector_mode(m);
    zero_uppers();
    const uint64_t before = xinuse();
    const int r = fixture_add(2, 3);  // entry and return hook
    const uint64_t after = xinuse();
    EXPECT_EQ(r, 5);
    EXPECT_EQ(before & 0x44, 0u) << std::hex << before;
    EXPECT_EQ(after & 0x44, 0u) << "the upper state was left dirty: XINUSE " << std::hex << after;
  }
  ASSERT_EQ(apply({}), 0);
  EXPECT_EQ(standin::exits(fn), runnable_vector_modes().size());
}

TEST_F(PatchTest, RecursionTenThousandDeep) {
  const uint64_t fn = addr(&fixture_recurse);
  standin::watch(fn);
  standin::set_redirect(true);
  ASSERT_EQ(apply({fn}), 0);
  EXPECT_EQ(fixture_recurse(10000), 10000);
  EXPECT_EQ(standin::entries(fn), 10000u);
  EXPECT_EQ(standin::exits(fn), 10000u);
  EXPECT_EQ(standin::depth(), 0);
}

// ---- Exceptions and longjmp (interpose.cc) --------------------------------

TEST_F(PatchTest, ExceptionThroughFivePatchedFramesIsCaught) {
  const uint64_t level = addr(dlsym(RTLD_DEFAULT, "fixture_chain_level"));
  const uint64_t top = addr(&fixture_chain5);
  standin::watch(level);
  standin::watch(top);
  standin::set_redirect(true);
  ASSERT_EQ(apply({level, top}), 0);
  for (int round = 0; round < 3; ++round) {
    const uint64_t unhooks = standin::unhooks();
    bool caught = false;
    try {
      fixture_chain5(5);  // chain5 + levels 1..5: six patched frames
    } catch (const std::runtime_error& e) {
      caught = std::strcmp(e.what(), "fixture") == 0;
    }
    EXPECT_TRUE(caught);
    EXPECT_GT(standin::unhooks(), unhooks);
    EXPECT_EQ(standin::depth(), 0) << "the catch must drop every frame below it";
  }
  EXPECT_EQ(standin::exits(level), 0u);
  // Tracing goes on normally after it.
  EXPECT_EQ(fixture_chain5(0), 9);
  EXPECT_EQ(standin::exits(level), 5u);
  EXPECT_EQ(standin::exits(top), 1u);
}

// A catch inside a patched function: the frames the unwind removed go, the
// catching function's own frame stays hooked and returns through the hook.
TEST_F(PatchTest, ExceptionCaughtInsideAPatchedFunction) {
  const uint64_t catcher = addr(&fixture_catch);
  const uint64_t top = addr(&fixture_chain5);
  standin::watch(catcher);
  standin::watch(top);
  standin::set_redirect(true);
  ASSERT_EQ(apply({catcher, top, addr(dlsym(RTLD_DEFAULT, "fixture_chain_level"))}), 0);
  EXPECT_EQ(fixture_catch(2), -1);
  EXPECT_EQ(standin::exits(catcher), 1u) << "the catching frame lost its hook";
  EXPECT_EQ(standin::exits(top), 0u);
  EXPECT_EQ(standin::depth(), 0);
  EXPECT_EQ(fixture_catch(0), 9);
  EXPECT_EQ(standin::exits(catcher), 2u);
  EXPECT_EQ(standin::exits(top), 1u);
}

TEST_F(PatchTest, LongjmpOutOfFivePatchedFrames) {
  const uint64_t level = addr(dlsym(RTLD_DEFAULT, "fixture_jump_level"));
  const uint64_t top = addr(&fixture_jump5);
  const uint64_t outer = addr(&fixture_recurse);
  standin::watch(level);
  standin::set_redirect(true);
  ASSERT_EQ(apply({level, top, outer}), 0);
  static std::jmp_buf env;
  if (setjmp(env) == 0) {
    fixture_jump5(&env);
    ADD_FAILURE() << "longjmp did not happen";
  }
  // The six frames are still on the shadow stack, until the next traced
  // entry at or above their slots (here: the very slot fixture_jump5 had)
  // prunes them; the core must do the same (see the design document).
  EXPECT_EQ(standin::depth(), 6);
  const uint64_t pruned = standin::pruned();
  EXPECT_EQ(fixture_recurse(1), 1);
  EXPECT_EQ(standin::pruned() - pruned, 6u);
  EXPECT_EQ(standin::depth(), 0);
}

// ---- The int3 handler ----------------------------------------------------

// Our SIGTRAP handler passes traps that are not at a site to the handler the
// program had (fresh process: the handler is chained when first installed).
void program_trap_handler(int) { _exit(7); }

TEST(PatchTrapDeathTest, ForeignTrapReachesTheProgramsHandler) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGTRAP, program_trap_handler);
        (void)patch::patchable_functions();  // installs ours, chaining
        __asm__ volatile("int3");
      },
      ::testing::ExitedWithCode(7), "");
}

TEST(PatchTrapDeathTest, ForeignTrapStillKillsByDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        (void)patch::patchable_functions();
        __asm__ volatile("int3");
      },
      ::testing::KilledBySignal(SIGTRAP), "");
}

// ---- Concurrency -----------------------------------------------------------

// Two threads call patched functions in a tight loop while the patch set
// flips thousands of times: no crash, and the calls the bodies counted are
// the calls made. With the return hook on, every entry the stand-in took
// returns through it. A thread that trapped on an int3 mid-patch skipped the
// trampoline for that call, which is allowed: entries <= calls.
TEST_F(PatchTest, FlipWhileTwoThreadsCall) {
  constexpr uint64_t kCallsMin = 100000;
  constexpr int kFlips = 3000;
  const uint64_t count = addr(&fixture_count), add = addr(&fixture_add);
  standin::watch(count);
  standin::watch(add);
  standin::set_redirect(true);
  const uint64_t body_before = fixture_calls();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> made{0};
  std::atomic<int> deep_errors{0};
  auto caller = [&] {
    uint64_t n = 0;
    while (n < kCallsMin || !stop.load(std::memory_order_relaxed)) {
      fixture_count();
      if (fixture_add(static_cast<int>(n & 0xff), 1) != static_cast<int>(n & 0xff) + 1)
        deep_errors.fetch_add(1);
      ++n;
    }
    if (standin::depth() != 0) deep_errors.fetch_add(1);
    made.fetch_add(n);
  };
  std::thread a(caller), b(caller);
  const std::vector<std::vector<uint64_t>> sets = {{count}, {count, add}, {}, {add}};
  for (int i = 0; i < kFlips; ++i) ASSERT_EQ(apply(sets[static_cast<size_t>(i) % sets.size()]), 0);
  stop.store(true);
  a.join();
  b.join();
  ASSERT_EQ(apply({}), 0);
  EXPECT_EQ(deep_errors.load(), 0);
  EXPECT_EQ(fixture_calls() - body_before, made.load());
  EXPECT_LE(standin::entries(count), made.load());
  EXPECT_EQ(standin::exits(count), standin::entries(count));
  EXPECT_EQ(standin::exits(add), standin::entries(add));
  EXPECT_GT(standin::entries(count), 0u);
  const internal::Stats st = internal::stats();
  EXPECT_GE(st.batches, static_cast<uint64_t>(kFlips) - 1);
  RecordProperty("traps", std::to_string(st.traps));
  RecordProperty("sync_method", st.sync_method);
}

// The first arming of a site made of several nops (gcc's 90 x 5) sweeps the
// other threads, which here are running through that very site.
TEST_F(PatchTest, FirstArmingSweepsThreadsRunningThroughMultiNopSites) {
  void* h = dlopen(USRTRACE_PATCHABLE_MODULE, RTLD_NOW | RTLD_LOCAL);  // fresh, unconverted sites
  ASSERT_NE(h, nullptr) << dlerror();
  const uint64_t fn = addr(dlsym(h, "fixture_count"));
  auto count = reinterpret_cast<uint64_t (*)()>(fn);
  auto calls = reinterpret_cast<uint64_t (*)()>(dlsym(h, "fixture_calls"));
  if (internal::classify(internal::read_site(fn, 5).data(), 5).insns == 1) {
    dlclose(h);
    GTEST_SKIP() << "this compiler's patchable entry is one instruction: no sweep needed";
  }
  standin::watch(fn);
  standin::set_redirect(true);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> made{0};
  std::atomic<int> running{0};
  auto caller = [&] {
    uint64_t n = 0;
    running.fetch_add(1);
    while (!stop.load(std::memory_order_relaxed) || n < 1000) {
      count();
      ++n;
    }
    made.fetch_add(n);
  };
  const uint64_t body_before = calls();
  std::thread a(caller), b(caller);
  while (running.load() < 2) std::this_thread::yield();
  const uint64_t sweeps = internal::stats().sweeps;
  ASSERT_EQ(apply({fn}), 0);
  EXPECT_EQ(internal::stats().sweeps, sweeps + 1);
  EXPECT_TRUE(is_call_to_stub(fn));
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(apply(i % 2 ? std::vector<uint64_t>{fn} : std::vector<uint64_t>{}), 0);
  EXPECT_EQ(internal::stats().sweeps, sweeps + 1) << "a converted site needs no sweep";
  stop.store(true);
  a.join();
  b.join();
  ASSERT_EQ(apply({}), 0);
  EXPECT_EQ(calls() - body_before, made.load());
  EXPECT_EQ(standin::exits(fn), standin::entries(fn));
  ASSERT_EQ(dlclose(h), 0);
}

// A thread that blocks the sweep's signal makes the batch fail, with the
// site left as it was.
TEST_F(PatchTest, SweepFailsCleanlyWhenAThreadBlocksItsSignal) {
  void* h = dlopen(USRTRACE_PATCHABLE_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  const uint64_t fn = addr(dlsym(h, "fixture_add"));
  const std::vector<uint8_t> before = internal::read_site(fn, 5);
  if (internal::classify(before.data(), 5).insns == 1) {
    dlclose(h);
    GTEST_SKIP() << "this compiler's patchable entry is one instruction: no sweep needed";
  }
  std::atomic<int> phase{0};
  std::thread blocker([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMAX - 3);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
  });
  while (phase.load() != 1) std::this_thread::yield();
  std::string why;
  EXPECT_EQ(patch::apply({fn}, &why), -EBUSY);
  EXPECT_NE(why.find("did not answer"), std::string::npos) << why;
  EXPECT_EQ(internal::read_site(fn, 5), before);
  EXPECT_EQ(reinterpret_cast<int (*)(int, int)>(fn)(1, 2), 3);
  phase.store(2);
  blocker.join();
  // The pending signal was delivered when the thread ended; nothing else is
  // left behind, and the next try succeeds.
  ASSERT_EQ(apply({fn}), 0);
  EXPECT_TRUE(is_call_to_stub(fn));
  ASSERT_EQ(apply({}), 0);
  ASSERT_EQ(dlclose(h), 0);
}

// ---- Objects -------------------------------------------------------------

TEST_F(PatchTest, DlopenAndDlcloseAreSeen) {
  const uint64_t before = standin::objects_changed_calls();
  void* h = dlopen(USRTRACE_PATCHABLE_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_EQ(standin::objects_changed_calls(), before + 1);
  const uint64_t add = addr(dlsym(h, "fixture_add"));
  ASSERT_NE(add, 0u);
  const std::vector<uint64_t> sites = sites_in_object_of(add);
  EXPECT_EQ(sites.size(), std::size(kFixtureFunctions));
  standin::watch(add);
  standin::set_redirect(true);
  ASSERT_EQ(apply({add}), 0);
  EXPECT_EQ(reinterpret_cast<int (*)(int, int)>(add)(20, 22), 42);
  EXPECT_EQ(standin::exits(add), 1u);
  ASSERT_EQ(dlclose(h), 0);
  EXPECT_EQ(standin::objects_changed_calls(), before + 2);
  // Its sites are gone, and apply() no longer knows them.
  for (uint64_t fn : patch::patchable_functions())
    EXPECT_TRUE(std::find(sites.begin(), sites.end(), fn) == sites.end());
  std::string why;
  EXPECT_EQ(patch::apply({add}, &why), -EINVAL);
  // Loaded again (likely at the same place): patched afresh.
  h = dlopen(USRTRACE_PATCHABLE_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr);
  const uint64_t add2 = addr(dlsym(h, "fixture_add"));
  ASSERT_EQ(apply({add2}), 0);
  standin::watch(add2);
  EXPECT_EQ(reinterpret_cast<int (*)(int, int)>(add2)(1, 2), 3);
  EXPECT_GE(standin::entries(add2), 1u);
  ASSERT_EQ(apply({}), 0);
  ASSERT_EQ(dlclose(h), 0);
}

// -fpatchable-function-entry=7,2: two nops before each symbol, five after.
// The function is found at its symbol, not at the first nop.
TEST_F(PatchTest, EntryWithNopsBeforeTheSymbol) {
  void* h = dlopen(USRTRACE_PATCHABLE_MODULE_M2, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  const uint64_t add = addr(dlsym(h, "fixture_add"));
  const uint64_t pair = addr(dlsym(h, "fixture_pair"));
  const std::vector<uint64_t> sites = sites_in_object_of(add);
  EXPECT_EQ(sites.size(), std::size(kFixtureFunctions));
  EXPECT_NE(std::find(sites.begin(), sites.end(), add), sites.end());
  standin::watch(add);
  standin::set_redirect(true);
  ASSERT_EQ(apply({add, pair}), 0);
  EXPECT_TRUE(is_call_to_stub(add));
  EXPECT_EQ(reinterpret_cast<int (*)(int, int)>(add)(20, 22), 42);
  EXPECT_EQ(reinterpret_cast<FixturePair (*)(long, long)>(pair)(1, 1).b, 5);
  EXPECT_EQ(standin::entries(add), 1u);
  EXPECT_EQ(standin::exits(add), 1u);
  ASSERT_EQ(apply({}), 0);
  ASSERT_EQ(dlclose(h), 0);
}

}  // namespace
