// File-backed buffers in one process: what is written is what a recovery
// reads (also across resizes and swaps), the buffer_file control file, and
// malformed files (truncated, bytes flipped): an error or a valid part,
// never a crash (run under ASan in the asan configuration).
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/sys.h"
#include "persist/file_store.h"
#include "ring_buffer/ring_buffer.h"
#include "testing/test_util.h"
#include "tracefs/tracefs.h"
#include "usrtrace/recover.h"

namespace usrtrace {
namespace {

std::string temp_path(const char* name) {
  return std::string("/tmp/usrtrace-persist-test-") + std::to_string(getpid()) + "-" + name;
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct Payload {
  uint64_t n;
  uint64_t check;
};

// Writes `count` payloads numbered from `from`, pinned to cpu 0.
void write_n(rb::RingBuffer& rb, uint64_t from, uint64_t count) {
  testing::Pinned pin(0);
  for (uint64_t i = from; i < from + count; ++i) {
    Payload p{i, ~i};
    ASSERT_TRUE(rb.write<sizeof p>(&p));
  }
}

std::vector<uint64_t> recovered(const Recovery& rec, uint32_t tag) {
  std::vector<uint64_t> out;
  for (const auto& ev : rec.events(tag)) {
    EXPECT_EQ(ev.len, sizeof(Payload));
    Payload p;
    std::memcpy(&p, ev.data, sizeof p);
    EXPECT_EQ(p.check, ~p.n) << "torn payload";
    out.push_back(p.n);
  }
  return out;
}

std::shared_ptr<persist::FileStore> make_store(const std::string& path) {
  int err = 0;
  auto fs = persist::FileStore::create(path, 4096, base::nr_possible_cpus(), "t", &err);
  EXPECT_TRUE(fs) << strerror(err);
  // An empty record: these raw buffers have no event formats.
  if (fs) {
    EXPECT_EQ(fs->write_formats(std::string(8, '\0')), 0);
  }
  return fs;
}

// The bytes of a buffer file holding 3 payloads on cpu 0, for the tests
// that craft malformed files from a real one.
void three_event_file(const char* name, std::vector<uint8_t>* bytes) {
  const std::string path = temp_path(name);
  rb::Options o;
  o.size_per_cpu = 16 * 1024;
  o.store = make_store(path);
  auto rb = rb::RingBuffer::create(o);
  ASSERT_TRUE(rb);
  write_n(*rb, 0, 3);
  *bytes = slurp(path);
  rb.reset();
  unlink(path.c_str());
  ASSERT_GE(bytes->size(), sizeof(persist::FileHeader));
}

// Entry i of the file's region table.
persist::RegionDesc region_of(const std::vector<uint8_t>& bytes, const persist::FileHeader& h, uint32_t i) {
  persist::RegionDesc d;
  std::memcpy(&d, bytes.data() + h.region_table + uint64_t{i} * sizeof d, sizeof d);
  return d;
}

TEST(PersistFile, WhatIsCommittedIsRecovered) {
  const std::string path = temp_path("basic.buf");
  rb::Options o;
  o.size_per_cpu = 64 * 1024;
  o.store = make_store(path);
  int err = 0;
  auto rb = rb::RingBuffer::create(o, &err);
  ASSERT_TRUE(rb) << err;
  write_n(*rb, 0, 1000);
  std::string why;
  auto rec = Recovery::open(path, &why);
  ASSERT_TRUE(rec) << why;
  EXPECT_TRUE(rec->warnings().empty());
  std::vector<uint64_t> want(1000);
  for (uint64_t i = 0; i < 1000; ++i) want[i] = i;
  EXPECT_EQ(recovered(*rec, 0), want);
  EXPECT_EQ(rec->info().pid, getpid());
  EXPECT_EQ(rec->info().instance, "t");
  EXPECT_EQ(rec->info().clock, "local");

  // Overwrite: the newest ones survive, as a contiguous run ending at the last.
  write_n(*rb, 1000, 20000);
  rec = Recovery::open(path, &why);
  ASSERT_TRUE(rec) << why;
  auto got = recovered(*rec, 0);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), 20999u);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_EQ(got[i], got[i - 1] + 1);
  EXPECT_GT(rec->events(0).front().lost_before, 0u);
  rb.reset();
  unlink(path.c_str());
}

TEST(PersistFile, ResizeKeepsWorking) {
  const std::string path = temp_path("resize.buf");
  rb::Options o;
  o.size_per_cpu = 16 * 1024;
  o.store = make_store(path);
  auto rb = rb::RingBuffer::create(o);
  ASSERT_TRUE(rb);
  write_n(*rb, 0, 100);
  ASSERT_EQ(rb->resize(-1, 256 * 1024), 0);
  write_n(*rb, 100, 100);
  ASSERT_EQ(rb->resize(-1, 8 * 1024), 0);  // shrink: the newest pages are kept
  write_n(*rb, 200, 10);
  std::string why;
  auto rec = Recovery::open(path, &why);
  ASSERT_TRUE(rec) << why;
  EXPECT_TRUE(rec->warnings().empty()) << rec->warnings().front();
  auto got = recovered(*rec, 0);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), 209u);
  for (size_t i = 1; i < got.size(); ++i) ASSERT_EQ(got[i], got[i - 1] + 1);
  rb.reset();
  unlink(path.c_str());
}

TEST(PersistFile, SwapUpdatesRoles) {
  const std::string path = temp_path("swap.buf");
  rb::Options o;
  o.size_per_cpu = 64 * 1024;
  o.store = make_store(path);
  auto live = rb::RingBuffer::create(o);
  o.tag = 1;
  auto snap = rb::RingBuffer::create(o);
  ASSERT_TRUE(live && snap);
  write_n(*live, 0, 50);
  ASSERT_EQ(live->swap_cpu(*snap, -1), 0);  // the 50 are now the snapshot's
  write_n(*live, 50, 7);
  std::string why;
  auto rec = Recovery::open(path, &why);
  ASSERT_TRUE(rec) << why;
  EXPECT_EQ(rec->tags(), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(recovered(*rec, 0), (std::vector<uint64_t>{50, 51, 52, 53, 54, 55, 56}));
  EXPECT_EQ(recovered(*rec, 1).size(), 50u);
  // A buffer of another store cannot take part in a swap.
  auto heap = rb::RingBuffer::create(rb::Options{});
  EXPECT_EQ(live->swap_cpu(*heap, -1), -EINVAL);
  live.reset();
  snap.reset();
  unlink(path.c_str());
}

// A tail page whose seq is near 2^64 (with the right slot) once made the
// reader's page loop run forever (`s <= tail_seq` always true); the
// recover fuzzer found it. The reader must finish, with nothing but what
// was written.
TEST(PersistFileMalformed, TailSeqNearTheTopOfItsRange) {
  std::vector<uint8_t> bytes;
  ASSERT_NO_FATAL_FAILURE(three_event_file("bigseq.buf", &bytes));
  persist::FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  auto region = [&](uint32_t i) { return region_of(bytes, h, i); };
  bool patched = false;
  for (uint32_t i = 0; i < h.region_capacity && !patched; ++i) {
    const persist::RegionDesc cpu = region(i);
    if (cpu.state != persist::kStateLive || cpu.kind != persist::kRegionCpu ||
        cpu.role != rb::role_word(0, 0))
      continue;
    uint64_t w0, meta_va, pages_va;
    uint32_t nr;
    std::memcpy(&w0, bytes.data() + cpu.offset + h.cpu_layout.w0, 8);
    std::memcpy(&meta_va, bytes.data() + cpu.offset + h.cpu_layout.meta, 8);
    std::memcpy(&pages_va, bytes.data() + cpu.offset + h.cpu_layout.pages, 8);
    std::memcpy(&nr, bytes.data() + cpu.offset + h.cpu_layout.nr_pages, 4);
    for (uint32_t j = 0; j < h.region_capacity; ++j) {
      const persist::RegionDesc pr = region(j);
      if (pr.state != persist::kStateLive || pr.kind != persist::kRegionPages || pr.base != meta_va) continue;
      const uint64_t slot = ((w0 >> 16) - pages_va) / h.page_size;
      const uint64_t seq = UINT64_MAX - (UINT64_MAX - (slot + 1)) % nr;  // (seq - 1) % nr == slot
      std::memcpy(bytes.data() + pr.offset + slot * h.cpu_layout.meta_size + h.cpu_layout.meta_seq, &seq, 8);
      patched = true;
      break;
    }
  }
  ASSERT_TRUE(patched);
  std::string why;
  auto rec = Recovery::parse(std::move(bytes), &why);
  ASSERT_TRUE(rec) << why;
  for (uint64_t n : recovered(*rec, 0)) EXPECT_LT(n, 3u);
}

// A region table of the largest size the reader takes (2^20 entries, a
// 64 MB file), every added entry live: half copies of cpu 0's CpuBuffer
// region under new roles (tags), half pages regions at addresses nothing
// points to. The reader once matched each CpuBuffer to its pages by
// scanning every pages region (2^19 x 2^19 comparisons: minutes), and read
// a pages region again for every CpuBuffer that pointed at it (the file's
// 3 events came out 2^19 + 1 times). Now the pages regions are indexed and
// each is read for one CpuBuffer at most (in a real file no two share
// one: a resize gives the CpuBuffer new pages, a swap moves whole
// CpuBuffers), so the work is linear in the file.
//
// Checked by a count, not a clock: the 3 events once, and a warning for
// the CpuBuffers left out. The count does not see the comparisons of the
// match: a return to scanning alone shows only as time, this test taking
// minutes instead of 0.4 s (145 s in the RelWithDebInfo clang build before
// the fix, more under the sanitizers), which is left to ctest's timeout
// (scripts/test.sh: --timeout 600).
TEST(PersistFileMalformed, ManyRegionsAreReadInLinearWork) {
  std::vector<uint8_t> bytes;
  ASSERT_NO_FATAL_FAILURE(three_event_file("regions.buf", &bytes));
  persist::FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  auto region = [&](uint32_t i) { return region_of(bytes, h, i); };
  // cpu 0's CpuBuffer of the live buffer, and the address of its pages.
  persist::RegionDesc cpu0{};
  for (uint32_t i = 0; i < h.region_capacity; ++i) {
    const persist::RegionDesc d = region(i);
    if (d.state == persist::kStateLive && d.kind == persist::kRegionCpu && d.role == rb::role_word(0, 0))
      cpu0 = d;
  }
  ASSERT_EQ(cpu0.kind, persist::kRegionCpu);
  persist::RegionDesc pages0{};
  uint64_t meta_va = 0;
  std::memcpy(&meta_va, bytes.data() + cpu0.offset + h.cpu_layout.meta, 8);
  for (uint32_t i = 0; i < h.region_capacity; ++i) {
    const persist::RegionDesc d = region(i);
    if (d.state == persist::kStateLive && d.kind == persist::kRegionPages && d.base == meta_va) pages0 = d;
  }
  ASSERT_EQ(pages0.kind, persist::kRegionPages);

  // The new table, after the file's end: the file's own entries first.
  constexpr uint32_t kCapacity = 1u << 20;
  const uint64_t table = (bytes.size() + persist::kFileAlign - 1) / persist::kFileAlign * persist::kFileAlign;
  std::vector<uint8_t> crafted(table + uint64_t{kCapacity} * sizeof(persist::RegionDesc));
  std::memcpy(crafted.data(), bytes.data(), bytes.size());
  std::memcpy(crafted.data() + table, bytes.data() + h.region_table,
              uint64_t{h.region_capacity} * sizeof(persist::RegionDesc));
  for (uint32_t i = h.region_capacity; i < kCapacity; ++i) {
    persist::RegionDesc d;
    if (i % 2) {
      d = cpu0;
      d.role = rb::role_word(i, 0);  // cpu 0 (what its CpuBuffer says) of buffer i
    } else {
      d = pages0;
      d.base = (uint64_t{1} << 47) + uint64_t{i} * pages0.size;  // no CpuBuffer's pages
    }
    std::memcpy(crafted.data() + table + uint64_t{i} * sizeof d, &d, sizeof d);
  }
  h.region_table = table;
  h.region_capacity = kCapacity;
  std::memcpy(crafted.data(), &h, sizeof h);
  bytes.clear();

  std::string why;
  auto rec = Recovery::parse(std::move(crafted), &why);
  ASSERT_TRUE(rec) << why;
  EXPECT_EQ(recovered(*rec, 0), (std::vector<uint64_t>{0, 1, 2}));
  size_t total = 0;
  for (uint32_t tag : rec->tags()) total += rec->events(tag).size();
  EXPECT_EQ(total, 3u) << "a pages region was read for more than one CpuBuffer";
  bool said = false;
  for (const std::string& w : rec->warnings())
    said |= w.find("pages are another buffer's") != std::string::npos;
  EXPECT_TRUE(said) << "no warning for the CpuBuffers left out";
}

// Truncated at many offsets and with bytes flipped: a clear error or a part
// that checks out; never a crash or a hang.
TEST(PersistFileMalformed, TruncatedAndFlipped) {
  const std::string path = temp_path("malformed.buf");
  rb::Options o;
  o.size_per_cpu = 16 * 1024;
  o.store = make_store(path);
  auto rb = rb::RingBuffer::create(o);
  ASSERT_TRUE(rb);
  write_n(*rb, 0, 3000);
  const std::vector<uint8_t> good = slurp(path);
  std::string why;
  auto ref = Recovery::parse(good, &why);
  ASSERT_TRUE(ref) << why;
  const auto all = recovered(*ref, 0);
  const std::set<uint64_t> valid(all.begin(), all.end());
  ASSERT_FALSE(valid.empty());

  auto check = [&](std::vector<uint8_t> bytes, bool flipped) {
    std::string err;
    auto rec = Recovery::parse(std::move(bytes), &err);
    if (!rec) {
      EXPECT_FALSE(err.empty());
      return;
    }
    for (const auto& ev : rec->events(0)) {
      ASSERT_LE(ev.len, 4096u);
      if (flipped || ev.len != sizeof(Payload)) continue;  // a flipped payload byte is not detectable
      Payload p;
      std::memcpy(&p, ev.data, sizeof p);
      EXPECT_TRUE(valid.count(p.n)) << "an event that was not written";
    }
  };
  // Truncations: every 512 bytes, and around the header and table.
  for (size_t cut = 0; cut < good.size(); cut += (cut < 16384 ? 61 : 512))
    check(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut)), false);
  // Flips: random bytes anywhere, and concentrated on the header and tables.
  std::mt19937 rng(7);
  for (int i = 0; i < 1500; ++i) {
    std::vector<uint8_t> bytes = good;
    const size_t span = i % 3 == 0 ? bytes.size() : std::min<size_t>(bytes.size(), 3 * 4096);
    for (int k = 0; k < 1 + i % 4; ++k) {
      size_t at = std::uniform_int_distribution<size_t>(0, span - 1)(rng);
      bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
    }
    check(std::move(bytes), true);
  }
  rb.reset();
  unlink(path.c_str());
}

std::string rd(const std::string& path) {
  std::string out;
  tracefs::read_file(path, &out);
  return out;
}

TEST(PersistTracefs, BufferFileControlFile) {
  const std::string path = temp_path("tracefs.buf");
  ASSERT_EQ(tracefs::mkdir("instances/pf"), 0);
  EXPECT_EQ(rd("instances/pf/buffer_file"), "\n");
  ASSERT_GT(tracefs::write_file("instances/pf/buffer_file", path + "\n"), 0);
  EXPECT_EQ(rd("instances/pf/buffer_file"), path + "\n");
  ASSERT_GT(tracefs::write_file("instances/pf/trace_marker", "hello from the file"), 0);
  std::string why;
  auto rec = Recovery::open(path, &why);
  ASSERT_TRUE(rec) << why;
  ASSERT_EQ(rec->events(0).size(), 1u);
  EXPECT_EQ(rec->info().instance, "pf");
  bool has_print = false;
  for (const auto& f : rec->formats()) has_print |= f.system == "ftrace" && f.id == 5;
  EXPECT_TRUE(has_print);
  // The trace file reads the new buffer.
  EXPECT_NE(rd("instances/pf/trace").find("hello from the file"), std::string::npos);
  // Bad paths: the errno and an error_log line; the setting is unchanged.
  EXPECT_EQ(tracefs::write_file("instances/pf/buffer_file", "/nonexistent-dir/x.buf\n"), -ENOENT);
  EXPECT_NE(rd("instances/pf/error_log").find("Cannot create the buffer file"), std::string::npos);
  EXPECT_EQ(tracefs::write_file("instances/pf/buffer_file", std::string("a\x01") + "b"), -EINVAL);
  EXPECT_EQ(rd("instances/pf/buffer_file"), path + "\n");
  // Back to memory.
  ASSERT_GE(tracefs::write_file("instances/pf/buffer_file", "\n"), 0);
  EXPECT_EQ(rd("instances/pf/buffer_file"), "\n");
  ASSERT_GT(tracefs::write_file("instances/pf/trace_marker", "in memory"), 0);
  EXPECT_NE(rd("instances/pf/trace").find("in memory"), std::string::npos);
  EXPECT_EQ(tracefs::rmdir("instances/pf"), 0);
  unlink(path.c_str());
}

// A crash-surviving instance that takes snapshots: the spares live in the
// same file, so the file keeps both the live buffer (tag 0) and the
// snapshot (tag 1), whichever CpuBuffers they hold after the swaps.
TEST(PersistTracefs, SnapshotsOfAFileBackedInstanceAreInTheFile) {
  const std::string path = temp_path("snap.buf");
  ASSERT_EQ(tracefs::mkdir("instances/ps"), 0);
  ASSERT_GT(tracefs::write_file("instances/ps/snapshot_enabled", "1\n"), 0);
  ASSERT_GT(tracefs::write_file("instances/ps/buffer_file", path + "\n"), 0);
  EXPECT_EQ(rd("instances/ps/snapshot_enabled"), "1\n");  // the spares followed the buffer
  ASSERT_GT(tracefs::write_file("instances/ps/trace_marker", "before the error"), 0);
  ASSERT_GT(tracefs::write_file("instances/ps/snapshot", "1 the error\n"), 0);
  ASSERT_GT(tracefs::write_file("instances/ps/trace_marker", "after the error"), 0);
  EXPECT_NE(rd("instances/ps/snapshot").find("before the error"), std::string::npos);
  std::string why;
  auto rec = Recovery::open(path, &why);
  ASSERT_TRUE(rec) << why;
  EXPECT_EQ(rec->tags(), (std::vector<uint32_t>{0, 1}));
  auto text_of = [&](uint32_t tag) {
    std::string all;
    for (const auto& ev : rec->events(tag)) all.append(reinterpret_cast<const char*>(ev.data), ev.len);
    return all;
  };
  EXPECT_NE(text_of(0).find("after the error"), std::string::npos);
  EXPECT_EQ(text_of(0).find("before the error"), std::string::npos);
  EXPECT_NE(text_of(1).find("before the error"), std::string::npos);
  EXPECT_EQ(text_of(1).find("after the error"), std::string::npos);
  EXPECT_EQ(tracefs::rmdir("instances/ps"), 0);
  unlink(path.c_str());
}

}  // namespace
}  // namespace usrtrace
