// Running fetch programs (src/probe/fetch.h) against hand-built registers
// and real memory: good, unmapped, PROT_NONE, strings running into a hole;
// the record's layout, the event's format and the `trace` text.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/safe_copy.h"
#include "events/registry.h"
#include "probe/fetch.h"

namespace usrtrace::probe {
namespace {

Definition must_parse(const std::string& line) {
  Definition d;
  Error e;
  EXPECT_EQ(parse(line, &d, &e), 0) << line << ": " << e.text << " at " << e.pos;
  return d;
}

// Two pages: the first readable, the second PROT_NONE; and an address
// that no mapping can hold.
class Pages {
 public:
  Pages() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    base_ = static_cast<char*>(
        mmap(nullptr, 3 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(base_ + page_, page_, PROT_NONE);
    munmap(base_ + 2 * page_, page_);
  }
  ~Pages() { munmap(base_, 2 * page_); }
  char* good() const { return base_; }
  char* none() const { return base_ + page_; }
  // Unmapped, and kept so: the page just past the user address space
  // (x86-64's TASK_SIZE_MAX). A page unmapped after the first two was
  // mapped again by ASan's allocator in one run, and read as "".
  static char* unmapped() { return reinterpret_cast<char*>(uintptr_t{0x7ffffffff000}); }
  // A string whose last bytes are the first page's last ones, without a NUL.
  char* edge(const char* s) const {
    const size_t n = strlen(s);
    char* p = base_ + page_ - n;
    memcpy(p, s, n);
    return p;
  }

 private:
  size_t page_;
  char* base_;
};

struct Rec {
  alignas(8) uint8_t b[internal::kMaxRecord + 64];  // room to see that nothing is written past cap
  uint32_t len = 0;
  template <class T>
  T at(uint32_t off) const {
    T v;
    memcpy(&v, b + off, sizeof v);
    return v;
  }
  std::string str(uint32_t off) const {
    const uint32_t loc = at<uint32_t>(off);
    if ((loc >> 16) == 0) return "(fault)";
    EXPECT_LE((loc & 0xffff) + (loc >> 16), len);
    EXPECT_EQ(b[(loc & 0xffff) + (loc >> 16) - 1], 0) << "a string's last byte is its NUL";
    return std::string(reinterpret_cast<const char*>(b + (loc & 0xffff)));
  }
};

Rec run_on(const Definition& d, const patch::Regs& regs, RunContext ctx = {},
           uint32_t cap = internal::kMaxRecord) {
  Rec r;
  memset(r.b, 0xee, sizeof r.b);
  ctx.regs = &regs;
  r.len = run(d, 1234, ctx, r.b, cap);
  return r;
}

std::string printed(const Definition& d, const Rec& r) {
  char buf[4096];
  const int n = print_record(d, r.b, r.len, buf, sizeof buf);
  EXPECT_LT(n, static_cast<int>(sizeof buf));
  return std::string(buf, static_cast<size_t>(n));
}

struct S {
  int64_t a;
  const char* name;
  uint32_t flags;
  const char* names[2];
};

TEST(ProbeFetch, RegistersAndMemory) {
  static const char kHello[] = "hello";
  S s{42, "inner", 0xf5, {"x", "yz"}};
  patch::Regs regs{};
  regs.di = 2;
  regs.si = reinterpret_cast<uint64_t>(kHello);
  regs.dx = reinterpret_cast<uint64_t>(&s);
  regs.ax = static_cast<uint64_t>(-1);
  regs.ip = 0x55aa00001190;
  const Definition d = must_parse(
      "p:g/e /bin/sh:0x1190 a=%di:u8 b=+0(%dx):s64 c=+0(+8(%dx)):string d=+16(%dx):x32 e=+0(%si):char[4] "
      "f=+24(%dx):string[2] g=+16(%dx):b3@4/32 h=%ax:s16 i=+0(+8(%dx)):x8 j=\\\"imm\" k=\\-5:s32 %ax");
  const Rec r = run_on(d, regs);
  EXPECT_EQ(r.at<uint16_t>(0), 1234) << "the event id in common_type";
  EXPECT_EQ(r.at<uint64_t>(8), 0x55aa00001190u) << "__probe_ip";
  EXPECT_EQ(r.at<uint8_t>(d.args[0].offset), 2);
  EXPECT_EQ(r.at<int64_t>(d.args[1].offset), 42);
  EXPECT_EQ(r.str(d.args[2].offset), "inner");
  EXPECT_EQ(r.at<uint32_t>(d.args[3].offset), 0xf5u);
  EXPECT_EQ(memcmp(r.b + d.args[4].offset, "hell", 4), 0);
  EXPECT_EQ(r.str(d.args[5].offset), "x");
  EXPECT_EQ(r.str(d.args[5].offset + 4), "yz");
  EXPECT_EQ(r.at<uint32_t>(d.args[6].offset), (0xf5u >> 4) & 7);
  EXPECT_EQ(r.at<int16_t>(d.args[7].offset), -1);
  EXPECT_EQ(r.at<uint8_t>(d.args[8].offset), 'i');
  EXPECT_EQ(r.str(d.args[9].offset), "imm");
  EXPECT_EQ(r.at<int32_t>(d.args[10].offset), -5);
  EXPECT_EQ(r.at<uint64_t>(d.args[11].offset), ~uint64_t{0});
  EXPECT_EQ(r.len, d.fixed_size + 6 + 2 + 3 + 4) << "the strings packed after the fixed part";
  EXPECT_EQ(
      printed(d, r),
      "(0x55aa00001190) a=2 b=42 c=\"inner\" d=0xf5 e={'h','e','l','l'} f={\"x\",\"yz\"} g=7 h=-1 i=0x69 "
      "j=\"imm\" k=-5 arg12=0xffffffffffffffff");
}

TEST(ProbeFetch, StackCommFileOffsetsAndArgs) {
  uint64_t stack[12];
  for (int i = 0; i < 12; ++i) stack[i] = 100 + static_cast<uint64_t>(i);
  static const uint32_t kData[4] = {7, 8, 9, 10};
  patch::Regs regs{};
  regs.sp = reinterpret_cast<uint64_t>(stack);
  regs.di = 1;
  regs.si = 2;
  regs.dx = 3;
  regs.cx = 4;
  regs.r8 = 5;
  regs.r9 = 6;
  const Definition d =
      must_parse("p /bin/sh:0x10 $stack $stack0 $stack2 $comm @+0x8:u32 $arg1 $arg6 $arg7 $arg8 c2=$COMM");
  RunContext ctx;
  ctx.comm = "worker";
  // @+FILEOFFS: bias + offset. The bias here puts file offset 8 at kData[2].
  ctx.bias = reinterpret_cast<uint64_t>(kData);
  const Rec r = run_on(d, regs, ctx);
  EXPECT_EQ(r.at<uint64_t>(d.args[0].offset), regs.sp);
  EXPECT_EQ(r.at<uint64_t>(d.args[1].offset), 100u);
  EXPECT_EQ(r.at<uint64_t>(d.args[2].offset), 102u);
  EXPECT_EQ(r.str(d.args[3].offset), "worker");
  EXPECT_EQ(r.at<uint32_t>(d.args[4].offset), 9u);
  EXPECT_EQ(r.at<uint64_t>(d.args[5].offset), 1u);
  EXPECT_EQ(r.at<uint64_t>(d.args[6].offset), 6u);
  // At a function's entry sp points at the return address: arg7 is above it.
  EXPECT_EQ(r.at<uint64_t>(d.args[7].offset), 101u);
  EXPECT_EQ(r.at<uint64_t>(d.args[8].offset), 102u);
  EXPECT_EQ(r.str(d.args[9].offset), "worker");
  EXPECT_TRUE(d.uses_args);
  // No comm in the context: the thread's own name.
  ctx.comm = nullptr;
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  EXPECT_EQ(run_on(d, regs, ctx).str(d.args[3].offset), name);
}

TEST(ProbeFetch, ReturnProbe) {
  patch::Regs regs{};
  regs.ax = 49;
  regs.ip = 0x560e1f3ec081;  // where the function returns to
  const uint64_t entry[6] = {0x31, 2, 3, 4, 5, 6};
  const Definition d = must_parse("r:g/c /bin/sh:0x1190 arg1=$arg1 rv=$retval:s32");
  RunContext ctx;
  ctx.func = 0x560e1f3ec190;
  ctx.entry_args = entry;
  const Rec r = run_on(d, regs, ctx);
  EXPECT_EQ(r.at<uint64_t>(8), 0x560e1f3ec190u) << "__probe_func";
  EXPECT_EQ(r.at<uint64_t>(16), 0x560e1f3ec081u) << "__probe_ret_ip";
  // The kernel's own line for this return (trace, 6.18).
  EXPECT_EQ(printed(d, r), "(0x560e1f3ec081 <- 0x560e1f3ec190) arg1=0x31 rv=49");
}

TEST(ProbeFetch, BadReadsRecordWhatTheKernelRecords) {
  Pages pages;
  const char* edge = pages.edge("tail");
  patch::Regs regs{};
  regs.di = reinterpret_cast<uint64_t>(pages.none());
  regs.si = reinterpret_cast<uint64_t>(pages.unmapped());
  regs.dx = reinterpret_cast<uint64_t>(edge);
  regs.cx = 8;  // a null page
  regs.sp = reinterpret_cast<uint64_t>(pages.none());
  const uint64_t before = base::fixed_faults();
  const Definition d = must_parse(
      "p /bin/sh:0x10 a=+0(%di):u64 b=+0(%si):u32 c=+0(%di):string d=+0(%si):ustring e=+0(%dx):string "
      "f=+0(+0(%si)):u64 g=+0(+0(%cx)):string h=+0(%dx):u8[8] i=+0(%di):b3@1/8 j=+0(%dx):string[2] k=%cx "
      "l=$stack1");
  const Rec r = run_on(d, regs);
  EXPECT_EQ(r.at<uint64_t>(d.args[0].offset), 0u);
  EXPECT_EQ(r.at<uint32_t>(d.args[1].offset), 0u);
  EXPECT_EQ(r.str(d.args[2].offset), "(fault)");
  EXPECT_EQ(r.str(d.args[3].offset), "(fault)");
  EXPECT_EQ(r.str(d.args[4].offset), "(fault)") << "a string running into PROT_NONE";
  EXPECT_EQ(r.at<uint64_t>(d.args[5].offset), 0u);
  EXPECT_EQ(r.str(d.args[6].offset), "(fault)");
  EXPECT_EQ(memcmp(r.b + d.args[7].offset, "tail\0\0\0\0", 8), 0)
      << "each element read alone; those that fault are 0";
  EXPECT_EQ(r.at<uint8_t>(d.args[8].offset), 0);
  EXPECT_EQ(r.str(d.args[9].offset), "(fault)");
  EXPECT_EQ(r.str(d.args[9].offset + 4), "(fault)");
  EXPECT_EQ(r.at<uint64_t>(d.args[10].offset), 8u) << "the args after them are still fetched";
  EXPECT_EQ(r.at<uint64_t>(d.args[11].offset), 0u) << "a stack slot that cannot be read is 0";
  EXPECT_EQ(r.len, d.fixed_size) << "faulted strings take no room";
  EXPECT_GE(base::fixed_faults() - before, 9u);
  EXPECT_EQ(printed(d, r),
            "(0x0) a=0 b=0 c=(fault) d=(fault) e=(fault) f=0 g=(fault) h={116,97,105,108,0,0,0,0} i=0 "
            "j={(fault),(fault)} k=0x8 l=0x0");
}

TEST(ProbeFetch, StringsAreCutToTheRecord) {
  std::string big(3000, 'x');
  patch::Regs regs{};
  regs.di = reinterpret_cast<uint64_t>(big.c_str());
  const Definition d = must_parse("p /bin/sh:0x10 a=+0(%di):string b=+0(%di):string");
  Rec r = run_on(d, regs);
  EXPECT_EQ(r.len, internal::kMaxRecord);
  EXPECT_EQ(r.str(d.args[0].offset), std::string(internal::kMaxRecord - d.fixed_size - 1, 'x'));
  EXPECT_EQ(r.str(d.args[1].offset), "(fault)") << "no room left: the kernel's -ENOMEM, length 0";
  EXPECT_EQ(r.b[internal::kMaxRecord], 0xee) << "nothing past cap";
  r = run_on(d, regs, {}, 100);
  EXPECT_EQ(r.len, 100u);
  EXPECT_EQ(r.b[100], 0xee);
  EXPECT_EQ(run_on(d, regs, {}, d.fixed_size - 1).len, 0u) << "no room for the fixed part: nothing";
}

TEST(ProbeFetch, SymstrUsesTheSymbolizer) {
  patch::Regs regs{};
  regs.di = 0x1234;
  const Definition d = must_parse("p /bin/sh:0x10 s=%di:symstr");
  EXPECT_EQ(run_on(d, regs).str(d.args[0].offset), "0x1234");
  RunContext ctx;
  ctx.symbolize = [](uint64_t addr, char* buf, size_t size, void*) -> int {
    return snprintf(buf, size, "fn+0x%llx/0x40", static_cast<unsigned long long>(addr - 0x1200));
  };
  EXPECT_EQ(run_on(d, regs, ctx).str(d.args[0].offset), "fn+0x34/0x40");
}

TEST(ProbeFetch, FaultsFromManyThreads) {
  Pages pages;
  const Definition d = must_parse("p /bin/sh:0x10 a=+0(%di):u64 s=+0(%si):string t=+0(%dx):string");
  const char* edge = pages.edge("ab");
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      patch::Regs regs{};
      regs.di =
          t % 2 ? reinterpret_cast<uint64_t>(pages.none()) : 0x1000;  // below mmap_min_addr: never mapped
      regs.si = reinterpret_cast<uint64_t>(edge);
      regs.dx = reinterpret_cast<uint64_t>("ok");
      for (int i = 0; i < 2000; ++i) {
        const Rec r = run_on(d, regs);
        if (r.at<uint64_t>(d.args[0].offset) != 0 || r.str(d.args[1].offset) != "(fault)" ||
            r.str(d.args[2].offset) != "ok")
          bad.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

// ---- The event's shape: the format file's text, as the kernel's.
std::string format_of(const std::string& line, uint16_t id) {
  EventShape shape(must_parse(line));
  shape.desc()->id = id;
  return events::format_text(*shape.desc());
}

TEST(ProbeShape, FormatIsTheKernels) {
  // /sys/kernel/tracing/events/uprobes/p_t_0x1190/format (6.18) for
  // "p /tmp/hf/t:0x1190 %ax".
  EXPECT_EQ(format_of("p /bin/sh:0x1190 %ax", 2329),
            "name: p_sh_0x1190\n"
            "ID: 2329\n"
            "format:\n"
            "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
            "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
            "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
            "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
            "\n"
            "\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n"
            "\tfield:u64 arg1;\toffset:16;\tsize:8;\tsigned:0;\n"
            "\n"
            "print fmt: \"(%lx) arg1=0x%Lx\", REC->__probe_ip, REC->arg1\n");
  // events/hft/b/format for the arrays, strings, bitfields and immediates.
  const std::string b = format_of(
      "p:hft/b /bin/sh:0x1190 %di:b3@4/32 +0(%dx):b5@2/8 +16(%dx):u32[3] +0(%si):char[4] +8(%dx):string[2] "
      "$comm "
      "$stack",
      2327);
  EXPECT_NE(b.find("\tfield:u32 arg1;\toffset:16;\tsize:4;\tsigned:0;\n"
                   "\tfield:u8 arg2;\toffset:20;\tsize:1;\tsigned:0;\n"
                   "\tfield:u32 arg3[];\toffset:21;\tsize:12;\tsigned:0;\n"
                   "\tfield:u8 arg4[];\toffset:33;\tsize:4;\tsigned:0;\n"
                   "\tfield:__data_loc char[][2] arg5;\toffset:37;\tsize:8;\tsigned:1;\n"
                   "\tfield:__data_loc char[] arg6;\toffset:45;\tsize:4;\tsigned:1;\n"
                   "\tfield:u64 arg7;\toffset:49;\tsize:8;\tsigned:0;\n"),
            std::string::npos)
      << b;
  EXPECT_NE(
      b.find(
          "print fmt: \"(%lx) arg1=%u arg2=%u arg3={%u,%u,%u} arg4={'%c','%c','%c','%c'} "
          "arg5={\\\"%s\\\",\\\"%s\\\"} arg6=\\\"%s\\\" arg7=0x%Lx\", REC->__probe_ip, REC->arg1, REC->arg2, "
          "REC->arg3[0], REC->arg3[1], REC->arg3[2], REC->arg4[0], REC->arg4[1], REC->arg4[2], "
          "REC->arg4[3], __get_str(arg5[0]), __get_str(arg5[1]), __get_str(arg6), REC->arg7\n"),
      std::string::npos)
      << b;
  const std::string c = format_of("r:hft/c /bin/sh:0x1190 $retval rv=$retval:s32", 2328);
  EXPECT_NE(c.find("\tfield:unsigned long __probe_func;\toffset:8;\tsize:8;\tsigned:0;\n"
                   "\tfield:unsigned long __probe_ret_ip;\toffset:16;\tsize:8;\tsigned:0;\n"
                   "\tfield:u64 arg1;\toffset:24;\tsize:8;\tsigned:0;\n"
                   "\tfield:s32 rv;\toffset:32;\tsize:4;\tsigned:1;\n\n"
                   "print fmt: \"(%lx <- %lx) arg1=0x%Lx rv=%d\", REC->__probe_func, REC->__probe_ret_ip, "
                   "REC->arg1, REC->rv\n"),
            std::string::npos)
      << c;
}

TEST(ProbeShape, PrintFunctionFindsItsShapeByTheEventId) {
  EventShape shape(must_parse("p:g/pf /bin/sh:0x10 v=%di:u32"));
  shape.desc()->id = 4321;
  patch::Regs regs{};
  regs.di = 77;
  regs.ip = 0x1000;
  RunContext ctx;
  ctx.regs = &regs;
  alignas(8) uint8_t rec[internal::kMaxRecord];
  const uint32_t len = run(shape.def(), 4321, ctx, rec, sizeof rec);
  char buf[256];
  EXPECT_EQ(shape.desc()->print(rec, len, buf, sizeof buf), 0) << "not published yet: nothing";
  publish_shape(4321, &shape);
  const int n = shape.desc()->print(rec, len, buf, sizeof buf);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "(0x1000) v=77");
  publish_shape(4321, nullptr);
  EXPECT_EQ(shape.desc()->print(rec, len, buf, sizeof buf), 0);
}

TEST(ProbeShape, PrintIsBoundedByTheRecord) {
  // A record is not trusted: a __data_loc past its end prints (fault), a
  // record shorter than its fixed part prints what it holds.
  const Definition d = must_parse("p /bin/sh:0x10 s=+0(%di):string n=%si:u32");
  uint8_t rec[64] = {};
  const uint32_t loc = (10u << 16) | 60u;
  memcpy(rec + d.args[0].offset, &loc, 4);
  char buf[256];
  int n = print_record(d, rec, d.fixed_size, buf, sizeof buf);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "(0x0) s=(fault) n=0");
  n = print_record(d, rec, 18, buf, sizeof buf);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "(0x0) s=");
  n = print_record(d, rec, d.fixed_size, buf, 4);
  EXPECT_EQ(n, 19) << "snprintf's convention";
  EXPECT_STREQ(buf, "(0x");
}

}  // namespace
}  // namespace usrtrace::probe
