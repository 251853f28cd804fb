// The control server (server.h): the poll() loop, the requests, the exit
// handshake with recorders.
#include "server/server.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/files.h"
#include "base/sys.h"
#include "control/meta.h"
#include "control/paths.h"
#include "control/protocol.h"
#include "function/function.h"
#include "instance/instance.h"
#include "record/recorder.h"
#include "tracefs/tracefs.h"
#include "usrtrace/usrtrace.h"

namespace usrtrace::control {
namespace {

using instance::Instance;
using Clock = std::chrono::steady_clock;

std::string read_file_text(const char* path) {
  std::string s;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

// Deferred termination (USRTRACE_DEFER_SIGNALS=1, set by `usrtrace record
// -- COMMAND`): SIGINT, SIGTERM and SIGHUP, where the program left them at
// their default, do not kill the process at once: the handler (async-
// signal-safe: one store, one write) tells the server, which lets the
// recorders take the last pages (as at exit) and then lets the signal kill
// the process as it would have. A second one kills at once.
volatile sig_atomic_t g_pending_signal = 0;
std::atomic<int> g_wake_fd{-1};

void on_terminating_signal(int sig) {
  if (g_pending_signal != 0) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_pending_signal = sig;
  const uint64_t one = 1;
  // order: relaxed; the fd was published before the handler was installed.
  [[maybe_unused]] ssize_t w = ::write(g_wake_fd.load(std::memory_order_relaxed), &one, sizeof one);
}

void defer_terminating_signals() {
  const char* e = base::env("USRTRACE_DEFER_SIGNALS");
  if (!e || std::strcmp(e, "1") != 0) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_terminating_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

int exit_wait_ms();

// How long a connection may send nothing before the server closes it
// (USRTRACE_CONTROL_IDLE_MS, default kIdleMs; 0: never). Read as the server
// starts.
std::chrono::milliseconds idle_time() {
  const char* e = base::env("USRTRACE_CONTROL_IDLE_MS");
  if (!e || !*e) return std::chrono::milliseconds(kIdleMs);
  char* end = nullptr;
  const long v = strtol(e, &end, 10);
  if (*end || v < 0 || v > 24L * 3600 * 1000) return std::chrono::milliseconds(kIdleMs);
  return std::chrono::milliseconds(v);
}

struct Conn {
  int fd = -1;
  std::string in;
  std::string out;
  size_t out_off = 0;
  bool close_after = false;  // once `out` is sent
  bool dead = false;
  bool parked = false;
  Request req;               // the parked one
  Clock::time_point deadline;
  std::map<uint32_t, std::unique_ptr<tracefs::File>> files;
  uint32_t next_handle = 1;
  std::map<std::string, Instance*> readers;  // kPages sources, each holding a reference
  uint32_t next_cpu = 0;
  bool recording = false;
  // The idle clock: the connection's accept, or the last byte that came
  // or went. Not counted while a request is parked: the client waits for
  // us then.
  Clock::time_point last_active;
  uint32_t meta_generation = 0;  // base::metadata_generation() at the last kMeta
  bool has_meta = false;

  // Only a connection that holds nothing is closed for being quiet: one
  // with a file open (a shell's `exec 3>trace_marker` in the FUSE mount,
  // written to now and then), a page reader or a recording is the
  // client's state, which a close would break (ENODEV on its next use).
  bool holds_state() const { return !files.empty() || !readers.empty() || recording; }

  ~Conn() {
    files.clear();
    for (auto& [name, inst] : readers) inst->put_reader();
    if (fd >= 0) ::close(fd);
  }
};

inline bool may_idle_out(const Conn& c) { return !c.parked && !c.holds_state(); }

class Server {
 public:
  pid_t pid = 0;
  int listen_fd = -1;
  int wake_fd = -1;
  std::string path;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> exiting{false};
  std::mutex mu;
  std::condition_variable cv;
  int recorders = 0;  // connections in kRecord mode; under mu
  std::chrono::milliseconds idle{0};  // idle_time(); 0: never; set before the thread starts

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_fd, &one, sizeof one);
  }

  void run();

 private:
  std::vector<std::unique_ptr<Conn>> conns_;

  uint32_t flags(const Conn& c) const {
    const bool stale = !c.has_meta || c.meta_generation != base::metadata_generation();
    return (exiting.load(std::memory_order_acquire) ? kExiting : 0) | (stale ? kMetaChanged : 0);
  }
  void respond(Conn& c, int32_t status, std::string_view payload = {});
  void accept_all();
  void receive(Conn& c);
  void process(Conn& c);
  void flush(Conn& c);
  void close_idle(Conn& c);
  // False when the request was parked.
  bool handle(Conn& c, Request& r, bool may_park);
  bool read(Conn& c, Request& r, bool may_park);
  bool pages(Conn& c, Request& r, bool may_park);
  void meta(Conn& c, const Request& r);
  void set_recording(Conn& c, bool on);
  void park(Conn& c, Request& r);
};

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
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
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
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) refuse = EACCES;
    // Only the same user, or root, may drive this process.
    else if (cred.uid != geteuid() && cred.uid != 0) refuse = EACCES;
    else if (conns_.size() >= static_cast<size_t>(kMaxClients)) refuse = EUSERS;
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

// Whether process() can act on c now: it holds a whole request (or a
// length over the bound) and nothing is in the way of answering it.
bool ready(const Conn& c) {
  if (c.dead || c.parked || c.close_after || !c.out.empty() || c.in.size() < 4) return false;
  const uint32_t len = Decoder(reinterpret_cast<const uint8_t*>(c.in.data()), 4).u32();
  return len > kMaxRequest || c.in.size() >= 4 + static_cast<size_t>(len);
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
  if (n == -EAGAIN && may_park && r.wait_ms > 0 && !exiting.load(std::memory_order_acquire)) {
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
  Instance* inst = nullptr;
  if (auto it = c.readers.find(r.path); it != c.readers.end()) {
    inst = it->second;
  } else {
    int err = 0;
    inst = Instance::get(r.path, Instance::GetMode::kExisting, &err);
    if (!inst) {
      respond(c, -(err ? err : ENOENT));
      return true;
    }
    c.readers.emplace(r.path, inst);  // the reference keeps rmdir away (EBUSY)
  }
  rb::RingBuffer& rb = inst->buffer();
  const uint32_t ps = rb.page_size(0);
  const int ncpu = rb.nr_cpus();
  if (r.size < 8 + 4 + ps) {
    respond(c, -EINVAL);  // not even one page fits
    return true;
  }
  std::string payload;
  Encoder e(&payload);
  e.u32(ps);
  e.u32(static_cast<uint32_t>(ncpu));
  int32_t count = 0;
  for (int k = 0; k < ncpu; ++k) {
    const int cpu = static_cast<int>((c.next_cpu + static_cast<uint32_t>(k)) % static_cast<uint32_t>(ncpu));
    while (payload.size() + 4 + ps <= r.size) {
      const size_t at = payload.size();
      e.u32(static_cast<uint32_t>(cpu));
      payload.resize(at + 4 + ps);
      uint64_t missed = 0;
      if (!tracedat::take_page(rb, cpu, reinterpret_cast<uint8_t*>(payload.data() + at + 4), ps, !r.on,
                               &missed)) {
        payload.resize(at);
        break;
      }
      ++count;
    }
  }
  ++c.next_cpu;  // the next answer starts at another CPU: none starves
  if (count == 0 && may_park && !r.on && r.wait_ms > 0 && !exiting.load(std::memory_order_acquire)) {
    park(c, r);
    return false;
  }
  respond(c, count, payload);
  return true;
}

void Server::meta(Conn& c, const Request& r) {
  // Read before collecting: a change while it runs makes the next answer
  // say kMetaChanged again.
  const uint32_t generation = base::metadata_generation();
  RemoteMeta m;
  if (int rc = tracedat::collect_instance_meta(r.names, &m); rc < 0) {
    respond(c, rc);
    return;
  }
  std::string payload;
  encode_meta(m, &payload);
  c.meta_generation = generation;
  c.has_meta = true;
  respond(c, 0, payload);
}

void Server::set_recording(Conn& c, bool on) {
  if (c.recording == on) return;
  c.recording = on;
  {
    std::lock_guard<std::mutex> l(mu);
    recorders += on ? 1 : -1;
  }
  cv.notify_all();
}

bool Server::handle(Conn& c, Request& r, bool may_park) {
  switch (r.op) {
    case Op::kHello: {
      std::string payload;
      Encoder e(&payload);
      e.u32(static_cast<uint32_t>(pid));
      std::string comm = read_file_text("/proc/self/comm");
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
    case Op::kMeta:
      meta(c, r);
      return true;
    case Op::kRecord:
      set_recording(c, r.on);
      respond(c, 0);
      return true;
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
  Clock::time_point die_at{};
  bool signalled = false, killed = false;
  while (!stop.load(std::memory_order_acquire)) {
    if (const int sig = g_pending_signal; sig != 0 && !killed) {
      // The wait starts at the signal, even when the process had already
      // begun to exit (exit_hook set `exiting`) as it came.
      if (!signalled) die_at = Clock::now() + std::chrono::milliseconds(exit_wait_ms());
      signalled = true;
      exiting.store(true, std::memory_order_release);
      bool none;
      {
        std::lock_guard<std::mutex> l(mu);
        none = recorders == 0;
      }
      if (none || Clock::now() >= die_at) {
        killed = true;
        signal(sig, SIG_DFL);
        ::kill(getpid(), sig);  // blocked here: one of the program's threads takes it
      }
    }
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
      if (!c->parked && c->out.empty() && c->in.size() <= 4 + kMaxRequest && !c->close_after)
        ev |= POLLIN;
      if (!c->out.empty()) ev |= POLLOUT;
      any_parked |= c->parked;
      any_ready |= ready(*c);
      if (idle.count() > 0 && may_idle_out(*c)) idle_due = std::min(idle_due, c->last_active + idle);
      fds.push_back({c->fd, ev, 0});
    }
    const bool ticking = any_parked || (g_pending_signal != 0 && !killed);
    int timeout = any_ready ? 0 : ticking ? kTickMs : -1;
    if (timeout != 0 && idle_due != Clock::time_point::max()) {
      const auto wait =
          std::chrono::ceil<std::chrono::milliseconds>(idle_due - Clock::now()).count();
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
    const bool is_exiting = exiting.load(std::memory_order_acquire);
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
        set_recording(**it, false);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : conns_) set_recording(*c, false);
  conns_.clear();
}

std::mutex g_mu;
Server* g_server = nullptr;  // under g_mu

void stop_locked() {
  Server* s = g_server;
  if (!s) return;
  g_server = nullptr;
  if (s->pid != getpid()) {
    // A forked child: the parent's socket and thread are not ours. Close
    // our copies of the descriptors; the object is left (its std::thread
    // names a thread that does not exist here).
    ::close(s->listen_fd);
    ::close(s->wake_fd);
    return;
  }
  s->stop.store(true, std::memory_order_release);
  s->wake();
  if (s->thread.joinable()) s->thread.join();
  ::unlink(s->path.c_str());
  ::close(s->listen_fd);
  ::close(s->wake_fd);
  delete s;
}

int exit_wait_ms() {
  const char* e = base::env("USRTRACE_EXIT_WAIT_MS");
  if (!e || !*e) return 5000;
  char* end = nullptr;
  const long v = strtol(e, &end, 10);
  return (*end || v < 0 || v > 600000) ? 5000 : static_cast<int>(v);
}

// At exit: recorders take the last pages before the socket goes.
void exit_hook() {
  std::lock_guard<std::mutex> l(g_mu);
  Server* s = g_server;
  if (!s || s->pid != getpid()) return;
  s->exiting.store(true, std::memory_order_release);
  s->wake();
  {
    std::unique_lock<std::mutex> rl(s->mu);
    s->cv.wait_for(rl, std::chrono::milliseconds(exit_wait_ms()), [s] { return s->recorders == 0; });
  }
  stop_locked();
}

// Said once per process: a program whose server cannot start (its socket
// directory taken by another user, a bind that fails) is not traceable
// from outside, and its user should know why; a retry does not say it
// again.
void say_not_started(const std::string& why) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr, "usrtrace: control socket not started: %s\n", why.c_str());
}

int start(std::string* err) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_server && g_server->pid == getpid()) return 0;
  if (g_server) stop_locked();  // inherited through fork: forget it
  std::string dir;
  if (int rc = socket_dir(true, &dir, err); rc < 0) return rc;
  auto s = std::make_unique<Server>();
  s->pid = getpid();
  s->path = socket_path(dir, s->pid);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (s->path.size() >= sizeof addr.sun_path) {
    *err = s->path + ": path too long for a Unix socket";
    return -ENAMETOOLONG;
  }
  std::memcpy(addr.sun_path, s->path.c_str(), s->path.size() + 1);
  s->idle = idle_time();
  s->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s->listen_fd < 0) {
    const int e = errno;
    *err = std::string("socket: ") + std::strerror(e);
    return -e;
  }
  // A socket with our pid is a dead process's: ours is the only live one.
  ::unlink(s->path.c_str());
  const char* failed = nullptr;
  if (::bind(s->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) failed = "bind";
  else if (::chmod(s->path.c_str(), 0600) != 0) failed = "chmod";
  else if (::listen(s->listen_fd, kMaxClients) != 0) failed = "listen on";
  if (failed) {
    const int e = errno;
    *err = std::string("cannot ") + failed + " " + s->path + ": " + std::strerror(e);
    ::close(s->listen_fd);
    if (std::strcmp(failed, "bind") != 0) ::unlink(s->path.c_str());  // ours only once bound
    return -e;
  }
  s->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd < 0) {
    const int e = errno;
    *err = std::string("eventfd: ") + std::strerror(e);
    ::close(s->listen_fd);
    ::unlink(s->path.c_str());
    return -e;
  }
  // The thread takes no signal: the program's handlers run in its threads.
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, function::patch::sweep_signal());  // the patcher's sweep (function/function.h)
  pthread_sigmask(SIG_SETMASK, &all, &old);
  g_wake_fd.store(s->wake_fd, std::memory_order_relaxed);
  defer_terminating_signals();
  Server* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  g_server = s.release();
  static std::once_flag once;
  std::call_once(once, [] { atexit(exit_hook); });
  return 0;
}

}  // namespace

int start_server(std::string* err) {
  std::string why;
  const int rc = start(&why);
  if (rc < 0) {
    if (err) *err = why;
    else say_not_started(why);  // autostart, usrtrace_control_start(): no other way to tell
  }
  return rc;
}

void stop_server() {
  std::lock_guard<std::mutex> l(g_mu);
  stop_locked();
}

std::string server_socket() {
  std::lock_guard<std::mutex> l(g_mu);
  return g_server && g_server->pid == getpid() ? g_server->path : std::string();
}


}  // namespace usrtrace::control

// The C API (usrtrace/usrtrace.h).
extern "C" {

int usrtrace_control_start(void) { return usrtrace::control::start_server(nullptr); }

void usrtrace_control_stop(void) { usrtrace::control::stop_server(); }

}  // extern "C"

namespace {

// Serving starts when the library loads, unless USRTRACE_CONTROL=0. This
// object is the last of the library (src/CMakeLists.txt), so its
// constructor runs after every other initializer of the library: a client
// that connects at once finds the library whole.
__attribute__((constructor)) void usrtrace_control_autostart() {
  const char* e = usrtrace::base::env("USRTRACE_CONTROL");
  if (e && std::strcmp(e, "0") == 0) return;
  usrtrace::control::start_server(nullptr);
}

}  // namespace
