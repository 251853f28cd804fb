// The file policy of src/base/files.h, on real files, links and FIFOs.
#include "base/files.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace usrtrace::base {
namespace {

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/usrtrace-files-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)!system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(FilesTest, CreatesOwnerOnlyFiles) {
  const std::string p = dir_ + "/new";
  const mode_t old = umask(0);
  std::string why;
  const int fd = open_for_write(p, {O_WRONLY}, &why);
  umask(old);
  ASSERT_GE(fd, 0) << why;
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(fcntl(fd, F_GETFL) & O_NONBLOCK);
  close(fd);
}

TEST_F(FilesTest, FollowsTheUsersOwnSymlink) {
  const std::string target = dir_ + "/target", link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const int fd = open_for_write(link, {O_WRONLY});
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(access(target.c_str(), F_OK), 0);
}

TEST_F(FilesTest, RefusesAnotherUsersSymlinkAndLeavesItsTargetAlone) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make a link owned by another user";
  const std::string target = dir_ + "/victim", link = dir_ + "/planted";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  std::string why;
  EXPECT_EQ(open_for_write(link, {O_WRONLY | O_TRUNC}, &why), -ELOOP);
  EXPECT_NE(why.find("a symbolic link owned by another user"), std::string::npos) << why;
  EXPECT_NE(access(target.c_str(), F_OK), 0) << "the link's target was created";
}

std::string contents(const std::string& path) {
  std::string out;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<missing>";
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

int fill_with(int fd, const char* text) {
  const size_t n = strlen(text);
  return write(fd, text, n) == static_cast<ssize_t>(n) ? 0 : -EIO;
}

// Nothing but PATH's own name and `others` in DIR: no temporary file left.
std::string names_in(const std::string& dir) {
  std::string names;
  const std::string cmd = "ls -A " + dir;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    while (fgets(line, sizeof line, p)) names += line;
    pclose(p);
  }
  return names;
}

// Over an existing output: exchanged in one step (RENAME_EXCHANGE, not a
// rename that makes ext4 write the new file back at once), the old one
// removed, nothing else left; into a new name; through the user's symlink
// to its target; over the user's dangling symlink, which it replaces as
// rename does.
TEST_F(FilesTest, ReplaceFileOverWhatIsThere) {
  const std::string out = dir_ + "/out";
  std::string err;
  ASSERT_EQ(replace_file(
                out, [](int fd, std::string*) { return fill_with(fd, "first"); }, &err),
            0)
      << err;
  EXPECT_EQ(contents(out), "first");
  ASSERT_EQ(replace_file(
                out, [](int fd, std::string*) { return fill_with(fd, "second"); }, &err),
            0)
      << err;
  EXPECT_EQ(contents(out), "second");
  EXPECT_EQ(names_in(dir_), "out\n");
  // A failing fill leaves the previous file and no temporary one.
  EXPECT_EQ(replace_file(
                out, [](int, std::string*) { return -ENOSPC; }, &err),
            -ENOSPC);
  EXPECT_EQ(contents(out), "second");
  EXPECT_EQ(names_in(dir_), "out\n");
  // install_file: a complete file of ours put in the output's place.
  const std::string mine = dir_ + "/.mine";
  const int mfd = open(mine.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(mfd, 0);
  ASSERT_EQ(fill_with(mfd, "third"), 0);
  close(mfd);
  ASSERT_EQ(install_file(mine, out, &err), 0) << err;
  EXPECT_EQ(contents(out), "third");
  EXPECT_EQ(names_in(dir_), "out\n");
  // Through the user's symlink: its target is replaced, the link stays.
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(out.c_str(), link.c_str()), 0);
  ASSERT_EQ(replace_file(
                link, [](int fd, std::string*) { return fill_with(fd, "fourth"); }, &err),
            0)
      << err;
  EXPECT_EQ(contents(out), "fourth");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // A dangling symlink of the user's is replaced by the file.
  const std::string dangling = dir_ + "/dangling";
  ASSERT_EQ(symlink((dir_ + "/nowhere").c_str(), dangling.c_str()), 0);
  ASSERT_EQ(replace_file(
                dangling, [](int fd, std::string*) { return fill_with(fd, "fifth"); }, &err),
            0)
      << err;
  ASSERT_EQ(lstat(dangling.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(contents(dangling), "fifth");
  EXPECT_EQ(names_in(dir_), "dangling\nlink\nout\n");
}

TEST_F(FilesTest, RefusesAFifoWithoutWaitingForAReader) {
  const std::string p = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  std::string why;
  EXPECT_EQ(open_for_write(p, {O_WRONLY}, &why), -EINVAL);
  EXPECT_NE(why.find("a FIFO, not a regular file"), std::string::npos) << why;
  // With a reader, opening succeeds at the system level: still refused.
  const int r = open(p.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(r, 0);
  EXPECT_EQ(open_for_write(p, {O_WRONLY}, &why), -EINVAL);
  EXPECT_NE(why.find("a FIFO, not a regular file"), std::string::npos) << why;
  close(r);
  off_t size = 0;
  EXPECT_EQ(open_regular_for_read(p, &size, &why), -EINVAL);
  EXPECT_NE(why.find("a FIFO"), std::string::npos) << why;
}

TEST_F(FilesTest, CharacterDevicesOnlyWhenAsked) {
  EXPECT_EQ(open_for_write("/dev/null", {O_WRONLY}), -EINVAL);
  const int fd = open_for_write("/dev/null", {O_WRONLY, 0600, true});
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
  off_t size;
  EXPECT_EQ(open_regular_for_read("/dev/zero", &size), -EINVAL);
}

TEST_F(FilesTest, DirectoriesAreRefusedBothWays) {
  std::string why;
  EXPECT_EQ(open_for_write(dir_, {O_WRONLY}, &why), -EISDIR);
  off_t size;
  EXPECT_EQ(open_regular_for_read(dir_, &size, &why), -EISDIR);
  EXPECT_NE(why.find("a directory"), std::string::npos) << why;
}

TEST_F(FilesTest, ReadsARegularFileAndGivesItsSize) {
  const std::string p = dir_ + "/r";
  int fd = open_for_write(p, {O_WRONLY});
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "hello", 5), 5);
  close(fd);
  off_t size = 0;
  fd = open_regular_for_read(p, &size);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(size, 5);
  close(fd);
}

TEST(EnvTest, ReadsTheEnvironmentOfAnOrdinaryProcess) {
  setenv("USRTRACE_FILES_TEST", "x", 1);
  ASSERT_NE(env("USRTRACE_FILES_TEST"), nullptr);
  EXPECT_STREQ(env("USRTRACE_FILES_TEST"), "x");
}

// A start time read past a name with spaces and parentheses (a thread
// may name itself anything), against the kernel's stat file split by
// Python, the way ps's own library does it (from the last ')').
TEST(ProcessStartTime, CountsFieldsFromTheLastParenthesis) {
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(hold[1]);  // or its read below never sees the end
    ::prctl(PR_SET_NAME, "a) 1 2 (b");
    char c = 'r';
    if (::write(ready[1], &c, 1) != 1) _exit(1);
    if (::read(hold[0], &c, 1) < 0) _exit(1);
    _exit(0);
  }
  ::close(hold[0]);
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  const std::string cmd = "python3 -c \"print(open('/proc/" + std::to_string(child) +
                          "/stat').read().rsplit(')', 1)[1].split()[19])\"";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[64] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  ::pclose(p);
  EXPECT_EQ(read_pseudo_file("/proc/" + std::to_string(child) + "/comm"), "a) 1 2 (b\n");
  const unsigned long long start = process_start_time(std::to_string(child));
  ::close(hold[1]);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(got);
  EXPECT_EQ(start, std::strtoull(buf, nullptr, 10));
  EXPECT_GT(start, 0u);
  EXPECT_EQ(process_start_time(std::to_string(child)), 0u) << "a reaped process has none";
  EXPECT_EQ(process_start_time("self"), process_start_time(std::to_string(::getpid())));
}

}  // namespace
}  // namespace usrtrace::base
