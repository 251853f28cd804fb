// libFuzzer: a record journal (record/journal.h) as untrusted input, as
// `usrtrace recover JOURNAL` reads it. Like recover_fuzzer, the input
// overwrites a real journal's bytes at an offset its first 4 bytes choose
// (or, starting with 'R', is the whole file), so that mutations reach past
// the header; three seeds, one with the pages in the journal (version 6),
// one with them in page files beside it (version 7, kPagesIn records) and
// one with them compressed in the journal (version 7 zstd, kChunks).
// read_journal must give an error or extents inside their files, and
// write_from_journal a trace.dat or an error; never a crash or a hang.
// The processes' saved_cmdlines are many lines each (assemble joins them
// with keep_departed), and an input may also make a page file longer by
// a hole (a sparse file): no extent may then name the hole. A compressed
// journal is also read without decompressing its chunks (as a recording's
// end reads its own) and written uncompressed: the writer's own checks of
// each chunk must hold then.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "record/journal.h"
#include "ring_buffer/page_format.h"

namespace {

using namespace usrtrace;

std::string g_dir;
// The page-file seed's journal, rewritten for each input, and its page
// files beside it (JOURNAL.S.C), which the seed left there.
std::string g_pj;

std::vector<uint8_t> read_all(const std::string& path) {
  std::vector<uint8_t> bytes;
  if (FILE* f = fopen(path.c_str(), "rb")) {
    uint8_t buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
    fclose(f);
  }
  return bytes;
}

// A journal of two processes, three CPUs' pages: version 6, pages in the
// journal (kPages), version 7, pages in page files (kPagesIn), or version 7
// compressed, chunks in the journal (kChunks).
std::vector<uint8_t> make_seed(int version, bool compress = false) {
  if (g_dir.empty()) {
    char tmpl[] = "/tmp/usrtrace-journal-fuzzer-XXXXXX";
    if (!mkdtemp(tmpl)) abort();
    g_dir = tmpl;
    g_pj = g_dir + "/pj";
  }
  RecordOptions o;
  o.output = g_dir + "/seed.dat";
  o.file_version = version;
  o.compress = compress;
  std::string err;
  std::string path;
  struct Written {
    uint32_t stream, cpu;
  };
  std::vector<Written> written;
  tracedat::JournalWriter w;
  if (w.create(o, &err) < 0) abort();
  path = w.path();
  uint32_t p0 = 0, p1 = 0, s0 = 0, s1 = 0;
  w.add_process(1, "", &p0, &err);
  w.add_stream(p0, "", 4096, 2, &s0, &err);
  control::RemoteMeta m;
  m.meta.nr_cpus = 2;
  m.meta.page_size = 4096;
  m.meta.header_page = rb::header_page_text(4096);
  m.meta.header_event = rb::header_event_text();
  m.meta.trace_clock = "[local] global\n";
  for (int pid = 1; pid <= 300; ++pid)
    m.meta.cmdlines += std::to_string(pid) + " thread-" + std::to_string(pid) + "\n";
  control::InstanceMeta im;
  im.name = "";
  im.clock = "local";
  im.page_size = 4096;
  im.nr_cpus = 2;
  im.stats = {"entries: 1\n", "entries: 0\n"};
  m.instances.push_back(im);
  w.put_meta(p0, m, &err);
  std::vector<uint8_t> page(4096, 0);
  w.put_pages(s0, 0, page.data(), page.size(), &err);
  w.put_pages(s0, 1, page.data(), page.size(), &err);
  w.put_pages(s0, 1, page.data(), page.size(), &err);
  std::vector<uint8_t> pages(4096 * 20, 0);  // two chunks when compressed
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<uint8_t>(i * 7 / 4096);
  if (compress) w.put_pages(s0, 0, pages.data(), pages.size(), &err);
  w.add_process(2, "child-2", &p1, &err);
  w.add_stream(p1, "x", 4096, 2, &s1, &err);
  m.meta.cmdlines.clear();
  for (int pid = 200; pid <= 500; ++pid)
    m.meta.cmdlines += std::to_string(pid) + " child-" + std::to_string(pid) + "\n";
  w.put_meta(p1, m, &err);
  w.put_pages(s1, 1, page.data(), page.size(), &err);
  written = {{s0, 0}, {s0, 1}, {s1, 1}};
  w.drain(&err);
  w.keep();
  std::vector<uint8_t> bytes = read_all(path);
  unlink(path.c_str());
  // The page files, where the inputs' journal (g_pj) finds them.
  for (const Written& pw : written) {
    const std::string from = w.page_file(pw.stream, pw.cpu);
    const std::string to = g_pj + "." + std::to_string(pw.stream) + "." + std::to_string(pw.cpu);
    if (access(from.c_str(), F_OK) == 0 && rename(from.c_str(), to.c_str()) != 0) abort();
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<uint8_t> inline_seed = make_seed(6);
  static const std::vector<uint8_t> files_seed = make_seed(7);
  static const std::vector<uint8_t> chunks_seed = make_seed(7, true);
  std::vector<uint8_t> bytes;
  // The first 4 bytes: where the rest overwrites a seed, and (the top two
  // bits) which seed: 1x the page files', 01 the compressed one's, 00 the
  // inline one's; 'R' first: the rest is the whole journal.
  uint32_t at = 0;
  if (size >= 4) std::memcpy(&at, data, 4);
  const bool files = (at & 0x80000000u) != 0;
  const bool chunks = !files && (at & 0x40000000u) != 0;
  if (size >= 1 && data[0] == 'R') {
    bytes.assign(data + 1, data + size);
  } else {
    bytes = files ? files_seed : chunks ? chunks_seed : inline_seed;
    const size_t off = bytes.empty() ? 0 : (at & 0x3fffffffu) % bytes.size();
    const size_t n = size > 4 ? size - 4 : 0;
    if (off + n > bytes.size()) bytes.resize(off + n);
    if (n) std::memcpy(bytes.data() + off, data + 4, n);
  }
  // With the page files, the input may add a hole to the end of one
  // (stream 0, CPU 0): bits 16..29 of `at`, in pages. Undone after.
  const std::string hole_file = g_pj + ".0.0";
  struct stat hole_st {};
  const uint64_t hole_pages = files ? (at >> 16) & 0x3fffu : 0;
  const bool have_hole =
      hole_pages > 0 && stat(hole_file.c_str(), &hole_st) == 0 &&
      truncate(hole_file.c_str(), hole_st.st_size + static_cast<off_t>(hole_pages * 4096)) == 0;
  // The journal is a real file beside the seed's page files.
  const int fd = open(g_pj.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  if (!bytes.empty() && write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    close(fd);
    return 0;
  }
  tracedat::Journal j;
  std::string err;
  if (tracedat::read_journal(fd, &j, &err, g_pj) == 0) {
    for (const auto& s : j.streams)
      for (const auto& c : s.cpus) {
        if (c.extents.empty()) continue;
        struct stat st;
        if (fstat(c.fd, &st) != 0) abort();
        const uint64_t limit = c.fd == fd ? bytes.size() : static_cast<uint64_t>(st.st_size);
        for (const auto& e : c.extents) {
          if (e.offset + e.size > limit) abort();                   // outside its file
          if (e.chunks == 0 && e.size % s.page_size != 0) abort();  // not whole pages
          const off_t h = lseek(c.fd, static_cast<off_t>(e.offset), SEEK_HOLE);
          if (h >= 0 && static_cast<uint64_t>(h) < e.offset + e.size) abort();  // pages from a hole
        }
      }
    const std::string out = g_dir + "/out.dat";
    if (tracedat::write_from_journal(j, out, {}, &err) == 0) unlink(out.c_str());
  }
  tracedat::Journal unchecked;
  if (tracedat::read_journal(fd, &unchecked, &err, g_pj, /*check_chunks=*/false) == 0) {
    unchecked.file_version = 6;
    unchecked.compress = false;
    const std::string out = g_dir + "/out6.dat";
    if (tracedat::write_from_journal(unchecked, out, {}, &err) == 0) unlink(out.c_str());
  }
  close(fd);
  if (have_hole) (void)truncate(hole_file.c_str(), hole_st.st_size);
  return 0;
}
