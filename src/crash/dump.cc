// The buffer dump: the kernel's ftrace_dump_one() output,
//
//   Dumping ftrace buffer:
//   ---------------------------------
//       main-1234      0 .....    12us : demo_request: id=1 ...
//   ---------------------------------
//
// ("Dumping ftrace instance NAME buffer:" for a named instance, and
// "   (ftrace buffer empty)" instead of the lines when there is none), with
// the lines in the latency format the kernel's dump forces. Every byte goes
// through Storage::line, whose capacity is reserved, and write(2).
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "crash/internal.h"
#include "instance/instance.h"
#include "output/trace_output.h"
#include "ring_buffer/page_format.h"
#include "writers/writers.h"

namespace usrtrace::crash::detail {

std::atomic<Storage*> g_storage{nullptr};
std::atomic<int> g_owner{0};

Storage::Storage(int nr_cpus)
    : it(nr_cpus, rb::kMaxPageSize), held(new uint8_t[rb::kMaxPageSize]), altstack(new char[kAltStackSize]) {
  line.reserve(4 * output::kDumpLineMax);
}

int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

Text& Text::str(std::string_view s) {
  const size_t k = std::min(s.size(), sizeof buf_ - n_);
  std::memcpy(buf_ + n_, s.data(), k);
  n_ += k;
  return *this;
}

Text& Text::dec(uint64_t v) {
  char d[20];
  size_t k = 0;
  do {
    d[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  while (k > 0 && n_ < sizeof buf_) buf_[n_++] = d[--k];
  return *this;
}

Text& Text::hex(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char d[18] = {'0', 'x'};
  for (int i = 0; i < 16; ++i) d[2 + i] = kDigits[(v >> (60 - 4 * i)) & 0xf];
  return str(std::string_view(d, sizeof d));
}

namespace {

constexpr std::string_view kRule = "---------------------------------\n";

// Storage::line, written out whenever a line might not fit any more.
class Out {
 public:
  Out(int fd, std::string* buf) : fd_(fd), buf_(buf) { buf_->clear(); }
  // Room for one more line of at most kDumpLineMax bytes.
  std::string* room() {
    if (buf_->capacity() - buf_->size() < output::kDumpLineMax) flush();
    return buf_;
  }
  void put(std::string_view s) { room()->append(s); }
  void flush() {
    if (err_ == 0) err_ = write_all(fd_, buf_->data(), buf_->size());
    buf_->clear();
  }
  int err() const { return err_; }

 private:
  int fd_;
  std::string* buf_;
  int err_ = 0;
};

// Kernel: ftrace_dump_one().
void dump_one(Storage& st, Out& out, instance::Instance& inst, int cpu) {
  if (inst.is_top()) {
    out.put("Dumping ftrace buffer:\n");
  } else {
    out.put("Dumping ftrace instance ");
    out.put(inst.name());
    out.put(" buffer:\n");
  }
  st.it.start(inst.buffer(), cpu);
  rb::Event ev;
  if (!st.it.next(&ev)) {
    out.put("   (ftrace buffer empty)\n");
    return;
  }
  out.put(kRule);
  // Out now: if an event line faults (a printer reading a bad pointer), the
  // header says which dump was cut short.
  out.flush();
  // The latency format's delay mark needs the next event's time: hold the
  // current one (its bytes live in a page copy the next read replaces).
  rb::Event cur;
  auto hold = [&](const rb::Event& e) {
    cur = e;
    std::memcpy(st.held.get(), e.data, std::min<size_t>(e.len, rb::kMaxPageSize));
    cur.data = st.held.get();
  };
  hold(ev);
  for (;;) {
    const bool more = st.it.next(&ev);
    output::format_dump_event(inst, cur, more ? ev.ts : cur.ts, out.room());
    if (!more) break;
    hold(ev);
  }
  out.put(kRule);
}

}  // namespace

int dump_buffers(Storage& st, int fd, DumpMode mode, int orig_cpu, bool stop) {
  // A thread that writes events is on the writers' list: bracketing the
  // dump as a write makes an instance removal wait for it before freeing
  // the buffer (writers/writers.h). A thread that never wrote is not
  // registered, and registering here could allocate: it goes without.
  writers::ThreadState& self = writers::self();
  writers::ThreadState* bracket = self.state == writers::kRegistered ? writers::enter() : nullptr;
  const int slots = mode == DumpMode::kAll ? instance::kMaxInstances : 1;
  const int cpu = mode == DumpMode::kOrigCpu ? orig_cpu : -1;
  if (stop) {
    for (int s = 0; s < slots; ++s) {
      // order: acquire pairs with the release publish: the instance is built.
      if (auto* inst = instance::g_slot_state[s].instance.load(std::memory_order_acquire))
        inst->buffer().record_off();
    }
  }
  Out out(fd, &st.line);
  for (int s = 0; s < slots; ++s) {
    if (auto* inst = instance::g_slot_state[s].instance.load(std::memory_order_acquire))
      dump_one(st, out, *inst, cpu);
    else if (s == 0)  // nothing ever asked for the top instance
      out.put("Dumping ftrace buffer:\n   (ftrace buffer empty)\n");
  }
  out.flush();
  if (bracket) writers::exit(*bracket);
  return out.err();
}

}  // namespace usrtrace::crash::detail
