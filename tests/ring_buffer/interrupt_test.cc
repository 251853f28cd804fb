// A signal handler that writes while the interrupted code is mid-write, at
// every instruction of the write, one after the other.
//
// 1. Trace: with rseq unregistered for this thread (and cpu_id faked to 0,
//    so no section can abort), the CPU's trap flag single-steps one write
//    and records the address of every instruction it executes.
// 2. For each recorded address A: re-register rseq, put an int3 at A, write
//    again. The SIGTRAP handler restores the byte, writes a nested event and
//    returns; if A is inside a critical section, the kernel has already
//    moved the thread to the section's abort handler, and the write
//    restarts.
// Whatever A, both events must be in the buffer exactly once and intact, and
// the breakpoints that were followed by an abort must be exactly those that
// fell inside a critical section (from the __rseq_cs descriptors).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
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

extern "C" {
extern const char __start___rseq_cs[];
extern const char __stop___rseq_cs[];
extern const char __executable_start[];
extern const char etext[];
}

namespace usrtrace::rb {
namespace {

using testing::Payload;

struct RseqCs {  // ABI: struct rseq_cs
  uint32_t version, flags;
  uint64_t start_ip, post_commit_offset, abort_ip;
};

bool in_critical_section(uintptr_t ip) {
  for (auto* d = reinterpret_cast<const RseqCs*>(__start___rseq_cs);
       d < reinterpret_cast<const RseqCs*>(__stop___rseq_cs); ++d)
    if (ip - d->start_ip < d->post_commit_offset) return true;
  return false;
}

struct rseq* rseq_area() {
  return reinterpret_cast<struct rseq*>(static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset);
}

// Handler state; a handler runs on the test thread only.
RingBuffer* g_rb;
std::vector<uintptr_t>* g_trace;
volatile sig_atomic_t g_tracing;
uintptr_t g_bp;         // breakpoint address, 0 when none
unsigned char g_saved;  // the byte the int3 replaced
volatile sig_atomic_t g_hit, g_nested_ok, g_aborted;
constexpr uint32_t kNestedSeq = 0xfeed;

void on_trap(int, siginfo_t*, void* ctx) {
  auto* uc = static_cast<ucontext_t*>(ctx);
  auto& ip = uc->uc_mcontext.gregs[REG_RIP];
  if (g_tracing) {
    if (g_trace->size() < g_trace->capacity()) g_trace->push_back(static_cast<uintptr_t>(ip));
    return;
  }
  if (g_bp == 0) return;
  *reinterpret_cast<volatile unsigned char*>(g_bp) = g_saved;
  if (static_cast<uintptr_t>(ip) == g_bp + 1) {
    ip = static_cast<greg_t>(g_bp);  // re-execute the instruction we covered
  } else {
    g_aborted = 1;  // rseq moved us to an abort handler
  }
  g_bp = 0;
  g_hit = 1;
  Payload p = Payload::make(2, kNestedSeq, 1);
  g_nested_ok = g_rb->write<sizeof p>(&p);
}

enum class Path { kFast, kSlow, kSwitch };

struct Scenario {
  RingBuffer* rb;
  Path path;
  uint32_t fillers = 0;

  // Fills the first page so that the next event needs a new one: 203
  // entries of 20 bytes leave 20, and a write keeps w0 strictly inside.
  void prepare() {
    rb->reset();
    fillers = 0;
    Payload p = Payload::make(3, 0, 0);
    // kFast: one event first, so that the write under test finds a page open.
    int n = path == Path::kSwitch ? 203 : path == Path::kFast ? 1 : 0;
    for (int i = 0; i < n; ++i, ++fillers) EXPECT_TRUE(rb->write<sizeof p>(&p));
  }
  __attribute__((noinline)) bool write_once(uint32_t k) {
    Payload p = Payload::make(1, k, 0);
    if (path == Path::kSlow) return rb->write(&p, sizeof p);
    return rb->write<sizeof p>(&p);
  }
};

void trap_flag(bool on) {
  if (on)
    asm volatile("pushfq\n\torq $0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc");
  else
    asm volatile("pushfq\n\tandq $-257, (%%rsp)\n\tpopfq" ::: "memory", "cc");
}

class InterruptTest : public ::testing::TestWithParam<Path> {};

TEST_P(InterruptTest, NestedWriteAtEveryInstruction) {
#ifdef USRTRACE_TSAN
  GTEST_SKIP() << "ThreadSanitizer defers signal handlers: none would run mid-write";
#endif
  // A thread of its own: its rseq registration is changed below.
  std::thread t([&] {
    testing::Pinned pin(0);
    ASSERT_TRUE(pin.ok);
    auto rb = testing::make_buffer(16 * 1024);
    ASSERT_NE(rb, nullptr);
    g_rb = rb.get();
    Scenario sc{rb.get(), GetParam()};
    struct sigaction sa = {}, old = {};
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGTRAP, &sa, &old), 0);

    // 1. Trace the write with no rseq registration (nothing can abort).
    struct rseq* area = rseq_area();
    ASSERT_EQ(syscall(SYS_rseq, area, 32, RSEQ_FLAG_UNREGISTER, base::kRseqSig), 0);
    area->cpu_id_start = 0;
    area->cpu_id = 0;
    std::vector<uintptr_t> trace;
    trace.reserve(100000);
    g_trace = &trace;
    sc.prepare();
    g_tracing = 1;
    trap_flag(true);
    bool ok = sc.write_once(0);
    trap_flag(false);
    g_tracing = 0;
    ASSERT_TRUE(ok);
    area->cpu_id = static_cast<uint32_t>(RSEQ_CPU_ID_UNINITIALIZED);
    ASSERT_EQ(syscall(SYS_rseq, area, 32, 0, base::kRseqSig), 0);
    ASSERT_EQ(base::rseq_cpu_id(), 0);

    // Every distinct instruction of the write that lies in this executable.
    std::vector<uintptr_t> ips;
    std::set<uintptr_t> seen;
    for (uintptr_t ip : trace)
      if (ip >= reinterpret_cast<uintptr_t>(__executable_start) && ip < reinterpret_cast<uintptr_t>(etext) &&
          seen.insert(ip).second)
        ips.push_back(ip);
    ASSERT_GT(ips.size(), 20u);
    size_t in_cs = static_cast<size_t>(std::count_if(ips.begin(), ips.end(), in_critical_section));
    ASSERT_GT(in_cs, 10u) << "the trace never entered a critical section";

    // 2. A breakpoint at each of them in turn.
    const long pg = sysconf(_SC_PAGESIZE);
    auto text = reinterpret_cast<uintptr_t>(__executable_start) & ~static_cast<uintptr_t>(pg - 1);
    size_t text_len = reinterpret_cast<uintptr_t>(etext) - text;
    if (mprotect(reinterpret_cast<void*>(text), text_len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
      GTEST_SKIP() << "cannot make the text writable for breakpoints";
    const uint64_t aborts_before = base::usrtrace_rseq_aborts;
    size_t hits = 0, hits_in_cs = 0, aborted = 0, missed_in_cs = 0;
    for (size_t k = 0; k < ips.size(); ++k) {
      sc.prepare();
      g_hit = 0;
      g_nested_ok = 0;
      g_aborted = 0;
      g_saved = *reinterpret_cast<unsigned char*>(ips[k]);
      g_bp = ips[k];
      *reinterpret_cast<volatile unsigned char*>(ips[k]) = 0xcc;
      bool outer_ok = sc.write_once(static_cast<uint32_t>(k + 1));
      if (g_bp != 0) {  // not reached this time: take it out
        *reinterpret_cast<volatile unsigned char*>(ips[k]) = g_saved;
        g_bp = 0;
      }
      ASSERT_TRUE(outer_ok) << "k=" << k;
      if (!g_hit) {
        missed_in_cs += in_critical_section(ips[k]);
        continue;
      }
      ++hits;
      hits_in_cs += in_critical_section(ips[k]);
      aborted += g_aborted ? 1u : 0u;
      ASSERT_TRUE(g_nested_ok) << "k=" << k;
      Event ev;
      uint32_t fillers = 0, outer = 0, nested = 0;
      while (rb->consume(&ev, 0)) {
        ASSERT_EQ(ev.len, sizeof(Payload));
        Payload p;
        std::memcpy(&p, ev.data, sizeof p);
        ASSERT_TRUE(p.check()) << "torn event, k=" << k;
        if (p.writer == 3)
          ++fillers;
        else if (p.writer == 1 && p.seq == k + 1)
          ++outer;
        else if (p.writer == 2 && p.seq == kNestedSeq)
          ++nested;
        else
          ADD_FAILURE() << "unexpected event, k=" << k;
      }
      EXPECT_EQ(fillers, sc.fillers) << "k=" << k;
      EXPECT_EQ(outer, 1u) << "k=" << k << " ip=" << std::hex << ips[k];
      EXPECT_EQ(nested, 1u) << "k=" << k << " ip=" << std::hex << ips[k];
    }
    mprotect(reinterpret_cast<void*>(text), text_len, PROT_READ | PROT_EXEC);
    sigaction(SIGTRAP, &old, nullptr);
    // The path is the same as traced, but for instructions that ran only
    // in the first write of the process (lazy binding, first-use set-up);
    // every instruction inside a critical section is hit again.
    EXPECT_GE(hits, ips.size() * 3 / 4);
    EXPECT_EQ(missed_in_cs, 0u);
    // Each breakpoint inside a section aborted it, and only those did (as
    // the handler saw it). The abort counter may count more: the scheduler
    // can preempt the thread inside a section too.
    EXPECT_EQ(aborted, hits_in_cs);
    EXPECT_GE(base::usrtrace_rseq_aborts - aborts_before, hits_in_cs);
    EXPECT_GT(hits_in_cs, 10u);
    RecordProperty("instructions", static_cast<int>(hits));
    RecordProperty("in_critical_sections", static_cast<int>(hits_in_cs));
  });
  t.join();
}

INSTANTIATE_TEST_SUITE_P(Paths, InterruptTest, ::testing::Values(Path::kFast, Path::kSlow, Path::kSwitch),
                         [](const ::testing::TestParamInfo<Path>& i) {
                           return std::string(i.param == Path::kFast   ? "Fast"
                                              : i.param == Path::kSlow ? "Slow"
                                                                       : "PageSwitch");
                         });

}  // namespace
}  // namespace usrtrace::rb
