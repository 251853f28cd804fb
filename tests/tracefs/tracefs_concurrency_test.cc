// Instances created and removed (mkdir/rmdir) while writer threads write
// enabled events into them and readers read them; bounded by iteration
// counts. Checks: no crash (ASan/TSan clean), rmdir answers EBUSY while a
// file is open, and an instance that stays has every event intact.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <thread>

#include "tracefs/tracefs_test_util.h"

namespace usrtrace::tracefs_test {
namespace {

using instance::Instance;

constexpr int kNames = 3;
constexpr int kChurnIters = 150;
constexpr int kWriters = 2;
// Writers go on until the churn is over, at most this many events each (the
// stable instance's buffer holds them all).
constexpr int32_t kMaxEventsPerWriter = 100000;

std::string churn_name(int i) { return "tfs_churn" + std::to_string(i % kNames); }

TEST(TracefsConcurrencyTest, MkdirRmdirWhileWritingAndReading) {
  ASSERT_NE(Instance::top(), nullptr);
  ASSERT_EQ(tracefs::mkdir("instances/tfs_stable"), 0);
  Instance* stable = Instance::find("tfs_stable");
  ASSERT_GT(wr("instances/tfs_stable/set_event", "tfsother:seq"), 0);
  ASSERT_GT(wr("instances/tfs_stable/buffer_size_kb", "8192"), 0);
  Instance* top = Instance::top();
  top->buffer().reset();
  wr("trace_marker", "top-before");

  std::atomic<bool> stop{false}, churn_done{false};
  int32_t written[kWriters] = {};
  std::atomic<int> ebusy{0}, removed{0}, created{0};

  // Churners: create, enable, remove; any of these may race with the other
  // churner, so EEXIST, ENOENT and EBUSY are all fine answers.
  auto churn = [&](int seed) {
    for (int i = 0; i < kChurnIters; ++i) {
      const std::string dir = "instances/" + churn_name(i + seed);
      const int rc = tracefs::mkdir(dir);
      EXPECT_TRUE(rc == 0 || rc == -EEXIST || rc == -ENOSPC) << rc;
      if (rc == 0) created.fetch_add(1);
      const long w = wr(dir + "/events/tfsother/seq/enable", "1");
      EXPECT_TRUE(w == 1 || w == -ENOENT) << w;
      wr(dir + "/trace_marker", "churn");
      const int r = tracefs::rmdir(dir);
      EXPECT_TRUE(r == 0 || r == -ENOENT || r == -EBUSY) << r;
      if (r == 0) removed.fetch_add(1);
      if (r == -EBUSY) ebusy.fetch_add(1);
    }
  };
  // Readers: open files of churned instances and read them, holding them
  // open across a little work so that rmdir sees EBUSY.
  auto read_loop = [&](int seed) {
    char buf[4096];
    for (int i = 0; !stop.load(std::memory_order_relaxed) && i < 100000; ++i) {
      const std::string dir = "instances/" + churn_name(i + seed);
      std::unique_ptr<tracefs::File> f;
      const char* file = i % 3 == 0 ? "/trace_pipe" : i % 3 == 1 ? "/trace" : "/per_cpu/cpu0/trace_pipe_raw";
      if (tracefs::open(dir + file, O_RDONLY | O_NONBLOCK, &f) == 0) {
        for (int k = 0; k < 4; ++k)
          if (f->read(buf, sizeof buf) <= 0) break;
      }
      std::vector<std::string> names;
      tracefs::list(dir + "/events", &names);
      tracefs::Stat st;
      tracefs::stat(dir + "/buffer_size_kb", &st);
    }
  };
  // Writers: a numbered stream each, into every instance the event is on.
  auto write_loop = [&](int32_t w) {
    int32_t s = 0;
    for (; s < kMaxEventsPerWriter && (s < 1000 || !churn_done.load(std::memory_order_relaxed)); ++s) {
      trace_tfsother_seq(w, s);
      if (s % 64 == 0) std::this_thread::yield();  // spread the events over the churn
    }
    written[w] = s;
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) threads.emplace_back(write_loop, w);
  threads.emplace_back(read_loop, 0);
  threads.emplace_back(read_loop, 1);
  std::thread c1(churn, 0), c2(churn, 1);
  c1.join();
  c2.join();
  churn_done.store(true);
  for (int w = 0; w < kWriters; ++w) threads[static_cast<size_t>(w)].join();
  stop.store(true);
  for (size_t i = kWriters; i < threads.size(); ++i) threads[i].join();

  printf("created %d, removed %d, EBUSY %d, events per writer %d/%d\n", created.load(), removed.load(),
         ebusy.load(), written[0], written[1]);
  EXPECT_GT(created.load(), 0);
  EXPECT_GT(removed.load(), 0);
  // Deterministic EBUSY: a held file keeps its instance.
  ASSERT_EQ(tracefs::mkdir("instances/tfs_held"), 0);
  {
    std::unique_ptr<tracefs::File> f;
    ASSERT_EQ(tracefs::open("instances/tfs_held/trace_pipe", O_RDONLY | O_NONBLOCK, &f), 0);
    EXPECT_EQ(tracefs::rmdir("instances/tfs_held"), -EBUSY);
  }
  EXPECT_EQ(tracefs::rmdir("instances/tfs_held"), 0);
  for (int i = 0; i < kNames; ++i) {
    const int r = tracefs::rmdir("instances/" + churn_name(i));
    EXPECT_TRUE(r == 0 || r == -ENOENT) << r;
  }

  // The stable instance got every event of every writer, once.
  const uint16_t id = event_id("tfsother", "seq");
  std::map<int32_t, std::vector<int32_t>> by_writer;
  for (const Rec& r : records(stable))
    if (r.type == id) by_writer[r.i32(0)].push_back(r.i32(4));
  ASSERT_EQ(by_writer.size(), static_cast<size_t>(kWriters));
  for (auto& [w, seqs] : by_writer) {
    ASSERT_EQ(seqs.size(), static_cast<size_t>(written[w])) << "writer " << w;
    std::sort(seqs.begin(), seqs.end());  // merged across CPUs by time; a writer may migrate
    for (int32_t s = 0; s < written[w]; ++s) {
      EXPECT_EQ(seqs[static_cast<size_t>(s)], s);
    }
  }
  // The top instance saw none of it and kept its marker.
  EXPECT_TRUE(has_marker(top, "top-before"));
  for (const Rec& r : records(top)) {
    EXPECT_NE(r.type, id);
  }
  for (int c = 0; c < stable->buffer().nr_cpus(); ++c) {
    EXPECT_EQ(stable->buffer().stats(c).overrun, 0u);
  }
  EXPECT_EQ(tracefs::rmdir("instances/tfs_stable"), 0);
}

}  // namespace
}  // namespace usrtrace::tracefs_test
