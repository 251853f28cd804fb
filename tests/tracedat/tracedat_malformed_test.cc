// TraceFile on files that are wrong: cut short anywhere, a corrupt page, a
// compressed block that claims a huge size, an options chain that loops,
// a bad header. Each gives a clear error, or the records that are valid
// plus a warning; never a crash (this suite also runs under ASan and
// UBSan, and fuzz/tracedat_fuzzer goes further).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "instance/instance.h"
#include "ring_buffer/page_format.h"
#include "tracedat/format.h"
#include "tracedat/writer.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"
#include "usrtrace/tracedat.h"

USRTRACE_EVENT(tdbad, rec, (uint32_t, seq)(const char*, text), "seq=%u text=%s", REC->seq, __get_str(text))

namespace usrtrace {
namespace {

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A real file: 2000 records in the top instance, another 500 in tdbad_i.
std::vector<uint8_t> make_file(int version, bool compress) {
  tracefs::rmdir("instances/tdbad_i");
  EXPECT_EQ(tracefs::mkdir("instances/tdbad_i"), 0);
  tracefs::write_file("set_event", "tdbad:rec");
  tracefs::write_file("instances/tdbad_i/set_event", "tdbad:rec");
  tracefs::write_file("trace", "");
  for (uint32_t i = 0; i < 2000; ++i) trace_tdbad_rec(i, "some text " + std::to_string(i));
  tracefs::write_file("instances/tdbad_i/set_event", "");
  tracefs::write_file("set_event", "");
  char dir[] = "/tmp/usrtrace-bad-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  RecordOptions o;
  o.output = std::string(dir) + "/f.dat";
  o.instances = {"", "tdbad_i"};
  o.file_version = version;
  o.compress = compress;
  std::string err;
  EXPECT_EQ(extract_trace(o, &err), 0) << err;
  std::vector<uint8_t> bytes = slurp(o.output);
  unlink(o.output.c_str());
  rmdir(dir);
  tracefs::rmdir("instances/tdbad_i");
  return bytes;
}

size_t count(const TraceFile& f) {
  TraceFile::Cursor c(f);
  TraceFile::Record r;
  size_t n = 0;
  while (c.next(&r)) {
    EXPECT_GE(r.len, 8u);
    ++n;
  }
  return n;
}

struct Files {
  std::vector<uint8_t> v6 = make_file(6, false);
  std::vector<uint8_t> v7 = make_file(7, false);
  std::vector<uint8_t> v7z = make_file(7, true);
};
const Files& files() {
  static const Files f;
  return f;
}

std::unique_ptr<TraceFile> parse(std::vector<uint8_t> b, std::string* err) {
  err->clear();
  return TraceFile::parse(std::move(b), err);
}

TEST(TraceDatMalformed, TheGoodFilesRead) {
  for (const auto* b : {&files().v6, &files().v7, &files().v7z}) {
    std::string err;
    auto f = parse(*b, &err);
    ASSERT_TRUE(f) << err;
    EXPECT_EQ(count(*f), 4000u);
    EXPECT_TRUE(f->warnings().empty());
  }
}

TEST(TraceDatMalformed, BadHeadersSayWhat) {
  std::string err;
  EXPECT_FALSE(parse({}, &err));
  EXPECT_NE(err.find("not a trace.dat file (0 bytes)"), std::string::npos) << err;
  std::vector<uint8_t> b = files().v6;
  b[0] = 0;
  EXPECT_FALSE(parse(b, &err));
  EXPECT_NE(err.find("not a trace.dat file"), std::string::npos) << err;
  b = files().v6;
  b[10] = '8';
  EXPECT_FALSE(parse(b, &err));
  EXPECT_NE(err.find("version '8'"), std::string::npos) << err;
  b = files().v6;
  b[12] = 1;  // big endian
  EXPECT_FALSE(parse(b, &err));
  EXPECT_NE(err.find("big-endian"), std::string::npos) << err;
  b = files().v6;
  b[14] = 0x11;  // page size 0x..11: not a power of two
  EXPECT_FALSE(parse(b, &err));
  EXPECT_NE(err.find("page size"), std::string::npos) << err;
}

// Cut at every offset of the metadata and at many offsets in the data: an
// error before the CPU data is complete enough, otherwise every record that
// is whole, and a warning for what was cut.
TEST(TraceDatMalformed, TruncatedAnywhere) {
  for (const auto* full : {&files().v6, &files().v7, &files().v7z}) {
    size_t last_ok = 0;
    // Every offset of the first 20000 bytes (the header and the start of
    // the metadata), then about 300 cuts spread over the rest: each parse
    // of a longer cut reads the program's whole kallsyms, and a fixed
    // stride through a file of a few MB took 10 minutes in the ASan build.
    const size_t stride = std::max<size_t>(509, (full->size() - std::min<size_t>(full->size(), 20000)) / 300);
    for (size_t len = 0; len < full->size(); len += (len < 20000 ? 1 : stride)) {
      std::vector<uint8_t> b(full->begin(), full->begin() + static_cast<long>(len));
      std::string err;
      auto f = parse(b, &err);
      if (!f) {
        EXPECT_FALSE(err.empty()) << len;
        continue;
      }
      const size_t n = count(*f);
      EXPECT_LE(n, 4000u) << len;
      last_ok = len;
    }
    // A v6 file keeps its metadata first: cut in the data, what is whole
    // is still read. A v7 file's options (where its data is) come last, as
    // in the files trace-cmd writes: cut anywhere, it is refused.
    if (full == &files().v6)
      EXPECT_GT(last_ok, full->size() / 2);
    else
      EXPECT_EQ(last_ok, 0u);
  }
}

TEST(TraceDatMalformed, ACorruptPageIsSkippedAndTheRestKept) {
  std::string err;
  auto good = parse(files().v6, &err);
  ASSERT_TRUE(good) << err;
  const auto& ext = good->buffers()[0].cpus;
  size_t cpu = 0;
  while (cpu < ext.size() && ext[cpu].size == 0) ++cpu;
  ASSERT_LT(cpu, ext.size());
  std::vector<uint8_t> b = files().v6;
  // How many records the first page of that CPU holds.
  const uint8_t* page = b.data() + ext[cpu].offset;
  uint64_t commit;
  std::memcpy(&commit, page + 8, 8);
  rb::PageWalker w(page + 16, static_cast<uint32_t>(commit & rb::kCommitLengthMask), 0);
  rb::Entry e;
  size_t in_page = 0;
  while (w.next_data(&e)) ++in_page;
  ASSERT_GT(in_page, 0u);
  // A commit longer than the page.
  const uint64_t bad = 0xfff0;
  std::memcpy(b.data() + ext[cpu].offset + 8, &bad, 8);
  auto f = parse(b, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(count(*f), 4000u - in_page);
  ASSERT_EQ(f->warnings().size(), 1u);
  EXPECT_NE(f->warnings()[0].find("page 0 claims"), std::string::npos) << f->warnings()[0];
  // An entry whose length runs off the page: the page's records before it
  // are kept.
  b = files().v6;
  std::memcpy(b.data() + ext[cpu].offset + 16, "\x00\x00\x00\x00\xff\xff\x00\x00", 8);  // type 0, len 0xffff
  f = parse(b, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(count(*f), 4000u - in_page);
  ASSERT_EQ(f->warnings().size(), 1u);
  EXPECT_NE(f->warnings()[0].find("corrupt entry at offset 0"), std::string::npos) << f->warnings()[0];
}

// v7 layout helpers: the options section's offset is right after the
// compression strings.
uint64_t options_offset(const std::vector<uint8_t>& b) {
  size_t p = 10 + 2 + 1 + 1 + 4;
  while (b[p]) ++p;  // compression name
  ++p;
  while (b[p]) ++p;  // version
  ++p;
  uint64_t off;
  std::memcpy(&off, b.data() + p, 8);
  return off;
}

TEST(TraceDatMalformed, OptionsThatLoopAreRefused) {
  std::vector<uint8_t> b = files().v7;
  const uint64_t off = options_offset(b);
  uint64_t size;
  std::memcpy(&size, b.data() + off + 8, 8);
  // The last option is DONE with the next section's offset: point it back.
  std::memcpy(b.data() + off + 16 + size - 8, &off, 8);
  std::string err;
  EXPECT_FALSE(parse(b, &err));
  EXPECT_NE(err.find("loop"), std::string::npos) << err;
}

TEST(TraceDatMalformed, ACompressedBlockClaimingTooMuchIsNotAllocated) {
  std::vector<uint8_t> b = files().v7z;
  std::string err;
  auto good = parse(b, &err);
  ASSERT_TRUE(good) << err;
  const auto& ext = good->buffers()[0].cpus;
  size_t cpu = 0;
  while (cpu < ext.size() && ext[cpu].size == 0) ++cpu;
  ASSERT_LT(cpu, ext.size());
  // CPU data: u32 chunk count, then u32 compressed and u32 full size.
  const uint32_t huge = 0xF0000000u;
  std::memcpy(b.data() + ext[cpu].offset + 8, &huge, 4);
  auto f = parse(b, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_LT(count(*f), 4000u);
  ASSERT_FALSE(f->warnings().empty());
  EXPECT_NE(f->warnings()[0].find("too large"), std::string::npos) << f->warnings()[0];
  // A metadata section: refused with the section's name.
  b = files().v7z;
  const uint64_t off = options_offset(b);
  uint64_t size;
  std::memcpy(&size, b.data() + off + 8, 8);
  // The first option is HEADER_INFO's offset; its section's block sizes follow the 16-byte header.
  uint64_t hdr;
  std::memcpy(&hdr, b.data() + off + 16 + 6, 8);
  std::memcpy(b.data() + hdr + 16 + 4, &huge, 4);
  EXPECT_FALSE(parse(b, &err));
  EXPECT_NE(err.find("header info"), std::string::npos) << err;
}

// Little-endian numbers and strings appended to a file's bytes.
template <class T>
void put(std::vector<uint8_t>* b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + sizeof v);
}
void put_str(std::vector<uint8_t>* b, const std::string& s) {
  b->insert(b->end(), s.c_str(), s.c_str() + s.size() + 1);
}

// Appends a v7 options section holding `options` (then DONE) at the end of
// `b` and makes it the last of the chain; its offset.
uint64_t append_options(std::vector<uint8_t>* b, const std::vector<uint8_t>& options) {
  uint64_t off = options_offset(*b), size = 0, next = 0;
  for (;;) {
    std::memcpy(&size, b->data() + off + 8, 8);
    std::memcpy(&next, b->data() + off + 16 + size - 8, 8);
    if (next == 0) break;
    off = next;
  }
  const uint64_t at = b->size();
  std::memcpy(b->data() + off + 16 + size - 8, &at, 8);  // the last DONE names the new section
  put<uint16_t>(b, tracedat::kOptDone);                  // an options section's id
  put<uint16_t>(b, 0);                                   // flags
  put<uint32_t>(b, 0);                                   // description
  put<uint64_t>(b, options.size() + 14);
  b->insert(b->end(), options.begin(), options.end());
  put<uint16_t>(b, tracedat::kOptDone);
  put<uint32_t>(b, 8);
  put<uint64_t>(b, 0);
  return at;
}

// A BUFFER option (v7): the buffer's section at `section`, its CPUs as
// (id, offset, size).
void buffer_option(std::vector<uint8_t>* o, const std::string& name, uint64_t section,
                   const std::vector<std::array<uint64_t, 3>>& cpus) {
  std::vector<uint8_t> d;
  put<uint64_t>(&d, section);
  put_str(&d, name);
  put_str(&d, "local");
  put<uint32_t>(&d, 4096);
  put<uint32_t>(&d, static_cast<uint32_t>(cpus.size()));
  for (const auto& c : cpus) {
    put<uint32_t>(&d, static_cast<uint32_t>(c[0]));
    put<uint64_t>(&d, c[1]);
    put<uint64_t>(&d, c[2]);
  }
  put<uint16_t>(o, tracedat::kOptBuffer);
  put<uint32_t>(o, static_cast<uint32_t>(d.size()));
  o->insert(o->end(), d.begin(), d.end());
}

uint64_t cpu_slots(const TraceFile& f) {
  uint64_t n = 0;
  for (const auto& b : f.buffers()) n += b.cpus.size();
  return n;
}

// Every BUFFER option took a slot per CPU id up to the largest it names
// (4096 at most), whatever the number of options: 2000 options of 44 bytes
// that each name CPU 4096 alone held 8 million slots (256 MiB); the file
// is refused once its buffers have more slots than it can describe. Many
// buffers that list the CPUs they have still open, the top one first (it
// was inserted at the front, one move of all the others per option).
TEST(TraceDatMalformed, ManyBufferOptionsCostWhatTheFileHolds) {
  std::vector<uint8_t> b = files().v7;
  const uint64_t at = b.size();  // the appended section: its flags say "not compressed"
  std::vector<uint8_t> o;
  for (int i = 0; i < 2000; ++i) buffer_option(&o, "b" + std::to_string(i), at, {{4096, 0, 0}});
  append_options(&b, o);
  std::string err;
  auto f = parse(b, &err);
  if (f) ADD_FAILURE() << cpu_slots(*f) << " CPU slots from a file of " << b.size() << " bytes";
  EXPECT_NE(err.find("CPU slots in all"), std::string::npos) << err;

  b = files().v7;
  o.clear();
  for (int i = 0; i < 20000; ++i) buffer_option(&o, "b" + std::to_string(i), at, {{0, 0, 0}});
  append_options(&b, o);
  f = parse(b, &err);
  ASSERT_TRUE(f) << err;
  ASSERT_EQ(f->buffers().size(), 20002u);  // the file's own two, and these
  EXPECT_EQ(f->buffers()[0].name, "");
  EXPECT_EQ(f->buffers()[1].name, "tdbad_i");
  EXPECT_EQ(f->buffers()[2].name, "b0");
  EXPECT_EQ(f->buffers()[20001].name, "b19999");
  EXPECT_LE(cpu_slots(*f), 65536u + b.size() / 16);
}

// zstd data inflated up to 4 GiB whatever the file's size (37 KB gave
// 1.2 GB): now at most 1024 times the file's size (16 MiB at least), and
// more is refused, saying so, before it is allocated.
TEST(TraceDatMalformed, ZstdDataInflatesNoMoreThanTheFileJustifies) {
  // A small zstd file of the writer's (no CPU data)...
  tracedat::Metadata m;
  m.page_size = 4096;
  m.nr_cpus = 1;
  m.header_page = rb::header_page_text(4096);
  m.header_event = rb::header_event_text();
  m.trace_clock = "[local] global\n";
  tracedat::BufferData top;
  top.clock = "local";
  tracedat::WriteOptions w;
  w.compression = tracedat::Compression::kZstd;
  const int fd = memfd_create("bomb", 0);
  ASSERT_GE(fd, 0);
  std::string err;
  ASSERT_EQ(tracedat::write_file(fd, m, {top}, w, &err), 0) << err;
  std::vector<uint8_t> b(static_cast<size_t>(lseek(fd, 0, SEEK_END)));
  ASSERT_EQ(pread(fd, b.data(), b.size(), 0), static_cast<ssize_t>(b.size()));
  close(fd);
  ASSERT_TRUE(parse(b, &err)) << err;
  // ... and a buffer whose CPU 0 is 4 blocks of 64 MiB of zeros (a few KB).
  const std::vector<uint8_t> zeros(64u << 20);
  std::vector<uint8_t> frame(ZSTD_compressBound(zeros.size()));
  const size_t n = ZSTD_compress(frame.data(), frame.size(), zeros.data(), zeros.size(), 1);
  ASSERT_FALSE(ZSTD_isError(n));
  frame.resize(n);
  const uint64_t section = b.size();
  put<uint16_t>(&b, tracedat::kOptBuffer);
  put<uint16_t>(&b, tracedat::kSectionCompressed);
  put<uint32_t>(&b, 0);
  put<uint64_t>(&b, 0);
  const uint64_t data = b.size();
  put<uint32_t>(&b, 4);  // chunks
  for (int i = 0; i < 4; ++i) {
    put<uint32_t>(&b, static_cast<uint32_t>(frame.size()));
    put<uint32_t>(&b, static_cast<uint32_t>(zeros.size()));
    b.insert(b.end(), frame.begin(), frame.end());
  }
  std::vector<uint8_t> o;
  buffer_option(&o, "bomb", section, {{0, data, b.size() - data - 4}});
  append_options(&b, o);
  ASSERT_LT(b.size() * 1024, 64u << 20) << "the 256 MiB are more than 1024 times the file";
  auto f = parse(b, &err);
  if (f) {
    uint64_t done = 0, total = 0;
    TraceFile::Cursor(*f).progress(&done, &total);
    ADD_FAILURE() << b.size() << " bytes of file inflated to " << total;
  }
  EXPECT_NE(err.find("zstd data would inflate to more than"), std::string::npos) << err;
  EXPECT_NE(err.find("a compression bomb"), std::string::npos) << err;
}

}  // namespace
}  // namespace usrtrace
