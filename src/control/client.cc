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

#include "control/connection.h"
#include "control/paths.h"
#include "usrtrace/control.h"

namespace usrtrace::control {
namespace {

std::string comm_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

// The owner of /proc/PID (the process's uid), or -1.
long uid_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Uid:", 0) == 0) return std::strtol(line.c_str() + 4, nullptr, 10);
  return -1;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Where pid's socket may be: our own directory, then (for root driving
// another user's process) that user's usual ones.
std::vector<std::string> candidate_paths(pid_t pid) {
  std::vector<std::string> out;
  std::string dir, err;
  if (socket_dir(false, &dir, &err) == 0) out.push_back(socket_path(dir, pid));
  const long uid = uid_of(pid);
  if (uid >= 0 && static_cast<uid_t>(uid) != geteuid()) {
    out.push_back("/run/user/" + std::to_string(uid) + "/usrtrace/" + std::to_string(pid));
    out.push_back("/tmp/usrtrace-" + std::to_string(uid) + "/" + std::to_string(pid));
  }
  return out;
}

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
  int last = ENOENT;
  std::string tried;
  for (const std::string& path : candidate_paths(pid)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) continue;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *err = std::string("socket: ") + std::strerror(errno);
      return nullptr;
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      last = errno;
      ::close(fd);
      if (last == ECONNREFUSED && !process_alive(pid)) ::unlink(path.c_str());
      if (tried.empty()) tried = path;
      continue;
    }
    std::unique_ptr<Connection> c(new Connection());
    c->fd_ = fd;
    c->pid_ = pid;
    Request hello;
    hello.op = Op::kHello;
    std::string payload;
    const int rc = c->call(hello, &payload);
    if (rc == -EACCES) {
      *err = who + " belongs to another user: permission denied";
      return nullptr;
    }
    if (rc == -EUSERS) {
      *err = who + " serves too many clients already";
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
  if (last == EACCES || last == EPERM)
    *err = who + (comm.empty() ? "" : " (" + comm + ")") + ": permission denied on its control socket";
  else
    *err = who + (comm.empty() ? "" : " (" + comm + ")") +
           " does not serve usrtrace's control socket (not using usrtrace, or started with "
           "USRTRACE_CONTROL=0)" + (tried.empty() ? "" : ": " + tried + ": " + std::strerror(last));
  return nullptr;
}

int Connection::call(const Request& req, std::string* payload, uint32_t wait_ms) {
  if (fd_ < 0) return -EPIPE;
  buf_.clear();
  encode_request(req, &buf_);
  size_t off = 0;
  bool sent = true;
  while (off < buf_.size()) {
    const ssize_t n = ::send(fd_, buf_.data() + off, buf_.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The server may have refused the connection (another user, too
      // many clients) and closed before our request went out: its one
      // frame saying why can still be waiting to be read.
      sent = false;
      break;
    }
    off += static_cast<size_t>(n);
  }
  auto recv_all = [&](char* p, size_t len) -> int {
    size_t got = 0;
    while (got < len) {
      if (int rc = wait_fd(fd_, POLLIN, static_cast<int>(wait_ms) + kAnswerMs); rc < 0) return rc;
      const ssize_t n = ::recv(fd_, p + got, len - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return -EPIPE;
      got += static_cast<size_t>(n);
    }
    return 0;
  };
  char head[12];
  int rc = recv_all(head, 4);
  uint32_t len = 0;
  if (rc == 0) {
    len = Decoder(reinterpret_cast<const uint8_t*>(head), 4).u32();
    if (len < 8 || len > kMaxResponse) rc = -EPROTO;
  }
  if (rc == 0) rc = recv_all(head + 4, 8);
  if (rc == 0) {
    payload->resize(len - 8);
    rc = recv_all(payload->data(), payload->size());
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
  if (!d.ok() || out->page_size < 16 || out->page_size > (1u << 20) || out->nr_cpus <= 0) return -EPROTO;
  for (int i = 0; i < rc; ++i) {
    const uint32_t cpu = d.u32();
    const uint8_t* p = d.bytes(out->page_size);
    if (!p || cpu >= static_cast<uint32_t>(out->nr_cpus)) return -EPROTO;
    out->cpus.push_back(static_cast<int>(cpu));
    out->data.append(reinterpret_cast<const char*>(p), out->page_size);
  }
  return d.done() ? rc : -EPROTO;
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
  int call(const Request& r, std::string* payload, uint32_t wait_ms = 0) {
    return conn->call(r, payload, wait_ms);
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
  std::string dir, err;
  if (socket_dir(false, &dir, &err) < 0) return out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
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
    const std::string path = socket_path(dir, pid);
    if (!process_alive(pid)) {  // left by a process that died
      ::unlink(path.c_str());
      continue;
    }
    std::string cerr;
    auto c = Connection::open(pid, &cerr);
    if (!c) continue;
    out.push_back({pid, c->comm(), path});
  }
  return out;
}

}  // namespace usrtrace::control
