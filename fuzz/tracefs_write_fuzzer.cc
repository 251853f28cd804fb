// Drives random sequences of open/write/read/mkdir/rmdir/stat/list into the
// tree of control files, with events written in between. Bad input must
// never crash, hang or answer anything but bytes or -errno.
//
// Input: a stream of operations, each an op byte and its operands:
//   op % 8 == 0  write: instance byte, file byte, flags byte, length byte, data
//            1  read (non-blocking, at most two chunks)
//            2  mkdir instances/fzN (N from a byte) or a name from the input
//            3  rmdir
//            4  open a file and hold it (rmdir then answers EBUSY)
//            5  close a held file
//            6  write an event and a marker
//            7  a raw path from the input: stat, list, open and read
//            8  the buffer-file store's lifecycle: buffer_file of an
//               instance set to one of four files of the fuzzer's own
//               directory (new, in use by another instance, holding a dead
//               store's data, or the instance's current one) or back to
//               memory (""), or a file renamed or unlinked under a live
//               store; buffer_size_kb, snapshot and rmdir (ops 0 and 3)
//               resize and release it
// Every input starts from the same state (instances removed, top reset,
// the buffer files gone).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "instance/instance.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(tfsfuzz, evt, (int32_t, n), "n=%d", REC->n)

namespace {

using usrtrace::instance::Instance;
namespace tracefs = usrtrace::tracefs;

const char* const kFiles[] = {
    "trace",
    "trace_pipe",
    "tracing_on",
    "buffer_size_kb",
    "buffer_total_size_kb",
    "buffer_percent",
    "free_buffer",
    "trace_clock",
    "trace_marker",
    "trace_marker_raw",
    "trace_options",
    "options/raw",
    "options/overwrite",
    "options/markers",
    "options/disable_on_free",
    "current_tracer",
    "available_tracers",
    "available_events",
    "set_event",
    "set_event_pid",
    "set_event_notrace_pid",
    "events/enable",
    "events/tfsfuzz/enable",
    "events/tfsfuzz/evt/enable",
    "events/tfsfuzz/evt/format",
    "events/tfsfuzz/evt/id",
    "events/tfsfuzz/evt/filter",
    "events/tfsfuzz/evt/trigger",
    "events/header_page",
    "events/header_event",
    "events/ftrace/print/format",
    "per_cpu/cpu0/trace",
    "per_cpu/cpu0/trace_pipe",
    "per_cpu/cpu0/trace_pipe_raw",
    "per_cpu/cpu0/stats",
    "per_cpu/cpu0/buffer_size_kb",
    "saved_cmdlines",
    "saved_tgids",
    "tracing_cpumask",
    "error_log",
    "README",
    "instances",
    "events",
    "per_cpu",
    "options",
    // Not ftrace_dump_on_oops_file: it would create files named by the input.
    "ftrace_dump_on_oops",
    "events/tfsfuzz/filter",
    "events/tfsfuzz/evt/hist",
    // The function tracers' (src/function/control.cc parses the lists).
    "set_ftrace_filter",
    "set_ftrace_notrace",
    "set_graph_function",
    "set_graph_notrace",
    "set_ftrace_pid",
    "set_ftrace_notrace_pid",
    "max_graph_depth",
    "tracing_thresh",
    "function_profile_enabled",
    "trace_stat/function0",
    "enabled_functions",
    "available_filter_functions",
    "trace_stat",
    // The latency tracers' (src/latency/control.cc).
    "tracing_max_latency",
    "timerlat_period_us",
    "options/function-trace",
    "snapshot",
};
constexpr size_t kNumFiles = sizeof(kFiles) / sizeof(kFiles[0]);

struct In {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  std::string take(size_t len) {
    len = len < n ? len : n;
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
};

void check(long rc) {
  if (rc < -4095) abort();  // not bytes, not -errno
}

std::string prefix(uint8_t b) {
  switch (b % 3) {
    case 0:
      return "";
    case 1:
      return "instances/fz0/";
    default:
      return "instances/fz1/";
  }
}

// Large buffers would only make the run slow: sizes above 1 MiB are skipped.
bool too_big(const std::string& path, const std::string& data) {
  if (path.size() < 14 || path.compare(path.size() - 14, 14, "buffer_size_kb") != 0) return false;
  uint64_t v = 0;
  for (char c : data) {
    if (c < '0' || c > '9') break;
    v = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > 1024) return true;
  }
  return false;
}

// The buffer files' directory, the fuzzer's own.
const std::string& file_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/usrtrace-tfsfuzz-XXXXXX";
    return std::string(mkdtemp(tmpl) ? tmpl : "/tmp");
  }();
  return dir;
}

std::string buffer_path(uint8_t b) { return file_dir() + "/f" + std::to_string(b % 4) + ".buf"; }

void remove_buffer_files() {
  for (int i = 0; i < 4; ++i) {
    ::unlink(buffer_path(static_cast<uint8_t>(i)).c_str());
    ::unlink((buffer_path(static_cast<uint8_t>(i)) + ".moved").c_str());
  }
}

void reset() {
  for (const std::string& name : Instance::names()) tracefs::rmdir("instances/" + name);
  tracefs::write_file("buffer_file", "");
  remove_buffer_files();
  Instance* top = Instance::top();
  tracefs::write_file("set_event", "");
  tracefs::write_file("set_event_pid", "");
  tracefs::write_file("set_event_notrace_pid", "");
  tracefs::write_file("ftrace_dump_on_oops", "0");  // the fuzzer's own handlers back
  tracefs::write_file("current_tracer", "nop");     // a latency tracer's thread stops
  tracefs::write_file("tracing_thresh", "0");
  top->set_tracing_on(true);
  top->set_cpumask({});
  for (const int i : usrtrace::instance::listed_options())
    top->set_option(static_cast<usrtrace::instance::Option>(i),
                    usrtrace::instance::option_info(i).default_on);
  if (top->buffer().clock() != usrtrace::clock::ClockId::kLocal)
    top->buffer().set_clock(usrtrace::clock::ClockId::kLocal);
  top->buffer().resize(-1, 64 * 1024);
  top->buffer().reset();
  top->clear_error_log();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool ok = Instance::top() != nullptr;
  if (!ok) return 0;
  reset();
  std::vector<std::unique_ptr<tracefs::File>> held;
  In in{data, size};
  char buf[4096];
  for (int ops = 0; in.n && ops < 64; ++ops) {
    const uint8_t op = in.byte();
    switch (op % 9) {
      case 0: {
        const std::string path = prefix(in.byte()) + kFiles[in.byte() % kNumFiles];
        const uint8_t fl = in.byte();
        const std::string d = in.take(in.byte() % 96);
        if (too_big(path, d)) break;
        std::unique_ptr<tracefs::File> f;
        const int flags = O_WRONLY | (fl & 1 ? O_TRUNC : 0) | (fl & 2 ? O_APPEND : 0);
        if (tracefs::open(path, flags, &f) == 0) check(f->write(d.data(), d.size()));
        break;
      }
      case 1: {
        std::unique_ptr<tracefs::File> f;
        const std::string path = prefix(in.byte()) + kFiles[in.byte() % kNumFiles];
        if (tracefs::open(path, O_RDONLY | O_NONBLOCK, &f) == 0)
          for (int i = 0; i < 2; ++i) check(f->read(buf, sizeof buf));
        break;
      }
      case 2: {
        const uint8_t b = in.byte();
        const std::string name = b & 0x80 ? in.take(b & 0x3f) : "fz" + std::to_string(b % 2);
        const int rc = tracefs::mkdir("instances/" + name);
        check(rc);
        if (rc == 0) tracefs::write_file("instances/" + name + "/buffer_size_kb", "64");
        break;
      }
      case 3: {
        const uint8_t b = in.byte();
        const std::string name = b & 0x80 ? in.take(b & 0x3f) : "fz" + std::to_string(b % 2);
        check(tracefs::rmdir("instances/" + name));
        break;
      }
      case 4: {
        std::unique_ptr<tracefs::File> f;
        const std::string path = prefix(in.byte()) + kFiles[in.byte() % kNumFiles];
        if (held.size() < 4 && tracefs::open(path, O_RDONLY | O_NONBLOCK, &f) == 0)
          held.push_back(std::move(f));
        break;
      }
      case 5:
        if (!held.empty()) held.erase(held.begin() + in.byte() % held.size());
        break;
      case 6:
        trace_tfsfuzz_evt(in.byte());
        check(tracefs::write_file(prefix(in.byte()) + "trace_marker", in.take(in.byte() % 32)));
        break;
      case 7: {
        const std::string path = in.take(in.byte() % 80);
        tracefs::Stat st;
        check(tracefs::stat(path, &st));
        std::vector<std::string> names;
        check(tracefs::list(path, &names));
        std::unique_ptr<tracefs::File> f;
        if (tracefs::open(path, O_RDONLY | O_NONBLOCK, &f) == 0) check(f->read(buf, sizeof buf));
        break;
      }
      case 8: {
        const uint8_t b = in.byte(), which = in.byte();
        const std::string path = buffer_path(which);
        switch (b % 4) {
          case 0:
          case 1:
            check(tracefs::write_file(prefix(in.byte()) + "buffer_file", path + "\n"));
            break;
          case 2:
            check(tracefs::write_file(prefix(in.byte()) + "buffer_file", "\n"));
            break;
          default:
            // Under a live store: its mapping stays; the name is free again.
            if (which & 0x80)
              ::unlink(path.c_str());
            else
              ::rename(path.c_str(), (path + ".moved").c_str());
        }
        break;
      }
    }
  }
  return 0;
}
