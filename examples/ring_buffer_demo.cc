// Records events from a few threads into a usrtrace ring buffer (overwrite
// mode, the flight recorder) and prints what is in it, oldest first, the way
// the `trace` file will.
//
//   ./ring_buffer_demo [events_per_thread]
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/sys.h"
#include "clock/trace_clock.h"
#include "ring_buffer/ring_buffer.h"

namespace {

struct Request {  // one event: 3 integers and a 16-byte name
  int32_t tid;
  uint32_t id;
  uint32_t bytes;
  char name[16];
};

}  // namespace

int main(int argc, char** argv) {
  const int per_thread = argc > 1 ? atoi(argv[1]) : 5;
  int err = 0;
  usrtrace::rb::Options opts;
  opts.size_per_cpu = 16 * 1024;  // small, so the demo shows overwriting when asked for many
  auto rb = usrtrace::rb::RingBuffer::create(opts, &err);
  if (!rb) {
    fprintf(stderr, "ring buffer: %s\n", strerror(err));
    return 1;
  }

  const char* names[] = {"alpha", "bravo", "charlie"};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        Request r{usrtrace::base::gettid_cached(),
                  static_cast<uint32_t>(t * 1000 + i),
                  static_cast<uint32_t>(512 << t),
                  {}};
        snprintf(r.name, sizeof r.name, "%s", names[t]);
        rb->write<sizeof r>(&r);
      }
    });
  }
  for (auto& th : threads) th.join();

  printf("# usrtrace ring buffer demo: %d CPUs, %u pages of %u bytes per CPU\n", rb->nr_cpus(),
         rb->nr_pages(0), rb->page_size(0));
  printf("#    TID   CPU   TIMESTAMP  EVENT\n");
  usrtrace::rb::RingBuffer::Iterator it(*rb);
  usrtrace::rb::Event ev;
  while (it.next(&ev)) {
    Request r;
    memcpy(&r, ev.data, sizeof r);
    uint64_t ns = usrtrace::clock::raw_to_ns(rb->clock(), ev.ts);
    if (ev.lost_before) printf("CPU:%d [LOST %" PRIu64 " EVENTS]\n", ev.cpu, ev.missed_before);
    printf("%8d [%03d] %6" PRIu64 ".%06" PRIu64 ": request: id=%u bytes=%u name=%s\n", r.tid, ev.cpu,
           ns / 1000000000, ns / 1000 % 1000000, r.id, r.bytes, r.name);
  }
  for (int c = 0; c < rb->nr_cpus(); ++c) {
    usrtrace::rb::CpuStats s = rb->stats(c);
    printf("# cpu%d: written %" PRIu64 ", in buffer %" PRIu64 ", overrun %" PRIu64 "\n", c, s.written,
           s.entries, s.overrun);
  }
  return 0;
}
