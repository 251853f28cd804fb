// per_cpu/cpuN/: one CPU's trace, trace_pipe, trace_pipe_raw, stats and
// buffer_size_kb. Their table, kPerCpuFiles, is at the end.
#include <fcntl.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "clock/trace_clock.h"
#include "output/trace_output.h"
#include "tracefs/internal.h"

namespace usrtrace::tracefs::detail {
namespace {

// The kernel's tracing_stats_read text.
std::string show_stats(Instance& inst, int cpu) {
  rb::RingBuffer& rb = inst.buffer();
  const rb::CpuStats s = rb.stats(cpu);
  const clock::ClockId id = rb.clock();
  std::string out;
  char buf[128];
  auto put = [&](const char* name, uint64_t v) {
    snprintf(buf, sizeof buf, "%s: %" PRIu64 "\n", name, v);
    out += buf;
  };
  auto put_ts = [&](const char* name, uint64_t raw) {
    const uint64_t v = clock::raw_to_ns(id, raw);
    if (clock::describe(id).in_ns) {
      const uint64_t usec = (v + 500) / 1000;  // ns2usecs rounds, as the trace text does
      snprintf(buf, sizeof buf, "%s: %5" PRIu64 ".%06" PRIu64 "\n", name, usec / 1000000, usec % 1000000);
    } else {
      snprintf(buf, sizeof buf, "%s: %" PRIu64 "\n", name, v);  // counter, x86-tsc: counts
    }
    out += buf;
  };
  put("entries", s.entries);
  put("overrun", s.overrun);
  put("commit overrun", s.commit_overrun);
  put("bytes", s.bytes);
  put_ts("oldest event ts", s.oldest_event_ts);
  put_ts("now ts", s.now_ts);
  put("dropped events", s.dropped_events);
  put("read events", s.read_events);
  return out;
}

// trace_pipe_raw: whole pages in the kernel's format, consumed. A read
// smaller than a page gets the rest of that page on the next read, as the
// kernel's tracing_buffers_read. Blocking reads wait for buffer_percent.
class PipeRaw : public File {
 public:
  PipeRaw(InstanceRef inst, rb::RingBuffer* rb, int cpu, bool nonblock, std::shared_ptr<void> keep)
      : inst_(std::move(inst)),
        rb_(rb),
        keep_(std::move(keep)),
        cpu_(cpu),
        nonblock_(nonblock),
        page_(rb->page_size(cpu)) {}
  long read(char* buf, size_t size) override {
    if (size == 0) return 0;
    rb::RingBuffer& rb = *rb_;
    while (off_ == len_) {
      if (rb.read_page(cpu_, page_.data(), page_.size(), false) > 0) {
        off_ = 0;
        len_ = page_.size();
        break;
      }
      if (nonblock_ || keep_) return -EAGAIN;  // a snapshot does not grow: never wait
      if (!rb.wait(cpu_, inst_->buffer_percent())) return -EINTR;
    }
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(buf, page_.data() + off_, n);
    off_ += n;
    return static_cast<long>(n);
  }
  long write(const char*, size_t) override { return -EINVAL; }

 private:
  InstanceRef inst_;
  rb::RingBuffer* rb_;
  std::shared_ptr<void> keep_;  // a snapshot reference, for snapshot_raw
  int cpu_;
  bool nonblock_;
  std::vector<uint8_t> page_;
  size_t off_ = 0, len_ = 0;
};

}  // namespace

std::unique_ptr<File> make_pipe_raw(InstanceRef inst, rb::RingBuffer* rb, int cpu, bool nonblock,
                                    std::shared_ptr<void> keep) {
  return std::make_unique<PipeRaw>(std::move(inst), rb, cpu, nonblock, std::move(keep));
}

namespace {

// The open functions; `ip` stays valid as long as the file, which holds the
// node's reference on it.

std::unique_ptr<File> open_buffer_size_kb(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const int cpu = n.cpu;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, cpu] { return show_buffer_size(*ip, cpu); };
  f->store = [ip, cpu](std::string_view s) { return write_buffer_size(*ip, cpu, s); };
  return f;
}

std::unique_ptr<File> open_stats(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const int cpu = n.cpu;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip, cpu] { return show_stats(*ip, cpu); };
  return f;
}

std::unique_ptr<File> open_trace(Node n, int flags, int*) {
  Instance* ip = n.inst.get();
  const int cpu = n.cpu;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  if ((flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC)) ip->buffer().reset(cpu);
  f->stream = [ip, cpu, t = std::shared_ptr<output::TraceText>()](std::string* out, size_t want) mutable {
    if (!t) t = output::TraceText::live(*ip, cpu);
    return t->fill(out, want);
  };
  f->store = [](std::string_view s) { return static_cast<long>(s.size()); };
  return f;
}

std::unique_ptr<File> open_trace_pipe(Node n, int flags, int*) {
  return make_trace_pipe(std::move(n.inst), n.cpu, (flags & O_NONBLOCK) != 0);
}

std::unique_ptr<File> open_trace_pipe_raw(Node n, int flags, int*) {
  rb::RingBuffer* rb = &n.inst->buffer();
  return make_pipe_raw(std::move(n.inst), rb, n.cpu, (flags & O_NONBLOCK) != 0, nullptr);
}

// per_cpu/cpuN/snapshot and snapshot_raw are in snapshot_files.cc.
constexpr FileSpec kFiles[] = {
    {"buffer_size_kb", kRW, Dir::kCpu, 0, open_buffer_size_kb},
    {"stats", kRO, Dir::kCpu, 0, open_stats},
    {"trace", kRW, Dir::kCpu, 0, open_trace},
    {"trace_pipe", kRO, Dir::kCpu, 0, open_trace_pipe},
    {"trace_pipe_raw", kRO, Dir::kCpu, 0, open_trace_pipe_raw},
};

}  // namespace

constinit const std::span<const FileSpec> kPerCpuFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
