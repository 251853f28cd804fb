// The patch engine (src/patch/patch.h, docs/design/patch-engine.md) on
// functions built with plain -O2 (patch_fixture.cc, some of them in
// assembly for bytes the cases rely on) and with -fcf-protection
// (patch_fixture_cet.cc): what the handlers see, that the probed code still
// computes what it did, which method each kind of site gets, and that
// removing a probe gives the original bytes back.
#include <Zydis/Zydis.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <link.h>
#include <sched.h>

#include <atomic>
#include <csetjmp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "patch/patch.h"
#include "patch/text.h"

extern "C" {
long patch_fixture_add3(long a, long b, long c);
int patch_fixture_read_global(int x);
extern int patch_fixture_global;
long patch_fixture_mix(long a, long b, long c, long d);
long patch_fixture_loop(long n);
long patch_fixture_short(long x);
long patch_fixture_branch(long x);
long patch_fixture_call(long x);
long patch_fixture_tail(long x);
long patch_fixture_triple(long x);
long patch_fixture_nop(long x);
long patch_fixture_icall(long x, long (*f)(long));
long patch_fixture_icall2(long x, long (*f)(long));
long patch_fixture_cet(long a, long b);
long patch_fixture_flags_entry();
long patch_fixture_flags_call(long mode);
void patch_fixture_backward(char* buf, long n);
void patch_fixture_zmm(const void* in, void* out);
void patch_fixture_zmm_at();
void patch_fixture_zmm_clobber();
void patch_fixture_ymm(const void* in, void* out);
void patch_fixture_ymm_at();
void patch_fixture_ymm_clobber();
}
int patch_fixture_throw(int x);
int patch_fixture_catch(int x);
int patch_fixture_jump(int x);
extern std::jmp_buf patch_fixture_env;

namespace usrtrace::patch {
namespace {

// The function's bounds from the dynamic symbol table (the test is linked
// with -rdynamic).
struct Fn {
  uintptr_t start = 0;
  size_t size = 0;
};
Fn bounds(const void* f) {
  Dl_info info{};
  void* extra = nullptr;
  if (dladdr1(f, &info, &extra, RTLD_DL_SYMENT) == 0 || extra == nullptr) return {};
  const auto* sym = static_cast<const ElfW(Sym)*>(extra);
  return {reinterpret_cast<uintptr_t>(info.dli_saddr), sym->st_size};
}
template <typename F>
Fn bounds_of(F* f) {
  return bounds(reinterpret_cast<const void*>(f));
}

std::vector<uint8_t> bytes_at(uintptr_t p, size_t n) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return {b, b + n};
}

// What the detour would be, unless the environment keeps every site on int3.
Method fast() { return getenv("USRTRACE_PROBE_INT3") != nullptr ? Method::kInt3 : Method::kDetour; }
// The same for a punned jump.
Method pun() { return getenv("USRTRACE_PROBE_INT3") != nullptr ? Method::kInt3 : Method::kPun; }

// A handler's record of what it saw (no allocation in the handler).
struct Seen {
  static constexpr int kMax = 4096;
  std::atomic<int> n{0};
  Regs regs[kMax];
};
void record(const Regs* r, void* cookie) {
  auto* s = static_cast<Seen*>(cookie);
  const int i = s->n.fetch_add(1);
  if (i < Seen::kMax) s->regs[i] = *r;
}
void count(const Regs*, void* cookie) { static_cast<std::atomic<long>*>(cookie)->fetch_add(1); }

const SiteInfo* find_site(const std::vector<SiteInfo>& all, uintptr_t addr) {
  for (const SiteInfo& s : all)
    if (s.addr == addr) return &s;
  return nullptr;
}

class PatchTest : public ::testing::Test {
 protected:
  // Adds a probe at fn + off with `h`, expecting success.
  Method add_ok(const Fn& fn, size_t off, Handler h, void* cookie) {
    Method how{};
    std::string err;
    EXPECT_EQ(add(fn.start + off, fn.start, fn.size, h, cookie, &how, &err), 0) << err;
    return how;
  }
};

TEST_F(PatchTest, AnEntryProbeSeesTheArgumentsOfEveryCall) {
  const Fn fn = bounds_of(&patch_fixture_add3);
  ASSERT_NE(fn.size, 0u);
  const auto before = bytes_at(fn.start, 16);
  auto* seen = new Seen();
  EXPECT_EQ(add_ok(fn, 0, record, seen), fast());
  long (*volatile f)(long, long, long) = patch_fixture_add3;
  for (long i = 0; i < 100; ++i) EXPECT_EQ(f(i, 7 * i + 1, -i), i + 2 * (7 * i + 1) - 3 * i);
  ASSERT_EQ(seen->n.load(), 100);
  for (long i = 0; i < 100; ++i) {
    const Regs& r = seen->regs[i];
    EXPECT_EQ(r.di, static_cast<uint64_t>(i));
    EXPECT_EQ(r.si, static_cast<uint64_t>(7 * i + 1));
    EXPECT_EQ(r.dx, static_cast<uint64_t>(-i));
    EXPECT_EQ(r.ip, fn.start);
    // sp points at the return address, into this test.
    Dl_info info{};
    EXPECT_NE(dladdr(reinterpret_cast<void*>(*reinterpret_cast<const uint64_t*>(r.sp)), &info), 0);
  }
  const auto all = sites();
  const SiteInfo* s = find_site(all, fn.start);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->hits, 100u);
  EXPECT_EQ(s->handlers, 1u);
  EXPECT_EQ(s->method, fast());
  EXPECT_EQ(remove(fn.start, record, seen), 0);
  EXPECT_EQ(bytes_at(fn.start, 16), before);
  EXPECT_EQ(remove(fn.start, record, seen), -ENOENT);
  EXPECT_EQ(find_site(sites(), fn.start), nullptr);
  delete seen;
}

// Which registers the instructions before `boundary` may write (Zydis's
// operand actions, hidden operands included).
bool written_before(uintptr_t start, uintptr_t boundary, ZydisRegister reg) {
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction in;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  for (uintptr_t at = start; at < boundary; at += in.length) {
    if (ZYAN_FAILED(ZydisDecoderDecodeFull(&dec, reinterpret_cast<const void*>(at), 15, &in, ops)))
      return true;
    for (int i = 0; i < in.operand_count; ++i)
      if (ops[i].type == ZYDIS_OPERAND_TYPE_REGISTER && (ops[i].actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) &&
          ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, ops[i].reg.value) == reg)
        return true;
  }
  return false;
}

TEST_F(PatchTest, AMidFunctionProbeSeesTheRegistersThere) {
  const Fn fn = bounds_of(&patch_fixture_mix);
  ASSERT_NE(fn.size, 0u);
  // The third instruction's address, found by decoding.
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction in;
  uintptr_t at = fn.start;
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(ZYAN_SUCCESS(
        ZydisDecoderDecodeInstruction(&dec, nullptr, reinterpret_cast<const void*>(at), 15, &in)));
    at += in.length;
  }
  ASSERT_LT(at, fn.start + fn.size);
  const auto before = bytes_at(at, 16);
  auto* seen = new Seen();
  Method how{};
  std::string err;
  ASSERT_EQ(add(at, fn.start, fn.size, record, seen, &how, &err), 0) << err;
  long (*volatile f)(long, long, long, long) = patch_fixture_mix;
  long expect[20];
  for (long i = 0; i < 20; ++i) {
    long r = 100 + i;
    for (long k = 0; k < 3; ++k) r = r * 3 + ((i * 5) ^ k) - 11;
    expect[i] = r;
  }
  for (long i = 0; i < 20; ++i) EXPECT_EQ(f(100 + i, i * 5, 11, 3), expect[i]);
  ASSERT_GE(seen->n.load(), 20);
  EXPECT_EQ(remove(at, record, seen), 0);
  EXPECT_EQ(bytes_at(at, 16), before);
  // The argument registers the first two instructions leave alone hold the
  // arguments at the third, whichever call it was (hits in a loop repeat
  // a call's values).
  int checked = 0;
  const struct {
    ZydisRegister reg;
    uint64_t Regs::*field;
  } args[] = {
      {ZYDIS_REGISTER_RSI, &Regs::si}, {ZYDIS_REGISTER_RDX, &Regs::dx}, {ZYDIS_REGISTER_RCX, &Regs::cx}};
  for (const auto& a : args) {
    if (written_before(fn.start, at, a.reg)) continue;
    ++checked;
    for (int h = 0; h < std::min(seen->n.load(), Seen::kMax); ++h) {
      const uint64_t v = seen->regs[h].*a.field;
      if (a.field == &Regs::dx) {
        EXPECT_EQ(v, 11u);
      } else if (a.field == &Regs::cx) {
        EXPECT_EQ(v, 3u);
      } else {
        EXPECT_EQ(v % 5, 0u);
        EXPECT_LT(v, 100u);
      }
    }
  }
  EXPECT_GE(checked, 1) << "the first two instructions write every argument register: pick another fixture";
  for (int h = 0; h < std::min(seen->n.load(), Seen::kMax); ++h) EXPECT_EQ(seen->regs[h].ip, at);
  delete seen;
}

TEST_F(PatchTest, ARipRelativeLoadInTheWindowStillReadsItsGlobal) {
  const Fn fn = bounds_of(&patch_fixture_read_global);
  ASSERT_NE(fn.size, 0u);
  const auto before = bytes_at(fn.start, 16);
  std::atomic<long> hits{0};
  const Method how = add_ok(fn, 0, count, &hits);
  int (*volatile f)(int) = patch_fixture_read_global;
  for (int i = 0; i < 50; ++i) {
    patch_fixture_global = i;
    EXPECT_EQ(f(3), 3 * i + 1);
  }
  patch_fixture_global = 7;
  EXPECT_EQ(hits.load(), 50);
  EXPECT_EQ(remove(fn.start, count, &hits), 0);
  EXPECT_EQ(bytes_at(fn.start, 16), before);
  RecordProperty("method", method_name(how));
}

// The loop's head (+2) is a jump target inside the 5 bytes at +0: no
// window can be taken there, and the entry becomes a punned jump: the
// 2-byte xor alone is displaced, and the jmp's rel32 ends in the loop
// head's own bytes, unchanged, so the loop's jump still finds them. At +2
// the window is add + dec, and the only jump to it lands on its first
// byte: a plain detour. Both at once, and both still right.
TEST_F(PatchTest, AWindowOverAJumpTargetBecomesAPunnedJump) {
  const Fn fn = bounds_of(&patch_fixture_loop);
  ASSERT_NE(fn.size, 0u);
  const auto before = bytes_at(fn.start, fn.size);
  std::atomic<long> entries{0}, heads{0};
  EXPECT_EQ(add_ok(fn, 0, count, &entries), pun());
  if (pun() == Method::kPun) {
    EXPECT_EQ(bytes_at(fn.start, 1)[0], 0xe9);
    EXPECT_EQ(bytes_at(fn.start + 2, 3), std::vector<uint8_t>(before.begin() + 2, before.begin() + 5))
        << "the loop head's bytes are the rel32's high bytes, unchanged";
  }
  EXPECT_EQ(add_ok(fn, 2, count, &heads), Method::kInt3) << "inside the punned jump's 5 bytes";
  for (const SiteInfo& s : sites()) {
    if (s.addr == fn.start) {
      EXPECT_EQ(s.method, Method::kInt3) << "and the entry goes back to int3";
    }
  }
  long (*volatile f)(long) = patch_fixture_loop;
  long calls = 0, iterations = 0;
  for (long n = 1; n <= 40; ++n) {
    EXPECT_EQ(f(n), n * (n + 1) / 2);
    ++calls;
    iterations += n;
  }
  EXPECT_EQ(entries.load(), calls);
  EXPECT_EQ(heads.load(), iterations);
  EXPECT_EQ(remove(fn.start + 2, count, &heads), 0);
  EXPECT_EQ(remove(fn.start, count, &entries), 0);
  EXPECT_EQ(bytes_at(fn.start, fn.size), before);
  // The loop head alone: a plain detour; then the entry alone: the pun.
  entries = 0;
  heads = 0;
  EXPECT_EQ(add_ok(fn, 2, count, &heads), fast());
  for (long n = 1; n <= 10; ++n) EXPECT_EQ(f(n), n * (n + 1) / 2);
  EXPECT_EQ(heads.load(), 55);
  EXPECT_EQ(remove(fn.start + 2, count, &heads), 0);
  EXPECT_EQ(add_ok(fn, 0, count, &entries), pun());
  for (long n = 1; n <= 10; ++n) EXPECT_EQ(f(n), n * (n + 1) / 2);
  EXPECT_EQ(entries.load(), 10);
  EXPECT_EQ(remove(fn.start, count, &entries), 0);
  EXPECT_EQ(bytes_at(fn.start, fn.size), before);
}

// A function of 4 bytes (then padding): no 5-byte window, a punned jump
// whose rel32 ends in the `ret` and the padding after it.
TEST_F(PatchTest, AFunctionShorterThanAJumpGetsAPunnedJump) {
  const Fn fn = bounds_of(&patch_fixture_short);
  ASSERT_EQ(fn.size, 4u);
  const auto before = bytes_at(fn.start, 6);
  auto* seen = new Seen();
  EXPECT_EQ(add_ok(fn, 0, record, seen), pun());
  long (*volatile f)(long) = patch_fixture_short;
  for (long x = 0; x < 30; ++x) EXPECT_EQ(f(x * 7), x * 7);
  ASSERT_EQ(seen->n.load(), 30);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(seen->regs[i].di, static_cast<uint64_t>(i * 7));
    EXPECT_EQ(seen->regs[i].ip, fn.start);
  }
  EXPECT_EQ(remove(fn.start, record, seen), 0);
  EXPECT_EQ(bytes_at(fn.start, 6), before);
  delete seen;
}

// A probe strictly inside another's detour window (a mid-function probe
// just after an entry probe): the other goes back to int3, which runs one
// instruction at a time, and both see every call.
TEST_F(PatchTest, AnAddressInsideAnotherSitesWindowTurnsItBackToInt3) {
  const Fn fn = bounds_of(&patch_fixture_branch);
  ASSERT_NE(fn.size, 0u);
  const std::vector<uint8_t> before = bytes_at(fn.start, fn.size);
  std::atomic<long> a{0}, b{0};
  if (add_ok(fn, 0, count, &a) != Method::kDetour) {
    EXPECT_EQ(remove(fn.start, count, &a), 0);  // not left behind for the next test
    GTEST_SKIP() << "no detour here (USRTRACE_PROBE_INT3)";
  }
  Method how{};
  std::string err;
  ASSERT_EQ(add(fn.start + 3, fn.start, fn.size, count, &b, &how, &err), 0) << err;
  EXPECT_EQ(how, Method::kInt3);
  for (const SiteInfo& s : sites()) {
    if (s.addr == fn.start) {
      EXPECT_EQ(s.method, Method::kInt3) << "the outer site is back on int3";
    }
  }
  long (*volatile f)(long) = patch_fixture_branch;
  for (long x = -5; x < 5; ++x) EXPECT_EQ(f(x), x < 0 ? -x : x + 1);
  EXPECT_EQ(a.load(), 10);
  EXPECT_EQ(b.load(), 10);
  EXPECT_EQ(remove(fn.start + 3, count, &b), 0);
  EXPECT_EQ(remove(fn.start, count, &a), 0);
  EXPECT_EQ(bytes_at(fn.start, fn.size), before);
}

TEST_F(PatchTest, BranchesCallsAndJumpsInTheWindowAreRelocated) {
  struct Case {
    long (*f)(long);
    long (*expect)(long);
    Method how;
  };
  const Case cases[] = {
      {patch_fixture_branch, [](long x) { return x < 0 ? -x : x + 1; }, fast()},  // test; js rel8
      {patch_fixture_call, [](long x) { return 3 * x + 1; }, fast()},             // call rel32
      {patch_fixture_tail, [](long x) { return 3 * x; }, fast()},                 // jmp rel32
      {patch_fixture_nop, [](long x) { return x + 5; },
       fast() == Method::kDetour ? Method::kNop : Method::kInt3},
  };
  for (const Case& c : cases) {
    const Fn fn = bounds_of(c.f);
    ASSERT_NE(fn.size, 0u);
    const auto before = bytes_at(fn.start, fn.size);
    auto* seen = new Seen();
    EXPECT_EQ(add_ok(fn, 0, record, seen), c.how) << fn.start;
    long (*volatile f)(long) = c.f;
    for (long x = -20; x <= 20; ++x) EXPECT_EQ(f(x), c.expect(x)) << x;
    EXPECT_EQ(seen->n.load(), 41);
    for (int i = 0; i < 41; ++i) {
      EXPECT_EQ(seen->regs[i].di, static_cast<uint64_t>(i - 20));
      EXPECT_EQ(seen->regs[i].ip, fn.start);
    }
    EXPECT_EQ(remove(fn.start, record, seen), 0);
    EXPECT_EQ(bytes_at(fn.start, fn.size), before);
    delete seen;
  }
}

// call *%rsi, alone at the entry (int3) and at the window's end (detour):
// both emulated, the callee returning to the original code.
// A probe between an instruction that sets the flags and the branch that
// tests them (patch_fixture_branch+3: test, then the site, js): the handler
// sees the flags the test set and the branch still goes where they say,
// on the detour (whose own stack moves must not touch them) as on int3.
void flags_seen(const Regs* r, void* cookie) {
  auto* v = static_cast<std::vector<uint64_t>*>(cookie);
  if (v->size() < v->capacity()) v->push_back(r->flags);
}
TEST_F(PatchTest, TheFlagsAtAMidFunctionSiteAreThoseOfTheCode) {
  const Fn fn = bounds_of(&patch_fixture_branch);
  ASSERT_NE(fn.size, 0u);
  std::vector<uint64_t> flags;
  flags.reserve(64);
  EXPECT_EQ(add_ok(fn, 3, flags_seen, &flags), fast());
  long (*volatile f)(long) = patch_fixture_branch;
  for (long x = -5; x <= 5; ++x) EXPECT_EQ(f(x), x < 0 ? -x : x + 1) << x;
  EXPECT_EQ(remove(fn.start + 3, flags_seen, &flags), 0);
  ASSERT_EQ(flags.size(), 11u);
  constexpr uint64_t kSF = 0x80, kZF = 0x40;
  for (long x = -5; x <= 5; ++x) {
    const uint64_t fl = flags[static_cast<size_t>(x + 5)];
    EXPECT_EQ((fl & kSF) != 0, x < 0) << x << ": flags 0x" << std::hex << fl;
    EXPECT_EQ((fl & kZF) != 0, x == 0) << x << ": flags 0x" << std::hex << fl;
  }
}

// At a function's entry the slot saves the flags with lahf/seto, not
// pushfq (detour.h, build_slot's df_clear): CF and OF, which the caller
// left (patch_fixture_flags_call sets each way, then tail-calls the entry),
// reach the handler and are back for the function, which returns them.
TEST_F(PatchTest, TheFlagsAtAFunctionsEntryReachTheHandlerAndTheFunction) {
  const Fn fn = bounds_of(&patch_fixture_flags_entry);
  ASSERT_NE(fn.size, 0u);
  std::vector<uint64_t> flags;
  flags.reserve(64);
  EXPECT_EQ(add_ok(fn, 0, flags_seen, &flags), fast());
  long (*volatile f)(long) = patch_fixture_flags_call;
  for (long mode = 0; mode < 4; ++mode) EXPECT_EQ(f(mode), mode);
  EXPECT_EQ(remove(fn.start, flags_seen, &flags), 0);
  ASSERT_EQ(flags.size(), 4u);
  constexpr uint64_t kCF = 0x1, kOF = 0x800, kIF = 0x200;
  for (long mode = 0; mode < 4; ++mode) {
    const uint64_t fl = flags[static_cast<size_t>(mode)];
    EXPECT_EQ((fl & kCF) != 0, (mode & 1) != 0) << mode << ": flags 0x" << std::hex << fl;
    EXPECT_EQ((fl & kOF) != 0, (mode & 2) != 0) << mode << ": flags 0x" << std::hex << fl;
    EXPECT_NE(fl & kIF, 0u);
  }
}

// Inside a std..cld region (patch_fixture_backward+1, mid-function): the
// handler sees DF set in the site's flags, runs itself with DF clear (the
// ABI its C code assumes: a backward memcpy would corrupt it), and the
// code after the site still copies backward.
struct DfSeen {
  std::atomic<int> n{0};
  uint64_t site_flags = 0, handler_flags = 0;
};
void df_seen(const Regs* r, void* cookie) {
  auto* s = static_cast<DfSeen*>(cookie);
  uint64_t mine = 0;
  asm volatile("pushfq; popq %0" : "=r"(mine));
  s->site_flags = r->flags;
  s->handler_flags = mine;
  s->n.fetch_add(1);
}
TEST_F(PatchTest, ADirectionFlagSetAtTheSiteIsClearInTheHandlerAndBackAfter) {
  const Fn fn = bounds_of(&patch_fixture_backward);
  ASSERT_NE(fn.size, 0u);
  DfSeen seen;
  EXPECT_EQ(add_ok(fn, 1, df_seen, &seen), fast());
  void (*volatile f)(char*, long) = patch_fixture_backward;
  char buf[16] = "abcdefgh";
  f(buf, 8);
  EXPECT_EQ(remove(fn.start + 1, df_seen, &seen), 0);
  EXPECT_STREQ(buf, "aabcdefgh");
  constexpr uint64_t kDF = 0x400;
  ASSERT_EQ(seen.n.load(), 1);
  EXPECT_NE(seen.site_flags & kDF, 0u) << std::hex << seen.site_flags;
  EXPECT_EQ(seen.handler_flags & kDF, 0u) << std::hex << seen.handler_flags;
}

TEST_F(PatchTest, AnIndirectCallRunsOutOfLineEmulated) {
  const struct {
    long (*f)(long, long (*)(long));
    Method how;
  } cases[] = {{patch_fixture_icall, pun()}, {patch_fixture_icall2, fast()}};
  for (const auto& c : cases) {
    const Fn fn = bounds_of(c.f);
    ASSERT_NE(fn.size, 0u);
    const auto before = bytes_at(fn.start, fn.size);
    std::atomic<long> hits{0};
    EXPECT_EQ(add_ok(fn, 0, count, &hits), c.how);
    long (*volatile f)(long, long (*)(long)) = c.f;
    for (long x = 0; x < 20; ++x) EXPECT_EQ(f(x, patch_fixture_triple), 3 * x + 1);
    EXPECT_EQ(hits.load(), 20);
    EXPECT_EQ(remove(fn.start, count, &hits), 0);
    EXPECT_EQ(bytes_at(fn.start, fn.size), before);
  }
}

TEST_F(PatchTest, AnEndbr64StaysInPlaceAndTheHandlerSeesTheFunctionsAddress) {
  const Fn fn = bounds_of(&patch_fixture_cet);
  ASSERT_NE(fn.size, 0u);
  const std::vector<uint8_t> endbr{0xf3, 0x0f, 0x1e, 0xfa};
  if (bytes_at(fn.start, 4) != endbr) GTEST_SKIP() << "the compiler left no endbr64 (-fcf-protection)";
  const auto before = bytes_at(fn.start, fn.size);
  auto* seen = new Seen();
  const Method how = add_ok(fn, 0, record, seen);
  EXPECT_EQ(how, fast());
  EXPECT_EQ(bytes_at(fn.start, 4), endbr);
  if (how == Method::kDetour) {
    EXPECT_EQ(bytes_at(fn.start + 4, 1)[0], 0xe9);
  }
  long (*volatile f)(long, long) = patch_fixture_cet;
  for (long i = 0; i < 30; ++i) EXPECT_EQ(f(i, i + 1), i * (i + 1) + 3);
  ASSERT_EQ(seen->n.load(), 30);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(seen->regs[i].ip, fn.start);
    EXPECT_EQ(seen->regs[i].di, static_cast<uint64_t>(i));
    EXPECT_EQ(seen->regs[i].si, static_cast<uint64_t>(i + 1));
  }
  EXPECT_EQ(remove(fn.start, record, seen), 0);
  EXPECT_EQ(bytes_at(fn.start, fn.size), before);
  delete seen;
}

TEST_F(PatchTest, SeveralHandlersShareASiteUntilTheLastGoes) {
  const Fn fn = bounds_of(&patch_fixture_add3);
  const auto before = bytes_at(fn.start, 16);
  std::atomic<long> a{0}, b{0};
  add_ok(fn, 0, count, &a);
  add_ok(fn, 0, count, &b);
  long (*volatile f)(long, long, long) = patch_fixture_add3;
  f(1, 2, 3);
  EXPECT_EQ(a.load(), 1);
  EXPECT_EQ(b.load(), 1);
  EXPECT_EQ(remove(fn.start, count, &a), 0);
  EXPECT_NE(bytes_at(fn.start, 16), before);  // still armed for b
  f(1, 2, 3);
  EXPECT_EQ(a.load(), 1);
  EXPECT_EQ(b.load(), 2);
  EXPECT_EQ(remove(fn.start, count, &b), 0);
  EXPECT_EQ(bytes_at(fn.start, 16), before);
  f(1, 2, 3);
  EXPECT_EQ(b.load(), 2);
}

TEST_F(PatchTest, AnAddressThatIsNoInstructionBoundaryIsRefused) {
  const Fn fn = bounds_of(&patch_fixture_loop);
  std::atomic<long> a{0};
  Method how{};
  std::string err;
  // +3 is inside `add %rdi,%rax` (+2..+5).
  EXPECT_EQ(add(fn.start + 3, fn.start, fn.size, count, &a, &how, &err), -EILSEQ);
  EXPECT_FALSE(err.empty());
}

// ---- Return probes.

struct RetSeen {
  std::atomic<int> n{0};
  uint64_t ax[64];
  uint64_t func[64];
  uint64_t args[64][6];
  uint64_t ip[64];
};
void on_ret(const Regs* r, void* cookie, uint64_t func, const uint64_t entry_args[6]) {
  auto* s = static_cast<RetSeen*>(cookie);
  const int i = s->n.fetch_add(1) % 64;
  s->ax[i] = r->ax;
  s->func[i] = func;
  s->ip[i] = r->ip;
  std::memcpy(s->args[i], entry_args, sizeof s->args[i]);
}
std::atomic<long> g_misses{0};
void hook(const Regs* r, void* cookie) {
  if (!hook_return(r, on_ret, cookie)) g_misses.fetch_add(1);
}

TEST_F(PatchTest, AReturnProbeSeesTheValueAndTheEntryArguments) {
  const Fn fn = bounds_of(&patch_fixture_add3);
  auto* seen = new RetSeen();
  add_ok(fn, 0, hook, seen);
  long (*volatile f)(long, long, long) = patch_fixture_add3;
  for (long i = 0; i < 40; ++i) EXPECT_EQ(f(i, 2 * i, 3), i + 4 * i + 9);
  EXPECT_EQ(remove(fn.start, hook, seen), 0);
  ASSERT_EQ(seen->n.load(), 40);
  for (long i = 0; i < 40; ++i) {
    EXPECT_EQ(seen->ax[i], static_cast<uint64_t>(i + 4 * i + 9));
    EXPECT_EQ(seen->func[i], fn.start);
    EXPECT_EQ(seen->args[i][0], static_cast<uint64_t>(i));
    EXPECT_EQ(seen->args[i][1], static_cast<uint64_t>(2 * i));
    EXPECT_EQ(seen->args[i][2], 3u);
    Dl_info info{};
    EXPECT_NE(dladdr(reinterpret_cast<void*>(seen->ip[i]), &info), 0);  // back into this test
  }
  EXPECT_EQ(g_misses.load(), 0);
  delete seen;
}

TEST_F(PatchTest, ExceptionsAndLongjmpThroughAReturnProbeLeaveTheProgramAsItWas) {
  const Fn thr = bounds_of(&patch_fixture_throw), jmp = bounds_of(&patch_fixture_jump);
  ASSERT_NE(thr.size, 0u);
  ASSERT_NE(jmp.size, 0u);
  auto* seen_thr = new RetSeen();
  auto* seen_jmp = new RetSeen();
  add_ok(thr, 0, hook, seen_thr);
  add_ok(jmp, 0, hook, seen_jmp);
  int (*volatile t)(int) = patch_fixture_throw;
  int (*volatile j)(int) = patch_fixture_jump;
  int caught = 0, jumped = 0, sum = 0;
  for (int i = 0; i < 10; ++i) {
    try {
      sum += t(i % 2 ? -1 : i);
    } catch (const std::runtime_error&) {
      ++caught;
    }
    if (setjmp(patch_fixture_env) == 0)
      sum += j(i % 2 ? -1 : i);
    else
      ++jumped;
  }
  EXPECT_EQ(t(41), 42);
  EXPECT_EQ(j(40), 42);
  EXPECT_EQ(remove(thr.start, hook, seen_thr), 0);
  EXPECT_EQ(remove(jmp.start, hook, seen_jmp), 0);
  EXPECT_EQ(caught, 5);
  EXPECT_EQ(jumped, 5);
  EXPECT_EQ(sum, (0 + 2 + 4 + 6 + 8) + 5 + (0 + 2 + 4 + 6 + 8) + 10);
  // The calls that returned, with their values: the last ones.
  EXPECT_EQ(seen_thr->n.load(), 6);
  EXPECT_EQ(seen_jmp->n.load(), 6);
  EXPECT_EQ(seen_thr->ax[5] & 0xffffffff, 42u);
  EXPECT_EQ(seen_jmp->ax[5] & 0xffffffff, 42u);
  delete seen_thr;
  delete seen_jmp;
}

// An exception thrown and caught below a return-probed frame: the unwind
// interposers unhook every return for the unwinder, and __cxa_begin_catch's
// hooks the live frames again, so the probed function's return is still seen.
TEST_F(PatchTest, AReturnProbeAboveACaughtExceptionStillSeesTheReturn) {
  const Fn fn = bounds_of(&patch_fixture_catch);
  ASSERT_NE(fn.size, 0u);
  auto* seen = new RetSeen();
  add_ok(fn, 0, hook, seen);
  int (*volatile c)(int) = patch_fixture_catch;
  for (int i = 1; i <= 10; ++i) EXPECT_EQ(c(i), i + 100);
  EXPECT_EQ(remove(fn.start, hook, seen), 0);
  ASSERT_EQ(seen->n.load(), 10);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(seen->ax[i] & 0xffffffff, static_cast<uint64_t>(i + 101));
    EXPECT_EQ(seen->args[i][0] & 0xffffffff, static_cast<uint64_t>(i + 1));
  }
  delete seen;
}

// ---- Threads.

// 8 threads call a probed function in a loop while this thread arms and
// disarms it 1,000 times: every result is right (the checksum of the
// unprobed calls), nothing crashes, and the bytes are the original after.
// The vector state at a site is the site's again after the handler, even
// when the handler's code leaves no vector register as it found it (glibc's
// evex string functions use zmm16-31; here a helper sets every bit of
// every register): every zmm0-31 and k0-7 on AVX-512 (the slot saves them
// by moves), ymm0-15 on AVX, each byte compared. Both the detour and the
// int3 path (USRTRACE_PROBE_INT3=1's run of this test).
void clobber_zmm(const Regs*, void* cookie) {
  static_cast<std::atomic<long>*>(cookie)->fetch_add(1);
  patch_fixture_zmm_clobber();
}
void clobber_ymm(const Regs*, void* cookie) {
  static_cast<std::atomic<long>*>(cookie)->fetch_add(1);
  patch_fixture_ymm_clobber();
}

TEST_F(PatchTest, EveryVectorRegisterAtTheSiteSurvivesAHandlerThatClobbersThemAll) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && __builtin_cpu_supports("avx512f");
  const bool avx = __builtin_cpu_supports("avx2");
  if (!avx512 && !avx) GTEST_SKIP() << "no AVX on this CPU: the xmm-only slot is covered by the other tests";
  const size_t n = avx512 ? 32 * 64 + 8 * 8 : 16 * 32;
  std::vector<uint8_t> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
  auto* run = avx512 ? patch_fixture_zmm : patch_fixture_ymm;
  const Fn fn = bounds_of(run);
  const auto at = reinterpret_cast<uintptr_t>(avx512 ? &patch_fixture_zmm_at : &patch_fixture_ymm_at);
  ASSERT_NE(fn.size, 0u);
  std::atomic<long> hits{0};
  add_ok(fn, at - fn.start, avx512 ? clobber_zmm : clobber_ymm, &hits);
  run(in.data(), out.data());
  EXPECT_EQ(hits.load(), 1);
  if (avx512) {
    // k0-7 as kmovq stores them: whole 64-bit masks.
    EXPECT_EQ(std::memcmp(in.data(), out.data(), 32 * 64), 0) << "a zmm register changed across the handler";
    EXPECT_EQ(std::memcmp(in.data() + 2048, out.data() + 2048, 64), 0) << "a k register changed";
  } else {
    EXPECT_EQ(in, out) << "a ymm register changed across the handler";
  }
  EXPECT_EQ(remove(at, avx512 ? clobber_zmm : clobber_ymm, &hits), 0);
}

// Many entries in one batch, as the function tracers arm them (add_many,
// jump_only): each gets the jump add() alone would give it (a detour, or a
// punned jump where the window is not free), every call is counted, and
// remove_many puts every byte back.
TEST_F(PatchTest, ABatchArmsEveryEntryAsOneAtATimeWould) {
  struct Case {
    Fn fn;
    Method how;
    long (*call)(long);
  };
  const Case cases[] = {
      {bounds_of(&patch_fixture_loop), pun(), [](long x) { return patch_fixture_loop(x); }},
      {bounds_of(&patch_fixture_short), pun(), [](long x) { return patch_fixture_short(x); }},
      {bounds_of(&patch_fixture_triple), fast(), [](long x) { return patch_fixture_triple(x); }},
      {bounds_of(&patch_fixture_nop), getenv("USRTRACE_PROBE_INT3") ? Method::kInt3 : Method::kNop,
       [](long x) { return patch_fixture_nop(x); }},
  };
  if (getenv("USRTRACE_PROBE_INT3") != nullptr)
    GTEST_SKIP() << "every site is kept on int3 here: no jump to take";
  constexpr size_t kN = sizeof cases / sizeof cases[0];
  std::atomic<long> hits[kN] = {};
  std::vector<std::vector<uint8_t>> before;
  std::vector<long> expect;
  std::vector<Request> reqs;
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_NE(cases[i].fn.size, 0u);
    before.push_back(bytes_at(cases[i].fn.start, cases[i].fn.size));
    expect.push_back(cases[i].call(7));
    reqs.push_back({cases[i].fn.start, cases[i].fn.start, cases[i].fn.size, count, &hits[i], true});
  }
  const std::vector<Outcome> out = add_many(reqs);
  ASSERT_EQ(out.size(), kN);
  for (size_t i = 0; i < kN; ++i) {
    EXPECT_EQ(out[i].rc, 0) << i << ": " << out[i].err;
    EXPECT_EQ(out[i].how, cases[i].how) << i;
    EXPECT_EQ(bytes_at(cases[i].fn.start, 1)[0], 0xe9) << i;
  }
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < kN; ++i) EXPECT_EQ(cases[i].call(7), expect[i]) << i;
  for (size_t i = 0; i < kN; ++i) EXPECT_EQ(hits[i].load(), 3) << i;
  std::vector<Removal> rs;
  for (size_t i = 0; i < kN; ++i) rs.push_back({cases[i].fn.start, count, &hits[i]});
  remove_many(rs);
  for (size_t i = 0; i < kN; ++i) {
    EXPECT_EQ(bytes_at(cases[i].fn.start, cases[i].fn.size), before[i]) << i;
    EXPECT_EQ(find_site(sites(), cases[i].fn.start), nullptr) << i;
  }
}

// A jump-only request whose jump cannot be armed is refused, not left on
// int3: here a thread blocks the sweep's signal, so no window may change
// under it; the entry keeps its bytes and the function still runs.
TEST_F(PatchTest, AJumpOnlyRequestThatCannotHaveItsJumpIsRefused) {
  if (getenv("USRTRACE_PROBE_INT3") != nullptr) GTEST_SKIP() << "every site is kept on int3 here";
  const Fn fn = bounds_of(&patch_fixture_triple);
  const auto before = bytes_at(fn.start, fn.size);
  std::atomic<bool> blocked{false}, done{false};
  std::thread deaf([&] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    blocked = true;
    while (!done) sched_yield();
  });
  while (!blocked) sched_yield();
  std::atomic<long> hits{0};
  const std::vector<Outcome> out = add_many({{fn.start, fn.start, fn.size, count, &hits, true}});
  done = true;
  deaf.join();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rc, -EOPNOTSUPP);
  EXPECT_NE(out[0].err.find("did not answer the sweep"), std::string::npos) << out[0].err;
  EXPECT_EQ(bytes_at(fn.start, fn.size), before);
  EXPECT_EQ(find_site(sites(), fn.start), nullptr);
  EXPECT_EQ(patch_fixture_triple(5), patch_fixture_triple(5));
  EXPECT_EQ(hits.load(), 0);
}

TEST_F(PatchTest, ThreadsRacingArmAndDisarmGetTheUnprobedChecksum) {
#if USRTRACE_TEST_TSAN
  GTEST_SKIP() << "TSan delivers signals only at intercepted calls: a spinning thread answers no sweep";
#endif
  const Fn fn = bounds_of(&patch_fixture_mix);
  const auto before = bytes_at(fn.start, 32);
  constexpr int kThreads = 8;
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0};
  std::vector<long> sums(kThreads), calls(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      long (*volatile f)(long, long, long, long) = patch_fixture_mix;
      long s = 0, n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const long v = f(t, n & 7, 1, 2);
        const long want = ((t * 3 + (n & 7)) - 1) * 3 + ((n & 7) ^ 1) - 1;
        if (v != want) bad.fetch_add(1);
        s += v;
        // A yield now and then: 8 threads spinning on a 2-CPU machine answer
        // each arming's sweep only when the scheduler comes round to them.
        if (++n % 64 == 0) sched_yield();
      }
      sums[static_cast<size_t>(t)] = s;
      calls[static_cast<size_t>(t)] = n;
    });
  }
  std::atomic<long> hits{0};
  int detours = 0;
  for (int i = 0; i < 1000; ++i) {
    Method how{};
    std::string err;
    ASSERT_EQ(add(fn.start, fn.start, fn.size, count, &hits, &how, &err), 0) << err;
    detours += how == Method::kDetour;
    ASSERT_EQ(remove(fn.start, count, &hits), 0);
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    long want = 0;
    for (long n = 0; n < calls[static_cast<size_t>(t)]; ++n)
      want += ((t * 3 + (n & 7)) - 1) * 3 + ((n & 7) ^ 1) - 1;
    EXPECT_EQ(sums[static_cast<size_t>(t)], want) << t;
  }
  EXPECT_EQ(bytes_at(fn.start, 32), before);
  RecordProperty("detours", detours);
  RecordProperty("hits", static_cast<int>(hits.load()));
  RecordProperty("sweep_moves", static_cast<int>(sweep_moves()));
  RecordProperty("sync", sync_method());
}

}  // namespace
}  // namespace usrtrace::patch
