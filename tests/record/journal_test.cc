// The record journal's compression while recording (record/journal.h,
// docs/design/record-journal.md): the pages put go to the journal as
// trace.dat v7 chunks, which a compressed file takes as they are and any
// other file gets decompressed; and the chunk records read back as the
// untrusted input they are (JournalCompressionMalformed).
#include "record/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "record/journal_format.h"
#include "ring_buffer/page_format.h"
#include "tracedat/chunks.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tracedat {
namespace {

constexpr uint32_t kPage = 4096;

std::string temp_dir() {
  char tmpl[] = "/tmp/usrtrace-journal-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

// Page `n` of CPU `cpu`: text that compresses, different in every page.
std::string page_of(uint32_t cpu, uint32_t n) {
  std::string p;
  for (uint32_t line = 0; p.size() < kPage; ++line) {
    char b[64];
    snprintf(b, sizeof b, "cpu %u page %u line %u\n", cpu, n, line);
    p += b;
  }
  p.resize(kPage);
  return p;
}

control::RemoteMeta meta() {
  control::RemoteMeta m;
  m.meta.nr_cpus = 2;
  m.meta.page_size = kPage;
  m.meta.header_page = rb::header_page_text(kPage);
  m.meta.header_event = rb::header_event_text();
  m.meta.trace_clock = "[local] global\n";
  control::InstanceMeta im;
  im.name = "";
  im.clock = "local";
  im.page_size = kPage;
  im.nr_cpus = 2;
  im.stats = {"", ""};
  m.instances.push_back(im);
  return m;
}

struct Recorded {
  std::string journal;
  std::string pages[2];  // what each CPU was given, in order
};

// A compressed recording's journal: 2 CPUs, `batches` batches of 1 to 20
// pages each, alternating CPUs; kept on disk (the writer is gone).
// `each`: every batch drained before the next is put, so that each is a
// chunk record of its own (the compressor otherwise takes what is queued
// when it runs, and how many records that makes depends on timing).
Recorded record(const std::string& dir, int batches, bool each = false) {
  Recorded r;
  JournalWriter w;
  RecordOptions o;
  o.output = dir + "/out.dat";
  o.compress = true;
  std::string err;
  EXPECT_EQ(w.create(o, &err), 0) << err;
  uint32_t p0 = 0, s0 = 0;
  EXPECT_EQ(w.add_process(1, "", &p0, &err), 0) << err;
  EXPECT_EQ(w.add_stream(p0, "", kPage, 2, &s0, &err), 0) << err;
  EXPECT_EQ(w.put_meta(p0, meta(), &err), 0) << err;
  uint32_t n[2] = {0, 0};
  for (int b = 0; b < batches; ++b) {
    const uint32_t cpu = static_cast<uint32_t>(b % 2);
    std::string batch;
    for (int k = 0; k < 1 + (b * 7) % 20; ++k) batch += page_of(cpu, n[cpu]++);
    EXPECT_EQ(w.put_pages(s0, cpu, batch.data(), batch.size(), &err), 0) << err;
    if (each) {
      EXPECT_EQ(w.drain(&err), 0) << err;
    }
    r.pages[cpu] += batch;
  }
  EXPECT_EQ(w.drain(&err), 0) << err;
  r.journal = w.path();
  w.keep();
  return r;
}

std::string read_file(const std::string& path) {
  std::string s;
  if (FILE* f = fopen(path.c_str(), "rb")) {
    char b[65536];
    size_t k;
    while ((k = fread(b, 1, sizeof b, f)) > 0) s.append(b, k);
    fclose(f);
  }
  return s;
}

// A CPU's data in a trace.dat, decompressed if the file is: its pages.
std::string cpu_pages(const std::string& file, int cpu) {
  std::string err;
  auto f = TraceFile::open(file, &err);
  EXPECT_TRUE(f) << err;
  if (!f) return "";
  const std::string bytes = read_file(file);
  const auto& e = f->buffers()[0].cpus[static_cast<size_t>(cpu)];
  if (f->compression() == "none") return bytes.substr(e.offset, e.size);
  std::string out;
  uint32_t count;
  std::memcpy(&count, bytes.data() + e.offset, 4);
  ChunkDecompressor d;
  size_t at = e.offset + 4;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t sizes[2];
    std::memcpy(sizes, bytes.data() + at, 8);
    std::string page(sizes[1], '\0');
    EXPECT_TRUE(d.decompress(bytes.data() + at + 8, sizes[0], page.data(), page.size())) << "chunk " << i;
    out += page;
    at += 8 + sizes[0];
  }
  EXPECT_EQ(at, e.offset + 4 + e.size) << "a compressed CPU's size leaves out the chunk count";
  return out;
}

int open_journal(const std::string& path) { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }

void remove_all(const std::string& dir, const Recorded& r) {
  ::unlink(r.journal.c_str());
  for (const char* f : {"/out.dat", "/v7.dat", "/none.dat", "/v6.dat"}) ::unlink((dir + f).c_str());
  ::rmdir(dir.c_str());
}

// The kChunks records of a journal: (offset of the record, payload bytes).
std::vector<std::pair<uint64_t, uint64_t>> chunk_records(const std::string& journal) {
  const std::string bytes = read_file(journal);
  std::vector<std::pair<uint64_t, uint64_t>> found;
  for (uint64_t at = journal_format::kHeaderBytes; at + 16 <= bytes.size();) {
    uint32_t kind;
    uint64_t len;
    std::memcpy(&kind, bytes.data() + at, 4);
    std::memcpy(&len, bytes.data() + at + 8, 8);
    if (kind == journal_format::kChunks) found.push_back({at, len});
    at += 16 + len + (8 - len % 8) % 8;
  }
  return found;
}

TEST(JournalCompression, PagesAreCompressedAsPutAndTheFileTakesTheChunks) {
  const std::string dir = temp_dir();
  const Recorded r = record(dir, 40);
  const uint64_t raw = r.pages[0].size() + r.pages[1].size();
  // In the journal as chunks, not pages: a fraction of their size.
  EXPECT_LT(read_file(r.journal).size(), raw / 4);
  EXPECT_FALSE(chunk_records(r.journal).empty());
  const int fd = open_journal(r.journal);
  ASSERT_GE(fd, 0);
  Journal j;
  std::string err;
  ASSERT_EQ(read_journal(fd, &j, &err, r.journal), 0) << err;
  EXPECT_EQ(j.damage, "");
  EXPECT_TRUE(j.compress);
  EXPECT_EQ(j.pages, raw / kPage);
  for (int cpu = 0; cpu < 2; ++cpu) {
    const CpuData& c = j.streams[0].cpus[static_cast<size_t>(cpu)];
    // At least one chunk per kChunkPages pages.
    EXPECT_GE(c.chunks, r.pages[cpu].size() / kPage / kChunkPages) << cpu;
  }
  // As the recording's file (zstd, the chunks as they are), and
  // decompressed as v7 without compression and as v6: the same pages.
  const std::string v7 = dir + "/v7.dat", none = dir + "/none.dat", v6 = dir + "/v6.dat";
  ASSERT_EQ(write_from_journal(j, v7, {}, &err), 0) << err;
  j.compress = false;
  ASSERT_EQ(write_from_journal(j, none, {}, &err), 0) << err;
  j.file_version = 6;
  ASSERT_EQ(write_from_journal(j, v6, {}, &err), 0) << err;
  ::close(fd);
  for (const std::string& file : {v7, none, v6}) {
    SCOPED_TRACE(file);
    for (int cpu = 0; cpu < 2; ++cpu) EXPECT_TRUE(cpu_pages(file, cpu) == r.pages[cpu]) << "cpu " << cpu;
  }
  auto f = TraceFile::open(v7, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->compression(), "zstd");
  // The chunks in the file are the journal's, byte for byte.
  const std::string jbytes = read_file(r.journal), fbytes = read_file(v7);
  std::string journal_chunks;
  for (const auto& [at, len] : chunk_records(r.journal)) {
    uint32_t cpu;
    std::memcpy(&cpu, jbytes.data() + at + 16 + 4, 4);
    if (cpu == 0) journal_chunks += jbytes.substr(at + 16 + 8, len - 8);
  }
  const auto& e0 = f->buffers()[0].cpus[0];
  EXPECT_TRUE(fbytes.substr(e0.offset + 4, e0.size) == journal_chunks);
  remove_all(dir, r);
}

// Put faster than one thread compresses (a tight loop of 256 KiB batches):
// the rounds the compressor takes while the queue is full again behind
// it go to the journal as pages, between its chunks, in the order put;
// the file compresses those and copies the chunks, and every file made
// of it holds each CPU's pages in order.
TEST(JournalCompression, PagesTheCompressorCannotKeepUpWithAreJournaledAsTheyAre) {
  const std::string dir = temp_dir();
  Recorded r;
  {
    JournalWriter w;
    RecordOptions o;
    o.output = dir + "/out.dat";
    o.compress = true;
    std::string err;
    ASSERT_EQ(w.create(o, &err), 0) << err;
    uint32_t p0 = 0, s0 = 0;
    ASSERT_EQ(w.add_process(1, "", &p0, &err), 0) << err;
    ASSERT_EQ(w.add_stream(p0, "", kPage, 2, &s0, &err), 0) << err;
    ASSERT_EQ(w.put_meta(p0, meta(), &err), 0) << err;
    // Made first: the loop that puts them does nothing else.
    uint32_t n[2] = {0, 0};
    std::vector<std::string> batches;
    for (int b = 0; b < 160; ++b) {  // 40 MiB
      const uint32_t cpu = static_cast<uint32_t>(b % 2);
      std::string batch;
      for (int k = 0; k < 64; ++k) batch += page_of(cpu, n[cpu]++);
      r.pages[cpu] += batch;
      batches.push_back(std::move(batch));
    }
    for (size_t b = 0; b < batches.size(); ++b)
      ASSERT_EQ(w.put_pages(s0, static_cast<uint32_t>(b % 2), batches[b].data(), batches[b].size(), &err), 0)
          << err;
    ASSERT_EQ(w.drain(&err), 0) << err;
    r.journal = w.path();
    w.keep();
  }
  const int fd = open_journal(r.journal);
  Journal j;
  std::string err;
  ASSERT_EQ(read_journal(fd, &j, &err, r.journal), 0) << err;
  EXPECT_EQ(j.damage, "");
  EXPECT_EQ(j.pages, (r.pages[0].size() + r.pages[1].size()) / kPage);
  size_t raw = 0, chunked = 0;
  for (const CpuData& c : j.streams[0].cpus)
    for (const Extent& e : c.extents) ++(e.chunks ? chunked : raw);
  EXPECT_GT(raw, 0u) << "the compressor kept up with a tight loop";
  EXPECT_GT(chunked, 0u) << "nothing was compressed while put";
  const std::string v7 = dir + "/v7.dat", none = dir + "/none.dat", v6 = dir + "/v6.dat";
  ASSERT_EQ(write_from_journal(j, v7, {}, &err), 0) << err;
  j.compress = false;
  ASSERT_EQ(write_from_journal(j, none, {}, &err), 0) << err;
  j.file_version = 6;
  ASSERT_EQ(write_from_journal(j, v6, {}, &err), 0) << err;
  ::close(fd);
  for (const std::string& file : {v7, none, v6}) {
    SCOPED_TRACE(file);
    for (int cpu = 0; cpu < 2; ++cpu) EXPECT_TRUE(cpu_pages(file, cpu) == r.pages[cpu]) << "cpu " << cpu;
  }
  remove_all(dir, r);
}

// A killed or failed writer is waited for: the destructor writes what was
// queued, so a journal never misses pages put before the writer went.
TEST(JournalCompression, TheWriterWritesWhatWasQueuedBeforeItGoes) {
  const std::string dir = temp_dir();
  std::string path;
  {
    JournalWriter w;
    RecordOptions o;
    o.output = dir + "/out.dat";
    o.compress = true;
    std::string err;
    ASSERT_EQ(w.create(o, &err), 0) << err;
    uint32_t p0 = 0, s0 = 0;
    ASSERT_EQ(w.add_process(1, "", &p0, &err), 0) << err;
    ASSERT_EQ(w.add_stream(p0, "", kPage, 2, &s0, &err), 0) << err;
    for (uint32_t i = 0; i < 300; ++i) {
      const std::string p = page_of(0, i);
      ASSERT_EQ(w.put_pages(s0, 0, p.data(), p.size(), &err), 0) << err;
    }
    path = w.path();
    w.keep();
  }
  const int fd = open_journal(path);
  Journal j;
  std::string err;
  ASSERT_EQ(read_journal(fd, &j, &err, path), 0) << err;
  EXPECT_EQ(j.damage, "");
  EXPECT_EQ(j.pages, 300u);
  ::close(fd);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

// Cut in the middle of its last chunk record: the whole chunks before the
// cut are kept, and the journal ends there.
TEST(JournalCompressionMalformed, AChunkRecordCutShortKeepsItsWholeChunks) {
  const std::string dir = temp_dir();
  const Recorded r = record(dir, 10, /*each=*/true);
  const auto recs = chunk_records(r.journal);
  ASSERT_GE(recs.size(), 2u);
  const auto [at, len] = recs.back();
  const std::string bytes = read_file(r.journal);
  // The last record's first chunk whole, and 5 bytes of its second (if it
  // has one; else 5 bytes of its first).
  uint32_t first[2];
  std::memcpy(first, bytes.data() + at + 24, 8);
  const bool two = 8 + 8 + first[0] < len;
  const uint64_t cut = at + 24 + (two ? 8 + first[0] : 0) + 5;
  ASSERT_EQ(::truncate(r.journal.c_str(), static_cast<off_t>(cut)), 0);
  const int fd = open_journal(r.journal);
  Journal j;
  std::string err;
  ASSERT_EQ(read_journal(fd, &j, &err, r.journal), 0) << err;
  EXPECT_NE(j.damage.find("a chunk record cut short (its whole chunks are kept)"), std::string::npos)
      << j.damage;
  // Every page but those of the last record's chunks after its first
  // (or all of them).
  uint64_t last_pages = 0, kept_of_last = 0;
  for (uint64_t off = at + 24; off < at + 16 + len;) {
    uint32_t sizes[2];
    std::memcpy(sizes, bytes.data() + off, 8);
    last_pages += sizes[1] / kPage;
    if (off == at + 24 && two) kept_of_last = sizes[1] / kPage;
    off += 8 + sizes[0];
  }
  EXPECT_EQ(j.pages, (r.pages[0].size() + r.pages[1].size()) / kPage - last_pages + kept_of_last);
  ASSERT_EQ(write_from_journal(j, dir + "/v7.dat", {}, &err), 0) << err;
  ::close(fd);
  remove_all(dir, r);
}

// A chunk whose frame was garbled: recover (check_chunks) ends the journal
// before it; a reader that does not decompress (a recording's own end)
// still never writes it decompressed: the writer checks each frame too.
TEST(JournalCompressionMalformed, AGarbledChunkEndsTheJournalBeforeIt) {
  const std::string dir = temp_dir();
  const Recorded r = record(dir, 10, /*each=*/true);
  const auto recs = chunk_records(r.journal);
  ASSERT_GE(recs.size(), 3u);
  const uint64_t at = recs[2].first;
  {
    const int fd = ::open(r.journal.c_str(), O_RDWR | O_CLOEXEC);
    const std::string junk(12, '\x5a');
    // Past the chunk's head and the zstd frame's own header.
    ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(at + 24 + 8 + 12)), 12);
    ::close(fd);
  }
  uint64_t before = 0;  // pages of the records before it
  const std::string bytes = read_file(r.journal);
  for (size_t i = 0; i < 2; ++i)
    for (uint64_t off = recs[i].first + 24; off < recs[i].first + 16 + recs[i].second;) {
      uint32_t sizes[2];
      std::memcpy(sizes, bytes.data() + off, 8);
      before += sizes[1] / kPage;
      off += 8 + sizes[0];
    }
  const int fd = open_journal(r.journal);
  std::string err;
  {
    Journal j;
    ASSERT_EQ(read_journal(fd, &j, &err, r.journal), 0) << err;
    EXPECT_NE(j.damage.find("a compressed chunk that does not decompress to its size"), std::string::npos)
        << j.damage;
    EXPECT_EQ(j.pages, before);
    ASSERT_EQ(write_from_journal(j, dir + "/v7.dat", {}, &err), 0) << err;
  }
  {
    Journal j;
    ASSERT_EQ(read_journal(fd, &j, &err, r.journal, /*check_chunks=*/false), 0) << err;
    EXPECT_EQ(j.damage, "");
    j.file_version = 6;
    j.compress = false;
    EXPECT_LT(write_from_journal(j, dir + "/v6.dat", {}, &err), 0);
    EXPECT_NE(err.find("does not decompress to its size"), std::string::npos) << err;
  }
  ::close(fd);
  remove_all(dir, r);
}

// Hand-made chunk records (appended to a real journal): sizes past what a
// chunk may hold, a frame that makes more than its head declares (a zstd
// bomb: stopped at the declared size), and chunks of a CPU whose pages
// are not compressed.
TEST(JournalCompressionMalformed, ChunksThatClaimWhatTheyAreNotAreRefused) {
  const std::string dir = temp_dir();
  const Recorded r = record(dir, 2);  // CPU 0 and CPU 1, a record each
  const uint64_t good = (r.pages[0].size() + r.pages[1].size()) / kPage;
  const std::string base = read_file(r.journal);
  ChunkCompressor z(1);
  std::string sixteen;
  for (uint32_t i = 0; i < kChunkPages; ++i) sixteen += page_of(0, 1000 + i);
  auto record_of = [](uint32_t cpu, const std::string& chunks) {
    std::string rec, payload;
    journal_format::put32(&payload, 0);
    journal_format::put32(&payload, cpu);
    payload += chunks;
    journal_format::put32(&rec, journal_format::kChunks);
    journal_format::put32(&rec, 0);
    journal_format::put64(&rec, payload.size());
    rec += payload;
    rec.append((8 - payload.size() % 8) % 8, '\0');
    return rec;
  };
  struct Case {
    const char* name;
    std::string chunks;
    uint32_t cpu;
    const char* damage;
  };
  std::vector<Case> cases;
  {  // 17 pages in one chunk: more than a chunk may hold
    std::string c;
    std::string seventeen = sixteen + page_of(0, 2000);
    ASSERT_TRUE(z.block(seventeen.data(), seventeen.size(), &c));
    cases.push_back({"seventeen pages", c, 0, "a compressed chunk whose sizes do not check out"});
  }
  {  // 16 pages declared as one
    std::string c;
    ASSERT_TRUE(z.block(sixteen.data(), sixteen.size(), &c));
    const uint32_t one = kPage;
    std::memcpy(c.data() + 4, &one, 4);
    cases.push_back({"a bomb", c, 0, "a compressed chunk that does not decompress to its size"});
  }
  {  // not whole pages
    std::string c;
    ASSERT_TRUE(z.block(sixteen.data(), 100, &c));
    cases.push_back({"100 bytes", c, 0, "a compressed chunk whose sizes do not check out"});
  }
  {  // a compressed size past anything zstd makes of a page
    std::string c;
    ASSERT_TRUE(z.block(sixteen.data(), kPage, &c));
    const uint32_t huge = 1u << 30;
    std::memcpy(c.data(), &huge, 4);
    cases.push_back({"a huge compressed size", c, 0, "a compressed chunk whose sizes do not check out"});
  }
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::string path = dir + "/j" + std::to_string(&k - cases.data());
    {
      FILE* f = fopen(path.c_str(), "wb");
      ASSERT_TRUE(f);
      const std::string bytes = base + record_of(k.cpu, k.chunks);
      fwrite(bytes.data(), 1, bytes.size(), f);
      fclose(f);
    }
    const int fd = open_journal(path);
    Journal j;
    std::string err;
    ASSERT_EQ(read_journal(fd, &j, &err, path), 0) << err;
    EXPECT_NE(j.damage.find(k.damage), std::string::npos) << j.damage;
    EXPECT_EQ(j.pages, good) << "what came before is kept, nothing of the bad chunk";
    // The writer refuses the same on its own (a journal read without
    // check_chunks): never more than the head declares.
    Journal unchecked;
    ASSERT_EQ(read_journal(fd, &unchecked, &err, path, false), 0) << err;
    unchecked.file_version = 6;
    unchecked.compress = false;
    if (unchecked.damage.empty()) {
      EXPECT_LT(write_from_journal(unchecked, dir + "/v6.dat", {}, &err), 0);
    }
    ::close(fd);
    ::unlink(path.c_str());
  }
  // Pages in a page file (an uncompressed v7 recording's) and then chunks
  // of the same CPU in the journal: not one CPU's data.
  {
    JournalWriter w;
    RecordOptions o;
    o.output = dir + "/out.dat";
    std::string err;
    ASSERT_EQ(w.create(o, &err), 0) << err;
    uint32_t p0 = 0, s0 = 0;
    ASSERT_EQ(w.add_process(1, "", &p0, &err), 0);
    ASSERT_EQ(w.add_stream(p0, "", kPage, 2, &s0, &err), 0);
    const std::string p = page_of(0, 0);
    ASSERT_EQ(w.put_pages(s0, 0, p.data(), p.size(), &err), 0);
    std::string c;
    ASSERT_TRUE(z.block(p.data(), p.size(), &c));
    const std::string rec = record_of(0, c);
    struct stat st;
    ASSERT_EQ(fstat(w.fd(), &st), 0);
    ASSERT_EQ(pwrite(w.fd(), rec.data(), rec.size(), st.st_size), static_cast<ssize_t>(rec.size()));
    Journal j;
    ASSERT_EQ(read_journal(w.fd(), &j, &err, w.path()), 0) << err;
    EXPECT_NE(j.damage.find("compressed pages of a CPU whose pages are in its page file"), std::string::npos)
        << j.damage;
    EXPECT_EQ(j.pages, 1u);
    w.remove();
  }
  remove_all(dir, r);
}

}  // namespace
}  // namespace usrtrace::tracedat
