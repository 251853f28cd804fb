// libFuzzer: `usrtrace report`'s views and exports on a trace.dat as
// untrusted input, formats included (a traced process writes them). The
// files are made by the writer from a ring buffer's pages: function_graph
// entries and exits on two threads, and an event with a number, a
// __data_loc string and a char array. The input is either
//   'F' + up to three event formats (funcgraph_entry, funcgraph_exit and
//       the event, separated by NUL): a file (v7) with these formats and
//       the same records, so that the fuzzer mutates the formats' text;
//   'R' + a whole file; or
//   bytes that overwrite one seed file (v6, v7, v7 with zstd) at an offset
//       its first bytes choose (and may truncate it).
// Each file that opens goes through --profile, --graph, --flame-graph,
// --format json and --format perfetto (with a counter), into /dev/null:
// never a crash, a read past a record or an allocation without bound
// (docs/security.md).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "report_json.h"
#include "report_perfetto.h"
#include "report_views.h"
#include "ring_buffer/page_format.h"
#include "ring_buffer/ring_buffer.h"
#include "tep_session.h"
#include "tracedat/writer.h"
#include "usrtrace/tracedat.h"

namespace {

constexpr char kCommon[] =
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";

// ftrace's function_graph formats, as usrtrace records them.
const std::string kEntry = std::string("name: funcgraph_entry\nID: 11\nformat:\n") + kCommon +
                           "\tfield:unsigned long func;\toffset:8;\tsize:8;\tsigned:0;\n"
                           "\tfield:unsigned int depth;\toffset:16;\tsize:4;\tsigned:0;\n\n"
                           "print fmt: \"--> %ps (%u)\", (void *)REC->func, REC->depth\n";
const std::string kExit = std::string("name: funcgraph_exit\nID: 10\nformat:\n") + kCommon +
                          "\tfield:unsigned long func;\toffset:8;\tsize:8;\tsigned:0;\n"
                          "\tfield:unsigned int depth;\toffset:16;\tsize:4;\tsigned:0;\n"
                          "\tfield:unsigned int overrun;\toffset:20;\tsize:4;\tsigned:0;\n"
                          "\tfield:unsigned long long calltime;\toffset:24;\tsize:8;\tsigned:0;\n"
                          "\tfield:unsigned long long rettime;\toffset:32;\tsize:8;\tsigned:0;\n\n"
                          "print fmt: \"<-- %ps (%u) (start: %llx  end: %llx) over: %u\", (void *)REC->func, "
                          "REC->depth, REC->calltime, REC->rettime, REC->depth\n";
const std::string kTick = std::string("name: tick\nID: 1000\nformat:\n") + kCommon +
                          "\tfield:u64 seq;\toffset:8;\tsize:8;\tsigned:0;\n"
                          "\tfield:__data_loc char[] text;\toffset:16;\tsize:4;\tsigned:0;\n"
                          "\tfield:char label[8];\toffset:20;\tsize:8;\tsigned:0;\n\n"
                          "print fmt: \"seq=%llu text=%s label=%s\", REC->seq, __get_str(text), REC->label\n";

std::vector<uint8_t> read_all(int fd) {
  std::vector<uint8_t> out;
  uint8_t buf[65536];
  ssize_t n;
  off_t at = 0;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    out.insert(out.end(), buf, buf + n);
    at += n;
  }
  return out;
}

// The records (a memfd of ring-buffer pages) and what a file needs beside
// its formats.
struct Source {
  int data_fd = -1;
  uint32_t page_size = 0;
  int nr_cpus = 0;
  std::vector<usrtrace::tracedat::CpuData> cpus;
  std::vector<std::vector<uint8_t>> seeds;  // v6, v7, v7 with zstd

  std::vector<uint8_t> file(const std::string formats[3], int version, bool zstd) const {
    using namespace usrtrace;
    tracedat::Metadata m;
    m.page_size = page_size;
    m.nr_cpus = nr_cpus;
    m.header_page = rb::header_page_text(page_size);
    m.header_event = rb::header_event_text();
    m.ftrace_formats = {formats[0], formats[1]};
    m.systems.push_back({"fuzz", {formats[2]}});
    m.kallsyms = "0000000000001000 T main\n0000000000002000 T middle\n0000000000003000 t leaf\n";
    m.cmdlines = "42 fuzzer\n43 worker\n";
    m.trace_clock = "[local] global\n";
    m.procmaps = {"2a 1 fuzzer\n1000 4000 /bin/fuzzer\n"};
    tracedat::BufferData top;
    top.clock = "local";
    top.page_size = page_size;
    top.cpus = cpus;
    tracedat::BufferData other = top;
    other.name = "fuzzer-42:other";
    tracedat::WriteOptions w;
    w.version = version;
    w.compression = zstd ? tracedat::Compression::kZstd : tracedat::Compression::kNone;
    const int fd = memfd_create("report-fuzz-out", 0);
    std::string err;
    std::vector<uint8_t> out;
    if (fd >= 0 && tracedat::write_file(fd, m, {top, other}, w, &err) == 0) out = read_all(fd);
    if (fd >= 0) close(fd);
    return out;
  }
};

Source make_source() {
  using namespace usrtrace;
  Source src;
  rb::Options o;
  o.size_per_cpu = 16384;
  auto rb = rb::RingBuffer::create(o);
  if (!rb) return src;
  struct Entry {
    uint16_t type = 11;
    uint8_t flags = 0, preempt = 0;
    int32_t pid;
    uint64_t func;
    uint32_t depth, pad = 0;
  };
  struct Exit {
    uint16_t type = 10;
    uint8_t flags = 0, preempt = 0;
    int32_t pid;
    uint64_t func;
    uint32_t depth, overrun = 0;
    uint64_t calltime, rettime;
  };
  struct Tick {
    uint16_t type = 1000;
    uint8_t flags = 0, preempt = 0;
    int32_t pid = 42;
    uint64_t seq;
    uint32_t loc = (6u << 16) | 28u;
    char label[8] = "label";
    char text[8] = "hello";
  };
  // main -> middle -> leaf, twice, on threads 42 and 43; a tick between.
  uint64_t t = 1000;
  for (int32_t pid : {42, 43}) {
    for (int i = 0; i < 2; ++i) {
      const uint64_t funcs[] = {0x1000, 0x2000, 0x3000};
      uint64_t start[3];
      for (uint32_t d = 0; d < 3; ++d) {
        start[d] = t++;
        Entry e;
        e.pid = pid;
        e.func = funcs[d];
        e.depth = d;
        rb->write<sizeof(Entry)>(&e);
      }
      Tick k;
      k.seq = t;
      rb->write<sizeof(Tick)>(&k);
      for (uint32_t d = 3; d-- > 0;) {
        Exit x;
        x.pid = pid;
        x.func = funcs[d];
        x.depth = d;
        x.calltime = start[d];
        x.rettime = t += 10;
        rb->write<sizeof(Exit)>(&x);
      }
    }
  }
  src.data_fd = memfd_create("report-fuzz", 0);
  src.page_size = rb->page_size(0);
  src.nr_cpus = rb->nr_cpus();
  const uint32_t ps = src.page_size;
  uint64_t at = 0;
  std::vector<uint8_t> page(ps);
  for (int cpu = 0; cpu < rb->nr_cpus(); ++cpu) {
    tracedat::CpuData c{src.data_fd, {}};
    std::fill(page.begin(), page.end(), 0);
    while (rb->read_page(cpu, page.data(), page.size(), false) > 0) {
      if (pwrite(src.data_fd, page.data(), ps, static_cast<off_t>(at)) != static_cast<ssize_t>(ps)) break;
      c.extents.push_back({at, ps});
      at += ps;
      std::fill(page.begin(), page.end(), 0);
    }
    src.cpus.push_back(c);
  }
  const std::string formats[3] = {kEntry, kExit, kTick};
  for (int v = 0; v < 3; ++v)
    if (std::vector<uint8_t> f = src.file(formats, v == 0 ? 6 : 7, v == 2); !f.empty())
      src.seeds.push_back(f);
  return src;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace usrtrace;
  static const Source source = make_source();
  static FILE* const sink = fopen("/dev/null", "w");
  const std::vector<std::vector<uint8_t>>& seeds = source.seeds;
  std::vector<uint8_t> bytes;
  if (size >= 1 && data[0] == 'F') {
    std::string formats[3] = {kEntry, kExit, kTick};
    const std::string in(reinterpret_cast<const char*>(data + 1), size - 1);
    size_t at = 0;
    for (int i = 0; i < 3 && at <= in.size(); ++i) {
      const size_t end = std::min(in.find('\0', at), in.size());
      if (end > at) formats[i] = in.substr(at, end - at);
      at = end + 1;
    }
    bytes = source.file(formats, 7, false);
  } else if (size >= 1 && data[0] == 'R') {
    bytes.assign(data + 1, data + size);
  } else if (size >= 5 && !seeds.empty()) {
    bytes = seeds[data[0] % seeds.size()];
    uint32_t at;
    std::memcpy(&at, data + 1, 4);
    size_t off = at % bytes.size();
    for (size_t i = 5; i < size && off < bytes.size(); ++i, ++off) bytes[off] = data[i];
    if (at & 0x80000000u) bytes.resize(at % bytes.size());
  } else {
    return 0;
  }
  std::string err;
  auto f = TraceFile::parse(std::move(bytes), &err);
  if (!f || sink == nullptr) return 0;
  std::string warnings;
  auto session = tool::TepSession::load(*f, &warnings);
  if (!session) return 0;
  const auto keep = [](const TraceFile::Record&, const char*) { return true; };
  for (const tool::View view : {tool::View::kProfile, tool::View::kGraph, tool::View::kFlame}) {
    TraceFile::Cursor c(*f);
    tool::ViewOptions o;
    o.view = view;
    tool::write_view(*session, c, keep, o, sink);
  }
  {
    TraceFile::Cursor c(*f);
    tool::write_json(*f, *session, c, true, keep, sink);
  }
  {
    TraceFile::Cursor c(*f);
    tool::write_perfetto(*f, *session, c, f->buffers()[0].clock, {"fuzz:tick:seq"}, keep, sink);
  }
  return 0;
}
