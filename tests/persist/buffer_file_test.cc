// Who may own a buffer file (issue 19): one store per file, never a
// truncation of what a file holds, another user's symlink not followed,
// 0600, and no environment in a privileged process. Each test reproduces a
// failure of the code before (named in its comment).
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "base/sys.h"
#include "persist/file_store.h"
#include "tracefs/tracefs.h"
#include "usrtrace/recover.h"

namespace usrtrace {
namespace {

std::string rd(const std::string& path) {
  std::string out;
  tracefs::read_file(path, &out);
  return out;
}

long wr(const std::string& path, const std::string& text) { return tracefs::write_file(path, text); }

std::string run_out(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

class BufferFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/usrtrace-bf-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* n : {"bf_a", "bf_b"}) {
      tracefs::rmdir(std::string("instances/") + n);
      ASSERT_EQ(tracefs::mkdir(std::string("instances/") + n), 0);
    }
  }
  void TearDown() override {
    for (const char* n : {"bf_a", "bf_b"}) tracefs::rmdir(std::string("instances/") + n);
    (void)!system(("rm -rf " + dir_).c_str());
  }
  size_t recovered(const std::string& path, const std::string& text) {
    std::string why;
    auto rec = Recovery::open(path, &why);
    EXPECT_TRUE(rec) << why;
    size_t n = 0;
    if (rec)
      for (const auto& ev : rec->events(0))
        n += std::string(reinterpret_cast<const char*>(ev.data), ev.len).find(text) != std::string::npos;
    return n;
  }
  std::string dir_;
};

// Before: the new store was made over the old one's file (O_TRUNC), and the
// old store's release punched holes in what the new one had mapped: SIGBUS
// on the next event, or a buffer that recorded nothing.
TEST_F(BufferFileTest, WritingTheCurrentPathAgainKeepsTheFileAndItsEvents) {
  const std::string path = dir_ + "/a.buf";
  ASSERT_GT(wr("instances/bf_a/buffer_file", path + "\n"), 0);
  ASSERT_GT(wr("instances/bf_a/trace_marker", "before the rewrite"), 0);
  for (int i = 0; i < 3; ++i) ASSERT_GT(wr("instances/bf_a/buffer_file", path + "\n"), 0);
  ASSERT_GT(wr("instances/bf_a/trace_marker", "after the rewrite"), 0);
  EXPECT_EQ(recovered(path, "before the rewrite"), 1u);
  EXPECT_EQ(recovered(path, "after the rewrite"), 1u);
  const std::string trace = rd("instances/bf_a/trace");
  EXPECT_NE(trace.find("before the rewrite"), std::string::npos);
  EXPECT_NE(trace.find("after the rewrite"), std::string::npos);
}

// Before: two instances naming one file shared it, each store punching
// holes in the other's regions.
TEST_F(BufferFileTest, TwoInstancesCannotShareAFile) {
  const std::string path = dir_ + "/shared.buf";
  ASSERT_GT(wr("instances/bf_a/buffer_file", path + "\n"), 0);
  EXPECT_EQ(wr("instances/bf_b/buffer_file", path + "\n"), -EBUSY);
  EXPECT_NE(rd("instances/bf_b/error_log").find("in use by another buffer"), std::string::npos)
      << rd("instances/bf_b/error_log");
  EXPECT_EQ(rd("instances/bf_b/buffer_file"), "\n");
  // The same file under another name is the same file.
  EXPECT_EQ(wr("instances/bf_b/buffer_file", dir_ + "/./shared.buf\n"), -EBUSY);
  ASSERT_GT(wr("instances/bf_a/trace_marker", "still mine"), 0);
  EXPECT_EQ(recovered(path, "still mine"), 1u);
}

// Another process holding the file (its lock, taken as FileStore takes
// it): refused, and the file untouched.
TEST_F(BufferFileTest, AFileAnotherProcessHoldsIsRefused) {
  const std::string path = dir_ + "/held.buf";
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    int err = 0;
    auto fs = persist::FileStore::create(path, 4096, base::nr_possible_cpus(), "other", &err);
    const char c = fs ? 'y' : 'n';
    (void)!write(from_child[1], &c, 1);
    char x;
    (void)!read(to_child[0], &x, 1);  // until the parent is done
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  char c = 0;
  ASSERT_EQ(read(from_child[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  EXPECT_EQ(wr("instances/bf_a/buffer_file", path + "\n"), -EBUSY);
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  EXPECT_EQ(after.st_blocks, before.st_blocks);
  close(to_child[1]);  // the child's read ends: it exits
  close(from_child[0]);
  waitpid(pid, nullptr, 0);
}

#ifdef USRTRACE_PERSIST_CHILD
// Before: a restart with the same path (or USRTRACE_BUFFER_DIR after a pid
// was reused) truncated a crashed program's trace before anyone recovered
// it. The crashed program: persist_child, killed once its events are in.
TEST_F(BufferFileTest, AFileThatHoldsATraceIsNeverTruncated) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    setenv("USRTRACE_BUFFER_DIR", dir_.c_str(), 1);
    execl(USRTRACE_PERSIST_CHILD, "persist_child", "discard", "64", "10", nullptr);
    _exit(127);
  }
  close(out[1]);
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') {
  }
  close(out[0]);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const std::string path = dir_ + "/usrtrace-" + std::to_string(pid) + "-top.buf";
  auto events = [&] {
    std::string why;
    auto rec = Recovery::open(path, &why);
    EXPECT_TRUE(rec) << why;
    return rec ? rec->events(0).size() : 0;
  };
  const size_t before = events();
  ASSERT_GE(before, 4u) << "every thread of persist_child wrote one event before 'ready'";
  EXPECT_EQ(wr("instances/bf_b/buffer_file", path + "\n"), -EEXIST);
  EXPECT_NE(rd("instances/bf_b/error_log").find("already holds data"), std::string::npos)
      << rd("instances/bf_b/error_log");
  EXPECT_EQ(events(), before);
  // Once removed, the name is free again; an empty file is fine too.
  ASSERT_EQ(unlink(path.c_str()), 0);
  ASSERT_EQ(close(open(path.c_str(), O_CREAT | O_WRONLY, 0600)), 0);
  EXPECT_GT(wr("instances/bf_b/buffer_file", path + "\n"), 0);
}
#endif

TEST_F(BufferFileTest, FilesAreTheOwnersOnly) {
  const std::string path = dir_ + "/mode.buf";
  const mode_t old = umask(0);
  const long rc = wr("instances/bf_a/buffer_file", path + "\n");
  umask(old);
  ASSERT_GT(rc, 0);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// Before: a symlink planted in a shared directory was followed, and its
// target (here a root-owned 0600 file) truncated.
TEST_F(BufferFileTest, AnotherUsersSymlinkIsNotFollowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a link owned by another user";
  const std::string victim = dir_ + "/victim", link = dir_ + "/planted.buf";
  {
    const int fd = open(victim.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "secret", 6), 6);
    close(fd);
  }
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  EXPECT_EQ(wr("instances/bf_a/buffer_file", link + "\n"), -ELOOP);
  EXPECT_NE(rd("instances/bf_a/error_log").find("a symbolic link owned by another user"), std::string::npos);
  struct stat st;
  ASSERT_EQ(stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 6);
}

#ifdef USRTRACE_PERSIST_CHILD
// Before: a setuid program linked with usrtrace read USRTRACE_BUFFER_DIR
// from whoever ran it, and created (or, through a link, truncated) files
// with its privileges. persist_child exits 3 when the environment named no
// file, and prints "ready" when it did.
TEST_F(BufferFileTest, APrivilegedProcessIgnoresTheEnvironment) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a setuid copy";
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) is missing";
  const std::string bin = dir_ + "/persist_child", drop = dir_ + "/drop";
  ASSERT_EQ(system(("cp " + std::string(USRTRACE_PERSIST_CHILD) + " " + bin).c_str()), 0);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod(bin.c_str(), 04755), 0);
  ASSERT_EQ(mkdir(drop.c_str(), 0777), 0);
  ASSERT_EQ(chmod(drop.c_str(), 0777), 0);
  // Unprivileged, the same binary takes the variable: the test can tell.
  for (const bool setuid : {false, true}) {
    SCOPED_TRACE(setuid ? "setuid root, run by uid 65534" : "run by uid 65534");
    ASSERT_EQ(chmod(bin.c_str(), setuid ? 04755 : 0755), 0);
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      setenv("USRTRACE_BUFFER_DIR", drop.c_str(), 1);
      gid_t none[1] = {65534};
      if (setgroups(1, none) != 0 || setresgid(65534, 65534, 65534) != 0 ||
          setresuid(65534, 65534, 65534) != 0)
        _exit(126);
      execl(bin.c_str(), "persist_child", "discard", "64", "1", nullptr);
      _exit(127);
    }
    close(out[1]);
    // "ready" (it took the variable) or end of file (it exited): no wait
    // on time either way.
    std::string said;
    char buf[64];
    ssize_t n;
    while ((n = read(out[0], buf, sizeof buf)) > 0) {
      said.append(buf, static_cast<size_t>(n));
      if (said.find('\n') != std::string::npos) break;
    }
    close(out[0]);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    const std::string files = run_out("ls -A " + drop);
    if (setuid) {
      EXPECT_EQ(said, "");
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << "status " << status;
      EXPECT_EQ(files, "") << "a privileged process created a file the environment named";
    } else {
      EXPECT_EQ(said, "ready\n");
      EXPECT_NE(files.find("-top.buf"), std::string::npos) << files;
      (void)!system(("rm -f " + drop + "/*").c_str());
    }
  }
}
#endif

}  // namespace
}  // namespace usrtrace
