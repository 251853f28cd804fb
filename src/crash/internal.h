// Private to src/crash: the dump's storage and its writer, shared by the
// handler (crash.cc) and the buffer dump (dump.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "crash/crash.h"
#include "ring_buffer/ring_buffer.h"

namespace usrtrace::crash::detail {

// Everything a dump needs, allocated by prepare() and never freed.
struct Storage {
  explicit Storage(int nr_cpus);
  rb::RingBuffer::DumpIterator it;
  std::string line;                 // capacity reserved: appends never allocate
  std::unique_ptr<uint8_t[]> held;  // the event the latency format holds back
  std::unique_ptr<char[]> altstack;
};
inline constexpr size_t kAltStackSize = 256 * 1024;  // ASan frames are large

// order: release in prepare(), acquire in dumps: the storage is built.
extern std::atomic<Storage*> g_storage;
// The thread using the storage (a dump), 0 when free; taken with a CAS.
extern std::atomic<int> g_owner;

// Writes all of [p, p+n) to fd (retrying short writes and EINTR). Returns 0
// or -errno. Context: async-signal-safe.
int write_all(int fd, const char* p, size_t n);

// Text into a fixed buffer, for the oops header. Context: async-signal-safe.
class Text {
 public:
  Text& str(std::string_view s);
  Text& dec(uint64_t v);
  Text& hex(uint64_t v);  // "0x" and 16 digits, as the kernel prints addresses
  int write(int fd) const { return write_all(fd, buf_, n_); }

 private:
  char buf_[512];
  size_t n_ = 0;
};

// The buffers as ftrace_dump() prints them, for `mode` (kOff: kTop);
// `orig_cpu` is kOrigCpu's CPU. With `stop`, recording into the dumped
// buffers is turned off first (the kernel's tracing_off()). The caller owns
// the storage (g_owner). Returns 0 or -errno from write(2).
// Context: async-signal-safe; no lock, no allocation.
int dump_buffers(Storage& st, int fd, DumpMode mode, int orig_cpu, bool stop);

}  // namespace usrtrace::crash::detail
