// The built-in ftrace events (events/builtin.h): their format files, byte
// for byte, and the registered descriptors against their definitions.
#include "events/builtin.h"

#include <gtest/gtest.h>

#include <string>

#include "events/registry.h"
#include "tracefs/tracefs.h"

namespace usrtrace {
namespace {

std::string line(const std::string& decl, int offset, int size, int is_signed) {
  return "\tfield:" + decl + ";\toffset:" + std::to_string(offset) + ";\tsize:" + std::to_string(size) +
         ";\tsigned:" + std::to_string(is_signed) + ";\n";
}

// A format file: the kernel's common fields, then `fields`.
std::string format(const std::string& name, int id, const std::string& fields, const std::string& fmt) {
  return "name: " + name + "\nID: " + std::to_string(id) + "\nformat:\n" +
         line("unsigned short common_type", 0, 2, 0) + line("unsigned char common_flags", 2, 1, 0) +
         line("unsigned char common_preempt_count", 3, 1, 0) + line("int common_pid", 4, 4, 1) + "\n" +
         fields + "\nprint fmt: " + fmt + "\n";
}

std::string read(const std::string& path) {
  std::string out;
  EXPECT_GE(tracefs::read_file(path, &out), 0) << path;
  return out;
}

// The kernel's events/ftrace/NAME/format files (6.18), where trace-cmd and
// libtraceevent find the layouts: the same offsets and sizes. Where the
// text differs it always has: raw_data's id is 12 (the kernel's moves
// between versions: 19 on 6.18), function and funcgraph_entry have no
// trailing `unsigned long args[]` (the kernel's function arguments, which
// we do not record), and the trailing `char buf[]` says signed:1 where the
// kernel says signed:0.
TEST(BuiltinEventTest, FormatFilesAreTheKernels) {
  EXPECT_EQ(read("events/ftrace/print/format"),
            format("print", 5, line("unsigned long ip", 8, 8, 0) + line("char buf[]", 16, 0, 1),
                   "\"%ps: %s\", (void *)REC->ip, REC->buf"));
  EXPECT_EQ(read("events/ftrace/raw_data/format"),
            format("raw_data", 12, line("unsigned int id", 8, 4, 0) + line("char buf[]", 12, 0, 1),
                   "\"id:%04x %08x\", REC->id, (int)REC->buf[0]"));
  EXPECT_EQ(
      read("events/ftrace/function/format"),
      format("function", 1, line("unsigned long ip", 8, 8, 0) + line("unsigned long parent_ip", 16, 8, 0),
             "\" %ps <-- %ps\", (void *)REC->ip, (void *)REC->parent_ip"));
  EXPECT_EQ(read("events/ftrace/funcgraph_entry/format"),
            format("funcgraph_entry", 11,
                   line("unsigned long func", 8, 8, 0) + line("unsigned int depth", 16, 4, 0),
                   "\"--> %ps (%u)\", (void *)REC->func, REC->depth"));
  EXPECT_EQ(
      read("events/ftrace/funcgraph_exit/format"),
      format("funcgraph_exit", 10,
             line("unsigned long func", 8, 8, 0) + line("unsigned int depth", 16, 4, 0) +
                 line("unsigned int overrun", 20, 4, 0) + line("unsigned long long calltime", 24, 8, 0) +
                 line("unsigned long long rettime", 32, 8, 0),
             "\"<-- %ps (%u) (start: %llx  end: %llx) over: %u\", (void *)REC->func, "
             "REC->depth, REC->calltime, REC->rettime, REC->depth"));
  EXPECT_EQ(read("events/ftrace/user_stack/format"),
            format("user_stack", 13,
                   line("unsigned int tgid", 8, 4, 0) + line("unsigned long caller[8]", 16, 64, 0),
                   "\"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" \"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" "
                   "\"\\t=> %ps\\n\\t=> %ps\\n\", (void *)REC->caller[0], (void *)REC->caller[1], "
                   "(void *)REC->caller[2], (void *)REC->caller[3], (void *)REC->caller[4], "
                   "(void *)REC->caller[5], (void *)REC->caller[6], (void *)REC->caller[7]"));
}

// What the registry holds is the definition: its id, its record's size and
// its generated field table.
template <class E>
void expect_registered() {
  SCOPED_TRACE(E::kName);
  const internal::EventDesc* d = events::Registry::get().find("ftrace", E::kName);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->id, E::kId);
  EXPECT_EQ(events::Registry::get().by_id(E::kId), d);
  EXPECT_EQ(d->fields, E::kFields);
  EXPECT_EQ(d->nfields, std::size(E::kFields));
  EXPECT_EQ(d->fixed_size, sizeof(typename E::Record));
  EXPECT_STREQ(d->print_fmt, E::kPrintFmt);
}

TEST(BuiltinEventTest, RegisteredFromTheirDefinitions) {
  expect_registered<events::PrintEvent>();
  expect_registered<events::RawDataEvent>();
  expect_registered<events::FunctionEvent>();
  expect_registered<events::GraphEntryEvent>();
  expect_registered<events::GraphExitEvent>();
  expect_registered<events::UserStackEvent>();
}

// The generated tables, field by field, against the structs' members.
TEST(BuiltinEventTest, FieldsFollowTheRecords) {
  using events::GraphExitEvent;
  using events::GraphExitRecord;
  EXPECT_EQ(GraphExitEvent::kFields[3].offset, offsetof(GraphExitRecord, calltime));
  EXPECT_STREQ(GraphExitEvent::kFields[3].name, "calltime");
  const internal::FieldDesc& caller = events::UserStackEvent::kFields[1];
  EXPECT_EQ(caller.offset, offsetof(events::UserStackRecord, caller));
  EXPECT_EQ(caller.size, sizeof(events::UserStackRecord::caller));
  EXPECT_EQ(caller.array_len, events::kUserStackEntries);
  EXPECT_FALSE(caller.is_signed);
  const internal::FieldDesc& buf = events::PrintEvent::kFields[1];
  EXPECT_EQ(buf.offset, sizeof(events::PrintRecord));  // the text follows the fixed part
  EXPECT_EQ(buf.size, 0);
  EXPECT_EQ(buf.kind, internal::FieldKind::kCharArray);
}

}  // namespace
}  // namespace usrtrace
