#include "control/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/files.h"

namespace usrtrace::control {
namespace {

std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

// Whether `st` (of `path`, not following a link) is what `owner` would have
// made: a directory when `want_dir`, else a socket, owned by `owner`, and,
// for a directory, none of the `forbidden` mode bits. False with *why.
bool trusted(const std::string& path, const struct stat& st, bool want_dir, uid_t owner, mode_t forbidden,
             std::string* why) {
  const char* want = want_dir ? "a directory" : "a socket";
  if (S_ISLNK(st.st_mode)) {
    *why = path + " is a symbolic link, not " + want;
    return false;
  }
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISSOCK(st.st_mode)) {
    *why = path + " is " + base::file_type_name(st.st_mode) + ", not " + want;
    return false;
  }
  if (st.st_uid != owner) {
    *why = path + " is owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(owner);
    return false;
  }
  if (want_dir && (st.st_mode & forbidden) != 0) {
    const std::string mode = mode_text(st.st_mode);
    *why = forbidden == 022 ? path + " is writable by its group or others (mode " + mode + ")"
                            : path + " is open to its group or others (mode " + mode + ", not 0700)";
    return false;
  }
  return true;
}

}  // namespace

std::string socket_dir_path() {
  if (const char* o = base::env("USRTRACE_SOCKET_DIR"); o && *o) return o;
  if (const char* x = base::env("XDG_RUNTIME_DIR"); x && *x == '/') return std::string(x) + "/usrtrace";
  return "/tmp/usrtrace-" + std::to_string(geteuid());
}

int socket_dir(bool create, std::string* dir, std::string* err) {
  *dir = socket_dir_path();
  if (create && ::mkdir(dir->c_str(), 0700) != 0 && errno != EEXIST) {
    const int e = errno;
    *err = "cannot create " + *dir + ": " + std::strerror(e);
    return -e;
  }
  struct stat st;
  if (::lstat(dir->c_str(), &st) != 0) {
    const int e = errno;
    *err = *dir + ": " + std::strerror(e);
    return -e;
  }
  // The server's own directory is private (0700): it holds only sockets
  // that only their user may use.
  if (!trusted(*dir, st, true, geteuid(), 077, err)) return -EPERM;
  return 0;
}

std::string socket_path(const std::string& dir, pid_t pid) { return dir + "/" + std::to_string(pid); }

int open_socket_dir(const std::string& dir, uid_t owner, std::string* why) {
  // O_PATH | O_NOFOLLOW opens a symbolic link itself, so that fstat says
  // what the name is (an lstat) of the very thing we then connect through.
  const int fd = ::open(dir.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    *why = dir + ": " + std::strerror(e);
    return -e;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    *why = dir + ": " + std::strerror(e);
    ::close(fd);
    return -e;
  }
  // A client needs only that no one but the owner can put a socket there.
  if (!trusted(dir, st, true, owner, 022, why)) {
    ::close(fd);
    return -EPERM;
  }
  return fd;
}

int check_socket(int dir_fd, const std::string& dir, const std::string& name, uid_t owner, std::string* why) {
  const std::string path = dir + "/" + name;
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    const int e = errno;
    *why = path + ": " + std::strerror(e);
    return -e;
  }
  return trusted(path, st, false, owner, 0, why) ? 0 : -EPERM;
}

std::string socket_path_at(int dir_fd, const std::string& dir, const std::string& name) {
  const std::string via = "/proc/self/fd/" + std::to_string(dir_fd);
  struct stat st;
  if (::stat(via.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return dir + "/" + name;
  return via + "/" + name;
}

}  // namespace usrtrace::control
