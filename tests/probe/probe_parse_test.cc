// The uprobe_events language (src/probe/parse.h): what a line defines, the
// programs its args compile to, the listing it prints back, and the
// kernel's error texts, carets and errnos for bad lines. The expectations
// were read off a 6.18 kernel's tracefs (the lines and the caret bytes);
// probe_kernel_test.cc compares with the running kernel itself.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "probe/parse.h"
#include "probe/sdt.h"

namespace usrtrace::probe {
namespace {

// A regular file every machine has (the kernel's check follows symlinks).
constexpr const char* kBin = "/bin/sh";

Definition must_parse(const std::string& line) {
  Definition d;
  Error e;
  const int rc = parse(line, &d, &e);
  EXPECT_EQ(rc, 0) << line << ": " << e.text << " at " << e.pos;
  return d;
}

std::vector<FetchOp> ops(const Arg& a) {
  std::vector<FetchOp> out;
  for (const FetchInsn& i : a.code) {
    out.push_back(i.op);
    if (i.op == FetchOp::kEnd) break;
  }
  return out;
}

TEST(ProbeParse, EntryProbeWithEveryKindOfArg) {
  const std::string line = std::string("p:grp/ev ") + kBin +
                           ":0x1190 a=%di:u8 b=%si:s16 c=%dx:x32 d=+0(%dx):s64 e=+8(%dx):string %ax";
  const Definition d = must_parse(line);
  EXPECT_EQ(d.kind, 'p');
  EXPECT_FALSE(d.is_return);
  EXPECT_EQ(d.group, "grp");
  EXPECT_EQ(d.event, "ev");
  EXPECT_EQ(d.target.path, kBin);
  EXPECT_EQ(d.target.symbol, "");
  EXPECT_EQ(d.target.offset, 0x1190u);
  EXPECT_EQ(d.target_pos, 9u);
  ASSERT_EQ(d.args.size(), 6u);
  // Packed after the common header (8) and __probe_ip (8), as the kernel.
  const uint16_t offsets[] = {16, 17, 19, 23, 31, 35};
  const char* names[] = {"a", "b", "c", "d", "e", "arg6"};
  for (size_t i = 0; i < d.args.size(); ++i) {
    EXPECT_EQ(d.args[i].offset, offsets[i]) << i;
    EXPECT_EQ(d.args[i].name, names[i]) << i;
  }
  EXPECT_EQ(d.fixed_size, 35 + 8);
  EXPECT_STREQ(d.args[5].type->name, "x64");  // untyped: x64, "u64" in the format
  EXPECT_STREQ(d.args[5].type->fmttype, "u64");
  EXPECT_STREQ(d.args[4].type->fmttype, "__data_loc char[]");
}

TEST(ProbeParse, ProgramsHaveTheKernelsShape) {
  const Definition d =
      must_parse(std::string("p ") + kBin +
                 ":0x10 %di +8(%di):u32 +0(+8(%dx)):x8 +8(%dx):string +8(%dx):string[2] $comm "
                 "\\\"abc\" %di:b3@4/32 @0x1000 @+0x2000:u32 +u4(%si):u16 $stack3 \\-5:s32");
  using F = FetchOp;
  EXPECT_EQ(ops(d.args[0]), (std::vector<F>{F::kReg, F::kStRaw, F::kEnd}));
  EXPECT_EQ(d.args[0].code[0].param, 14u);  // di in pt_regs order
  EXPECT_EQ(ops(d.args[1]), (std::vector<F>{F::kReg, F::kStMem, F::kEnd}));
  EXPECT_EQ(d.args[1].code[1].value, 8);
  EXPECT_EQ(d.args[1].code[1].param, 4u);
  EXPECT_EQ(ops(d.args[2]), (std::vector<F>{F::kReg, F::kDeref, F::kStMem, F::kEnd}));
  EXPECT_EQ(d.args[2].code[1].value, 8);
  EXPECT_EQ(d.args[2].code[2].value, 0);
  EXPECT_EQ(ops(d.args[3]), (std::vector<F>{F::kReg, F::kStString, F::kEnd}));
  EXPECT_EQ(d.args[3].code[1].value, 8);
  // An array of strings keeps the dereference: its elements are pointers.
  EXPECT_EQ(ops(d.args[4]), (std::vector<F>{F::kReg, F::kDeref, F::kStString, F::kLpArray, F::kEnd}));
  EXPECT_EQ(d.args[4].code[3].param, 2u);
  EXPECT_EQ(ops(d.args[5]), (std::vector<F>{F::kComm, F::kStString, F::kEnd}));
  EXPECT_EQ(ops(d.args[6]), (std::vector<F>{F::kData, F::kStString, F::kEnd}));
  EXPECT_EQ(d.args[6].data, "abc");
  EXPECT_EQ(ops(d.args[7]), (std::vector<F>{F::kReg, F::kStRaw, F::kModBf, F::kEnd}));
  EXPECT_EQ(d.args[7].code[2].lshift, 32 - 7);
  EXPECT_EQ(d.args[7].code[2].rshift, 32 - 3);
  EXPECT_EQ(d.args[7].code[2].basesize, 4);
  EXPECT_EQ(ops(d.args[8]), (std::vector<F>{F::kImm, F::kStMem, F::kEnd}));
  EXPECT_EQ(d.args[8].code[0].value, 0x1000);
  EXPECT_EQ(ops(d.args[9]), (std::vector<F>{F::kFoffs, F::kStMem, F::kEnd}));
  EXPECT_EQ(d.args[9].code[0].value, 0x2000);
  EXPECT_EQ(ops(d.args[10]), (std::vector<F>{F::kReg, F::kStUMem, F::kEnd}));
  EXPECT_EQ(ops(d.args[11]), (std::vector<F>{F::kStack, F::kStRaw, F::kEnd}));
  EXPECT_EQ(d.args[11].code[0].param, 3u);
  EXPECT_EQ(ops(d.args[12]), (std::vector<F>{F::kImm, F::kStRaw, F::kEnd}));
  EXPECT_EQ(d.args[12].code[0].value, -5);
}

TEST(ProbeParse, ReturnProbes) {
  Definition d = must_parse(std::string("r:g/e ") + kBin + ":0x1190 $retval rv=$retval:s32");
  EXPECT_TRUE(d.is_return);
  EXPECT_EQ(d.kind, 'r');
  EXPECT_EQ(d.args[0].offset, 24);  // after __probe_func and __probe_ret_ip
  EXPECT_EQ(d.args[1].offset, 32);
  EXPECT_EQ(d.fixed_size, 36);
  EXPECT_EQ(d.args[0].code[0].op, FetchOp::kRetval);
  // %return makes a p line a return probe.
  d = must_parse(std::string("p:g/e ") + kBin + ":0x1190%return");
  EXPECT_TRUE(d.is_return);
  EXPECT_EQ(d.text(), std::string("r:g/e ") + kBin + ":0x0000000000001190");
}

TEST(ProbeParse, DefaultNamesAreTheKernels) {
  // p_BASENAME_0xOFFSET, the base name cut at '.', '-' or '_', and 'p' for
  // return probes too (the kernel's snprintf has a literal 'p').
  EXPECT_EQ(must_parse(std::string("p ") + kBin + ":0x1190").event, "p_sh_0x1190");
  EXPECT_EQ(must_parse(std::string("r ") + kBin + ":4096").event, "p_sh_0x1000");
  EXPECT_EQ(must_parse("p:grp/ /proc/self/exe:0x10").event, "p_exe_0x10");
  EXPECT_EQ(must_parse("p:grp/ /proc/self/exe:0x10").group, "grp");
  EXPECT_EQ(must_parse(std::string("p ") + kBin + ":0x10").group, "uprobes");
  // A group may have '-' (is_good_system_name()), an event may not.
  EXPECT_EQ(must_parse(std::string("p:-my-grp/ev ") + kBin + ":0x10").group, "-my-grp");
  // GROUP.EVENT is the kernel's other spelling.
  const Definition dot = must_parse(std::string("p:grp.ev ") + kBin + ":0x10");
  EXPECT_EQ(dot.group, "grp");
  EXPECT_EQ(dot.event, "ev");
  // Ours, the symbol forms: kprobes' p_SYMBOL_OFFS / r_SYMBOL_OFFS.
  Definition s = must_parse("p main+0x10");
  EXPECT_EQ(s.event, "p_main_16");
  EXPECT_EQ(s.target.path, "");
  EXPECT_EQ(s.target.symbol, "main");
  EXPECT_EQ(s.target.offset, 16u);
  s = must_parse(std::string("r ") + kBin + ":ns::f(int)");
  EXPECT_EQ(s.event, "r_ns__f_int__0");
  EXPECT_EQ(s.target.path, kBin);
  EXPECT_EQ(s.target.symbol, "ns::f(int)");
  s = must_parse("p:g/e strlen%return");
  EXPECT_TRUE(s.is_return);
  EXPECT_EQ(s.target.symbol, "strlen");
  EXPECT_EQ(s.text(), "r:g/e strlen");
}

TEST(ProbeParse, ListingIsTheKernels) {
  // As /sys/kernel/tracing/uprobe_events printed it for the same line.
  const Definition d = must_parse(std::string("p:hft/b ") + kBin +
                                  ":0x1190 %di:b3@4/32 +0(%dx):b5@2/8 +16(%dx):u32[3] +0(%si):char[4] "
                                  "+8(%dx):string[2] $comm $stack $stack0 $stack3 @0x1000 @+0x2000:u32 "
                                  "+0(+8(%dx)):x8 \\1234 \\-5:s32 \\0x10:x16 +u0(%si):u8 -8(%sp):s16");
  EXPECT_EQ(d.text(), std::string("p:hft/b ") + kBin +
                          ":0x0000000000001190 arg1=%di:b3@4/32 arg2=+0(%dx):b5@2/8 arg3=+16(%dx):u32[3] "
                          "arg4=+0(%si):char[4] arg5=+8(%dx):string[2] arg6=$comm arg7=$stack arg8=$stack0 "
                          "arg9=$stack3 arg10=@0x1000 arg11=@+0x2000:u32 arg12=+0(+8(%dx)):x8 arg13=\\1234 "
                          "arg14=\\-5:s32 arg15=\\0x10:x16 arg16=+u0(%si):u8 arg17=-8(%sp):s16");
  const Definition r = must_parse(std::string("p ") + kBin + ":0x10(0x20)");
  EXPECT_EQ(r.ref_ctr_offset, 0x20u);
  EXPECT_EQ(r.text(), std::string("p:uprobes/p_sh_0x10 ") + kBin + ":0x0000000000000010(0x20)");
}

TEST(ProbeParse, CommandTextJoinsWordsWithOneBlank) {
  EXPECT_EQ(command_text("  p:a/b\t/bin/sh:0x10   %di  "), "p:a/b /bin/sh:0x10 %di");
  // The caret is in that text: the blanks of the line do not move it.
  Definition d;
  Error e;
  EXPECT_EQ(parse("p:a/b   /bin/sh:0x10 \t %eax", &d, &e), -EINVAL);
  EXPECT_EQ(e.text, "Invalid register name");
  EXPECT_EQ(e.pos, 19u);
}

TEST(ProbeParse, Removal) {
  Definition rm;
  Error e;
  ASSERT_EQ(parse("-:grp/ev", &rm, &e), 0);
  EXPECT_EQ(rm.kind, '-');
  EXPECT_EQ(rm.group, "grp");
  EXPECT_EQ(rm.event, "ev");
  const Definition p = must_parse(std::string("p:grp/ev ") + kBin + ":0x10 a=%di");
  const Definition other = must_parse(std::string("p:other/ev ") + kBin + ":0x10");
  EXPECT_TRUE(removal_matches(rm, p));
  EXPECT_FALSE(removal_matches(rm, other));
  // No group: any group; "GRP/": every event of the group.
  ASSERT_EQ(parse("-:ev", &rm, &e), 0);
  EXPECT_TRUE(removal_matches(rm, p));
  EXPECT_TRUE(removal_matches(rm, other));
  ASSERT_EQ(parse("-:grp/", &rm, &e), 0);
  EXPECT_TRUE(removal_matches(rm, p));
  EXPECT_FALSE(removal_matches(rm, other));
  // Words after the name must be the probe's own listing.
  ASSERT_EQ(parse(std::string("-:grp/ev ") + kBin + ":0x0000000000000010 a=%di", &rm, &e), 0);
  EXPECT_TRUE(removal_matches(rm, p));
  ASSERT_EQ(parse(std::string("-:grp/ev ") + kBin + ":0x10", &rm, &e), 0);
  EXPECT_FALSE(removal_matches(rm, p));
  // What the kernel refuses without a log entry.
  EXPECT_EQ(parse("-:", &rm, &e), -EINVAL);
  EXPECT_EQ(e.text, "");
  EXPECT_EQ(parse("-x", &rm, &e), -EINVAL);
}

TEST(ProbeParse, Quirks) {
  // Each as the kernel takes it.
  EXPECT_EQ(must_parse(std::string("px ") + kBin + ":0x10").kind, 'p');  // after p: only ':' counts
  EXPECT_TRUE(must_parse(std::string("r5 ") + kBin + ":0x10").is_return);
  EXPECT_EQ(must_parse(std::string("r ") + kBin + ":0x10 $retvalx").args[0].code[0].op, FetchOp::kRetval);
  // Text after a dereference's ')' is ignored.
  EXPECT_EQ(must_parse(std::string("p ") + kBin + ":0x10 +8(%di)xyz").args[0].code[1].value, 8);
  // 13 nested dereferences fit the 16 instructions; $stackN is cut to 32 bits.
  const Definition d =
      must_parse(std::string("p ") + kBin +
                 ":0x10 +0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di))))))))))))) $stack4294967297");
  EXPECT_EQ(d.args[1].code[0].param, 1u);
  EXPECT_EQ(must_parse(std::string("p ") + kBin + ":0x10 \\\"\"").args[0].data, "");
}

// ---- Bad lines: the kernel's text, caret and errno.
struct Bad {
  const char* args;  // after "p:hft/x /bin/sh:0x1190 " (23 bytes)
  const char* text;
  int pos;  // in the command
  int err;
};

class ProbeParseMalformed : public testing::TestWithParam<Bad> {};

TEST_P(ProbeParseMalformed, KernelTextCaretAndErrno) {
  const Bad& b = GetParam();
  const std::string line = std::string("p:hft/x ") + kBin + ":0x1190 " + b.args;
  Definition d;
  Error e;
  EXPECT_EQ(parse(line, &d, &e), -b.err) << line;
  EXPECT_EQ(e.text, b.text) << line;
  EXPECT_EQ(e.pos, static_cast<size_t>(b.pos)) << line << "\n" << std::string(e.pos, ' ') << "^";
  EXPECT_EQ(e.errnum, b.err);
}

// Read off the kernel with /tmp/hf/t (9 bytes) in place of /bin/sh (7):
// every caret in the args moved 2 bytes left.
constexpr int P = 23;
INSTANTIATE_TEST_SUITE_P(
    Args, ProbeParseMalformed,
    testing::Values(Bad{"%eax", "Invalid register name", P, EINVAL},
                    Bad{"a=%di:u128", "Unknown type is specified", P + 6, EINVAL},
                    Bad{"=%di", "Argument name is not specified", P, EINVAL},
                    Bad{"1a=%di", "Argument name must follow the same rules as C identifiers", P, EINVAL},
                    Bad{"a=%di b=%si a=%dx", "This argument name is already used", P + 12, EINVAL},
                    Bad{"__probe_ip=%di", "This argument name is already used", P, EINVAL},
                    Bad{"$retval", "$retval is not available on probe", P, EINVAL},
                    Bad{"$foo", "Invalid $-variable specified", P, EINVAL},
                    Bad{"$stack1x", "Invalid $-variable specified", P, EINVAL},
                    Bad{"+8%di", "Dereference needs a brace", P, EINVAL},
                    Bad{"+8(%di", "Dereference brace is not closed", P + 6, EINVAL},
                    Bad{"+u8(%di", "Dereference brace is not closed", P + 6, EINVAL},
                    Bad{"-u8(%zz)", "Invalid register name", P + 3, EINVAL},
                    Bad{"+z(%di)", "Invalid dereference offset", P, EINVAL},
                    Bad{"+0xffffffffffffffff(%di)", "Invalid dereference offset", P, ERANGE},
                    Bad{"+8($comm)", "$comm can not be dereferenced", P + 3, EINVAL},
                    Bad{"+0(+8($comm))", "$comm can not be dereferenced", P + 6, EINVAL},
                    Bad{"%di:string", "String accepts only memory argument", P + 4, EINVAL},
                    Bad{"$stack:string", "String accepts only memory argument", P + 7, EINVAL},
                    Bad{"+0(%di):u32[", "Array is not closed", P + 12, EINVAL},
                    Bad{"+0(%di):u32[2]x", "Array has wrong suffix", P + 14, EINVAL},
                    Bad{"+0(%di):string[2]:u8", "Array has wrong suffix", P + 17, EINVAL},
                    Bad{"+0(%di):u32[0]", "Invalid array size", P + 12, EINVAL},
                    Bad{"+0(%di):u32[65]", "Array number is too big", P + 12, EINVAL},
                    Bad{"%di:u32[2]", "String accepts only memory argument", P + 4, EINVAL},
                    Bad{"%di:b3@30/32", "Invalid bitfield", P + 4, EINVAL},
                    Bad{"%di:b3/32", "Invalid bitfield", P + 4, EINVAL},
                    Bad{"%di:b2@0x/16", "Invalid bitfield", P + 4, EINVAL},
                    Bad{"%di:b2@0/12", "Unknown type is specified", P + 4, EINVAL},
                    // The type's offset counts from the outer dereference's '(' (the
                    // kernel's ctx->offset is left there).
                    Bad{"+0(%di):b8@0/8 +0(%di):b0@0/8", "Invalid bitfield", P + 15 + 11, EINVAL},
                    Bad{"\\xyz", "Invalid immediate value", P + 1, EINVAL},
                    Bad{"\\18446744073709551616", "Invalid immediate value", P + 1, ERANGE},
                    Bad{"\\\"abc", "String is not closed with '\"'", P + 5, EINVAL},
                    Bad{"@xyz", "Symbol is not available with uprobe", P, EINVAL},
                    Bad{"@+xyz", "Invalid file offset value", P, EINVAL},
                    Bad{"@0xzz", "Invalid memory address", P, EINVAL},
                    Bad{"@0xffffffffffffffff @18446744073709551616", "Invalid memory address", P + 20,
                        ERANGE},
                    Bad{"$comm:u32", "$comm and immediate-string only accepts string type", P + 6, EINVAL},
                    Bad{"\\\"a:b\"", "$comm and immediate-string only accepts string type", P + 4, EINVAL},
                    Bad{"\\\"a=b\"", "Argument name must follow the same rules as C identifiers", P, EINVAL},
                    Bad{"abc", "BTF is not available or not supported", P, EINVAL},
                    Bad{"a=b=%di", "BTF is not available or not supported", P + 2, EINVAL},
                    Bad{"abc=%di abc", "BTF is not available or not supported", P + 8, EINVAL},
                    Bad{"%di:", "Unknown type is specified", P + 4, EINVAL},
                    Bad{"%di:x8:", "Unknown type is specified", P + 4, EINVAL},
                    Bad{"%di %si:s8:x", "Unknown type is specified", P + 8, EINVAL},
                    Bad{"a=", "No argument expression", P + 2, EINVAL},
                    Bad{"12", "Invalid fetch argument", P, EINVAL},
                    Bad{"!x", "Invalid fetch argument", P, EINVAL},
                    Bad{"arg2=%di %si", "This argument name is already used", P + 9, EINVAL},
                    Bad{"common_pid=%di", "This argument name is already used", P, EINVAL},
                    Bad{"abcdefghijabcdefghijabcdefghijabc=%di", "Argument name is too long", P, EINVAL},
                    Bad{"+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di)))))))))))))))",
                        "Dereference is too much nested", P + 3, EINVAL},
                    Bad{"+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(+0(%di))))))))))))):string[2]",
                        "Argument expression is too long", P, E2BIG},
                    Bad{"$arg0", "Invalid argument number", P, EINVAL},
                    Bad{"+0(%di):string[65]", "Array number is too big", P + 15, EINVAL}));

struct BadHead {
  const char* line;
  const char* text;
  int pos;
  int err;
};

class ProbeParseMalformedHead : public testing::TestWithParam<BadHead> {};

TEST_P(ProbeParseMalformedHead, KernelTextCaretAndErrno) {
  const BadHead& b = GetParam();
  Definition d;
  Error e;
  EXPECT_EQ(parse(b.line, &d, &e), -b.err) << b.line;
  EXPECT_EQ(e.text, b.text) << b.line;
  EXPECT_EQ(e.pos, static_cast<size_t>(b.pos)) << b.line << "\n" << std::string(e.pos, ' ') << "^";
}

INSTANTIATE_TEST_SUITE_P(
    Head, ProbeParseMalformedHead,
    testing::Values(
        BadHead{"p:/x /bin/sh:0x1190", "Group name is not specified", 2, EINVAL},
        BadHead{"p:1hft/x /bin/sh:0x1190", "Group name must follow the same rules as C identifiers", 2,
                EINVAL},
        BadHead{"p:hft/1x /bin/sh:0x1190", "Event name must follow the same rules as C identifiers", 6,
                EINVAL},
        BadHead{"p:hft/x-y /bin/sh:0x1190", "Event name must follow the same rules as C identifiers", 6,
                EINVAL},
        BadHead{"p:hft.x.y /bin/sh:0x1190", "Event name must follow the same rules as C identifiers", 6,
                EINVAL},
        BadHead{"p: /bin/sh:0x1190", "Event name is not specified", 2, EINVAL},
        BadHead{"p:abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd/x /bin/sh:0x1190",
                "Group name is too long", 2, EINVAL},
        BadHead{"p:hft/abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd /bin/sh:0x1190",
                "Event name is too long", 6, EINVAL},
        BadHead{"p /nonexistent/x:0x1190", "Failed to find the given file", 2, ENOENT},
        BadHead{"p /tmp:0x1190", "Not a regular file", 2, EINVAL},
        // The file is checked before the event name.
        BadHead{"p:1bad /nonexistent/x:0x10", "Failed to find the given file", 7, ENOENT},
        BadHead{"p /bin/sh:0x1190%ret", "Invalid probed address suffix", 16, EINVAL},
        BadHead{"p /bin/sh:0x11z0", "Invalid uprobe offset", 10, EINVAL},
        BadHead{"p /bin/sh:01190", "Invalid uprobe offset", 10, EINVAL},
        BadHead{"p /bin/sh:0x1190(0x10", "Reference counter brace is not closed", 21, EINVAL},
        BadHead{"p /bin/sh:0x1190(0x10)x", "Reference counter has wrong suffix", 22, EINVAL},
        BadHead{"p /bin/sh:0x1190(0x10)%return", "Reference counter has wrong suffix", 22, EINVAL},
        BadHead{"p /bin/sh:0x1190(0xzz)", "Invalid reference counter offset", 17, EINVAL},
        // Ours: the symbol forms, with kprobes' texts.
        BadHead{"p main%ret", "Invalid probed address suffix", 6, EINVAL},
        BadHead{"r main+4", "Retprobe address must be an function entry", 2, EINVAL},
        BadHead{"p +4", "Invalid probed address or symbol", 2, EINVAL}));

TEST(ProbeParseMalformed, TooManyArgs) {
  std::string line = std::string("p:hft/x ") + kBin + ":0x1190";
  for (int i = 0; i < 128; ++i) line += " %di";
  Definition d;
  Error e;
  EXPECT_EQ(parse(line, &d, &e), 0);
  line += " %di";
  EXPECT_EQ(parse(line, &d, &e), -E2BIG);
  EXPECT_EQ(e.text, "Too many arguments are specified");
  EXPECT_EQ(e.pos, 23u);
}

TEST(ProbeParseMalformed, RecordTooBigForOurs) {
  // 128 args of u64[64] would not fit a record (kMaxRecord): ours refuses
  // at the first that does not, with the kernel's text for too many args.
  std::string line = std::string("p ") + kBin + ":0x10";
  for (int i = 0; i < 4; ++i) line += " +0(%di):u64[64]";
  Definition d;
  Error e;
  EXPECT_EQ(parse(line, &d, &e), -E2BIG);
  EXPECT_EQ(e.text, "Too many arguments are specified");
  EXPECT_EQ(e.pos, line.rfind(" +0") + 1);
}

TEST(ProbeParseMalformed, NotAUprobeIsRefusedSilently) {
  // -ECANCELED in the kernel (another kind of dynamic event, or none):
  // -EINVAL and no error_log entry.
  for (const char* line : {"x /bin/sh:0x10", "p", "p:hft/x", "p /bin/sh", ""}) {
    Definition d;
    Error e;
    EXPECT_EQ(parse(line, &d, &e), -EINVAL) << line;
    EXPECT_EQ(e.text, "") << line;
  }
}

// Ours: `%PROVIDER:NAME [NAME[:TYPE]...]`, a USDT probe whose sites and
// argument locations come from the notes (probes.cc).
TEST(ProbeParseSdt, NamesTheProbeAndItsArguments) {
  const Definition d = must_parse("p:py/gcs %python:gc__start gen path:string");
  EXPECT_TRUE(d.sdt);
  EXPECT_EQ(d.sdt_provider, "python");
  EXPECT_EQ(d.sdt_name, "gc__start");
  EXPECT_EQ(d.group, "py");
  EXPECT_EQ(d.event, "gcs");
  EXPECT_TRUE(d.args.empty());
  EXPECT_EQ(d.sdt_names, (std::vector<std::string>{"gen", "path:string"}));
  EXPECT_EQ(d.text(), "p:py/gcs %python:gc__start gen path:string");
  // The event is named after the probe unless given.
  EXPECT_EQ(must_parse("p %libstdcxx:throw").event, "throw");
  // PATH%PROVIDER:NAME: the sites of one object's notes only (loaded now
  // or later); the kernel's PATH:OFFSET%return is not one.
  const Definition p = must_parse("p:py/gc /bin/sh%python:gc__start gen");
  EXPECT_TRUE(p.sdt);
  EXPECT_EQ(p.target.path, "/bin/sh");
  EXPECT_EQ(p.sdt_provider, "python");
  EXPECT_EQ(p.text(), "p:py/gc /bin/sh%python:gc__start gen");
  EXPECT_FALSE(must_parse("p:g/e /bin/sh:0x10%return").sdt);
}

TEST(ProbeParseSdt, BadFormsAreRefusedWithACaret) {
  struct Case {
    const char* line;
    const char* text;
    size_t pos;
  };
  const Case cases[] = {
      {"p:g/e %python", "SDT probe must be [PATH]%PROVIDER:NAME, both C identifiers", 6},
      {"p:g/e %:gc__start", "SDT probe must be [PATH]%PROVIDER:NAME, both C identifiers", 6},
      {"p:g/e %py-thon:x", "SDT probe must be [PATH]%PROVIDER:NAME, both C identifiers", 6},
      {"p:g/e /bin/sh%py:x-y", "SDT probe must be [PATH]%PROVIDER:NAME, both C identifiers", 13},
      {"r:g/e %python:gc__start", "SDT probe cannot be a return probe", 6},
      {"p:g/e %python:gc__start a=%di", "SDT probe arguments are NAME or NAME:TYPE (arg1..argN by default)",
       24},
      {"p:g/e %python:gc__start a:nosuch",
       "SDT probe arguments are NAME or NAME:TYPE (arg1..argN by default)", 24},
      {"p:g/e %python:gc__start a b a:u8", "This argument name is already used", 28},
  };
  for (const Case& c : cases) {
    Definition d;
    Error e;
    EXPECT_EQ(parse(c.line, &d, &e), -EINVAL) << c.line;
    EXPECT_EQ(e.text, c.text) << c.line;
    EXPECT_EQ(e.pos, c.pos) << c.line;
  }
}

// The note's operands as fetch args: sizes and signs, registers by any
// of their names, DISP(%REG), constants; names and types given.
TEST(ProbeParseSdt, NoteOperandsBecomeFetchArgs) {
  std::string out, why;
  ASSERT_TRUE(sdt_fetch_args("8@%rbp 8@%r12 -4@%eax", {}, &out, &why)) << why;
  EXPECT_EQ(out, "arg1=%bp:u64 arg2=%r12:u64 arg3=%ax:s32");
  ASSERT_TRUE(sdt_fetch_args("-4@112(%rsp) 2@(%rdi) 1@$5 -8@%r12d", {"gen", "n:x16"}, &out, &why)) << why;
  EXPECT_EQ(out, "gen=+112(%sp):s32 n=+0(%di):x16 arg3=\\5:u8 arg4=%r12:s64");
  ASSERT_TRUE(sdt_fetch_args("8@%rbp 8@-24(%rbx)", {"file:string", "func:string"}, &out, &why)) << why;
  EXPECT_EQ(out, "file=+0(%bp):string func=+0(-24(%bx)):string");
  // What uprobe_events cannot say, and names that do not fit.
  EXPECT_FALSE(sdt_fetch_args("8@(%rax,%rbx,8)", {}, &out, &why));
  EXPECT_NE(why.find("is not DISP(%REG)"), std::string::npos) << why;
  EXPECT_FALSE(sdt_fetch_args("1@%ah", {}, &out, &why));
  EXPECT_FALSE(sdt_fetch_args("3@%rax", {}, &out, &why));
  EXPECT_FALSE(sdt_fetch_args("4@$5", {"s:string"}, &out, &why));
  EXPECT_FALSE(sdt_fetch_args("8@%rax", {"a", "b"}, &out, &why));
  EXPECT_NE(why.find("2 names for a probe of 1 arguments"), std::string::npos) << why;
  // Every line made this way parses.
  ASSERT_TRUE(sdt_fetch_args("-4@112(%rsp) 8@%rbp", {"gen", "f:string"}, &out, &why)) << why;
  must_parse(std::string("p:g/e ") + kBin + ":0x10 " + out);
}

}  // namespace
}  // namespace usrtrace::probe
