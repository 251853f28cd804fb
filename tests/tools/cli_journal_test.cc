// `usrtrace record`'s journal, as a user meets it: what a full disk, a
// killed recorder and a size limit leave, and what `usrtrace recover` makes
// of it, compressed while recording or not (docs/design/record-journal.md).
// The rest of record is cli_record_test.cc.
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cstring>
#include <regex>
#include <sstream>

#include "record/journal.h"
#include "tools/cli_harness.h"
#include "usrtrace/tracedat.h"

using namespace cli_harness;

namespace {
// A full disk under record: it stops at once and says why, the command is
// let go (before: held at its exit for its whole exit wait, 30 s, and then
// blamed: "went away before its last pages were taken"), and the previous
// output is untouched. The exit wait is ten minutes here: a command still
// held would outlive finish()'s deadline, and the test fail.
// Compressed, the write that fails is the compressor thread's: the
// recorder hears of it at its next batch, and stops as at once.
TEST(CliRecord, AFullDiskEndsTheRecordingAndLetsTheCommandGo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  for (const std::string compression : {"none", "zstd"}) {
    SCOPED_TRACE(compression);
    const std::string dir = temp_dir(), small = dir + "/small", file = small + "/full.dat";
    ASSERT_EQ(::mkdir(small.c_str(), 0700), 0);
    // Room for the journal's start, then shrunk (below) to what it holds plus a set room.
    if (std::system(("mount -t tmpfs -o size=64m tmpfs " + small).c_str()) != 0)
      GTEST_SKIP() << "cannot mount a tmpfs";
    {
      std::ofstream f(file);
      f << "the previous recording";
    }
    Proc rec = Proc::start({"/usr/bin/env", "USRTRACE_EXIT_WAIT_MS=600000", USRTRACE_CLI, "record", "-e",
                            "clitest:tick", "--compression", compression, "-o", file, "--", CLI_TARGET},
                           true);
    size_t seen = rec.wait_for("ready ");
    ASSERT_NE(seen, std::string::npos) << rec.err_text;
    // The journal's start (its metadata, 1.9 MB here) is written before the
    // command runs: measured, not guessed, so that the room left is known.
    // Plain: 64 KiB, full at the first batch. Compressed: 8 MiB, more than
    // two bursts' raw pages (a compressor behind journals them as they are),
    // so something lands before the disk is full, whatever the machine's load.
    auto used = [&] {
      struct statvfs v {};
      if (::statvfs(small.c_str(), &v) != 0) return uint64_t{0};
      return static_cast<uint64_t>(v.f_blocks - v.f_bfree) * v.f_frsize;
    };
    const uint64_t room = compression == "none" ? 64 << 10 : 8 << 20;
    ASSERT_EQ(std::system(("mount -o remount,size=" + std::to_string(used() + room) + " " + small).c_str()),
              0);
    // Bursts of 100000 ticks (3.6 MB of pages), each sent once the journal
    // grew after the last, until the recorder says the disk is full.
    const auto until = Clock::now() + std::chrono::seconds(120);
    while (rec.err_text.find("No space left on device") == std::string::npos && Clock::now() < until) {
      const uint64_t before = used();
      const std::string script = "tick 100000\n";
      ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
      seen = rec.wait_for("ok\n", seen);
      ASSERT_NE(seen, std::string::npos) << rec.err_text;
      while (used() == before && rec.err_text.find("No space left") == std::string::npos &&
             Clock::now() < until)
        rec.pump(20);
    }
    const Result r = rec.finish(120);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("No space left on device after "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(the previous " + file + ", if any, is unchanged)"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("went away before its last pages"), std::string::npos) << r.err;
    std::string text;
    {
      std::ifstream f(file);
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    EXPECT_TRUE(text == "the previous recording") << text.size() << " bytes";
    if (compression == "zstd") {
      // What was written is kept, and recover gives its ticks, in order
      // (bursts of 0..99999).
      const size_t at = r.err.find("`usrtrace recover "), end = r.err.find('`', at + 1);
      ASSERT_NE(at, std::string::npos) << r.err;
      const std::string journal = r.err.substr(at + 18, end - at - 18);
      const std::string out = dir + "/recovered.dat";
      const Result rv = run_cli({"recover", journal, "-o", out});
      ASSERT_EQ(rv.rc, 0) << rv.err;
      const std::vector<unsigned> got = seqs(run_cli({"report", "-i", out}).out, "tick");
      EXPECT_GT(got.size(), 10000u) << rv.err;
      for (size_t i = 1; i < got.size(); ++i)
        ASSERT_TRUE(got[i - 1] < got[i] || (got[i - 1] > 99000 && got[i] < 1000)) << i;
      ::unlink(out.c_str());
      ::unlink(journal.c_str());
    }
    EXPECT_EQ(std::system(("umount " + small).c_str()), 0);
    ::rmdir(small.c_str());
    ::rmdir(dir.c_str());
  }
}

// The journals of OUTPUT in DIR (.OUTPUT.usrtrace-rec-XXXXXX).
std::vector<std::string> journals_of(const std::string& dir, const std::string& output) {
  const std::string prefix = "." + output + ".usrtrace-rec-";
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      // Not its page files (JOURNAL.S.C).
      if (std::string(e->d_name).rfind(prefix, 0) == 0 && std::strlen(e->d_name) == prefix.size() + 6)
        found.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return found;
}

// The one journal of OUTPUT in DIR and the pages it holds (read as
// `usrtrace recover` reads it; a record being written counts its whole
// pages), or "".
std::pair<std::string, uint64_t> journal_of(const std::string& dir, const std::string& output) {
  const std::vector<std::string> all = journals_of(dir, output);
  if (all.size() != 1) return {"", 0};
  const int fd = ::open(all[0].c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {"", 0};
  usrtrace::tracedat::Journal j;
  std::string err;
  const bool ok = usrtrace::tracedat::read_journal(fd, &j, &err) == 0;
  ::close(fd);
  return {all[0], ok ? j.pages : 0};
}

// kill -9 of record: the pages it had taken are in its journal, which
// names the output; `usrtrace recover JOURNAL` writes that output from them
// (before: nothing was left, the pages were in unnamed temporary files).
TEST(CliRecord, AKilledRecorderLeavesAJournalThatRecoverFinishes) {
  const std::string dir = temp_dir(), file = dir + "/killed.dat";
  Proc rec = Proc::start({USRTRACE_CLI, "record", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET}, true);
  ASSERT_NE(rec.wait_for("ready "), std::string::npos) << rec.err_text;
  const std::string script = "tick 100000\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos) << rec.err_text;
  // Until the recorder has taken 64 pages (a condition, bounded: not a sleep).
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (journal_of(dir, "killed.dat").second < 64 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto [journal, pages] = journal_of(dir, "killed.dat");
  ASSERT_GE(pages, 64u) << "the recorder took no pages: " << rec.err_text;
  ASSERT_EQ(::kill(rec.pid, SIGKILL), 0);
  struct stat st;
  ASSERT_EQ(::stat(journal.c_str(), &st), 0);
  const off_t size = st.st_size;
  const Result r = rec.finish(60);  // closes the command's input: it ends
  EXPECT_EQ(::access(file.c_str(), F_OK), -1) << "record wrote its output before it was killed";
  const Result rv = run_cli({"recover", journal});
  ASSERT_EQ(rv.rc, 0) << rv.err;
  EXPECT_NE(rv.err.find("wrote " + file + ": "), std::string::npos) << rv.err;
  EXPECT_NE(rv.err.find("its page files " + journal + ".*"), std::string::npos) << rv.err;
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  // At least what the journal held when record died: 64 pages of 40-byte
  // events.
  ASSERT_GT(got.size(), 64u * 4000 / 40) << rv.err << rep.err << rep.out.substr(0, 3000);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << i;
  // A journal cut short at any byte still gives its whole pages: its last
  // ten records of pages (40 bytes each: their pages are in page files)
  // and a bit of the one before torn off, recover keeps the pages before.
  ASSERT_EQ(::truncate(journal.c_str(), size - 10 * 40 - 7), 0);
  const std::string half = dir + "/half.dat";
  const Result rh = run_cli({"recover", journal, "-o", half});
  ASSERT_EQ(rh.rc, 0) << rh.err;
  EXPECT_NE(rh.err.find("ends early"), std::string::npos) << rh.err;
  const std::vector<unsigned> first_half = seqs(run_cli({"report", "-i", half}).out, "tick");
  EXPECT_GT(first_half.size(), 0u);
  EXPECT_LT(first_half.size(), got.size());
  // The pages are in page files beside the journal (JOURNAL.S.C); one cut
  // short keeps its whole pages: the largest left with two and a bit.
  std::string largest;
  off_t largest_size = 0;
  std::vector<std::string> page_files;
  if (DIR* d = opendir(dir.c_str())) {
    const std::string base = journal.substr(dir.size() + 1) + ".";
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(base, 0) != 0) continue;
      page_files.push_back(dir + "/" + e->d_name);
      struct stat ps;
      if (::stat(page_files.back().c_str(), &ps) == 0 && ps.st_size > largest_size) {
        largest_size = ps.st_size;
        largest = page_files.back();
      }
    }
    closedir(d);
  }
  ASSERT_FALSE(largest.empty()) << "no page file beside " << journal;
  ASSERT_GT(largest_size, 4 * 4096);
  ASSERT_EQ(::truncate(largest.c_str(), 4096 + 2 * 4096 + 100), 0);
  const std::string cut = dir + "/cut.dat";
  const Result rc2 = run_cli({"recover", journal, "-o", cut});
  ASSERT_EQ(rc2.rc, 0) << rc2.err;
  EXPECT_NE(rc2.err.find("ends early"), std::string::npos) << rc2.err;
  const std::vector<unsigned> cut_seqs = seqs(run_cli({"report", "-i", cut}).out, "tick");
  EXPECT_GT(cut_seqs.size(), 0u);
  EXPECT_LT(cut_seqs.size(), first_half.size());
  // The next recording of that output points at the journal left behind,
  // and leaves no journal of its own.
  const Result again = run_cli({"record", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET});
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("note: " + journal + " holds the pages of an earlier recording"),
            std::string::npos)
      << again.err;
  EXPECT_EQ(journals_of(dir, "killed.dat"), std::vector<std::string>{journal});
  // Nor page files, nor a temporary output: what is left is the old journal's.
  if (DIR* d = opendir(dir.c_str())) {
    const std::string old_journal = journal.substr(dir.size() + 1);
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(".killed.dat.", 0) == 0) {
        EXPECT_EQ(name.rfind(old_journal, 0), 0u) << name;
      }
    }
    closedir(d);
  }
  for (const std::string& f : {file, half, cut, journal}) ::unlink(f.c_str());
  for (const std::string& f : page_files) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

// The events of a trace-cmd report, without what differs from one run of
// the same program to the next: the task, pid, CPU and time stamp before
// the event's name, and the thread ids in its fields.
std::vector<std::string> events_of(const std::string& report) {
  static const std::regex prefix(R"(^\s*\S+-\d+\s+\[\d+\]\s+[0-9.]+:\s+)"), tid(R"(tid=\d+)");
  std::vector<std::string> events;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, prefix)) continue;
    events.push_back(std::regex_replace(m.suffix().str(), tid, "tid=T"));
  }
  return events;
}

// Compressed while recorded (the journal's chunks, copied into the file
// as they are): trace-cmd reads the same events from it as from an
// uncompressed recording of the same program, and so does usrtrace report.
TEST(CliRecord, ACompressedRecordingHoldsTheEventsOfAnUncompressedOne) {
  if (!have_trace_cmd()) GTEST_SKIP() << "trace-cmd is not installed";
  const std::string dir = temp_dir();
  std::map<std::string, std::vector<std::string>> events;
  std::map<std::string, off_t> sizes;
  for (const std::string compression : {"none", "zstd"}) {
    SCOPED_TRACE(compression);
    const std::string file = dir + "/" + compression + ".dat";
    Proc rec = Proc::start(
        {USRTRACE_CLI, "record", "-e", "clitest", "--compression", compression, "-o", file, "--", CLI_TARGET},
        true);
    const std::string script = "tick 120000\nrare 3\ntick 500\nexit 0\n";
    ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
    const Result r = rec.finish();
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("; 0 events lost"), std::string::npos) << r.err;
    std::string err;
    auto f = usrtrace::TraceFile::open(file, &err);
    ASSERT_TRUE(f) << err;
    EXPECT_EQ(f->compression(), compression);
    const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", file}, false).finish();
    ASSERT_EQ(tc.rc, 0) << tc.err;
    events[compression] = events_of(tc.out);
    const Result rep = run_cli({"report", "-i", file});
    ASSERT_EQ(rep.rc, 0) << rep.err;
    EXPECT_EQ(rep.out, tc.out);
    struct stat st;
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    sizes[compression] = st.st_size;
    ::unlink(file.c_str());
  }
  ASSERT_EQ(events["none"].size(), 120000u + 3 + 500) << "every event, and nothing else";
  EXPECT_TRUE(events["zstd"] == events["none"]) << events["zstd"].size() << " events compressed";
  EXPECT_LT(sizes["zstd"] * 4, sizes["none"]);
  ::rmdir(dir.c_str());
}

// kill -9 of a compressed recording: its journal holds the chunks written
// so far (what was queued for the compressor is the only extra loss);
// recover writes them as they are, or decompressed (--compression none,
// --file-version 6), and a journal torn in a chunk record, or with a
// garbled chunk, keeps what comes before.
TEST(CliRecord, AKilledCompressedRecorderLeavesAJournalThatRecoverFinishes) {
  const std::string dir = temp_dir(), file = dir + "/zkilled.dat";
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "--compression", "zstd", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET},
      true);
  size_t seen = rec.wait_for("ready ");
  ASSERT_NE(seen, std::string::npos) << rec.err_text;
  // The journal's chunk records (kind 8), where they begin.
  auto chunk_records = [](const std::string& journal) {
    std::vector<uint64_t> found;
    std::ifstream in(journal, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    for (uint64_t at = 32; at + 16 <= bytes.size();) {
      uint32_t kind;
      uint64_t len;
      std::memcpy(&kind, bytes.data() + at, 4);
      std::memcpy(&len, bytes.data() + at + 8, 8);
      if (kind == 8) found.push_back(at);
      at += 16 + len + (8 - len % 8) % 8;
    }
    return found;
  };
  // Bursts with pauses between them: a compressor that fell behind in a
  // burst (its pages then journaled as they are) compresses again after.
  const auto until = Clock::now() + std::chrono::seconds(60);
  for (int burst = 0; Clock::now() < until; ++burst) {
    const auto [journal, pages] = journal_of(dir, "zkilled.dat");
    if (pages >= 64 && burst >= 4 && chunk_records(journal).size() >= 3) break;
    const std::string script = "tick 100000\n";
    ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
    seen = rec.wait_for("ok\n", seen);
    ASSERT_NE(seen, std::string::npos) << rec.err_text;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto [journal, pages] = journal_of(dir, "zkilled.dat");
  ASSERT_GE(pages, 64u) << "the recorder took no pages: " << rec.err_text;
  ASSERT_GE(chunk_records(journal).size(), 3u) << "the recorder compressed nothing: " << rec.err_text;
  ASSERT_EQ(::kill(rec.pid, SIGKILL), 0);
  rec.finish(60);
  EXPECT_EQ(::access(file.c_str(), F_OK), -1) << "record wrote its output before it was killed";
  // No page files: the chunks are in the journal.
  const std::vector<std::string> left = journals_of(dir, "zkilled.dat");
  EXPECT_EQ(left, std::vector<std::string>{journal});
  const Result rv = run_cli({"recover", journal});
  ASSERT_EQ(rv.rc, 0) << rv.err;
  EXPECT_EQ(rv.err.find("ends early"), std::string::npos) << rv.err;
  std::string err;
  auto f = usrtrace::TraceFile::open(file, &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->compression(), "zstd");
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  ASSERT_GE(got.size(), 64u * 4000 / 40) << rv.err << rep.err;
  // In order: bursts of 0..99999, each a new run from a small seq after a large one.
  auto in_order = [](const std::vector<unsigned>& v) {
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] <= v[i - 1] && !(v[i - 1] > 99000 && v[i] < 1000)) return false;
    return true;
  };
  EXPECT_TRUE(in_order(got));
  // Decompressed: the same ticks, as trace-cmd reads them too.
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{"--compression", "none"}, std::vector<std::string>{"--file-version", "6"}}) {
    SCOPED_TRACE(how[0]);
    const std::string plain = dir + "/plain.dat";
    std::vector<std::string> argv = {"recover", journal, "-o", plain};
    argv.insert(argv.end(), how.begin(), how.end());
    const Result rp = run_cli(argv);
    ASSERT_EQ(rp.rc, 0) << rp.err;
    auto pf = usrtrace::TraceFile::open(plain, &err);
    ASSERT_TRUE(pf) << err;
    EXPECT_EQ(pf->compression(), "none");
    EXPECT_EQ(pf->version(), how[0] == "--file-version" ? 6 : 7);
    EXPECT_TRUE(seqs(run_cli({"report", "-i", plain}).out, "tick") == got);
    if (have_trace_cmd()) {
      const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", plain}, false).finish();
      ASSERT_EQ(tc.rc, 0) << tc.err;
      EXPECT_TRUE(seqs(tc.out, "tick") == got);
    }
    ::unlink(plain.c_str());
  }
  // A chunk garbled in the middle of the journal: recover keeps the
  // chunks before it (fewer ticks, still in order), and says so.
  struct stat st;
  ASSERT_EQ(::stat(journal.c_str(), &st), 0);
  const int jfd = ::open(journal.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(jfd, 0);
  std::vector<char> bytes(static_cast<size_t>(st.st_size));
  ASSERT_EQ(::pread(jfd, bytes.data(), bytes.size(), 0), st.st_size);
  // The middle one of its chunk records.
  const std::vector<uint64_t> records = chunk_records(journal);
  ASSERT_GE(records.size(), 3u);
  const uint64_t middle = records[records.size() / 2];
  const std::string junk(16, '\x33');
  ASSERT_EQ(::pwrite(jfd, junk.data(), junk.size(), static_cast<off_t>(middle + 16 + 8 + 8 + 20)), 16);
  ::close(jfd);
  const std::string garbled = dir + "/garbled.dat";
  const Result rg = run_cli({"recover", journal, "-o", garbled});
  ASSERT_EQ(rg.rc, 0) << rg.err;
  EXPECT_NE(rg.err.find("ends early (a compressed chunk that does not decompress"), std::string::npos)
      << rg.err;
  const Result repg = run_cli({"report", "-i", garbled});
  ASSERT_EQ(repg.rc, 0) << repg.err;
  const std::vector<unsigned> before = seqs(repg.out, "tick");
  EXPECT_GT(before.size(), 0u);
  EXPECT_LT(before.size(), got.size());
  EXPECT_TRUE(in_order(before));
  // Torn in that record's first chunk: the same chunks kept.
  ASSERT_EQ(::truncate(journal.c_str(), static_cast<off_t>(middle + 16 + 8 + 30)), 0);
  const std::string torn = dir + "/torn.dat";
  const Result rt = run_cli({"recover", journal, "-o", torn});
  ASSERT_EQ(rt.rc, 0) << rt.err;
  EXPECT_NE(rt.err.find("ends early (a chunk record cut short"), std::string::npos) << rt.err;
  EXPECT_TRUE(seqs(run_cli({"report", "-i", torn}).out, "tick") == before);
  for (const std::string& x : {file, garbled, torn, journal}) ::unlink(x.c_str());
  ::rmdir(dir.c_str());
}

// trace-cmd's -m: each CPU keeps its newest pages within the size (in
// KiB), whatever the file's version or compression; what is kept is the
// end of what was written, every event of it in order.
TEST(CliRecord, MaxSizeKeepsTheNewestPagesOfEachCpu) {
  const std::string dir = temp_dir(), file = dir + "/m.dat";
  constexpr unsigned kTicks = 200000;  // about 7 MB of events: far above the limit
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"--compress"}, {"--file-version", "6"}, {"--max-size", "64"}}) {
    std::vector<std::string> argv = {USRTRACE_CLI, "record", "-e", "clitest:tick", "-o", file};
    if (extra.empty() || extra[0] != "--max-size") argv.insert(argv.end(), {"-m", "64"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", CLI_TARGET});
    SCOPED_TRACE(extra.empty() ? "-m 64" : extra[0]);
    Proc rec = Proc::start(argv, true);
    const std::string script = "tick " + std::to_string(kTicks) + "\nexit 0\n";
    ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
    const Result r = rec.finish();
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("oldest given up to the size limit (-m)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("; 0 events lost"), std::string::npos) << r.err;
    std::string err;
    auto f = usrtrace::TraceFile::open(file, &err);
    ASSERT_TRUE(f) << err;
    uint64_t data = 0;
    for (const auto& cpu : f->buffers()[0].cpus) {
      if (f->compression() == "none") {
        EXPECT_LE(cpu.size, 64u * 1024);
      }
      data += cpu.size;
    }
    EXPECT_GT(data, 0u);
    const Result rep = run_cli({"report", "-i", file});
    ASSERT_EQ(rep.rc, 0) << rep.err;
    const std::vector<unsigned> got = seqs(rep.out, "tick");
    // The newest: the last tick, in order, no more than two CPUs' 16 pages
    // hold (an event is 36 bytes or more), and at least the 15 full pages
    // of a CPU whose ring came round (one did: 7 MB went through them).
    // (Not one run of seqs: a CPU the thread left early keeps older ones.)
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.back(), kTicks - 1);
    EXPECT_LE(got.size(), 2u * 16 * 4096 / 36);
    EXPECT_GE(got.size(), 15u * 4096 / 48);
    for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << i;
    if (have_trace_cmd()) {
      const Result tc = Proc::start({"/usr/bin/trace-cmd", "report", file}, false).finish();
      EXPECT_EQ(tc.rc, 0) << tc.err;
      EXPECT_EQ(tc.out, rep.out);
    }
    ::unlink(file.c_str());
  }
  for (const char* bad : {"0", "-1", "lots"}) {
    const Result r = run_cli({"record", "-m", bad, "-o", file, "--", "/bin/true"});
    EXPECT_NE(r.rc, 0) << bad;
    EXPECT_NE(r.err.find("-m"), std::string::npos) << r.err;
    EXPECT_NE(::access(file.c_str(), F_OK), 0);
  }
  ::rmdir(dir.c_str());
}

// A recorder killed while -m's rings are coming round: recover gives the
// newest pages it had written, in order, and never a page that was being
// overwritten (the journal gives pages up before they are).
// The recording is held on one CPU: a thread that moved would leave its first
// ticks in a ring that never came round (CI once saw tick 0 recovered so).
// The affinity is the test's own around the fork, inherited by the recorder
// and its command (record reads the command's own events, so no taskset).
TEST(CliRecord, AKilledRecorderWithASizeLimitRecoversTheNewestInOrder) {
  const std::string dir = temp_dir(), file = dir + "/ring.dat";
  cpu_set_t allowed, one;
  CPU_ZERO(&allowed);
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  CPU_ZERO(&one);
  for (size_t c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  Proc rec = Proc::start(
      {USRTRACE_CLI, "record", "-m", "32", "-e", "clitest:tick", "-o", file, "--", CLI_TARGET}, true);
  ASSERT_EQ(::sched_setaffinity(0, sizeof allowed, &allowed), 0);
  ASSERT_NE(rec.wait_for("ready "), std::string::npos) << rec.err_text;
  const std::string script = "spin\n";
  ASSERT_EQ(::write(rec.in, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ASSERT_NE(rec.wait_for("ok\n"), std::string::npos) << rec.err_text;
  // Until the rings came round 4 times (a condition, bounded: not a sleep).
  auto gone = [&] {
    const std::vector<std::string> all = journals_of(dir, "ring.dat");
    if (all.size() != 1) return std::pair<std::string, uint64_t>{"", 0};
    const int fd = ::open(all[0].c_str(), O_RDONLY | O_CLOEXEC);
    usrtrace::tracedat::Journal j;
    std::string err;
    const bool ok = fd >= 0 && usrtrace::tracedat::read_journal(fd, &j, &err) == 0;
    if (fd >= 0) ::close(fd);
    return std::pair<std::string, uint64_t>{all[0], ok ? j.pages_gone : 0};
  };
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (gone().second < 32 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto [journal, pages_gone] = gone();
  ASSERT_GE(pages_gone, 32u) << rec.err_text;
  ASSERT_EQ(::kill(rec.pid, SIGKILL), 0);
  rec.finish(60);
  const Result rv = run_cli({"recover", journal});
  ASSERT_EQ(rv.rc, 0) << rv.err;
  const Result rep = run_cli({"report", "-i", file});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  const std::vector<unsigned> got = seqs(rep.out, "tick");
  ASSERT_FALSE(got.empty()) << rv.err;
  EXPECT_LE(got.size(), 2u * 8 * 4096 / 36);
  EXPECT_GT(got.front(), 0u) << "the oldest pages were given up";
  for (size_t i = 1; i < got.size(); ++i) ASSERT_LT(got[i - 1], got[i]) << i;
  ::unlink(file.c_str());
  for (const std::string& j : journals_of(dir, "ring.dat")) {
    for (int s = 0; s < 4; ++s)
      for (int c = 0; c < 64; ++c) ::unlink((j + "." + std::to_string(s) + "." + std::to_string(c)).c_str());
    ::unlink(j.c_str());
  }
  ::rmdir(dir.c_str());
}

}  // namespace
