// Where traced processes' control sockets live: one directory per user,
// $XDG_RUNTIME_DIR/usrtrace when XDG_RUNTIME_DIR is set, else
// /tmp/usrtrace-UID (USRTRACE_SOCKET_DIR overrides both, for tests and
// containers). A socket is named by its process's pid. The variables are
// read with base::env(): a privileged (setuid) process ignores them.
//
// Whom to trust (docs/design/control-socket.md): /tmp is shared, so another
// user can make /tmp/usrtrace-UID before UID's first traced process does.
// The server then refuses to serve there (socket_dir()), and a client
// refuses to connect there (open_socket_dir(), check_socket()): a socket in
// a directory someone else can write may be theirs, answering in the
// process's place.
#pragma once

#include <sys/types.h>

#include <string>

namespace usrtrace::control {

// This process's socket directory, by the rules above; nothing checked.
std::string socket_dir_path();

// The server's directory, created mode 0700 when `create` and missing.
// Refused (-EPERM, *err says why: "DIR is owned by uid 65534, not by uid
// 1000") when it is not a directory (a symbolic link is not) owned by this
// process's effective user with no access for others. 0, or -errno with
// *err set.
int socket_dir(bool create, std::string* dir, std::string* err);

std::string socket_path(const std::string& dir, pid_t pid);

// The client's side. Opens socket directory `dir`, which user `owner`
// must own, for connecting through (O_PATH, not following a symbolic
// link: what is checked is what is used). Refused when it is not a
// directory, is owned by another uid, or its group or others may write
// in it (they could put a socket there). A descriptor; -EPERM with *why
// saying what is wrong; or another -errno (-ENOENT: no such directory).
// Context: control plane; may block on the file system.
int open_socket_dir(const std::string& dir, uid_t owner, std::string* why);

// Whether entry `name` of a directory opened by open_socket_dir() is a
// socket owned by `owner`. 0; -EPERM with *why ("DIR/NAME is owned by uid
// 65534, not by uid 1000", "DIR/NAME is a regular file, not a socket");
// or another -errno (-ENOENT: nothing there).
int check_socket(int dir_fd, const std::string& dir, const std::string& name, uid_t owner, std::string* why);

// The address to connect to entry `name` of dir_fd: /proc/self/fd/N/NAME,
// which resolves through the checked directory itself even if DIR is
// renamed or replaced meanwhile; DIR/NAME when /proc is not mounted.
std::string socket_path_at(int dir_fd, const std::string& dir, const std::string& name);

}  // namespace usrtrace::control
