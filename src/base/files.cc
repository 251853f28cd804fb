#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>  // renameat2
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
    // A FIFO without a reader (or a socket) under O_NONBLOCK: what it is,
    // refused as any other file that is not regular.
    struct stat st;
    if (e == ENXIO && ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      const std::string text = std::string(file_type_name(st.st_mode)) + ", not a regular file";
      return refuse(EINVAL, why, path, text.c_str());
    }
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

namespace {

// The file PATH names for replace_file: itself, or what a symlink of the
// user's (or root's) points to. Refuses anything but a regular file or
// nothing. 0 or -errno with *err.
int replace_target(const std::string& path, std::string* out, std::string* err) {
  *out = path;
  struct stat ls;
  if (::lstat(out->c_str(), &ls) == 0 && S_ISLNK(ls.st_mode)) {
    if (ls.st_uid != geteuid() && ls.st_uid != 0)
      return refuse(ELOOP, err, path, "a symbolic link owned by another user");
    char* real = ::realpath(out->c_str(), nullptr);
    if (!real && errno != ENOENT) return refuse(errno, err, path, nullptr);
    if (real) {
      *out = real;
      ::free(real);
    }
  }
  if (::stat(out->c_str(), &ls) == 0 && !S_ISREG(ls.st_mode)) {
    const std::string text = std::string(file_type_name(ls.st_mode)) + ", not a regular file";
    return refuse(S_ISDIR(ls.st_mode) ? EISDIR : EINVAL, err, path, text.c_str());
  }
  return 0;
}

// Puts TMP in OUT's place. Over an existing file, the two are exchanged
// and the old one, now at TMP, removed: a plain rename over a file makes
// ext4 (auto_da_alloc) allocate and start writing back all of TMP's pages
// at once, which took 0.1 s of a 0.5 s recording of 150 MB here
// (bench/whole_job.py). Readers see the old file or the new, as with
// rename; like trace-cmd's own output, the new file is not fsync'ed.
int put_in_place(const std::string& tmp, const std::string& out) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    struct stat st;
    // What is at TMP now is the old OUT, unless that was not a regular file:
    // a dangling symlink of the user's (replace_target lets it be replaced,
    // as rename does), or something a race put there.
    if (::lstat(tmp.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      ::unlink(tmp.c_str());
      return 0;
    }
    // Put it back, then the plain rename decides (it refuses a directory).
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0) return -errno;
  }
  // ENOENT: no OUT yet; EINVAL: a filesystem without RENAME_EXCHANGE.
  return ::rename(tmp.c_str(), out.c_str()) == 0 ? 0 : -errno;
}

}  // namespace

int replace_file(const std::string& path, const std::function<int(int fd, std::string* err)>& fill,
                 std::string* err) {
  std::string out;
  if (int rc = replace_target(path, &out, err); rc < 0) return rc;
  const size_t slash = out.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  const std::string name = slash == std::string::npos ? out : out.substr(slash + 1);
  std::string tmp = dir + "/." + name + ".usrtrace-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);  // O_EXCL, 0600
  if (fd < 0) {
    const int e = errno;
    if (err) *err = "cannot create a file in " + dir + ": " + std::strerror(e);
    return -e;
  }
  std::string fill_err;
  int r = fill(fd, &fill_err);
  if (::close(fd) != 0 && r == 0) r = -errno;
  if (r == 0) r = put_in_place(tmp, out);
  if (r < 0) {
    ::unlink(tmp.c_str());
    std::string text = fill_err.empty() ? out + ": " + std::strerror(-r) : fill_err;
    if (r == -ENOSPC || r == -EDQUOT) text += " (the previous " + out + ", if any, is unchanged)";
    if (err) *err = text;
  }
  return r;
}

int install_file(const std::string& tmp, const std::string& path, std::string* err) {
  std::string out;
  if (int rc = replace_target(path, &out, err); rc < 0) return rc;
  if (int rc = put_in_place(tmp, out); rc < 0) {
    if (err) *err = out + ": " + std::strerror(-rc);
    return rc;
  }
  return 0;
}

int write_output(const std::string& path, const std::function<int(int fd, std::string* err)>& fill,
                 std::string* err) {
  struct stat st;
  // stat, not lstat: a link to /dev/null is /dev/null. Its owner is
  // checked by open_for_write (another user's link is refused there).
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return replace_file(path, fill, err);
  if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    const std::string text = std::string(file_type_name(st.st_mode)) + ", not a regular file";
    return refuse(S_ISDIR(st.st_mode) ? EISDIR : EINVAL, err, path, text.c_str());
  }
  int fd;
  if (S_ISFIFO(st.st_mode)) {
    // A FIFO is the user's pipe: its reader is waited for, as the shell's
    // redirection waits. The same link rule as open_for_write.
    struct stat ls;
    if (::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode) && ls.st_uid != geteuid() && ls.st_uid != 0)
      return refuse(ELOOP, err, path, "a symbolic link owned by another user");
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return refuse(errno, err, path, nullptr);
    if (::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {  // swapped since the stat
      ::close(fd);
      return refuse(EINVAL, err, path, "not a FIFO any more");
    }
  } else {
    fd = open_for_write(path, {O_WRONLY, 0600, true}, err);
    if (fd < 0) return fd;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {  // a file now, since the stat: written whole
      ::close(fd);
      return replace_file(path, fill, err);
    }
  }
  std::string fill_err;
  int r = fill(fd, &fill_err);
  if (::close(fd) != 0 && r == 0) r = -errno;
  if (r < 0 && err) *err = fill_err.empty() ? path + ": " + std::strerror(-r) : fill_err;
  return r;
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

std::string read_pseudo_file(const std::string& path) {
  std::string s;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return s;
}

unsigned long long process_start_time(const std::string& which) {
  const std::string stat = read_pseudo_file("/proc/" + which + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  const char* p = stat.c_str() + paren + 1;
  for (int field = 3; field < 22; ++field) {  // past the state (3) to the start time (22)
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

}  // namespace usrtrace::base
