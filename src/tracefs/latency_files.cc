// The latency tracers' files (src/latency): tracing_max_latency, the
// worst latency seen and the bar to beat (the kernel's, under
// CONFIG_TRACER_MAX_TRACE), and timerlat_period_us, the timerlat thread's
// period. tracing_thresh, which the latency tracers also read, is the
// function tracers' (function_files.cc). Their table, kLatencyFiles, is at
// the end.
#include <cerrno>
#include <cstdint>

#include "latency/latency.h"
#include "tracefs/internal.h"

namespace usrtrace::tracefs::detail {
namespace {

// error_log subsystem of a bad number: ftrace's, as the function tracers'
// numeric files, which these were written beside.
constexpr std::string_view kSub = "ftrace";

// ---- The open functions; `ip` stays valid as long as the file, which holds
// the node's reference on it.

std::unique_ptr<File> open_tracing_max_latency(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::to_string(latency::max_latency_us(*ip)) + "\n"; };
  f->store = [ip](std::string_view s) -> long {
    uint64_t v = 0;
    const long rc = write_u64(*ip, kSub, s, UINT64_MAX / 1000, &v);
    if (rc >= 0) latency::set_max_latency_us(*ip, v);
    return rc;
  };
  return f;
}

std::unique_ptr<File> open_timerlat_period_us(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::to_string(latency::timerlat_period_us(*ip)) + "\n"; };
  f->store = [ip](std::string_view s) -> long {
    uint64_t v = 0;
    const long rc = write_u64(*ip, kSub, s, UINT64_MAX / 1000, &v);
    if (rc < 0) return rc;
    if (latency::set_timerlat_period_us(*ip, v) < 0)
      return fail(*ip, "timerlat", Err::kTimerlatPeriod, s, 0, EINVAL);
    return rc;
  };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"tracing_max_latency", kRW, Dir::kRoot, 0, open_tracing_max_latency},
    {"timerlat_period_us", kRW, Dir::kRoot, 0, open_timerlat_period_us},
};

}  // namespace

constinit const std::span<const FileSpec> kLatencyFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
