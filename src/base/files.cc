#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace usrtrace::base {
namespace {

int refuse(int err, std::string* why, const std::string& path, const char* text) {
  if (why) *why = path + ": " + (text ? text : std::strerror(err));
  return -err;
}

}  // namespace

const char* env(const char* name) { return secure_getenv(name); }

const char* file_type_name(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

int open_for_write(const std::string& path, const OpenForWrite& o, std::string* why) {
  if (path.empty()) return refuse(ENOENT, why, path, "an empty path");
  // O_NONBLOCK: opening a FIFO must not wait for a reader; it is refused
  // below, and the flag cleared for what is kept.
  const int base_flags = o.flags | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  int fd = ::open(path.c_str(), base_flags | O_NOFOLLOW, o.mode);
  if (fd < 0 && errno == ELOOP && !(o.flags & O_EXCL)) {
    // The last component is a symlink: follow it only if its owner is us
    // or root (another user cannot replace it in a sticky directory).
    struct stat ls;
    if (::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode)) {
      if (ls.st_uid != geteuid() && ls.st_uid != 0)
        return refuse(ELOOP, why, path, "a symbolic link owned by another user");
      fd = ::open(path.c_str(), base_flags, o.mode);
    } else {
      errno = ELOOP;
    }
  }
  if (fd < 0) {
    const int e = errno;
    if (e == ENXIO) return refuse(e, why, path, "a FIFO, not a regular file");
    return refuse(e, why, path, nullptr);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return refuse(e, why, path, nullptr);
  }
  if (!S_ISREG(st.st_mode) && !(o.allow_char_device && S_ISCHR(st.st_mode))) {
    ::close(fd);
    std::string text = std::string(file_type_name(st.st_mode)) + ", not a regular file";
    return refuse(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, why, path, text.c_str());
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

int open_regular_for_read(const std::string& path, off_t* size, std::string* why) {
  if (path.empty()) return refuse(ENOENT, why, path, "an empty path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return refuse(errno, why, path, nullptr);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return refuse(e, why, path, nullptr);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    std::string text = std::string(file_type_name(st.st_mode)) + ", not a regular file";
    return refuse(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, why, path, text.c_str());
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (size) *size = st.st_size;
  return fd;
}

}  // namespace usrtrace::base
