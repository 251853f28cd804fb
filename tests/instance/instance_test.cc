// Instances: creation rules, and removal while threads write into them.
#include "instance/instance.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "events/registry.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(insttest, tick, (uint32_t, writer)(uint32_t, seq), "writer=%u seq=%u", REC->writer, REC->seq)

namespace usrtrace::instance {
namespace {

TEST(InstanceTest, NamesAndSlots) {
  int err = 0;
  EXPECT_EQ(Instance::create("", &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(Instance::create("a/b", &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(Instance::create(std::string(65, 'x'), &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  Instance* a = Instance::create("inst_a", &err);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Instance::create("inst_a", &err), nullptr);
  EXPECT_EQ(err, EEXIST);
  EXPECT_EQ(Instance::find("inst_a"), a);
  EXPECT_EQ(Instance::find(""), Instance::top());
  // Every slot but the top's can be used, then ENOSPC.
  std::vector<std::string> made;
  for (int i = 0; i < kMaxInstances; ++i) {
    std::string n = "fill_" + std::to_string(i);
    if (!Instance::create(n, &err)) break;
    made.push_back(n);
  }
  EXPECT_EQ(err, ENOSPC);
  EXPECT_EQ(made.size(), static_cast<size_t>(kMaxInstances - 2));
  for (const auto& n : made) EXPECT_EQ(Instance::destroy(n), 0);
  a->get_reader();
  EXPECT_EQ(Instance::destroy("inst_a"), -EBUSY);
  a->put_reader();
  EXPECT_EQ(Instance::destroy("inst_a"), 0);
  EXPECT_EQ(Instance::destroy("inst_a"), -ENOENT);
  EXPECT_EQ(Instance::destroy(""), -EINVAL);
}

// Writers write an event enabled in the top instance and in an instance that
// is created and removed over and over while they write. Nothing may crash
// (ASan/TSan see every use after free), and the top instance accounts for
// every event exactly: written == the writers' own counts, and what is read
// back is in order per writer.
TEST(InstanceTest, RemoveWhileWriting) {
  Instance* top = Instance::top();
  ASSERT_NE(top, nullptr);
  top->buffer().reset();
  top->set_event("insttest", "tick", true);
  constexpr int kWriters = 3;
  std::atomic<int> started{0};
  std::atomic<bool> stop{false};
  std::vector<uint32_t> counts(kWriters, 0);
  std::vector<std::thread> writers;
  for (uint32_t w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      started.fetch_add(1);
      uint32_t i = 0;
      for (; !stop.load(std::memory_order_relaxed); ++i) trace_insttest_tick(w, i);
      counts[w] = i;
    });
  }
  while (started.load() < kWriters) std::this_thread::yield();
  uint64_t seen_in_churn = 0;
  for (int cycle = 0; cycle < 100; ++cycle) {
    int err = 0;
    Instance* x = Instance::create("churn", &err);
    ASSERT_NE(x, nullptr) << err;
    x->set_event("insttest", "tick", true);
    // Wait (bounded by data, not time) until a writer has written into it.
    rb::Event ev;
    while (!x->buffer().consume(&ev)) std::this_thread::yield();
    uint32_t f[2];
    std::memcpy(f, ev.data + 8, sizeof f);
    EXPECT_LT(f[0], static_cast<uint32_t>(kWriters));
    ++seen_in_churn;
    ASSERT_EQ(Instance::destroy("churn"), 0);
  }
  stop = true;
  for (auto& t : writers) t.join();
  top->set_event("insttest", "tick", false);
  EXPECT_EQ(seen_in_churn, 100u);

  uint64_t total = 0;
  for (uint32_t c : counts) total += c;
  uint64_t written = 0;
  for (int c = 0; c < top->buffer().nr_cpus(); ++c) written += top->buffer().stats(c).written;
  EXPECT_EQ(written, total);
  std::vector<int64_t> last(kWriters, -1);
  rb::Event ev;
  uint64_t got = 0;
  while (top->buffer().consume(&ev)) {
    uint32_t f[2];
    std::memcpy(f, ev.data + 8, sizeof f);
    ASSERT_LT(f[0], static_cast<uint32_t>(kWriters));
    EXPECT_GT(static_cast<int64_t>(f[1]), last[f[0]]) << "writer " << f[0];
    last[f[0]] = f[1];
    ++got;
  }
  uint64_t lost = 0;
  for (int c = 0; c < top->buffer().nr_cpus(); ++c) lost += top->buffer().stats(c).overrun;
  EXPECT_EQ(got + lost, total);
}

}  // namespace
}  // namespace usrtrace::instance
