// The file and environment policy (docs/security.md): every file usrtrace
// creates or opens for writing, and every input file it reads, goes through
// these, so that the rules hold in one place:
//
//   * a symbolic link is followed only when it belongs to the process's
//     effective user or to root: in a shared directory (/tmp), another
//     user's planted link cannot redirect a write (fs.protected_symlinks
//     does the same in sticky directories only, and only when enabled);
//   * files are created 0600: a trace holds the program's data;
//   * only regular files (and, for writes that say so, character devices
//     such as /dev/null or a terminal) are opened: a FIFO with no reader
//     would block the caller (the control thread, a signal handler);
//   * the environment is not read at all when the process runs with more
//     privileges than its user (setuid, setgid, file capabilities).
//
// Context for all: may block on the file system; not async-signal-safe
// (they format error text); never on the event write path.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace usrtrace::base {

// getenv for usrtrace's own variables: nullptr when the process is
// privileged (AT_SECURE: secure_getenv), so that whoever runs a setuid
// program linked with usrtrace cannot point it at files or sockets.
const char* env(const char* name);

struct OpenForWrite {
  int flags = 0;                   // O_RDWR or O_WRONLY, plus O_APPEND / O_EXCL / O_TRUNC
  mode_t mode = 0600;              // for a file created now
  bool allow_char_device = false;  // /dev/null, a terminal
};

// Opens (creating if needed) PATH for writing under the rules above.
// Returns a descriptor (O_CLOEXEC, blocking) or -errno, with `why` (if
// given) saying what was refused in words: "PATH: a symbolic link owned by
// another user", "PATH: a FIFO, not a regular file", or strerror.
int open_for_write(const std::string& path, const OpenForWrite& o, std::string* why = nullptr);

// Opens PATH for reading when it is a regular file (after following
// symlinks: what a user names to read is theirs to name). A FIFO is refused
// without blocking; a directory, a device or a socket too. Returns a
// descriptor (O_CLOEXEC, blocking) and its size in *size, or -errno with
// `why`.
int open_regular_for_read(const std::string& path, off_t* size, std::string* why = nullptr);

// Writes PATH whole or not at all: `fill` writes a new file (0600, O_EXCL)
// beside PATH, which is then renamed over it. A full disk, an error of
// `fill` or a death half-way leaves the previous PATH as it was (and no
// temporary file, but for a death). PATH as a symlink is written through
// when the link is the user's own or root's, refused (ELOOP) otherwise.
// `fill` returns 0 or -errno, and may set *err; the error in *err says
// when the previous file is unchanged for a full disk. Returns 0 or -errno.
int replace_file(const std::string& path, const std::function<int(int fd, std::string* err)>& fill,
                 std::string* err);

// replace_file's last step for a file already written: renames TMP (a
// complete file of ours) over PATH, with replace_file's rules for PATH.
// TMP must be on PATH's filesystem (-EXDEV otherwise; TMP is then left
// as it was). On success TMP's name is gone. Returns 0 or -errno with *err.
int install_file(const std::string& tmp, const std::string& path, std::string* err);

// An export's output (report --format json|perfetto -o PATH, record
// --perfetto PATH): a regular file or a new name is written whole or not
// at all, as replace_file does; an existing character device or FIFO
// (/dev/null, a terminal, a pipe a reader waits on) is written in place,
// as `cmd > PATH` would, and never replaced: a rename over /dev/null, run
// as root, would replace the system's /dev/null with a file. A directory,
// a socket or a block device is refused. Returns 0 or -errno with *err.
int write_output(const std::string& path, const std::function<int(int fd, std::string* err)>& fill,
                 std::string* err);

// What a non-regular file is, in words ("a FIFO", "a directory", ...).
const char* file_type_name(mode_t st_mode);

// A kernel pseudo-file (/proc, tracefs) whole: they say st_size 0, so it
// is read until EOF. "" when it cannot be opened.
std::string read_pseudo_file(const std::string& path);

// When a process started: field 22 of /proc/WHICH/stat (`which`: a pid or
// "self"), in clock ticks since boot; with the pid it names one process,
// even once the pid is reused. 0 when it cannot be read (no process but
// the first starts at tick 0). The name before it may hold spaces and
// parentheses: fields are counted from the last ')'.
unsigned long long process_start_time(const std::string& which);

}  // namespace usrtrace::base
