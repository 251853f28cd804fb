// The control socket, from a client's side: this test process serves its
// own tree (the server thread started when it loaded) and talks to it as
// the usrtrace command would, through usrtrace::control::Client and raw
// sockets for what a well-behaved client never sends.
#include <dirent.h>
#include <fcntl.h>
#include <linux/securebits.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/connection.h"
#include "control/paths.h"
#include "control/protocol.h"
#include "events/registry.h"
#include "server/server.h"
#include "usrtrace/control.h"
#include "usrtrace/usrtrace.h"

namespace usrtrace::control {
namespace {

std::unique_ptr<Client> self() {
  std::string err;
  EXPECT_EQ(start_server(&err), 0) << err;
  auto c = Client::connect(getpid(), &err);
  EXPECT_TRUE(c) << err;
  return c;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A raw connection to our own socket, for malformed messages.
int raw_connect() {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = server_socket();
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -errno;
  }
  return fd;
}

// Reads one response; its status, or 1 when the server closed instead.
int raw_status(int fd) {
  char h[12];
  size_t got = 0;
  while (got < sizeof h) {
    const ssize_t n = ::recv(fd, h + got, sizeof h - got, 0);
    if (n <= 0) return 1;
    got += static_cast<size_t>(n);
  }
  Decoder d(reinterpret_cast<const uint8_t*>(h), sizeof h);
  d.u32();
  return d.i32();
}

bool closed_by_server(int fd) {
  char c;
  return ::recv(fd, &c, 1, 0) == 0;
}

TEST(Control, TheSocketIsInTheUsersDirectoryAndOnlyTheUsers) {
  auto c = self();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->pid(), getpid());
  std::string dir, err;
  ASSERT_EQ(socket_dir(false, &dir, &err), 0) << err;
  EXPECT_EQ(server_socket(), dir + "/" + std::to_string(getpid()));
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(server_socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0077, 0u);
  bool found = false;
  for (const Process& p : list_processes()) found |= p.pid == getpid();
  EXPECT_TRUE(found);
}

TEST(Control, FilesReadWriteListAndErrorsAsTheKernels) {
  auto c = self();
  ASSERT_TRUE(c);
  std::vector<std::string> names;
  ASSERT_EQ(c->list("", &names), 0);
  EXPECT_NE(std::find(names.begin(), names.end(), "trace_pipe"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "instances"), names.end());
  bool dir = false;
  unsigned mode = 0;
  ASSERT_EQ(c->stat("instances", &dir, &mode), 0);
  EXPECT_TRUE(dir);
  ASSERT_EQ(c->stat("trace_marker", &dir, &mode), 0);
  EXPECT_FALSE(dir);
  EXPECT_EQ(mode, 0220u);
  EXPECT_EQ(c->stat("no_such_file", &dir, &mode), -ENOENT);

  ASSERT_EQ(c->mkdir("instances/ctl_a"), 0);
  EXPECT_EQ(c->mkdir("instances/ctl_a"), -EEXIST);
  EXPECT_EQ(c->mkdir("events/ctl_a"), -EPERM);
  EXPECT_EQ(c->write_file("instances/ctl_a/trace_marker", "hello from outside"), 18);
  std::string text;
  ASSERT_GT(c->read_file("instances/ctl_a/trace", &text), 0);
  EXPECT_EQ(count(text, "hello from outside"), 1) << text;

  // The kernel's errors, with the error_log line.
  EXPECT_EQ(c->write_file("instances/ctl_a/buffer_size_kb", "lots"), -EINVAL);
  ASSERT_GT(c->read_file("instances/ctl_a/error_log", &text), 0);
  EXPECT_EQ(count(text, "error:"), 1) << text;
  EXPECT_EQ(c->open("instances/ctl_a/trace_marker", O_RDONLY), -EACCES);
  EXPECT_EQ(c->open("instances/ctl_a/nothing", O_RDONLY), -ENOENT);
  EXPECT_EQ(c->read(12345, text.data(), 1), -EBADF);
  EXPECT_EQ(c->rmdir("instances/ctl_a"), 0);
  EXPECT_EQ(c->rmdir("instances/ctl_a"), -ENOENT);
}

// The server thread is usrtrace's own: naming itself must not put a
// thread_rename event into the program's trace (it once did, through the
// pthread_setname_np interposer, racing the program's own reads).
TEST(Control, TheServerThreadLeavesNoEventInTheProgramsTrace) {
  stop_server();
  ASSERT_EQ(usrtrace_tracefs_write("events/usrtrace/thread_rename/enable", "1", 1), 1);
  auto c = self();  // the new server thread has named itself once it answers
  ASSERT_TRUE(c);
  std::string text;
  ASSERT_GT(c->read_file("trace", &text), 0);
  EXPECT_EQ(count(text, "usrtrace-ctl"), 0) << text;
  // While a program thread's rename is there.
  ASSERT_EQ(pthread_setname_np(pthread_self(), "ctl-test-main"), 0);
  ASSERT_GT(c->read_file("trace", &text), 0);
  EXPECT_EQ(count(text, "newcomm=ctl-test-main"), 1) << text;
  EXPECT_EQ(usrtrace_tracefs_write("events/usrtrace/thread_rename/enable", "0", 1), 1);
}

TEST(Control, AReadOfTracePipeWaitsOnTheServerForData) {
  auto c = self();
  ASSERT_TRUE(c);
  ASSERT_EQ(c->mkdir("instances/ctl_pipe"), 0);
  const int h = c->open("instances/ctl_pipe/trace_pipe", O_RDONLY);
  ASSERT_GE(h, 0);
  char buf[4096];
  // Nothing there: the wait ends empty-handed.
  EXPECT_EQ(c->read(h, buf, sizeof buf, 20), -EAGAIN);
  EXPECT_EQ(c->read(h, buf, sizeof buf, 0), -EAGAIN);
  // A writer while the read waits (or before it: either way it must come).
  std::thread writer([] {
    usrtrace_array* tr = usrtrace_array_lookup("ctl_pipe");
    usrtrace_array_printk(tr, "wake the reader\n");
    usrtrace_array_put(tr);
  });
  std::string got;
  while (got.find("wake the reader") == std::string::npos) {
    const long n = c->read(h, buf, sizeof buf, 10000);
    ASSERT_GT(n, 0) << "no data within 10 s";
    got.append(buf, static_cast<size_t>(n));
  }
  writer.join();
  EXPECT_EQ(c->close(h), 0);
  EXPECT_EQ(c->close(h), -EBADF);
  EXPECT_EQ(c->rmdir("instances/ctl_pipe"), 0);
}

TEST(Control, PagesAndMetadataForARecorder) {
  auto c = self();
  ASSERT_TRUE(c);
  ASSERT_EQ(c->mkdir("instances/ctl_pages"), 0);
  usrtrace_array* tr = usrtrace_array_lookup("ctl_pages");
  for (int i = 0; i < 500; ++i) usrtrace_array_printk(tr, "page filler %d with some text to fill\n", i);
  std::string err;
  auto conn = Connection::open(getpid(), &err);
  ASSERT_TRUE(conn) << err;
  Connection::Pages p;
  int total = 0;
  for (;;) {
    const int n = conn->pages("ctl_pages", 64 * 1024, 0, true, &p);
    ASSERT_GE(n, 0);
    if (n == 0) break;
    total += n;
    EXPECT_EQ(p.data.size(), static_cast<size_t>(n) * p.page_size);
  }
  EXPECT_GE(total, 500 * 40 / 4096);
  // The instance is held while a recorder reads it.
  EXPECT_EQ(c->rmdir("instances/ctl_pages"), -EBUSY);
  RemoteMeta m;
  ASSERT_EQ(conn->meta({"ctl_pages"}, &m), 0);
  ASSERT_EQ(m.instances.size(), 1u);
  EXPECT_EQ(m.instances[0].name, "ctl_pages");
  EXPECT_EQ(m.instances[0].stats.size(), static_cast<size_t>(m.instances[0].nr_cpus));
  EXPECT_FALSE(m.meta.ftrace_formats.empty());
  EXPECT_NE(m.meta.header_page.find("commit"), std::string::npos);
  EXPECT_EQ(conn->meta({"no_such_instance"}, &m), -ENOENT);
  EXPECT_EQ(conn->pages("no_such_instance", 64 * 1024, 0, true, &p), -ENOENT);
  EXPECT_EQ(conn->pages("ctl_pages", 100, 0, true, &p), -EINVAL);
  conn.reset();
  usrtrace_array_put(tr);
  // Gone with the connection: the instance can go.
  for (int i = 0; i < 1000 && c->rmdir("instances/ctl_pages") == -EBUSY; ++i) usleep(1000);
  EXPECT_EQ(c->stat("instances/ctl_pages", nullptr, nullptr), -ENOENT);
}

// An event registered (or an object loaded) after a recorder took the
// metadata: the next answers say kMetaChanged until it takes it again.
TEST(Control, ARecorderIsToldWhenTheMetadataChanged) {
  auto c = self();
  ASSERT_TRUE(c);
  std::string err;
  auto conn = Connection::open(getpid(), &err);
  ASSERT_TRUE(conn) << err;
  RemoteMeta m;
  ASSERT_EQ(conn->meta({""}, &m), 0);
  EXPECT_EQ(conn->flags() & kMetaChanged, 0u);
  static const internal::FieldDesc kFields[] = {
      {"n", "int", 8, 4, 0, true, internal::FieldKind::kInteger},
  };
  static internal::EventDesc late{"ctltest", "late", "\"n=%d\", REC->n", kFields, 1, 12, nullptr};
  events::Registry::get().add(&late);
  Connection::Pages p;
  ASSERT_GE(conn->pages("", 64 * 1024, 0, true, &p), 0);
  EXPECT_NE(conn->flags() & kMetaChanged, 0u);
  ASSERT_EQ(conn->meta({""}, &m), 0);
  EXPECT_EQ(conn->flags() & kMetaChanged, 0u);
  EXPECT_TRUE(std::any_of(m.meta.systems.begin(), m.meta.systems.end(),
                          [](const auto& sys) { return sys.first == "ctltest"; }));
  events::Registry::get().remove(&late);
  ASSERT_GE(conn->pages("", 64 * 1024, 0, true, &p), 0);
  EXPECT_NE(conn->flags() & kMetaChanged, 0u);
}

TEST(ControlMalformed, BadMessagesAreRefusedAndTheServerGoesOn) {
  ASSERT_EQ(start_server(nullptr), 0);
  {  // over the size bound
    const int fd = raw_connect();
    ASSERT_GE(fd, 0);
    const uint32_t len = static_cast<uint32_t>(kMaxRequest + 1);
    ASSERT_EQ(::send(fd, &len, 4, 0), 4);
    EXPECT_EQ(raw_status(fd), -EMSGSIZE);
    EXPECT_TRUE(closed_by_server(fd));
    ::close(fd);
  }
  {  // an unknown op, and a known one with bytes left over
    for (const std::string& body :
         {std::string("\x7f", 1), std::string("\x01\x00", 2), std::string("\x05\x01\x00\x00", 4)}) {
      const int fd = raw_connect();
      ASSERT_GE(fd, 0);
      std::string msg;
      Encoder e(&msg);
      e.u32(static_cast<uint32_t>(body.size()));
      e.raw(body);
      ASSERT_EQ(::send(fd, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
      EXPECT_EQ(raw_status(fd), -EPROTO);
      EXPECT_TRUE(closed_by_server(fd));
      ::close(fd);
    }
  }
  {  // a read asking for more than the bound
    const int fd = raw_connect();
    std::string msg;
    Request r;
    r.op = Op::kRead;
    r.size = static_cast<uint32_t>(kMaxData + 1);
    encode_request(r, &msg);
    ASSERT_EQ(::send(fd, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
    EXPECT_EQ(raw_status(fd), -EPROTO);
    ::close(fd);
  }
  {  // truncated: half a message, then the client goes away
    const int fd = raw_connect();
    const char half[6] = {20, 0, 0, 0, 2, 3};
    ASSERT_EQ(::send(fd, half, sizeof half, 0), 6);
    ::close(fd);
  }
  // The server still answers.
  auto c = self();
  ASSERT_TRUE(c);
  bool dir = false;
  EXPECT_EQ(c->stat("instances", &dir, nullptr), 0);
}

// A client that sends its next requests before reading the answers gets
// them all: the server takes the requests it already holds without waiting
// for more bytes (found by control_request_fuzzer).
TEST(ControlMalformed, PipelinedRequestsAreAllAnswered) {
  ASSERT_EQ(start_server(nullptr), 0);
  const int fd = raw_connect();
  ASSERT_GE(fd, 0);
  const timeval five_s{5, 0};  // a stalled server fails the test, not hangs it
  ASSERT_EQ(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five_s, sizeof five_s), 0);
  std::string msg;
  Request r;
  r.op = Op::kClose;
  for (uint32_t h : {7u, 8u}) {
    r.handle = h;
    encode_request(r, &msg);
  }
  msg.append("\x01\x00\x00\x00\x7f", 5);  // then an unknown op
  ASSERT_EQ(::send(fd, msg.data(), msg.size(), 0), static_cast<ssize_t>(msg.size()));
  EXPECT_EQ(raw_status(fd), -EBADF);
  EXPECT_EQ(raw_status(fd), -EBADF);
  EXPECT_EQ(raw_status(fd), -EPROTO);
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
}

TEST(ControlMalformed, TooManyClientsAreToldSo) {
  ASSERT_EQ(start_server(nullptr), 0);
  std::vector<std::unique_ptr<Client>> clients;
  std::string err;
  for (int i = 0; i < kMaxClients; ++i) {
    auto c = Client::connect(getpid(), &err);
    ASSERT_TRUE(c) << i << ": " << err;
    clients.push_back(std::move(c));
  }
  EXPECT_FALSE(Client::connect(getpid(), &err));
  EXPECT_NE(err.find("'s control server is serving its limit of 16 clients"), std::string::npos) << err;
  clients.pop_back();
  // The server sees the close before it answers the next connect.
  std::unique_ptr<Client> again;
  for (int i = 0; i < 1000 && !again; ++i) {
    again = Client::connect(getpid(), &err);
    if (!again) usleep(1000);
  }
  EXPECT_TRUE(again) << err;
}

// Connections that never send a byte fill the server as well as busy
// ones: the next client is told the limit at once, not left to time out.
TEST(ControlMalformed, SixteenIdleConnectionsAndTheNextClientIsToldTheLimit) {
  stop_server();  // a server of our own: no connection of another test counts
  std::string err;
  ASSERT_EQ(start_server(&err), 0) << err;
  std::vector<int> idle;
  for (int i = 0; i < kMaxClients; ++i) {
    const int fd = raw_connect();
    ASSERT_GE(fd, 0) << i;
    idle.push_back(fd);
  }
  // The server takes connections in the order they came: these 16 first.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(Client::connect(getpid(), &err));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(Connection::kAnswerMs / 2))
      << "told only after waiting for an answer";
  EXPECT_NE(err.find("process " + std::to_string(getpid()) +
                     "'s control server is serving its limit of 16 clients"),
            std::string::npos)
      << err;
  for (int fd : idle) ::close(fd);
}

// A server of our own whose connections are closed after `idle_ms` without
// a request (USRTRACE_CONTROL_IDLE_MS, read as the server starts); the
// environment and a server with the default come back at the end.
struct ShortIdleServer {
  std::optional<std::string> old;
  explicit ShortIdleServer(int idle_ms) {
    if (const char* o = getenv("USRTRACE_CONTROL_IDLE_MS")) old = o;
    setenv("USRTRACE_CONTROL_IDLE_MS", std::to_string(idle_ms).c_str(), 1);
    stop_server();
    std::string err;
    EXPECT_EQ(start_server(&err), 0) << err;
  }
  ~ShortIdleServer() {
    if (old)
      setenv("USRTRACE_CONTROL_IDLE_MS", old->c_str(), 1);
    else
      unsetenv("USRTRACE_CONTROL_IDLE_MS");
    stop_server();
    std::string err;
    EXPECT_EQ(start_server(&err), 0) << err;
  }
};

using SteadyClock = std::chrono::steady_clock;

// Waits (up to a generous deadline: a loaded machine) until the server has
// closed fd; when it did, or a default time_point.
SteadyClock::time_point wait_closed_by_server(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 30000) <= 0 || !closed_by_server(fd)) return {};
  return SteadyClock::now();
}

// A connection that sends nothing for the idle time is closed by the
// server, so that idle clients cannot keep the others out; one that keeps
// asking is not; once the idle ones are gone a new client is served.
TEST(ControlIdle, IdleConnectionsAreClosedAndTheNextClientServed) {
  constexpr int kIdleMs = 2000;  // long enough that `busy`, asking every 100 ms, never idles
  const auto idle_time = std::chrono::milliseconds(kIdleMs);
  ShortIdleServer server(kIdleMs);
  std::string err;
  auto busy = Connection::open(getpid(), &err);  // Connection: no reconnection behind our back
  ASSERT_TRUE(busy) << err;
  Request stat;
  stat.op = Op::kStat;
  stat.path = "instances";
  std::string payload;
  std::vector<int> fds;
  std::vector<SteadyClock::time_point> opened;
  const auto first = SteadyClock::now();
  for (int i = 1; i < kMaxClients; ++i) {
    opened.push_back(SteadyClock::now());
    const int fd = raw_connect();
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  // Full. No connection can have been idle for kIdleMs before `first` +
  // kIdleMs, so a refusal that ends before then is certain.
  auto refused = Client::connect(getpid(), &err);
  if (SteadyClock::now() < first + idle_time) {
    EXPECT_FALSE(refused);
    EXPECT_NE(err.find("serving its limit of 16 clients"), std::string::npos) << err;
  }
  refused.reset();

  // Wait for the server to close each idle one, keeping `busy` busy
  // meanwhile (the poll is the wait; the requests are between its rounds).
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  std::vector<SteadyClock::time_point> closed(fds.size());
  size_t left = fds.size();
  while (left > 0 && SteadyClock::now() < deadline) {
    ASSERT_EQ(busy->call(stat, &payload), 0) << "the busy connection was closed";
    std::vector<pollfd> p;
    for (int fd : fds) p.push_back({fd, POLLIN, 0});
    if (::poll(p.data(), p.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP)) || closed[i] != SteadyClock::time_point{}) continue;
      closed[i] = SteadyClock::now();
      EXPECT_TRUE(closed_by_server(fds[i])) << i;
      --left;
    }
  }
  ASSERT_EQ(left, 0u) << "idle connections still open after 30 s";
  for (size_t i = 0; i < fds.size(); ++i) {
    EXPECT_GE(closed[i] - opened[i], idle_time) << i << ": closed before it was idle that long";
    ::close(fds[i]);
  }
  // Older than any of them, and still served.
  EXPECT_EQ(busy->call(stat, &payload), 0);
  auto next = Client::connect(getpid(), &err);
  ASSERT_TRUE(next) << err;
  bool dir = false;
  EXPECT_EQ(next->stat("instances", &dir, nullptr), 0);
  EXPECT_TRUE(dir);
}

// A Client whose idle connection the server closed connects again on its
// next call when it holds nothing on the server (a FUSE mount's lookups, a
// library user's occasional write); with a file open, the file is gone
// with the connection, and it says so (-EPIPE) rather than reconnect under
// a handle that would name another file.
// A quiet connection that holds nothing is closed, and its client connects
// again unnoticed; one with a file open is kept (a shell's
// `exec 3>trace_marker` in a mount, written to now and then).
TEST(ControlIdle, AClientReconnectsAfterAnIdleCloseAndOneWithAFileOpenIsKept) {
  ShortIdleServer server(200);
  std::string err;
  auto plain = Client::connect(getpid(), &err);
  ASSERT_TRUE(plain) << err;
  auto holder = Client::connect(getpid(), &err);
  ASSERT_TRUE(holder) << err;
  const int h = holder->open("trace_marker", O_WRONLY);
  ASSERT_GE(h, 0);
  // Opened after both went quiet: once the server closed it, it had closed
  // them (their idle time ran out first).
  const int later = raw_connect();
  ASSERT_GE(later, 0);
  ASSERT_NE(wait_closed_by_server(later), SteadyClock::time_point{}) << "not closed within 30 s";
  ::close(later);
  bool dir = false;
  EXPECT_EQ(plain->stat("instances", &dir, nullptr), 0);
  EXPECT_TRUE(dir);
  EXPECT_EQ(plain->write_file("trace_marker", "after the idle close"), 20);
  EXPECT_EQ(holder->write(h, "x", 1), 1);
  EXPECT_EQ(holder->stat("instances", &dir, nullptr), 0);
}

// True once the server thread ("usrtrace-ctl") is blocked in poll() or
// ppoll() (/proc/self/task/TID/syscall), within 30 s. Other threads are the
// sanitizer's own (TSan's background thread sleeps, and its fork handler
// takes its locks), not the program's.
bool server_blocked_in_poll() {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < end) {
    int servers = 0, waiting = 0;
    DIR* d = opendir("/proc/self/task");
    if (!d) return false;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string task = std::string("/proc/self/task/") + e->d_name;
      std::string comm;
      std::getline(std::ifstream(task + "/comm"), comm);
      if (comm != "usrtrace-ctl") continue;
      ++servers;
      std::ifstream f(task + "/syscall");
      long nr = -1;
      f >> nr;
      if (nr == SYS_poll || nr == SYS_ppoll) ++waiting;
    }
    closedir(d);
    if (servers > 0 && waiting == servers) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Another user's client is refused (SO_PEERCRED), even one that can reach
// the socket: the child keeps its capabilities (so the 0700 directory does
// not stop it) but connects with another effective uid.
//
// The child allocates (connect does), so it is forked only once the server
// thread is blocked in poll() and so holds no allocator lock: ASan's allocator (g++ 12) has no fork handler,
// and a child forked while the thread allocated hung in it (1 run in 40 here).
TEST(ControlSecurity, AnotherUsersPeerIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to take another uid";
  ASSERT_EQ(start_server(nullptr), 0);
  ASSERT_TRUE(server_blocked_in_poll()) << "the server thread never waited in poll()";
  const pid_t parent = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP) != 0) _exit(10);
    if (setresuid(static_cast<uid_t>(-1), 65534, static_cast<uid_t>(-1)) != 0) _exit(11);
    std::string err;
    auto c = Client::connect(parent, &err);
    if (c) _exit(12);
    _exit(err.find("another user") != std::string::npos ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10/11: could not take another uid, 12: connected, 13: wrong error";
}

TEST(ControlClient, ErrorsSayWhatIsWrong) {
  std::string err;
  EXPECT_FALSE(Client::connect(0, &err));
  EXPECT_NE(err.find("bad pid"), std::string::npos) << err;
  // A pid that does not exist: a child that has exited and been reaped.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  EXPECT_FALSE(Client::connect(gone, &err));
  EXPECT_NE(err.find("no process"), std::string::npos) << err;
  // A live process without usrtrace: our parent (ctest or a shell).
  EXPECT_FALSE(Client::connect(getppid(), &err));
  EXPECT_NE(err.find("does not serve"), std::string::npos) << err;
}

TEST(ControlClient, StaleSocketsAreRemoved) {
  ASSERT_EQ(start_server(nullptr), 0);
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  std::string dir, err;
  ASSERT_EQ(socket_dir(false, &dir, &err), 0);
  const std::string stale = socket_path(dir, gone);
  // A socket file left by a process that died without removing it.
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, stale.c_str(), stale.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::close(fd);
  ASSERT_EQ(::access(stale.c_str(), F_OK), 0);
  for (const Process& p : list_processes()) EXPECT_NE(p.pid, gone);
  EXPECT_NE(::access(stale.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace usrtrace::control
