// The client side of the control socket: Connection (connection.h) and the
// public usrtrace::control::Client and list_processes() (usrtrace/control.h).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/files.h"
#include "control/connection.h"
#include "control/paths.h"
#include "ring_buffer/page_format.h"
#include "usrtrace/control.h"

namespace usrtrace::control {
namespace {

std::string comm_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

// The effective uid of process pid, or -1: its server names its socket
// directory by it (geteuid()), owns it and binds the socket as it.
long euid_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Uid:", 0) != 0) continue;
    char* end = nullptr;
    std::strtol(line.c_str() + 4, &end, 10);  // the real uid
    const long euid = std::strtol(end, &end, 10);
    return end && (*end == '\t' || *end == ' ') ? euid : -1;
  }
  return -1;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

uint64_t start_time_of(pid_t pid) { return base::process_start_time(std::to_string(pid)); }

// A directory where pid's socket may be, and the user who must own it.
struct Candidate {
  std::string dir;
  uid_t owner;
};

// Our own directory, then (for root driving another user's process) that
// user's usual ones, which must be that user's.
std::vector<Candidate> candidates(pid_t pid) {
  std::vector<Candidate> out;
  out.push_back({socket_dir_path(), geteuid()});
  const long uid = euid_of(pid);
  if (uid >= 0 && static_cast<uid_t>(uid) != geteuid()) {
    const uid_t u = static_cast<uid_t>(uid);
    out.push_back({"/run/user/" + std::to_string(u) + "/usrtrace", u});
    out.push_back({"/tmp/usrtrace-" + std::to_string(u), u});
  }
  return out;
}

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits until fd is ready for `events` or deadline_ms pass; 0 or -errno.
int wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n > 0) return 0;
    if (n == 0) return -ETIMEDOUT;
    if (errno != EINTR) return -errno;
  }
}

}  // namespace

Connection::~Connection() {
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<Connection> Connection::adopt(int fd, pid_t pid) {
  std::unique_ptr<Connection> c(new Connection());
  c->fd_ = fd;
  c->pid_ = pid;
  return c;
}

std::unique_ptr<Connection> Connection::open(pid_t pid, std::string* err) {
  const std::string who = "process " + std::to_string(pid);
  if (pid <= 0) {
    *err = "bad pid " + std::to_string(pid);
    return nullptr;
  }
  if (!process_alive(pid)) {
    *err = "no " + who;
    return nullptr;
  }
  const uint64_t started = start_time_of(pid);
  int last = ENOENT;
  std::string tried;    // the first path looked at, for "does not serve"
  std::string refused;  // why the first untrusted one was refused
  const std::string name = std::to_string(pid);
  for (const Candidate& cand : candidates(pid)) {
    const std::string path = socket_path(cand.dir, pid);
    std::string why;
    FdCloser dir{open_socket_dir(cand.dir, cand.owner, &why)};
    int rc = dir.fd < 0 ? dir.fd : check_socket(dir.fd, cand.dir, name, cand.owner, &why);
    if (rc == -EPERM) {
      if (refused.empty()) refused = "not connecting to " + path + ": " + why;
      continue;
    }
    if (rc < 0) {
      if (rc != -ENOENT && rc != -ENOTDIR) last = -rc;
      if (tried.empty()) tried = path;
      continue;
    }
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string via = socket_path_at(dir.fd, cand.dir, name);
    if (via.size() >= sizeof addr.sun_path) continue;
    std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
    FdCloser sock{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (sock.fd < 0) {
      *err = std::string("socket: ") + std::strerror(errno);
      return nullptr;
    }
    if (::connect(sock.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      last = errno;
      // Left by a process that died. Removed only from our own directory:
      // never what another user made (root's client included).
      if (last == ECONNREFUSED && cand.owner == geteuid() && !process_alive(pid))
        ::unlinkat(dir.fd, name.c_str(), 0);
      if (tried.empty()) tried = path;
      continue;
    }
    // The listener's credentials, from the kernel: the process itself
    // serves its socket, so anyone else here is an impostor (and a socket
    // of a dead process's pid reused by another is not its).
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(sock.fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid != pid ||
        cred.uid != cand.owner) {
      if (refused.empty())
        refused = "not connecting to " + path + ": " + path + " is served by process " +
                  std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + "), not by process " +
                  name + " (uid " + std::to_string(cand.owner) + ")";
      continue;
    }
    std::unique_ptr<Connection> c(new Connection());
    c->fd_ = sock.fd;
    sock.fd = -1;
    c->pid_ = pid;
    c->start_time_ = started;
    Request hello;
    hello.op = Op::kHello;
    std::string payload;
    rc = c->call(hello, &payload);
    if (rc == -EACCES) {
      *err = who + " belongs to another user: permission denied";
      return nullptr;
    }
    if (rc == -EUSERS) {
      // The refusal says the server's limit and idle time (protocol.h).
      Decoder d(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
      const uint32_t limit = d.u32(), idle_ms = d.u32();
      *err = who + "'s control server is serving its limit of " +
             (d.done() ? std::to_string(limit) + " " : std::string()) + "clients";
      if (d.done() && idle_ms > 0)
        *err += " (one that sends nothing for " + std::to_string((idle_ms + 999) / 1000) +
                " s is let go: try again then)";
      errno = EUSERS;
      return nullptr;
    }
    if (rc < 0) {
      *err = who + " did not answer: " + std::strerror(-rc);
      return nullptr;
    }
    Decoder d(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
    const uint32_t their_pid = d.u32();
    c->comm_ = d.str(256);
    if (!d.ok() || static_cast<pid_t>(their_pid) != pid) {
      *err = who + ": " + path + " is not its control socket";
      return nullptr;
    }
    return c;
  }
  const std::string comm = comm_of(pid);
  if (!refused.empty()) {
    // Said rather than passed over: someone may be impersonating it.
    *err = who + (comm.empty() ? "" : " (" + comm + ")") + ": " + refused +
           " (an impostor could answer in its place)";
    errno = EPERM;
  } else if (last == EACCES || last == EPERM) {
    *err = who + (comm.empty() ? "" : " (" + comm + ")") + ": permission denied on its control socket";
  } else {
    *err = who + (comm.empty() ? "" : " (" + comm + ")") +
           " does not serve usrtrace's control socket (not using usrtrace, or started with "
           "USRTRACE_CONTROL=0)" +
           (tried.empty() ? "" : ": " + tried + ": " + std::strerror(last));
  }
  return nullptr;
}

int Connection::call(const Request& req, std::string* payload, uint32_t wait_ms) {
  unsent_ = true;
  if (fd_ < 0) return -EPIPE;
  buf_.clear();
  encode_request(req, &buf_);
  // One deadline for the whole exchange: the server is another process
  // (hostile, or hung), and a byte now and then must not keep a recorder
  // going (a timeout per recv would).
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(wait_ms) + answer_ms_);
  auto wait_until = [&](short events) -> int {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
            .count();
    return left <= 0 ? -ETIMEDOUT
                     : wait_fd(fd_, events, static_cast<int>(std::min<int64_t>(left, INT32_MAX)));
  };
  size_t off = 0;
  bool sent = true;
  int rc = 0;
  while (off < buf_.size()) {
    // Not blocking: a server that reads nothing must not hold the send
    // past the deadline either.
    const ssize_t n = ::send(fd_, buf_.data() + off, buf_.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if ((rc = wait_until(POLLOUT)) < 0) break;
      continue;
    }
    if (n <= 0) {
      // The server may have refused the connection (another user, too
      // many clients) and closed before our request went out: its one
      // frame saying why can still be waiting to be read.
      sent = false;
      break;
    }
    off += static_cast<size_t>(n);
  }
  if (rc < 0) {  // the request is half sent: the connection is no use now
    ::close(fd_);
    fd_ = -1;
    unsent_ = false;
    return rc;
  }
  auto recv_all = [&](char* p, size_t len) -> int {
    size_t got = 0;
    while (got < len) {
      if (int wr = wait_until(POLLIN); wr < 0) return wr;
      const ssize_t n = ::recv(fd_, p + got, len - got, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return -EPIPE;
      got += static_cast<size_t>(n);
    }
    return 0;
  };
  unsent_ = !sent;
  char head[12];
  rc = recv_all(head, 4);
  uint32_t len = 0;
  if (rc == 0) {
    len = Decoder(reinterpret_cast<const uint8_t*>(head), 4).u32();
    if (len < 8 || len > kMaxResponse) rc = -EPROTO;
  }
  if (rc == 0) rc = recv_all(head + 4, 8);
  // The payload grows as it comes, a megabyte at a time: a length the
  // server declares costs memory only once its bytes are here.
  payload->clear();
  for (size_t want = len - 8; rc == 0 && payload->size() < want;) {
    const size_t at = payload->size(), n = std::min<size_t>(want - at, size_t{1} << 20);
    payload->resize(at + n);
    rc = recv_all(payload->data() + at, n);
  }
  if (rc < 0 || !sent) {
    ::close(fd_);
    fd_ = -1;
    if (rc < 0) return sent ? rc : -EPIPE;
  }
  Decoder d(reinterpret_cast<const uint8_t*>(head + 4), 8);
  const int32_t status = d.i32();
  flags_ = d.u32();
  if (!sent && status >= 0) return -EPIPE;  // not an answer to this request
  return status;
}

int Connection::pages(const std::string& instance, uint32_t max_bytes, uint32_t wait_ms, bool flush,
                      Pages* out) {
  Request r;
  r.op = Op::kPages;
  r.path = instance;
  r.size = max_bytes;
  r.wait_ms = wait_ms;
  r.on = flush;
  std::string payload;
  const int rc = call(r, &payload, wait_ms);
  if (rc < 0) return rc;
  Decoder d(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  out->page_size = d.u32();
  out->nr_cpus = static_cast<int>(d.u32());
  out->cpus.clear();
  out->data.clear();
  // Pages as this build's buffers make them (a power of two of 4 to 64
  // KiB): any other size is a lie, which a journal would refuse later and
  // lose every page recorded after it.
  if (!d.ok() || out->page_size < rb::kMinPageSize || out->page_size > rb::kMaxPageSize ||
      (out->page_size & (out->page_size - 1)) || out->nr_cpus <= 0 || out->nr_cpus > kMaxCpus)
    return -EPROTO;
  for (int i = 0; i < rc; ++i) {
    const uint32_t cpu = d.u32();
    const uint8_t* p = d.bytes(out->page_size);
    if (!p || cpu >= static_cast<uint32_t>(out->nr_cpus)) return -EPROTO;
    out->cpus.push_back(static_cast<int>(cpu));
    out->data.append(reinterpret_cast<const char*>(p), out->page_size);
  }
  return d.done() ? rc : -EPROTO;
}

int Connection::share(const std::string& instance, int* fd) {
  Request r;
  r.op = Op::kShare;
  r.path = instance;
  std::string payload;
  const int rc = call(r, &payload);
  if (rc < 0) return rc;
  Decoder d(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  const uint32_t v = d.u32();
  if (!d.done() || v > INT32_MAX) return -EPROTO;
  *fd = static_cast<int>(v);
  return 0;
}

int Connection::meta(const std::vector<std::string>& instances, RemoteMeta* out) {
  Request r;
  r.op = Op::kMeta;
  r.names = instances;
  std::string payload;
  const int rc = call(r, &payload);
  if (rc < 0) return rc;
  return decode_meta(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), out);
}

// ---------------------------------------------------------------------------
// The public Client.

struct Client::Impl {
  std::unique_ptr<Connection> conn;
  int open_files = 0;  // handles open on `conn`: another connection would not know them

  int call(const Request& r, std::string* payload, uint32_t wait_ms = 0) {
    int rc = conn->call(r, payload, wait_ms);
    // The server closes a connection that sent nothing for a while
    // (server.h). One that held nothing there is made again, and the
    // request, which never reached the server, sent on the new one. With
    // files open it is not: their handles would be unknown there, or name
    // other files; the caller gets -EPIPE, as when the process is gone.
    if (rc == -EPIPE && conn->request_unsent() && open_files == 0) {
      std::string err;
      auto fresh = Connection::open(conn->pid(), &err);
      // The same process, not another that got its pid after it died.
      if (fresh && fresh->start_time() == conn->start_time()) {
        conn = std::move(fresh);
        rc = conn->call(r, payload, wait_ms);
      }
    }
    if (r.op == Op::kOpen && rc >= 0) ++open_files;
    if (r.op == Op::kClose && rc == 0) --open_files;
    return rc;
  }
  int simple(Op op, const std::string& path) {
    Request r;
    r.op = op;
    r.path = path;
    std::string p;
    return call(r, &p);
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

std::unique_ptr<Client> Client::connect(int pid, std::string* err) {
  auto conn = Connection::open(pid, err);
  if (!conn) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->conn = std::move(conn);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

int Client::pid() const { return impl_->conn->pid(); }
const std::string& Client::comm() const { return impl_->conn->comm(); }
bool Client::exiting() const { return (impl_->conn->flags() & kExiting) != 0; }

int Client::stat(const std::string& path, bool* is_dir, unsigned* mode) {
  Request r;
  r.op = Op::kStat;
  r.path = path;
  std::string p;
  const int rc = impl_->call(r, &p);
  if (rc < 0) return rc;
  Decoder d(reinterpret_cast<const uint8_t*>(p.data()), p.size());
  const bool dir = d.u8() != 0;
  const uint32_t m = d.u32();
  if (!d.done()) return -EPROTO;
  if (is_dir) *is_dir = dir;
  if (mode) *mode = m;
  return 0;
}

int Client::list(const std::string& dir, std::vector<std::string>* names) {
  Request r;
  r.op = Op::kList;
  r.path = dir;
  std::string p;
  const int rc = impl_->call(r, &p);
  if (rc < 0) return rc;
  Decoder d(reinterpret_cast<const uint8_t*>(p.data()), p.size());
  const uint32_t n = d.u32();
  names->clear();
  for (uint32_t i = 0; i < n && d.ok(); ++i) names->push_back(d.str(kMaxPath));
  return d.done() ? 0 : -EPROTO;
}

int Client::mkdir(const std::string& path) { return impl_->simple(Op::kMkdir, path); }
int Client::rmdir(const std::string& path) { return impl_->simple(Op::kRmdir, path); }

int Client::open(const std::string& path, int flags) {
  Request r;
  r.op = Op::kOpen;
  r.path = path;
  r.flags = static_cast<uint32_t>(flags);
  std::string p;
  const int rc = impl_->call(r, &p);
  if (rc < 0) return rc;
  Decoder d(reinterpret_cast<const uint8_t*>(p.data()), p.size());
  const uint32_t h = d.u32();
  if (!d.done() || h > INT32_MAX) return -EPROTO;
  return static_cast<int>(h);
}

long Client::read(int handle, char* buf, size_t size, int wait_ms) {
  Request r;
  r.op = Op::kRead;
  r.handle = static_cast<uint32_t>(handle);
  r.size = static_cast<uint32_t>(std::min(size, kMaxData));
  r.wait_ms = static_cast<uint32_t>(std::clamp(wait_ms, 0, static_cast<int>(kMaxWaitMs)));
  std::string p;
  const int rc = impl_->call(r, &p, r.wait_ms);
  if (rc < 0) return rc;
  if (static_cast<size_t>(rc) != p.size() || p.size() > size) return -EPROTO;
  // Bytes, as read(2) gives them: no terminating NUL is owed.
  // NOLINTNEXTLINE(bugprone-not-null-terminated-result)
  std::memcpy(buf, p.data(), p.size());
  return rc;
}

long Client::write(int handle, const char* buf, size_t size) {
  if (size > kMaxData) return -EFBIG;
  Request r;
  r.op = Op::kWrite;
  r.handle = static_cast<uint32_t>(handle);
  r.data.assign(buf, size);
  std::string p;
  return impl_->call(r, &p);
}

int Client::close(int handle) {
  Request r;
  r.op = Op::kClose;
  r.handle = static_cast<uint32_t>(handle);
  std::string p;
  return impl_->call(r, &p);
}

long Client::read_file(const std::string& path, std::string* out) {
  out->clear();
  const int h = open(path, O_RDONLY);
  if (h < 0) return h;
  std::string buf(256 * 1024, '\0');
  long rc = 0;
  for (;;) {
    const long n = read(h, buf.data(), buf.size());
    if (n == -EAGAIN || n == 0) break;  // a pipe: what was there
    if (n < 0) {
      rc = n;
      break;
    }
    out->append(buf.data(), static_cast<size_t>(n));
  }
  close(h);
  return rc < 0 ? rc : static_cast<long>(out->size());
}

long Client::write_file(const std::string& path, const std::string& text, bool append) {
  const int h = open(path, O_WRONLY | (append ? O_APPEND : O_TRUNC));
  if (h < 0) return h;
  const long n = write(h, text.data(), text.size());
  const int rc = close(h);
  return n < 0 ? n : (rc < 0 ? rc : n);
}

std::vector<Process> list_processes() {
  std::vector<Process> out;
  const std::string dir = socket_dir_path();
  std::string why;
  FdCloser dfd{open_socket_dir(dir, geteuid(), &why)};
  if (dfd.fd < 0) return out;
  const int lfd = ::openat(dfd.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = lfd >= 0 ? ::fdopendir(lfd) : nullptr;
  if (!d) {
    if (lfd >= 0) ::close(lfd);
    return out;
  }
  std::vector<pid_t> pids;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid > INT32_MAX) continue;
    pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  std::sort(pids.begin(), pids.end());
  for (pid_t pid : pids) {
    const std::string name = std::to_string(pid);
    if (!process_alive(pid)) {
      // Left by a process of ours that died: only a socket of our own goes.
      if (check_socket(dfd.fd, dir, name, geteuid(), &why) == 0) ::unlinkat(dfd.fd, name.c_str(), 0);
      continue;
    }
    std::string cerr;
    auto c = Connection::open(pid, &cerr);
    if (!c) continue;
    out.push_back({pid, c->comm(), socket_path(dir, pid)});
  }
  return out;
}

}  // namespace usrtrace::control
