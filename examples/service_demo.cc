// The flight-recorder demo: why ftrace has instances.
//
// Four worker threads serve requests. Every request records demo:request
// (the hog: hundreds of thousands per second); now and then one fails and
// records demo:error (rare, and the one you want after an incident). The top
// buffer records both and is small, so by the end the hog has overwritten the
// old errors. The instance "errors" records only demo:error and keeps every
// one. The instance "slow" keeps only slow /api requests (an event filter),
// and a hist trigger counts requests per route. Everything is set up the way
// you would with ftrace, by writing the control files (here through the C
// API; `usrtrace` does it from a shell).
//
// Exits 0 when the errors instance kept every error, the slow instance kept
// only what its filter passes, and the histogram counted every request; 1
// otherwise.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "usrtrace/event.h"
#include "usrtrace/tracedat.h"
#include "usrtrace/usrtrace.h"

USRTRACE_EVENT(demo, request, (uint64_t, id)(uint32_t, latency_us)(char[16], route),
               "id=%llu latency_us=%u route=%s", REC->id, REC->latency_us, REC->route)
USRTRACE_EVENT(demo, error, (uint64_t, id)(int32_t, code)(const char*, what), "id=%llu code=%d what=%s",
               REC->id, REC->code, __get_str(what))

namespace {

constexpr int kWorkers = 4;
constexpr uint64_t kRequestsPerWorker = 200000;
constexpr uint64_t kFailEvery = 9973;  // a prime: failures spread over the run

const char* const kRoutes[] = {"/index.html", "/api/orders", "/api/users", "/static/app.js"};

void check(long rc, const char* what) {
  if (rc < 0) {
    fprintf(stderr, "service_demo: %s: %s\n", what, strerror(static_cast<int>(-rc)));
    exit(2);
  }
}

void write_file(const char* path, const char* text) {
  check(usrtrace_tracefs_write(path, text, strlen(text)), path);
}

std::string read_file(const char* path) {
  std::string out(16 << 20, '\0');
  long n = usrtrace_tracefs_read(path, out.data(), out.size());
  check(n, path);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

size_t count_events(const std::vector<std::string>& lines, const char* name) {
  size_t n = 0;
  for (const auto& l : lines)
    if (!l.empty() && l[0] != '#' && l.find(name) != std::string::npos) ++n;
  return n;
}

// Every slow /api request line of the `slow` instance's trace passes its
// filter; returns how many there are, or -1 if one does not.
long check_slow(const std::vector<std::string>& lines) {
  long n = 0;
  for (const auto& l : lines) {
    const size_t at = l.find("request: id=");
    if (l.empty() || l[0] == '#' || at == std::string::npos) continue;
    unsigned long long id = 0;
    unsigned latency = 0;
    char route[32] = {};
    if (sscanf(l.c_str() + at, "request: id=%llu latency_us=%u route=%31s", &id, &latency, route) != 3 ||
        latency <= 1000 || strncmp(route, "/api/", 5) != 0)
      return -1;
    ++n;
  }
  return n;
}

}  // namespace

// Outside the anonymous namespace and exported (the demo links with
// -rdynamic), so that the stacktrace trigger's frames name it.
__attribute__((visibility("default"))) void serve_requests(int w, std::atomic<uint64_t>* errors) {
  char name[16];
  snprintf(name, sizeof name, "worker-%d", w);
  pthread_setname_np(pthread_self(), name);
  uint64_t x = static_cast<uint64_t>(w) + 1;
  for (uint64_t i = 0; i < kRequestsPerWorker; ++i) {
    const uint64_t id = static_cast<uint64_t>(w) * kRequestsPerWorker + i;
    for (int k = 0; k < 1000; ++k) x = x * 6364136223846793005u + 1442695040888963407u;  // "work"
    trace_demo_request(id, static_cast<uint32_t>(x >> 54), kRoutes[id % 4]);
    if (id % kFailEvery == kFailEvery - 1) {
      trace_demo_error(id, 500 + static_cast<int32_t>(x % 4), "upstream timed out");
      errors->fetch_add(1, std::memory_order_relaxed);
    }
  }
}

int main(int argc, char** argv) {
  // Where the errors and slow instances are recorded as a trace.dat.
  const std::string dat = argc > 1 ? argv[1] : "service_demo.dat";
  // The top buffer: everything, 64 KiB per CPU. The instance: errors only.
  write_file("buffer_size_kb", "64");
  check(usrtrace_tracefs_mkdir("instances/errors"), "mkdir instances/errors");
  write_file("set_event", "demo:*");
  write_file("instances/errors/set_event", "demo:error");
  // The `slow` instance keeps only slow /api requests (an event filter);
  // the top instance counts requests per route in a histogram (a hist
  // trigger); the first three errors also record the failing thread's
  // backtrace in the errors instance (a stacktrace trigger).
  check(usrtrace_tracefs_mkdir("instances/slow"), "mkdir instances/slow");
  write_file("instances/slow/events/demo/request/enable", "1");
  write_file("instances/slow/events/demo/request/filter", "latency_us > 1000 && route ~ \"/api/*\"");
  write_file("events/demo/request/trigger", "hist:keys=route:vals=latency_us:sort=latency_us.descending");
  write_file("instances/errors/events/demo/error/trigger", "stacktrace:3");

  // A fourth instance, `recorded`, has the errors and the slow /api
  // requests too, and is recorded to a trace.dat while the service runs
  // (what `trace-cmd record -B recorded` does for the kernel). Recording
  // consumes what it records, so it gets an instance of its own.
  check(usrtrace_tracefs_mkdir("instances/recorded"), "mkdir instances/recorded");
  write_file("instances/recorded/set_event", "demo:error");
  write_file("instances/recorded/events/demo/request/enable", "1");
  write_file("instances/recorded/events/demo/request/filter", "latency_us > 1000 && route ~ \"/api/*\"");
  usrtrace::RecordOptions rec_opts;
  rec_opts.output = dat;
  rec_opts.instances = {"recorded"};
  std::string rec_err;
  auto recorder = usrtrace::TraceRecorder::start(rec_opts, &rec_err);
  if (!recorder) {
    fprintf(stderr, "service_demo: recording %s: %s\n", dat.c_str(), rec_err.c_str());
    return 1;
  }

  std::atomic<uint64_t> errors{0};
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < kWorkers; ++w) threads.emplace_back(serve_requests, w, &errors);
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file("tracing_on", "0");
  write_file("instances/errors/tracing_on", "0");

  write_file("instances/slow/tracing_on", "0");
  if (recorder->stop(&rec_err) != 0) {
    fprintf(stderr, "service_demo: recording %s: %s\n", dat.c_str(), rec_err.c_str());
    return 1;
  }
  const std::string top = read_file("trace");
  const std::string kept = read_file("instances/errors/trace");
  const auto top_lines = lines_of(top);
  const auto kept_lines = lines_of(kept);
  const uint64_t n = errors.load();
  const size_t in_top = count_events(top_lines, "error: id=");
  const size_t in_instance = count_events(kept_lines, "error: id=");

  printf("=== cat trace (top buffer, demo:*, 64 KiB per CPU): header and last lines ===\n");
  for (size_t i = 0; i < top_lines.size(); ++i)
    if (top_lines[i].starts_with("#") || i + 8 >= top_lines.size()) printf("%s\n", top_lines[i].c_str());
  printf("\n=== cat instances/errors/trace (demo:error only): first and last lines ===\n");
  size_t shown = 0, skipped = 0;
  for (size_t i = 0; i < kept_lines.size(); ++i) {
    if (kept_lines[i].starts_with("#")) {
      printf("%s\n", kept_lines[i].c_str());
    } else if (shown++ < 5 || i + 3 >= kept_lines.size()) {
      if (skipped) printf("   ... %zu more ...\n", skipped);
      skipped = 0;
      printf("%s\n", kept_lines[i].c_str());
    } else {
      ++skipped;
    }
  }
  const uint64_t requests = kWorkers * kRequestsPerWorker;
  printf("\n%llu requests in %.2f s (%.0f demo:request events per second), %llu errors.\n",
         static_cast<unsigned long long>(requests), secs, static_cast<double>(requests) / secs,
         static_cast<unsigned long long>(n));
  printf("The top buffer kept %zu of the %llu errors: the hog overwrote the rest.\n", in_top,
         static_cast<unsigned long long>(n));
  printf("instances/errors kept %zu of %llu.\n", in_instance, static_cast<unsigned long long>(n));

  const auto slow_lines = lines_of(read_file("instances/slow/trace"));
  const long slow = check_slow(slow_lines);
  printf("\n=== cat instances/slow/events/demo/request/filter ===\n%s",
         read_file("instances/slow/events/demo/request/filter").c_str());
  printf("instances/slow kept %ld requests, every one slow and on /api.\n", slow);
  const std::string hist = read_file("events/demo/request/hist");
  printf("\n=== cat events/demo/request/hist ===\n%s", hist.c_str());
  const bool hist_ok = hist.find("Hits: " + std::to_string(requests) + "\n") != std::string::npos;

  // The trace.dat, read back: every error is in it.
  uint64_t errors_in_file = 0, slow_in_file = 0;
  if (auto f = usrtrace::TraceFile::open(dat, &rec_err)) {
    long error_id = -1;  // demo:error's id, from its format in the file
    for (const auto& fmt : f->formats())
      if (fmt.system == "demo" && fmt.text.starts_with("name: error\nID: "))
        error_id = atol(fmt.text.c_str() + 16);
    usrtrace::TraceFile::Cursor c(*f);
    usrtrace::TraceFile::Record r;
    while (c.next(&r)) {
      uint16_t type;
      memcpy(&type, r.data, 2);
      if (type == error_id)
        ++errors_in_file;
      else
        ++slow_in_file;
    }
  } else {
    fprintf(stderr, "service_demo: %s\n", rec_err.c_str());
  }
  printf("\n=== %s: instance `recorded`, recorded while the service ran ===\n", dat.c_str());
  printf(
      "%llu errors and %llu slow requests in the file. Read it with:\n  usrtrace report %s\n  trace-cmd "
      "report %s\n",
      static_cast<unsigned long long>(errors_in_file), static_cast<unsigned long long>(slow_in_file),
      dat.c_str(), dat.c_str());
  usrtrace_tracefs_rmdir("instances/slow");
  usrtrace_tracefs_rmdir("instances/recorded");
  usrtrace_tracefs_rmdir("instances/errors");
  // The file has every error and every slow request.
  const bool file_ok = errors_in_file == n && slow_in_file == static_cast<uint64_t>(slow);
  return in_instance == n && slow > 0 && hist_ok && file_ok ? 0 : 1;
}
