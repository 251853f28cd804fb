// libFuzzer: the control socket from the client's side (src/control/
// client.cc), fed what a hostile traced process answers. The input is the
// whole byte stream the "server" sends, written in advance into one end of
// a socket pair (then shut): the client's calls (kPages, kMeta, kShare, a
// plain call) read their answers from it in turn. Each must give an
// answer that checks out or an error (-EPROTO, -EPIPE, -ETIMEDOUT); never
// a crash, an allocation beyond what arrived (a length prefix alone costs
// nothing), or a wait past the exchange's deadline.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "control/connection.h"
#include "ring_buffer/page_format.h"

using namespace usrtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  // The answers: as much as the socket takes at once (the rest would need a
  // reader on the other side; inputs stay small).
  size_t off = 0;
  while (off < size) {
    const ssize_t n = send(sv[1], data + off, size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(sv[1], SHUT_WR);
  auto c = control::Connection::adopt(sv[0], getpid());
  c->set_answer_ms(50);  // nothing more comes: a wait is the deadline's test
  control::Connection::Pages p;
  const int pr = c->pages("", 1 << 20, 0, false, &p);
  if (pr >= 0) {
    // What it took must be pages of this build's size, CPUs in range.
    if (p.page_size < rb::kMinPageSize || p.page_size > rb::kMaxPageSize || (p.page_size & (p.page_size - 1)))
      abort();
    if (p.data.size() != p.cpus.size() * p.page_size) abort();
    for (int cpu : p.cpus)
      if (cpu < 0 || cpu >= p.nr_cpus) abort();
  }
  control::RemoteMeta m;
  (void)c->meta({"", "x"}, &m);
  int fd = -1;
  (void)c->share("", &fd);
  control::Request r;
  r.op = control::Op::kStat;
  std::string payload;
  (void)c->call(r, &payload);
  close(sv[1]);
  return 0;
}
