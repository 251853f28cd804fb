// hostile_peer: a process that serves usrtrace's control socket as no
// process running usrtrace's runtime would, for the tests of what a
// recorder does when the traced process lies (docs/security.md: what a
// traced process answers is hostile input). It is the process itself that
// serves the socket (the client checks SO_PEERCRED), so to the client it is
// a traced process like any other; its answers are what the mode says.
//
//   hostile_peer MODE
//     page48    its buffers have pages of 48 bytes (kPages; no shared
//               memory), a size no usrtrace buffer has
//     dribble   answers kHello, then sends every later answer one byte per
//               100 ms: a length that promises 1 MiB, then a byte now and
//               then, for ever
//     normal    a quiet process with one CPU and no events
//
// It prints "ready PID" once it serves. Under `usrtrace record -c` (the
// variable USRTRACE_FOLLOW names record's socket) it then announces itself
// as a process of the recorded tree does, and waits to be let go. It exits
// when its stdin closes (or it is killed).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "control/meta.h"
#include "control/paths.h"
#include "control/protocol.h"

namespace {

using usrtrace::control::Decoder;
using usrtrace::control::Encoder;
using usrtrace::control::Op;
using usrtrace::control::Request;

std::string g_mode;

bool read_all(int fd, void* buf, size_t n) {
  char* c = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t n) {
  const char* c = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A response message: length, status, flags, payload.
std::string response(int32_t status, const std::string& payload, uint32_t flags = 0) {
  std::string m;
  Encoder e(&m);
  e.u32(static_cast<uint32_t>(8 + payload.size()));
  e.i32(status);
  e.u32(flags);
  m += payload;
  return m;
}

std::string meta_of(const Request& r) {
  usrtrace::control::RemoteMeta m;
  m.meta.nr_cpus = 1;
  m.meta.trace_clock = "[local] global";
  m.meta.cmdlines = std::to_string(getpid()) + " hostile_peer\n";
  for (const std::string& name : r.names) {
    usrtrace::control::InstanceMeta im;
    im.name = name;
    im.clock = "local";
    im.page_size = 4096;
    im.nr_cpus = 1;
    im.capacity = 4096 * 16;
    im.stats = {""};
    m.instances.push_back(im);
  }
  std::string out;
  usrtrace::control::encode_meta(m, &out);
  return out;
}

// The answer to one request, as the mode says.
std::string answer(const Request& r) {
  std::string p;
  Encoder e(&p);
  switch (r.op) {
    case Op::kHello:
      e.u32(static_cast<uint32_t>(getpid()));
      e.str("hostile_peer");
      e.str("hostile");
      return response(0, p);
    case Op::kStat:
      e.u8(0);
      e.u32(0644);
      return response(0, p);
    case Op::kList:
      e.u32(0);
      return response(0, p);
    case Op::kOpen:
      e.u32(1);
      return response(0, p);
    case Op::kWrite:
      return response(static_cast<int32_t>(r.data.size()), p);
    case Op::kRead:
      return response(0, p);
    case Op::kShare:
      return response(-ENOTSUP, p);
    case Op::kPages:
      e.u32(g_mode == "page48" ? 48 : 4096);
      e.u32(1);
      return response(0, p);
    case Op::kMeta:
      return response(0, meta_of(r));
    default:
      return response(0, p);
  }
}

void serve(int c) {
  bool hello_done = false;
  for (;;) {
    uint32_t len = 0;
    if (!read_all(c, &len, 4) || len == 0 || len > usrtrace::control::kMaxRequest) break;
    std::string body(len, '\0');
    if (!read_all(c, body.data(), len)) break;
    Request r;
    if (usrtrace::control::decode_request(reinterpret_cast<const uint8_t*>(body.data()), len, &r) != 0) break;
    if (g_mode == "dribble" && hello_done) {
      // A frame that promises a megabyte, a byte at a time, for ever.
      std::string head;
      Encoder e(&head);
      e.u32(8 + (1u << 20));
      e.i32(0);
      e.u32(0);
      for (size_t i = 0;; ++i) {
        const char b = i < head.size() ? head[i] : 'x';
        if (!write_all(c, &b, 1)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      break;
    }
    hello_done = hello_done || r.op == Op::kHello;
    const std::string a = answer(r);
    if (!write_all(c, a.data(), a.size())) break;
  }
  ::close(c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: hostile_peer page48|dribble|normal\n");
    return 2;
  }
  g_mode = argv[1];
  std::string dir, err;
  if (usrtrace::control::socket_dir(true, &dir, &err) < 0) {
    fprintf(stderr, "hostile_peer: %s\n", err.c_str());
    return 1;
  }
  const std::string path = usrtrace::control::socket_path(dir, getpid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return 1;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ::unlink(path.c_str());
  if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(l, 16) != 0) {
    fprintf(stderr, "hostile_peer: %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  std::thread([l] {
    for (;;) {
      const int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR) continue;
        return;
      }
      std::thread(serve, c).detach();
    }
  }).detach();
  printf("ready %d\n", getpid());
  fflush(stdout);
  if (const char* follow = getenv("USRTRACE_FOLLOW"); follow && *follow) {
    // As the runtime announces a process of a followed tree: its pid, then
    // a byte back once record has set it up (or given up on it).
    const int f = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un fa{};
    fa.sun_family = AF_UNIX;
    std::snprintf(fa.sun_path, sizeof fa.sun_path, "%s", follow);
    const int32_t pid = getpid();
    char go = 0;
    if (f >= 0 && ::connect(f, reinterpret_cast<sockaddr*>(&fa), sizeof fa) == 0 && write_all(f, &pid, 4))
      (void)read_all(f, &go, 1);
    if (f >= 0) ::close(f);
    printf("announced\n");
    fflush(stdout);
  }
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  ::unlink(path.c_str());
  return 0;
}
