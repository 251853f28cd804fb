// libFuzzer: a trace.dat as untrusted input (TraceFile). Seeds are real
// files made by the writer from a ring buffer's pages (v6, v7, v7 with
// zstd); the input either overwrites one seed's bytes at an offset its
// first bytes choose (and may truncate it), or is a whole file itself. The
// reader must give an error, or records that lie inside the file, never
// crash, hang or allocate without bound.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ring_buffer/page_format.h"
#include "ring_buffer/ring_buffer.h"
#include "tracedat/writer.h"
#include "usrtrace/tracedat.h"

namespace {

constexpr char kFormat[] =
    "name: tick\nID: 1000\nformat:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    "\tfield:u64 seq;\toffset:8;\tsize:8;\tsigned:0;\n"
    "\tfield:__data_loc char[] text;\toffset:16;\tsize:4;\tsigned:0;\n\n"
    "print fmt: \"seq=%llu text=%s\", REC->seq, __get_str(text)\n";

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

std::vector<std::vector<uint8_t>> make_seeds() {
  using namespace usrtrace;
  rb::Options o;
  o.size_per_cpu = 16384;
  auto rb = rb::RingBuffer::create(o);
  std::vector<std::vector<uint8_t>> seeds;
  if (!rb) return seeds;
  struct Rec {
    uint16_t type = 1000;
    uint8_t flags = 0, preempt = 0;
    int32_t pid = 42;
    uint64_t seq;
    uint32_t loc = (6u << 16) | 20u;
    char text[8] = "hello";
  };
  for (uint64_t i = 0; i < 600; ++i) {
    Rec r;
    r.seq = i;
    rb->write<sizeof(Rec)>(&r);
  }
  const int data_fd = memfd_create("tracedat-fuzz", 0);
  const uint32_t ps = rb->page_size(0);
  std::vector<tracedat::CpuData> cpus;
  uint64_t at = 0;
  std::vector<uint8_t> page(ps);
  for (int cpu = 0; cpu < rb->nr_cpus(); ++cpu) {
    tracedat::CpuData c{data_fd, {}};
    std::fill(page.begin(), page.end(), 0);
    while (rb->read_page(cpu, page.data(), page.size(), false) > 0) {
      if (pwrite(data_fd, page.data(), ps, static_cast<off_t>(at)) != static_cast<ssize_t>(ps)) break;
      c.extents.push_back({at, ps});  // one extent per page, as a journal may hold them
      at += ps;
      std::fill(page.begin(), page.end(), 0);
    }
    cpus.push_back(c);
  }
  tracedat::Metadata m;
  m.page_size = ps;
  m.nr_cpus = rb->nr_cpus();
  m.header_page = rb::header_page_text(ps);
  m.header_event = rb::header_event_text();
  m.systems.push_back({"fuzz", {kFormat}});
  m.kallsyms = "0000000000001000 T main\n";
  m.cmdlines = "42 fuzzer\n";
  m.trace_clock = "[local] global\n";
  tracedat::BufferData top;
  top.clock = "local";
  top.page_size = ps;
  top.cpus = cpus;
  tracedat::BufferData other = top;
  other.name = "other";
  for (int v = 0; v < 3; ++v) {
    tracedat::WriteOptions w;
    w.version = v == 0 ? 6 : 7;
    w.compression = v == 2 ? tracedat::Compression::kZstd : tracedat::Compression::kNone;
    const int fd = memfd_create("tracedat-fuzz-out", 0);
    std::string err;
    if (tracedat::write_file(fd, m, {top, other}, w, &err) == 0) seeds.push_back(read_all(fd));
    close(fd);
  }
  close(data_fd);
  return seeds;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::vector<uint8_t>> seeds = make_seeds();
  std::vector<uint8_t> bytes;
  if (size >= 1 && data[0] == 'R') {
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
  auto f = usrtrace::TraceFile::parse(std::move(bytes), &err);
  if (!f) {
    if (err.empty()) __builtin_trap();  // a refusal always says why
    return 0;
  }
  usrtrace::TraceFile::Cursor c(*f);
  usrtrace::TraceFile::Record r;
  uint64_t sum = 0;
  while (c.next(&r)) {
    for (uint32_t i = 0; i < r.len; ++i) sum += r.data[i];  // every byte handed out is readable
  }
  for (const auto& fmt : f->formats()) {
    auto flt = usrtrace::TraceFile::EventFilter::compile(fmt.text, "seq > 3 && text ~ \"h*\"", &err);
    (void)flt;
  }
  return sum == 1 ? 1 : 0;
}
