// The oracle: the running kernel's own uprobe_events. The same lines are
// written to /sys/kernel/tracing/uprobe_events (on this test's binary, in
// a group of its own, removed after) and parsed by src/probe: the format
// files must be equal byte for byte but for the id, the listings equal,
// and for bad lines the error_log's text and caret equal, and the errno.
// Skips when uprobe_events is not writable (not root, no tracefs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "events/registry.h"
#include "probe/fetch.h"

// The function both the kernel and we probe: called with known values, it
// notes where it returns to (the return probe's __probe_ret_ip).
struct KernelProbeArg {
  int64_t a;
  const char* names[2];
  uint8_t bits;
};
volatile uint64_t g_returns_to = 0;
#if defined(__clang__)
#define USRTRACE_TEST_NOIPA __attribute__((noinline, used))  // clang does no IPA across a noinline
#else
#define USRTRACE_TEST_NOIPA __attribute__((noinline, noipa, used))
#endif
extern "C" USRTRACE_TEST_NOIPA int64_t usrtrace_probe_kernel_target(int64_t x, const char* s,
                                                                    const KernelProbeArg* p) {
  g_returns_to = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  return x * 3 + p->a + s[0];
}

namespace usrtrace::probe {
namespace {

const std::string kTracing = "/sys/kernel/tracing";

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One write, as `echo LINE >> uprobe_events`: 0 or -errno.
int write_kernel(const std::string& line) {
  const int fd = open((kTracing + "/uprobe_events").c_str(), O_WRONLY | O_APPEND);
  if (fd < 0) return -errno;
  const std::string text = line + "\n";
  const ssize_t n = write(fd, text.data(), text.size());
  const int rc = n < 0 ? -errno : 0;
  close(fd);
  return rc;
}

class ProbeKernel : public testing::Test {
 protected:
  void SetUp() override {
    if (access((kTracing + "/uprobe_events").c_str(), W_OK) != 0)
      GTEST_SKIP() << kTracing << "/uprobe_events is not writable: no oracle";
    char buf[PATH_MAX];
    ASSERT_NE(realpath("/proc/self/exe", buf), nullptr);
    bin_ = buf;
    group_ = "usrtrace_k" + std::to_string(getpid());
    // Another engineer's probes may be there: only ours are ever removed.
    const int rc = write_kernel("p:" + group_ + "/probe_check " + bin_ + ":0x10");
    if (rc == -EACCES || rc == -EPERM || rc == -ENODEV)
      GTEST_SKIP() << "uprobe_events refuses writes: " << rc;
    ASSERT_EQ(rc, 0);
    remove_ours();
  }
  void TearDown() override {
    if (group_.empty()) return;
    // A test stopped half way may leave its instance (whose removal
    // disables our events in it), then our events.
    rmdir((kTracing + "/instances/" + group_).c_str());
    remove_ours();
  }
  void remove_ours() { write_kernel("-:" + group_ + "/"); }

  // The error_log entry of `command` (each of our lines is written once,
  // and its group is ours: another test's entries are not taken for it).
  struct LogEntry {
    std::string text, command;
    int pos = -1;
  };
  static bool find_error(const std::string& command, LogEntry* out) {
    const std::string log = read_file(kTracing + "/error_log");
    std::vector<std::string> lines;
    std::stringstream ss(log);
    for (std::string l; std::getline(ss, l);) lines.push_back(l);
    const std::string kCmd = "  Command: ";
    bool found = false;
    for (size_t i = 0; i + 2 < lines.size(); ++i) {
      const size_t at = lines[i].find("error: ");
      if (at == std::string::npos || lines[i + 1].rfind(kCmd, 0) != 0) continue;
      if (lines[i + 1].substr(kCmd.size()) != command) continue;
      out->text = lines[i].substr(at + 7);
      out->command = command;
      out->pos = static_cast<int>(lines[i + 2].find('^')) - static_cast<int>(kCmd.size());
      found = true;
    }
    return found;
  }

  std::string bin_, group_;
};

TEST_F(ProbeKernel, FormatsAndListingsAreTheKernels) {
  const std::vector<std::string> args = {
      "%ax",
      "a=%di:u8 b=%si:s16 c=%dx:x32 d=+0(%dx):s64 e=+8(%dx):string f=+0(%si):ustring g=%ax:char",
      "h=%bx:x8 i=%cx:s8 j=%r8:x16 k=%r9:u16 l=%r10:s32 m=%r11:u32 n=%r12:x64 o=%r13:s64 p=%sp:u64",
      "%di:b3@4/32 +0(%dx):b5@2/8 +0(%di):b1@63/64 %si:b16@0/16",
      "+16(%dx):u32[3] +0(%si):char[4] +8(%dx):string[2] +0(%di):s8[64] +0(%di):b3@2/8[2]",
      "$comm $stack $stack0 $stack3 $COMM:string",
      "@0x1000 @+0x2000:u32 @+-0x10:s16 @0x1000:string",
      "+0(+8(%dx)):x8 +0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di))))))))))))):string",
      "\\1234 \\-5:s32 \\0x10:x16 \\\"imm\" \\\"\":string \\18446744073709551615",
      "+u0(%si):u8 -8(%sp):s16 -u8(%sp):x64 +u8(+u0(%di)):ustring",
      "%ip %flags %cs %ss %orig_ax %bp %r14 %r15",
      "_x=%di:u8 abcdefghijabcdefghijabcdefghijab=%si a9=$stack",
  };
  int n = 0;
  for (const std::string& a : args) {
    for (const char kind : {'p', 'r'}) {
      const std::string event = "e" + std::to_string(n++);
      const std::string line = std::string(1, kind) + ":" + group_ + "/" + event + " " + bin_ + ":0x1000 " +
                               a + (kind == 'r' ? " rv=$retval:s32 $retval" : "");
      SCOPED_TRACE(line);
      ASSERT_EQ(write_kernel(line), 0);
      const std::string kformat = read_file(kTracing + "/events/" + group_ + "/" + event + "/format");
      Definition d;
      Error e;
      ASSERT_EQ(parse(line, &d, &e), 0) << e.text << " at " << e.pos;
      EventShape shape(d);
      const size_t id_at = kformat.find("ID: ");
      ASSERT_NE(id_at, std::string::npos);
      shape.desc()->id = static_cast<uint16_t>(std::stoul(kformat.substr(id_at + 4)));
      EXPECT_EQ(events::format_text(*shape.desc()), kformat);
      const std::string listing = read_file(kTracing + "/uprobe_events");
      EXPECT_NE(listing.find(d.text() + "\n"), std::string::npos) << d.text() << "\nnot in\n" << listing;
      ASSERT_EQ(write_kernel("-:" + group_ + "/" + event), 0);
    }
  }
}

TEST_F(ProbeKernel, DefaultNamesAreTheKernels) {
  for (const std::string& line :
       {"p:" + group_ + "/ " + bin_ + ":0x1000", "r:" + group_ + "/ " + bin_ + ":4096"}) {
    SCOPED_TRACE(line);
    Definition d;
    Error e;
    ASSERT_EQ(parse(line, &d, &e), 0);
    ASSERT_EQ(write_kernel(line), 0);
    EXPECT_EQ(access((kTracing + "/events/" + group_ + "/" + d.event).c_str(), F_OK), 0) << d.event;
    remove_ours();
  }
}

TEST_F(ProbeKernel, ErrorsAreTheKernels) {
  const std::string g = "p:" + group_ + "/x ";
  const std::string b = bin_ + ":0x1000 ";
  const std::vector<std::string> lines = {
      g + b + "%eax",
      g + b + "a=%di:u128",
      g + b + "=%di",
      g + b + "a=%di b=%si a=%dx",
      g + b + "$retval",
      g + b + "$stack1x",
      g + b + "+u8(%di",
      g + b + "-u8(%zz)",
      g + b + "+0(%di):b8@0/8 +0(%di):b0@0/8",
      g + b + "+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di)))))))))))))))",
      g + b + "+0(%di):u32[2]x",
      g + b + "%di:u32[2]",
      g + b + "\\\"abc",
      g + b + "\\18446744073709551616",
      g + b + "@0xffffffffffffffff @18446744073709551616",
      g + b + "$comm:u32",
      g + b + "abc",
      g + b + "$arg0",
      g + b + "%di:symbol",
      g + b + "+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di))))))))))))):string[2]",
      "p:1" + group_ + "/x " + b,
      "p:" + group_ + "/x-y " + b,
      "p:" + group_ + "/x " + bin_ + ":0x10(0x10)x",
      "p:" + group_ + "/x " + bin_ + ":0x11z0",
      "p:" + group_ + "/x " + bin_ + ".nonexistent:0x10",
      "p:" + group_ + "/x /tmp:0x10",
      "x:" + group_ + "/x " + b,
      "-:" + group_ + "/nonexistent",
  };
  int compared = 0;
  for (const std::string& line : lines) {
    SCOPED_TRACE(line);
    const int krc = write_kernel(line);
    LogEntry after;
    const bool logged = find_error(command_text(line), &after);
    Definition d;
    Error e;
    const int rc = parse(line, &d, &e);
    if (line[0] == '-') {
      // A removal parses; the registry answers -ENOENT (no log).
      EXPECT_EQ(rc, 0);
      EXPECT_EQ(krc, -ENOENT);
      continue;
    }
    ASSERT_LT(krc, 0) << "the kernel took it";
    if (line.find(":symbol") != std::string::npos) {
      // Ours takes symbol (the kernel refuses it for uprobes: no kallsyms).
      EXPECT_EQ(after.text, "Unknown type is specified");
      EXPECT_EQ(rc, 0);
      continue;
    }
    EXPECT_EQ(rc, krc);
    if (!logged) {
      EXPECT_EQ(e.text, "") << "the kernel logged nothing";
      continue;
    }
    ++compared;
    EXPECT_EQ(e.text, after.text);
    EXPECT_EQ(static_cast<int>(e.pos), after.pos)
        << "\n"
        << after.command << "\n"
        << std::string(e.pos, ' ') << "^ ours\n"
        << std::string(static_cast<size_t>(after.pos), ' ') << "^ the kernel's";
  }
  EXPECT_GE(compared, 20) << "the kernel's error_log entries were found for most lines";
}

// The file offset of code at `addr` in the main program (what a uprobe's
// PATH:OFFSET names).
uint64_t file_offset_of(uint64_t addr) {
  struct Find {
    uint64_t addr, off = 0;
  } found{addr};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* f = static_cast<Find*>(arg);
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')
          return 0;  // the program is first, unnamed
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uint64_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && f->addr >= start && f->addr < start + ph.p_memsz)
            f->off = f->addr - start + ph.p_offset;
        }
        return 1;
      },
      &found);
  return found.off;
}

TEST_F(ProbeKernel, HitsPrintAsTheKernelsTrace) {
  // The kernel probes this process's own function; we run the same
  // programs on the same values, in the same memory: the lines must be
  // equal, addresses included.
  const auto fn = reinterpret_cast<uint64_t>(&usrtrace_probe_kernel_target);
  const uint64_t off = file_offset_of(fn);
  ASSERT_NE(off, 0u);
  char offs[32];
  snprintf(offs, sizeof offs, ":0x%llx", static_cast<unsigned long long>(off));
  const std::string args =
      " x=%di:s32 s=+0(%si):string c3=+0(%si):char[3] a=+0(%dx):u64 n=+8(%dx):string[2] p=+0(+8(%dx)):string "
      "b=+24(%dx):b4@4/8 bad=+0(%di):string h=%si:x16 i=\\\"imm\" cm=$comm";
  const std::string entry = "p:" + group_ + "/hit " + bin_ + offs + args;
  const std::string ret = "r:" + group_ + "/ret " + bin_ + offs + " rv=$retval:s64 r8=$retval:x8 cm=$comm";
  ASSERT_EQ(write_kernel(entry), 0);
  ASSERT_EQ(write_kernel(ret), 0);
  const std::string inst = kTracing + "/instances/" + group_;
  ASSERT_EQ(mkdir(inst.c_str(), 0755), 0) << strerror(errno);
  auto put = [](const std::string& path, const char* v) {
    std::ofstream f(path);
    f << v;
  };
  put(inst + "/events/" + group_ + "/enable", "1");
  static const KernelProbeArg arg{-42, {"first", "second"}, 0xb7};
  static const char kStr[] = "hello";
  const int64_t rv = usrtrace_probe_kernel_target(7, kStr, &arg);
  put(inst + "/events/" + group_ + "/enable", "0");
  const std::string trace = read_file(inst + "/trace");
  rmdir(inst.c_str());
  auto line_of = [&](const std::string& ev) {
    const size_t at = trace.find(" " + ev + ": ");
    if (at == std::string::npos) return std::string("(no line for " + ev + " in)\n" + trace);
    const size_t start = at + ev.size() + 3;
    return trace.substr(start, trace.find('\n', start) - start);
  };
  char comm[16] = {};
  prctl(PR_GET_NAME, comm);
  // Ours.
  patch::Regs regs{};
  regs.di = 7;
  regs.si = reinterpret_cast<uint64_t>(kStr);
  regs.dx = reinterpret_cast<uint64_t>(&arg);
  regs.ip = fn;
  RunContext ctx;
  ctx.regs = &regs;
  ctx.comm = comm;
  alignas(8) uint8_t rec[internal::kMaxRecord];
  char buf[1024];
  Definition d;
  Error e;
  ASSERT_EQ(parse(entry, &d, &e), 0);
  uint32_t len = run(d, 1, ctx, rec, sizeof rec);
  int n = print_record(d, rec, len, buf, sizeof buf);
  // One difference, the kernel's bug that ours does not copy: a uprobe's
  // \"STR" is read from user space at a kernel address, and faults.
  std::string kernel = line_of("hit");
  const size_t imm = kernel.find(" i=(fault) ");
  EXPECT_NE(imm, std::string::npos) << kernel;
  if (imm != std::string::npos) kernel.replace(imm, 11, " i=\"imm\" ");
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), kernel);
  patch::Regs at_ret{};
  at_ret.ax = static_cast<uint64_t>(rv);
  at_ret.ip = g_returns_to;
  ctx.regs = &at_ret;
  ctx.func = fn;
  ASSERT_EQ(parse(ret, &d, &e), 0);
  len = run(d, 2, ctx, rec, sizeof rec);
  n = print_record(d, rec, len, buf, sizeof buf);
  // The kernel's __probe_ret_ip is where its uretprobe trampoline is (the
  // [uprobes] page), not the caller's address; ours is the caller's.
  kernel = line_of("ret");
  const size_t arrow = kernel.find(" <- ");
  ASSERT_NE(arrow, std::string::npos) << kernel;
  char ours_ret[32];
  snprintf(ours_ret, sizeof ours_ret, "(0x%llx", static_cast<unsigned long long>(g_returns_to));
  kernel.replace(0, arrow, ours_ret);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), kernel);
}

}  // namespace
}  // namespace usrtrace::probe
