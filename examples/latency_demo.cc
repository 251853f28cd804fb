// The latency tracers on a small service: two workers serve requests,
// each a `request` section holding a `lock` section; one request in 700
// finds the lock held 4 ms. The program sets tracing up as a user would
// with echo (instances/lat: current_tracer section_request, the demo
// events enabled), serves 3000 requests, and prints the max trace: the
// worst request, with exactly the events that happened during it, under
// the kernel's latency header (docs/guide/latency-tracers.md).
//
//   ./latency_demo            the worst request
//   ./latency_demo thresh     every request over 2 ms (tracing_thresh)
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "usrtrace/event.h"
#include "usrtrace/latency.h"
#include "usrtrace/usrtrace.h"

USRTRACE_EVENT(demo, parse, (uint32_t, req), "req=%u", REC->req)
USRTRACE_EVENT(demo, locked, (uint32_t, req)(uint32_t, worker), "req=%u worker=%u", REC->req, REC->worker)
USRTRACE_EVENT(demo, reply, (uint32_t, req)(uint32_t, bytes), "req=%u bytes=%u", REC->req, REC->bytes)

namespace {

std::mutex g_table_mu;
std::atomic<uint32_t> g_next{0};

void busy_ns(long ns) {
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do {
    clock_gettime(CLOCK_MONOTONIC, &b);
  } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

void serve(uint32_t req, uint32_t worker) {
  USRTRACE_SECTION("request");
  trace_demo_parse(req);
  busy_ns(2000);
  {
    std::lock_guard<std::mutex> l(g_table_mu);
    USRTRACE_SECTION("lock");
    trace_demo_locked(req, worker);
    busy_ns(req % 700 == 350 ? 4000000 : 1000);  // the one slow update
  }
  trace_demo_reply(req, 512 + req % 64);
}

void worker(uint32_t id) {
  for (uint32_t req; (req = g_next.fetch_add(1)) < 3000;) serve(req, id);
}

bool write(const char* path, const char* text) {
  const long rc = usrtrace_tracefs_write(path, text, strlen(text));
  if (rc < 0) fprintf(stderr, "echo %s > %s: %s\n", text, path, strerror(static_cast<int>(-rc)));
  return rc >= 0;
}

std::string read(const char* path) {
  std::string out(4 << 20, '\0');
  const long n = usrtrace_tracefs_read(path, out.data(), out.size());
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool thresh = argc > 1 && strcmp(argv[1], "thresh") == 0;
  usrtrace_section_kind_get("request");  // section_request exists from here on
  usrtrace_section_kind_get("lock");
  if (usrtrace_tracefs_mkdir("instances/lat") < 0 ||  // mkdir instances/lat
      !write("instances/lat/events/demo/enable", "1") ||
      !write("instances/lat/snapshot_ring_size", "8") ||  // thresh: the last 8 kept
      (thresh && !write("instances/lat/tracing_thresh", "2000")) ||
      !write("instances/lat/current_tracer", "section_request"))
    return 1;
  std::vector<std::thread> workers;
  for (uint32_t i = 0; i < 2; ++i) workers.emplace_back(worker, i);
  for (auto& t : workers) t.join();
  printf("available_tracers: %s", read("available_tracers").c_str());
  printf("tracing_max_latency: %s", read("instances/lat/tracing_max_latency").c_str());
  if (thresh) {
    for (const char* f : {"instances/lat/snapshot.2", "instances/lat/snapshot.1", "instances/lat/snapshot"}) {
      printf("\n=== cat %s ===\n", f);
      fputs(read(f).c_str(), stdout);
    }
  } else {
    printf("\n=== cat instances/lat/trace ===\n");
    fputs(read("instances/lat/trace").c_str(), stdout);
  }
  return 0;
}
