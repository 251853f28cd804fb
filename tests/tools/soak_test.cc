// The soak (issue 19): soak_target writes from four threads and a 1 ms
// SIGALRM handler without pause while this client flips the control files
// at random, through the control socket as `usrtrace` does: tracing_on,
// buffer sizes, snapshots, instances made and removed, options, buffer
// files, partial reads of trace and trace_pipe, extracts, and recordings
// started and stopped. For USRTRACE_SOAK_SECONDS (default 20; CI's run is
// bounded so) with a seed printed (USRTRACE_SOAK_SEED replays one).
//
// What must hold throughout: the process answers every request (no
// -EPIPE, no -ETIMEDOUT: it neither died nor hung); every extracted or
// recorded file reads whole; in every such file, each writer thread's
// soak:seq numbers only go up (what the buffers lost is a gap, never a
// reordering or a repeat); and in the end the program exits 0 by itself.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "usrtrace/control.h"
#include "usrtrace/tracedat.h"

namespace usrtrace {
namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

// The id of SYSTEM:NAME in a file's formats, or -1.
int event_id(const TraceFile& f, const std::string& system, const std::string& name) {
  for (const auto& fmt : f.formats()) {
    if (fmt.system != system || fmt.text.rfind("name: " + name + "\n", 0) != 0) continue;
    const size_t at = fmt.text.find("\nID: ");
    if (at != std::string::npos) return atoi(fmt.text.c_str() + at + 5);
  }
  return -1;
}

struct FileCheck {
  bool ok = false;
  std::string why;
  uint64_t seqs = 0;
};

// Reads the whole file; each thread's soak:seq only goes up, per buffer.
FileCheck check_file(const std::string& path) {
  FileCheck c;
  auto f = TraceFile::open(path, &c.why);
  if (!f) return c;
  const int id = event_id(*f, "soak", "seq");
  std::map<std::pair<int, uint32_t>, uint64_t> last;  // (buffer, thread) -> seq
  TraceFile::Cursor cur(*f);
  TraceFile::Record r;
  while (cur.next(&r)) {
    if (r.len < 24) continue;
    uint16_t type;
    std::memcpy(&type, r.data, 2);
    if (id < 0 || type != id) continue;
    uint32_t thread;
    uint64_t seq;
    std::memcpy(&thread, r.data + 8, 4);
    std::memcpy(&seq, r.data + 16, 8);
    auto [it, fresh] = last.emplace(std::make_pair(r.buffer, thread), seq);
    if (!fresh) {
      if (seq <= it->second) {
        c.why = path + ": buffer " + std::to_string(r.buffer) + " thread " + std::to_string(thread) +
                ": seq " + std::to_string(seq) + " after " + std::to_string(it->second);
        return c;
      }
      it->second = seq;
    }
    ++c.seqs;
  }
  c.ok = true;
  return c;
}

TEST(Soak, EverythingAtOnceForAWhile) {
  const int seconds = env_int("USRTRACE_SOAK_SECONDS", 20);
  const unsigned seed = static_cast<unsigned>(env_int("USRTRACE_SOAK_SEED", static_cast<int>(time(nullptr))));
  RecordProperty("seed", static_cast<int>(seed));
  fprintf(stderr, "soak: %d s, seed %u (USRTRACE_SOAK_SEED=%u replays it)\n", seconds, seed, seed);
  char tmpl[] = "/tmp/usrtrace-soak-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;

  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
    execl(SOAK_TARGET, "soak_target", nullptr);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  std::string said;
  char ch;
  while (read(out[0], &ch, 1) == 1 && ch != '\n') said += ch;
  close(out[0]);
  ASSERT_EQ(said, "ready " + std::to_string(pid));

  std::string err;
  auto c = control::Client::connect(pid, &err);
  ASSERT_TRUE(c) << err;
  // Every answer: a result, or an error the request may meet; never the
  // transport's (the process died or hung).
  int transport_errors = 0;
  auto ok = [&](long rc, const char* what) {
    if (rc == -EPIPE || rc == -ETIMEDOUT || rc == -ECONNRESET) {
      ++transport_errors;
      ADD_FAILURE() << what << ": " << strerror(static_cast<int>(-rc));
    }
  };
  ok(c->write_file("events/soak/enable", "1"), "enable");

  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const char* sizes[] = {"64", "256", "1024", "2048"};
  const char* options[] = {"overwrite", "nooverwrite", "latency-format", "nolatency-format", "record-tgid"};
  std::vector<std::string> instances;  // made and not removed yet
  std::string buffer_file;             // of the top instance, "" for memory
  std::unique_ptr<TraceRecorder> recorder;
  std::string recorded;
  int files = 0, ops = 0, file_no = 0;
  uint64_t seqs = 0;
  auto verify = [&](const std::string& path) {
    const FileCheck fc = check_file(path);
    EXPECT_TRUE(fc.ok) << fc.why;
    seqs += fc.seqs;
    ++files;
    unlink(path.c_str());
  };
  auto where = [&] {
    return instances.empty() || pick(2)
               ? std::string()
               : "instances/" + instances[static_cast<size_t>(pick(static_cast<int>(instances.size())))] +
                     "/";
  };
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::map<int, std::pair<int, double>> op_time;  // op -> (count, seconds), said at the end
  while (Clock::now() < end && transport_errors == 0) {
    ++ops;
    const int op = pick(14);
    const auto t0 = Clock::now();
    struct Timed {
      std::pair<int, double>& slot;
      Clock::time_point t0;
      ~Timed() {
        ++slot.first;
        slot.second += std::chrono::duration<double>(Clock::now() - t0).count();
      }
    } timed{op_time[op], t0};
    switch (op) {
      case 0:
        ok(c->write_file(where() + "tracing_on", pick(4) ? "1" : "0"), "tracing_on");
        break;
      case 1:
        ok(c->write_file(where() + "buffer_size_kb", sizes[pick(4)]), "buffer_size_kb");
        break;
      case 2:
        ok(c->write_file(where() + "snapshot", "1"), "snapshot");
        break;
      case 3:
        ok(c->write_file(where() + "snapshot", pick(2) ? "0" : "2"), "snapshot free/clear");
        break;
      case 4:
        if (instances.size() < 3) {
          const std::string name = "soak" + std::to_string(ops);
          const int rc = c->mkdir("instances/" + name);
          ok(rc, "mkdir");
          if (rc == 0) {
            instances.push_back(name);
            ok(c->write_file("instances/" + name + "/events/soak/enable", "1"), "enable in instance");
          }
        } else {
          const size_t i = static_cast<size_t>(pick(static_cast<int>(instances.size())));
          const int rc = c->rmdir("instances/" + instances[i]);
          ok(rc, "rmdir");
          if (rc == 0) instances.erase(instances.begin() + static_cast<long>(i));
        }
        break;
      case 5:
        ok(c->write_file(where() + "trace_options", options[pick(5)]), "trace_options");
        break;
      case 6:
      case 7: {
        const bool pipe_file = pick(2);
        const int h =
            c->open(where() + (pipe_file ? "trace_pipe" : "trace"), O_RDONLY | (pipe_file ? O_NONBLOCK : 0));
        ok(h, "open");
        if (h >= 0) {
          std::vector<char> buf(1 << 16);
          for (int k = 0; k < 1 + pick(3); ++k) ok(c->read(h, buf.data(), buf.size()), "read");
          ok(c->close(h), "close");
        }
        break;
      }
      case 8: {
        // The top instance into a new file, or back to memory; a file left
        // goes (it is not recovered here).
        const std::string old = buffer_file;
        const std::string next = pick(2) ? dir + "/buf" + std::to_string(++file_no) : "";
        const long rc = c->write_file("buffer_file", next + "\n");
        ok(rc, "buffer_file");
        if (rc >= 0) {
          buffer_file = next;
          if (!old.empty()) unlink(old.c_str());
        }
        break;
      }
      case 9: {
        RecordOptions ro;
        ro.pid = pid;
        ro.output = dir + "/extract" + std::to_string(++file_no) + ".dat";
        if (!instances.empty() && pick(2)) ro.instances = {"", instances[0]};
        const int rc = extract_trace(ro, &err);
        ok(rc, "extract");
        // An instance removed meanwhile is a fair refusal; a written file
        // must read.
        if (rc == 0) verify(ro.output);
        break;
      }
      case 10:
        ok(c->write_file(where() + "trace", ""), "clear");
        break;
      case 11:
        ok(c->write_file("events/soak/" + std::string(pick(2) ? "seq" : "sig") + "/enable",
                         pick(3) ? "1" : "0"),
           "event enable");
        break;
      case 12:
        if (!recorder) {
          RecordOptions ro;
          ro.pid = pid;
          ro.output = recorded = dir + "/record" + std::to_string(++file_no) + ".dat";
          recorder = TraceRecorder::start(ro, &err);
          EXPECT_TRUE(recorder) << err;
        } else {
          const int rc = recorder->stop(&err);
          EXPECT_EQ(rc, 0) << err;
          recorder.reset();
          if (rc == 0) verify(recorded);
        }
        break;
      default: {
        bool is_dir = false;
        ok(c->stat(where() + "stats", &is_dir, nullptr), "stat");
      }
    }
  }
  if (recorder) {
    EXPECT_EQ(recorder->stop(&err), 0) << err;
    recorder.reset();
    verify(recorded);
  }
  // The walk may have left no soak:seq in any file it took (tracing off,
  // the event disabled, a clear just before each extract: a slow build makes
  // few operations). With tracing and the event on again, an extract of the
  // top instance must hold some and in order: the target writes them all the
  // time, so the first extract normally has them; more are taken only while
  // it has not written since the enable.
  ok(c->write_file("tracing_on", "1"), "tracing_on at the end");
  ok(c->write_file("events/soak/seq/enable", "1"), "enable at the end");
  uint64_t last_seqs = 0;
  for (int tries = 0; tries < 20 && last_seqs == 0 && transport_errors == 0; ++tries) {
    RecordOptions ro;
    ro.pid = pid;
    ro.output = dir + "/last" + std::to_string(tries) + ".dat";
    const int rc = extract_trace(ro, &err);
    ok(rc, "extract at the end");
    ASSERT_EQ(rc, 0) << err;
    const uint64_t before = seqs;
    verify(ro.output);
    last_seqs = seqs - before;
  }
  EXPECT_GT(last_seqs, 0u);
  for (const auto& name : instances) ok(c->rmdir("instances/" + name), "rmdir at the end");
  c.reset();
  RecordProperty("operations", ops);
  RecordProperty("files_verified", files);
  fprintf(stderr, "soak: %d operations, %d files read and checked, %llu soak:seq records in order\n", ops,
          files, static_cast<unsigned long long>(seqs));
  for (const auto& [op, t] : op_time)
    fprintf(stderr, "soak: op %d: %d times, %.3f s\n", op, t.first, t.second);
  EXPECT_GT(files, 0);

  // Its input closes: it stops by itself and exits 0.
  close(in[1]);
  int status = 0;
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  pid_t w = 0;
  while ((w = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < give_up) usleep(20000);
  if (w == 0) {
    ADD_FAILURE() << "soak_target did not exit within 60 s of its input's end";
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  (void)!system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace usrtrace
