#include "control/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace usrtrace::control {

int socket_dir(bool create, std::string* dir, std::string* err) {
  if (const char* o = getenv("USRTRACE_SOCKET_DIR"); o && *o) {
    *dir = o;
  } else if (const char* x = getenv("XDG_RUNTIME_DIR"); x && *x == '/') {
    *dir = std::string(x) + "/usrtrace";
  } else {
    *dir = "/tmp/usrtrace-" + std::to_string(geteuid());
  }
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
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    *err = *dir + " is not a directory of user " + std::to_string(geteuid()) +
           " with mode 0700: refusing to use it";
    return -EPERM;
  }
  return 0;
}

std::string socket_path(const std::string& dir, pid_t pid) { return dir + "/" + std::to_string(pid); }

}  // namespace usrtrace::control
