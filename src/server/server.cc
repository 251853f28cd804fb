// The control server's thread (server.h): the poll() loop over the
// listening socket and the connections, the transport (non-blocking
// receive and send, parked requests, idle connections) and the dispatch of
// requests to the tracefs tree. The rest of the server has its own files:
//
//   recorder_service.{h,cc}  kPages, kMeta, kRecord, the kMetaChanged flag
//   exit_handshake.{h,cc}    the exit waiting for recorders, deferred signals
//   lifecycle.cc             start, stop, autostart, the C API
//   server_impl.h            the Server object this file and lifecycle.cc share
#include "server/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/sys.h"
#include "control/protocol.h"
#include "server/recorder_service.h"
#include "server/server_impl.h"
#include "tracefs/tracefs.h"

namespace usrtrace::control {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::chrono::milliseconds idle_time() {
  const char* e = base::env("USRTRACE_CONTROL_IDLE_MS");
  if (!e || !*e) return std::chrono::milliseconds(kIdleMs);
  char* end = nullptr;
  const long v = strtol(e, &end, 10);
  if (*end || v < 0 || v > 24L * 3600 * 1000) return std::chrono::milliseconds(kIdleMs);
  return std::chrono::milliseconds(v);
}

// One client connection. The server thread only.
struct Conn {
  int fd = -1;
  std::string in;
  std::string out;
  size_t out_off = 0;
  bool close_after = false;  // once `out` is sent
  bool dead = false;
  bool parked = false;
  Request req;  // the parked one
  Clock::time_point deadline;
  std::map<uint32_t, std::unique_ptr<tracefs::File>> files;
  uint32_t next_handle = 1;
  // The idle clock: the connection's accept, or the last byte that came
  // or went. Not counted while a request is parked: the client waits for
  // us then.
  Clock::time_point last_active;
  RecorderSession rec;  // what it holds of the recorder service

  // Only a connection that holds nothing is closed for being quiet: one
  // with a file open (a shell's `exec 3>trace_marker` in the FUSE mount,
  // written to now and then), a page reader or a recording is the
  // client's state, which a close would break (ENODEV on its next use).
  bool holds_state() const { return !files.empty() || rec.holds_state(); }

  ~Conn() {
    files.clear();
    rec.release_readers();  // before the close: a client that saw it may rmdir
    if (fd >= 0) ::close(fd);
  }
};

namespace {

inline bool may_idle_out(const Conn& c) { return !c.parked && !c.holds_state(); }

// Whether process() can act on c now: it holds a whole request (or a
// length over the bound) and nothing is in the way of answering it.
bool ready(const Conn& c) {
  if (c.dead || c.parked || c.close_after || !c.out.empty() || c.in.size() < 4) return false;
  const uint32_t len = Decoder(reinterpret_cast<const uint8_t*>(c.in.data()), 4).u32();
  return len > kMaxRequest || c.in.size() >= 4 + static_cast<size_t>(len);
}

}  // namespace

Server::Server() = default;
Server::~Server() = default;

uint32_t Server::flags(const Conn& c) const {
  const uint32_t meta = meta_flags(c.rec);
  return (exit.exiting() ? kExiting : 0) | meta;
}

void Server::respond(Conn& c, int32_t status, std::string_view payload) {
  const size_t at = c.out.size();
  c.out.append(4, '\0');
  Encoder e(&c.out);
  e.i32(status);
  e.u32(flags(c));
  e.raw(payload);
  finish_message(&c.out, at);
}

void Server::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c.dead = true;
      return;
    }
    c.out_off += static_cast<size_t>(n);
    c.last_active = Clock::now();
  }
  c.out.clear();
  c.out_off = 0;
  if (c.close_after) c.dead = true;
}

void Server::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a peer gone before we took it
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->last_active = Clock::now();
    struct ucred cred {};
    socklen_t len = sizeof cred;
    int refuse = 0;
    // Only the same user, or root, may drive this process; a peer whose
    // credentials cannot be read is neither.
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != geteuid() && cred.uid != 0))
      refuse = EACCES;
    else if (conns_.size() >= static_cast<size_t>(kMaxClients))
      refuse = EUSERS;
    if (refuse) {
      // One small frame, best effort: the client says why it was refused;
      // at the limit, with the limit and how soon idle ones go (protocol.h).
      std::string why;
      if (refuse == EUSERS) {
        Encoder e(&why);
        e.u32(static_cast<uint32_t>(kMaxClients));
        e.u32(static_cast<uint32_t>(idle.count()));
      }
      respond(*c, -refuse, why);
      c->close_after = true;
      flush(*c);
      continue;  // ~Conn closes
    }
    conns_.push_back(std::move(c));
  }
}

void Server::receive(Conn& c) {
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c.dead = true;
      return;
    }
    c.in.append(buf, static_cast<size_t>(n));
    c.last_active = Clock::now();
    // Requests are taken one at a time, so `in` holds at most one request
    // and what a pipelining client sent after it; stop reading there.
    if (c.in.size() > 4 + kMaxRequest) return;
  }
}

void Server::process(Conn& c) {
  while (!c.dead && !c.parked && !c.close_after && c.out.empty() && c.in.size() >= 4) {
    Decoder h(reinterpret_cast<const uint8_t*>(c.in.data()), 4);
    const uint32_t len = h.u32();
    if (len > kMaxRequest) {
      respond(c, -EMSGSIZE);
      c.close_after = true;
      return;
    }
    if (c.in.size() < 4 + static_cast<size_t>(len)) return;
    Request r;
    const int rc = decode_request(reinterpret_cast<const uint8_t*>(c.in.data()) + 4, len, &r);
    c.in.erase(0, 4 + static_cast<size_t>(len));
    if (rc < 0) {
      respond(c, rc);
      c.close_after = true;  // the stream cannot be trusted past a bad message
      return;
    }
    handle(c, r, true);
  }
}

// Closes a connection that has sent nothing (or read nothing of its
// answer) for `idle`. Its client may be sending a request at this very
// moment: after shutdown(SHUT_RD) its send fails (EPIPE), so it knows the
// request never got here (Connection::request_unsent(): Client sends it
// again on a new connection), and a whole one that got here first is
// still answered before the close.
void Server::close_idle(Conn& c) {
  if (!c.out.empty()) {  // it does not read what it asked for
    c.dead = true;
    return;
  }
  ::shutdown(c.fd, SHUT_RD);
  char buf[64 * 1024];
  while (c.in.size() <= 4 + kMaxRequest) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // all there was (0 after SHUT_RD), or a broken connection
    c.in.append(buf, static_cast<size_t>(n));
  }
  process(c);
  if (c.parked || !c.out.empty()) {
    c.close_after = true;  // once that answer is out
    c.last_active = Clock::now();
    if (!c.out.empty()) flush(c);
  } else {
    c.dead = true;  // nothing came, or half a request whose rest cannot
  }
}

void Server::park(Conn& c, Request& r) {
  c.parked = true;
  c.deadline = Clock::now() + std::chrono::milliseconds(r.wait_ms);
  c.req = std::move(r);
}

bool Server::read(Conn& c, Request& r, bool may_park) {
  auto it = c.files.find(r.handle);
  if (it == c.files.end()) {
    respond(c, -EBADF);
    return true;
  }
  std::string buf(r.size, '\0');
  const long n = r.size ? it->second->read(buf.data(), buf.size()) : 0;
  if (n == -EAGAIN && may_park && r.wait_ms > 0 && !exit.exiting()) {
    park(c, r);
    return false;
  }
  if (n < 0) {
    respond(c, static_cast<int32_t>(n));
    return true;
  }
  respond(c, static_cast<int32_t>(n), std::string_view(buf.data(), static_cast<size_t>(n)));
  return true;
}

bool Server::pages(Conn& c, Request& r, bool may_park) {
  Reply reply;
  if (!take_pages(c.rec, r, may_park, exit, &reply)) {
    park(c, r);
    return false;
  }
  respond(c, reply.status, reply.payload);
  return true;
}

bool Server::handle(Conn& c, Request& r, bool may_park) {
  switch (r.op) {
    case Op::kHello: {
      std::string payload;
      Encoder e(&payload);
      e.u32(static_cast<uint32_t>(pid));
      std::string comm = base::read_pseudo_file("/proc/self/comm");
      while (!comm.empty() && comm.back() == '\n') comm.pop_back();
      e.str(comm);
      e.str(USRTRACE_VERSION_STRING);
      respond(c, static_cast<int32_t>(kProtocolVersion), payload);
      return true;
    }
    case Op::kStat: {
      tracefs::Stat st;
      const int rc = tracefs::stat(r.path, &st);
      std::string payload;
      Encoder e(&payload);
      e.u8(st.is_dir ? 1 : 0);
      e.u32(static_cast<uint32_t>(st.mode));
      respond(c, rc, rc < 0 ? std::string_view() : payload);
      return true;
    }
    case Op::kList: {
      std::vector<std::string> names;
      const int rc = tracefs::list(r.path, &names);
      std::string payload;
      Encoder e(&payload);
      e.u32(static_cast<uint32_t>(names.size()));
      for (const auto& n : names) e.str(n);
      respond(c, rc, rc < 0 ? std::string_view() : payload);
      return true;
    }
    case Op::kOpen: {
      if (c.files.size() >= static_cast<size_t>(kMaxFilesPerClient)) {
        respond(c, -EMFILE);
        return true;
      }
      // The server never blocks in a file: waiting is kRead's wait_ms.
      const int flags = static_cast<int>(r.flags & (O_ACCMODE | O_TRUNC | O_APPEND)) | O_NONBLOCK;
      std::unique_ptr<tracefs::File> f;
      const int rc = tracefs::open(r.path, flags, &f);
      if (rc < 0) {
        respond(c, rc);
        return true;
      }
      const uint32_t h = c.next_handle++;
      c.files.emplace(h, std::move(f));
      std::string payload;
      Encoder(&payload).u32(h);
      respond(c, 0, payload);
      return true;
    }
    case Op::kRead:
      return read(c, r, may_park);
    case Op::kWrite: {
      auto it = c.files.find(r.handle);
      if (it == c.files.end()) {
        respond(c, -EBADF);
        return true;
      }
      respond(c, static_cast<int32_t>(it->second->write(r.data.data(), r.data.size())));
      return true;
    }
    case Op::kClose:
      respond(c, c.files.erase(r.handle) ? 0 : -EBADF);
      return true;
    case Op::kMkdir:
      respond(c, tracefs::mkdir(r.path));
      return true;
    case Op::kRmdir:
      respond(c, tracefs::rmdir(r.path));
      return true;
    case Op::kPages:
      return pages(c, r, may_park);
    case Op::kMeta: {
      const Reply reply = collect_meta(c.rec, r);
      respond(c, reply.status, reply.payload);
      return true;
    }
    case Op::kRecord:
      set_recording(c.rec, r.on, &exit);
      respond(c, 0);
      return true;
    case Op::kShare: {
      const Reply reply = share_buffer(c.rec, r);
      respond(c, reply.status, reply.payload);
      return true;
    }
  }
  respond(c, -EPROTO);
  return true;
}

void Server::run() {
  base::name_own_thread("usrtrace-ctl");
  // Lower priority: the program's own threads come first. Not 19: at that
  // weight (15 against 1024) a loaded machine starved the control plane
  // about 70 to 1, and a client's kallsyms or a recorder's last pages then
  // took minutes under a sanitizer (CliRecord's Ctrl-C tests under ASan with
  // two busy CPUs: "reading its metadata: Connection timed out"). At 10
  // (weight 110) the program still gets about nine tenths of a shared CPU.
  setpriority(PRIO_PROCESS, static_cast<id_t>(base::gettid_cached()), 10);
  std::vector<pollfd> fds;
  while (!stop.load(std::memory_order_acquire)) {
    exit.check_signal();  // a deferred signal: does it kill now?
    fds.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    bool any_parked = false;
    // A pipelining client's next request may already be in `in` once the
    // answer before it is out: no byte will come to wake us for it, so the
    // poll does not wait then (one request per connection and round keeps
    // the others served). ControlMalformed.PipelinedRequestsAreAllAnswered.
    bool any_ready = false;
    // When the first connection that stays quiet is to be closed.
    Clock::time_point idle_due = Clock::time_point::max();
    for (const auto& c : conns_) {
      short ev = 0;
      if (!c->parked && c->out.empty() && c->in.size() <= 4 + kMaxRequest && !c->close_after) ev |= POLLIN;
      if (!c->out.empty()) ev |= POLLOUT;
      any_parked |= c->parked;
      any_ready |= ready(*c);
      if (idle.count() > 0 && may_idle_out(*c)) idle_due = std::min(idle_due, c->last_active + idle);
      fds.push_back({c->fd, ev, 0});
    }
    const bool ticking = any_parked || exit.signal_waiting();
    int timeout = any_ready ? 0 : ticking ? kTickMs : -1;
    if (timeout != 0 && idle_due != Clock::time_point::max()) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(idle_due - Clock::now()).count();
      const int until_due = static_cast<int>(std::clamp<decltype(wait)>(wait, 0, INT_MAX));
      timeout = timeout < 0 ? until_due : std::min(timeout, until_due);
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wake_fd, &v, sizeof v);
    }
    if (stop.load(std::memory_order_acquire)) break;
    if (fds[1].revents & POLLIN) accept_all();
    const bool is_exiting = exit.exiting();
    const auto now = Clock::now();
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = *conns_[i];
      const short re = i + 2 < fds.size() ? fds[i + 2].revents : 0;
      if (re & POLLOUT) flush(c);
      if (re & POLLIN) receive(c);
      if ((re & (POLLHUP | POLLERR)) && !(re & POLLIN)) c.dead = true;
      if (c.parked && !c.dead) {
        // Tried again each tick; answered (maybe empty) at the deadline
        // or at once when the process exits.
        const bool may_park = !is_exiting && now < c.deadline;
        const Clock::time_point deadline = c.deadline;
        Request r = std::move(c.req);
        c.parked = false;
        // Parked again: the wait still ends when the first one said.
        if (!handle(c, r, may_park)) c.deadline = deadline;
      }
      process(c);
      if (!c.out.empty()) flush(c);
    }
    // Quiet ones go, so that clients that hang (stopped, or leaking
    // connections) cannot hold the kMaxClients places for good.
    if (idle.count() > 0) {
      const auto checked = Clock::now();
      for (auto& c : conns_)
        if (!c->dead && may_idle_out(*c) && checked - c->last_active >= idle) close_idle(*c);
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->dead) {
        set_recording((*it)->rec, false, &exit);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : conns_) set_recording(c->rec, false, &exit);
  conns_.clear();
}

}  // namespace usrtrace::control
