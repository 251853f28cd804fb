// Run by ring_buffer_test with GLIBC_TUNABLES=glibc.pthread.rseq=0: checks
// that a thread glibc did not register gets registered by its first write.
#include <cstdio>
#include <thread>

#include "base/rseq.h"
#include "testing/test_util.h"

int main() {
  using namespace usrtrace;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      fprintf(stderr, "rseq_child: %s\n", what);
      ++failures;
    }
  };
  expect(base::rseq_cpu_id() < 0, "glibc registered rseq despite the tunable");
  std::thread t([&] {
    expect(base::rseq_cpu_id() < 0, "new thread already registered");
    auto rb = testing::make_buffer();
    expect(rb != nullptr, "create failed");
    if (!rb) return;
    auto p = testing::Payload::make(1, 0, 0);
    expect(rb->write<sizeof p>(&p), "first write failed");
    expect(base::rseq_cpu_id() >= 0, "thread not registered after its first write");
    expect(rb->write<sizeof p>(&p), "second write failed");
    rb::Event ev;
    expect(rb->consume(&ev) && rb->consume(&ev), "events not readable");
  });
  t.join();
  return failures == 0 ? 0 : 1;
}
