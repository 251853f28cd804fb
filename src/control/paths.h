// Where traced processes' control sockets live: one directory per user,
// $XDG_RUNTIME_DIR/usrtrace when XDG_RUNTIME_DIR is set, else
// /tmp/usrtrace-UID (USRTRACE_SOCKET_DIR overrides both, for tests and
// containers). A socket is named by its process's pid.
#pragma once

#include <sys/types.h>

#include <string>

namespace usrtrace::control {

// The directory, created mode 0700 when `create` and missing. Refused
// (-EPERM, *err says why) when it is not a directory owned by this user
// with no access for others: a directory someone else controls could
// hand out their sockets as ours. 0, or -errno with *err set.
int socket_dir(bool create, std::string* dir, std::string* err);

std::string socket_path(const std::string& dir, pid_t pid);

}  // namespace usrtrace::control
