// Whom the control socket trusts (issue 19): a client talks only to a
// socket in a directory that its target's user owns and no one else can
// write, served by the target process itself; a server that cannot serve
// says why on stderr, once. Played here with an impostor: a socket the test
// binds and serves itself, in directories the test makes with the owner and
// mode an attacker would give them (root can chown them to other uids).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "control/connection.h"
#include "control/paths.h"
#include "control/protocol.h"
#include "server/server.h"
#include "usrtrace/control.h"
#include "usrtrace/usrtrace.h"

namespace usrtrace::control {
namespace {

constexpr uid_t kNobody = 65534;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A private scratch directory under /tmp, removed with what is in it.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/usrtrace-trust-XXXXXX";
    path = ::mkdtemp(t) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// Sets (or unsets, with nullptr) an environment variable for a scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* o = getenv(n)) old = o;
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~ScopedEnv() {
    if (old)
      setenv(name.c_str(), old->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

// A socket at `path` that answers every hello as process `pid` would: what
// another user can put where a client looks for pid's control socket.
class Impostor {
 public:
  Impostor(const std::string& path, pid_t pid) : path_(path), pid_(pid) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ok_ = fd_ >= 0 && ::pipe2(stop_, O_CLOEXEC) == 0 &&
          ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 8) == 0;
    if (ok_) thread_ = std::thread([this] { serve(); });
  }
  ~Impostor() {
    if (thread_.joinable()) {
      ::close(stop_[1]);
      thread_.join();
    } else if (stop_[1] >= 0) {
      ::close(stop_[1]);
    }
    if (stop_[0] >= 0) ::close(stop_[0]);
    if (fd_ >= 0) ::close(fd_);
    if (ok_) ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // Connections it took, and hellos it answered.
  int accepted() const { return accepted_.load(); }
  int answered() const { return answered_.load(); }

 private:
  void serve() {
    for (;;) {
      pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
      if (p[1].revents) return;  // the test is done
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++accepted_;
      char head[4];
      if (::recv(c, head, 4, MSG_WAITALL) == 4) {
        const uint32_t len = Decoder(reinterpret_cast<const uint8_t*>(head), 4).u32();
        std::string body(len, '\0');
        if (len < 4096 && ::recv(c, body.data(), len, MSG_WAITALL) == static_cast<ssize_t>(len)) {
          std::string out;
          out.append(4, '\0');
          Encoder e(&out);
          e.i32(static_cast<int32_t>(kProtocolVersion));
          e.u32(0);
          e.u32(static_cast<uint32_t>(pid_));
          e.str("impostor");
          e.str("0");
          finish_message(&out, 0);
          if (::send(c, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size()))
            ++answered_;
        }
      }
      ::close(c);
    }
  }

  std::string path_;
  pid_t pid_;
  int fd_ = -1;
  int stop_[2] = {-1, -1};
  bool ok_ = false;
  std::atomic<int> accepted_{0};
  std::atomic<int> answered_{0};
  std::thread thread_;
};

// Without root: directories and sockets the client's own user got wrong.
TEST(ControlTrust, AClientRefusesADirectoryOthersMayWriteALinkOrANonSocket) {
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  const std::string name = std::to_string(getpid());
  std::string err;

  // Mode 0777: anyone could have put the socket there.
  const std::string open_dir = t.path + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  {
    Impostor imp(open_dir + "/" + name, getpid());
    ASSERT_TRUE(imp.ok());
    ScopedEnv env("USRTRACE_SOCKET_DIR", open_dir.c_str());
    EXPECT_FALSE(Client::connect(getpid(), &err));
    EXPECT_NE(err.find(open_dir + " is writable by its group or others (mode 0777)"), std::string::npos)
        << err;
    EXPECT_EQ(imp.accepted(), 0);
    // A socket of a process that is gone: not the client's to remove from a
    // directory it does not trust (usrtrace list removes those in its own).
    const pid_t gone = fork();
    if (gone == 0) _exit(0);
    ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
    const std::string stale = open_dir + "/" + std::to_string(gone);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, stale.c_str(), stale.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::close(fd);
    EXPECT_TRUE(list_processes().empty());
    EXPECT_EQ(::access(stale.c_str(), F_OK), 0) << "the client removed a socket it does not trust";
  }

  // A symbolic link to a good directory: its target may change under us.
  const std::string good = t.path + "/good";
  const std::string link = t.path + "/link";
  ASSERT_EQ(::mkdir(good.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(good.c_str(), link.c_str()), 0);
  {
    Impostor imp(good + "/" + name, getpid());
    ASSERT_TRUE(imp.ok());
    ScopedEnv env("USRTRACE_SOCKET_DIR", link.c_str());
    EXPECT_FALSE(Client::connect(getpid(), &err));
    EXPECT_NE(err.find(link + " is a symbolic link, not a directory"), std::string::npos) << err;
    EXPECT_EQ(imp.accepted(), 0);
  }

  // A regular file where the socket should be.
  {
    const std::string file = good + "/" + name;
    const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
    ScopedEnv env("USRTRACE_SOCKET_DIR", good.c_str());
    EXPECT_FALSE(Client::connect(getpid(), &err));
    EXPECT_NE(err.find(file + " is a regular file, not a socket"), std::string::npos) << err;
    EXPECT_EQ(::access(file.c_str(), F_OK), 0) << "the client removed what it did not make";
  }
}

// As root: a directory or socket that another user owns is refused.
TEST(ControlTrust, AClientRefusesAnotherUsersDirectoryOrSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to another uid";
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  const std::string name = std::to_string(getpid());
  std::string err;

  // The attack of issue 19: another user made the directory first.
  const std::string theirs = t.path + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::chmod(theirs.c_str(), 0777), 0);
  {
    Impostor imp(theirs + "/" + name, getpid());
    ASSERT_TRUE(imp.ok());
    ScopedEnv env("USRTRACE_SOCKET_DIR", theirs.c_str());
    EXPECT_FALSE(Client::connect(getpid(), &err));
    EXPECT_NE(err.find(theirs + " is owned by uid 65534, not by uid 0"), std::string::npos) << err;
    EXPECT_EQ(imp.accepted(), 0);
  }

  // Our own directory, but a socket another user made (it got in while the
  // mode was wrong, or through a bind mount): refused too.
  const std::string ours = t.path + "/ours";
  ASSERT_EQ(::mkdir(ours.c_str(), 0700), 0);
  {
    const std::string sock = ours + "/" + name;
    Impostor imp(sock, getpid());
    ASSERT_TRUE(imp.ok());
    ASSERT_EQ(::lchown(sock.c_str(), kNobody, kNobody), 0);
    ScopedEnv env("USRTRACE_SOCKET_DIR", ours.c_str());
    EXPECT_FALSE(Client::connect(getpid(), &err));
    EXPECT_NE(err.find(sock + " is owned by uid 65534, not by uid 0"), std::string::npos) << err;
    EXPECT_EQ(imp.accepted(), 0);
  }
}

// Root driving another user's process looks in that user's directory
// (/tmp/usrtrace-UID without XDG_RUNTIME_DIR): an impostor who made it
// first must not answer for the process, and root must not remove what is
// there.
TEST(ControlTrust, RootIsNotAnsweredByAnImpostorOfAnotherUsersProcess) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as another uid";
  // Uids of this run alone, so that parallel runs do not share the directory.
  const uid_t victim_uid = 200000 + static_cast<uid_t>(getpid() % 100000);
  const uid_t impostor_uid = victim_uid + 1;
  const std::string dir = "/tmp/usrtrace-" + std::to_string(victim_uid);
  struct stat st;
  if (::lstat(dir.c_str(), &st) == 0) GTEST_SKIP() << dir << " exists already";

  // The victim: a process of victim_uid that waits until the test is done.
  int ready[2], done[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(done, O_CLOEXEC), 0);
  const pid_t victim = fork();
  ASSERT_GE(victim, 0);
  if (victim == 0) {
    ::close(ready[0]);
    ::close(done[1]);
    if (setresgid(victim_uid, victim_uid, victim_uid) != 0 ||
        setresuid(victim_uid, victim_uid, victim_uid) != 0)
      _exit(10);
    const char ok = 1;
    if (::write(ready[1], &ok, 1) != 1) _exit(11);
    char c;
    while (::read(done[0], &c, 1) > 0) {
    }
    _exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the victim could not take uid " << victim_uid;
  ::close(ready[0]);
  const std::string name = std::to_string(victim);
  const std::string sock = dir + "/" + name;
  std::string err;
  {
    // The impostor's directory and socket, as it would make them.
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), impostor_uid, impostor_uid), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
    Impostor imp(sock, victim);
    ASSERT_TRUE(imp.ok());
    ASSERT_EQ(::lchown(sock.c_str(), impostor_uid, impostor_uid), 0);
    ScopedEnv no_override("USRTRACE_SOCKET_DIR", nullptr);
    ScopedEnv no_xdg("XDG_RUNTIME_DIR", nullptr);
    auto cl = Client::connect(victim, &err);
    EXPECT_FALSE(cl) << "connected to the impostor as process " << victim;
    EXPECT_NE(err.find(dir + " is owned by uid " + std::to_string(impostor_uid) + ", not by uid " +
                       std::to_string(victim_uid)),
              std::string::npos)
        << err;
    EXPECT_EQ(imp.answered(), 0);
    EXPECT_EQ(::lstat(sock.c_str(), &st), 0) << "root removed another user's socket";

    // The directory and socket as the victim's user would own them, but
    // served by another process (the test's impostor): SO_PEERCRED says
    // whose it is.
    ASSERT_EQ(::chown(dir.c_str(), victim_uid, victim_uid), 0);
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    ASSERT_EQ(::lchown(sock.c_str(), victim_uid, victim_uid), 0);
    cl = Client::connect(victim, &err);
    EXPECT_FALSE(cl) << "connected to the impostor as process " << victim;
    EXPECT_NE(err.find(sock + " is served by process " + std::to_string(getpid())), std::string::npos) << err;
    EXPECT_EQ(imp.answered(), 0);
  }
  ::close(done[1]);
  int status = 0;
  EXPECT_EQ(waitpid(victim, &status, 0), victim);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// Runs `child` in a forked process with its stderr into a pipe; what it
// wrote, and its exit status in *status.
template <typename F>
std::string stderr_of(F child, int* status) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    ::dup2(p[1], 2);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    _exit(child());
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  waitpid(pid, status, 0);
  return out;
}

// The server of a process whose socket directory another user took says
// so when the library loads, instead of not serving in silence.
TEST(ControlTrust, AServerThatCannotStartSaysWhyOnStderrOnce) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another uid";
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  const std::string theirs = t.path + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::chmod(theirs.c_str(), 0777), 0);
  int status = 0;
  // This test binary again, only listing its tests: its server starts (and
  // fails) as the library loads, before main().
  const std::string out = stderr_of(
      [&] {
        setenv("USRTRACE_SOCKET_DIR", theirs.c_str(), 1);
        unsetenv("USRTRACE_CONTROL");
        execl("/proc/self/exe", "socket_trust_test", "--gtest_list_tests", static_cast<char*>(nullptr));
        return 127;
      },
      &status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << out;
  EXPECT_EQ(count(out, "usrtrace: control socket not started: "), 1) << out;
  EXPECT_NE(
      out.find("usrtrace: control socket not started: " + theirs + " is owned by uid 65534, not by uid 0\n"),
      std::string::npos)
      << out;
}

// A bind that fails (something that is not a socket holds the name) is
// said too, and a second attempt to start says nothing more.
TEST(ControlTrust, AServerWhoseBindFailsSaysWhyOnce) {
  TempDir t;
  ASSERT_FALSE(t.path.empty());
  int status = 0;
  const std::string out = stderr_of(
      [&] {
        setenv("USRTRACE_SOCKET_DIR", t.path.c_str(), 1);
        const std::string taken = t.path + "/" + std::to_string(getpid());
        if (::mkdir(taken.c_str(), 0700) != 0) return 10;
        // Forked: the parent's server is not ours, so these start anew.
        const int a = usrtrace_control_start();
        const int b = usrtrace_control_start();
        return a < 0 && b < 0 ? 0 : 11;
      },
      &status);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: no directory made, 11: the server started" << out;
  EXPECT_EQ(count(out, "usrtrace: control socket not started: "), 1) << out;
  EXPECT_NE(out.find("usrtrace: control socket not started: cannot bind " + t.path + "/"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace usrtrace::control
