// The file policy of src/base/files.h, on real files, links and FIFOs.
#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

}  // namespace
}  // namespace usrtrace::base
