// The FUSE mount: a traced process's tree of control files (trace,
// trace_pipe, instances/, events/..., per_cpu/cpuN/...) as a filesystem, so
// that cat, echo, ls, mkdir and rmdir work on it as on the kernel's tracefs.
// Every operation goes to the process through control::Client
// (usrtrace/control.h); nothing is cached (attribute and entry timeouts 0,
// direct_io on every file), since the tree changes under us.
//
//   mount   stat/list/open/read/write/close/mkdir/rmdir of the server,
//           on a pool of up to kMaxConns connections (fuse_ops.cc)
//   serve   libfuse's multi-threaded loop, plus a thread that watches the
//           process and unmounts (lazily) once it has exited (mount.cc)
//
// Errors are the server's -errno (EINVAL for a bad value, EACCES for a
// read-only file, ENOENT, ...); once the process is gone every operation
// gives ENODEV, and the mount goes away by itself.
#pragma once

#include <memory>
#include <string>

#include "usrtrace/control.h"

struct fuse;

namespace usrtrace::fusefs {

struct Fs;

class Mount {
 public:
  // Mounts the tree of `first`'s process on `dir` (an existing directory).
  // `first` becomes the pool's first connection. nullptr with *err saying
  // why in one line.
  static std::unique_ptr<Mount> create(std::unique_ptr<control::Client> first, const std::string& dir,
                                       std::string* err);
  ~Mount();  // unmounts if still mounted
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  // Leaves the terminal (fork, setsid, stdio to /dev/null): the calling
  // process exits 0 once the child runs; only the child returns, with 0.
  // Context: before serve(), no other thread running.
  int daemonize();
  // Serves requests until the mount goes away: `usrtrace umount`, SIGINT,
  // SIGTERM or SIGHUP (then unmounts), or the process's exit (a lazy
  // unmount: files still open keep failing with ENODEV until closed).
  // 0, or -1 when libfuse's loop failed.
  int serve();

  const std::string& dir() const { return dir_; }

 private:
  Mount() = default;
  void watch_process(int stop_fd);

  std::string dir_;  // absolute
  std::unique_ptr<Fs> fs_;
  struct fuse* fuse_ = nullptr;
  bool mounted_ = false;
};

// Whether `dir` (absolute) is a usrtrace mount (fuse.usrtrace in
// /proc/self/mountinfo).
bool is_mount(const std::string& dir);

// Unmounts `dir` (absolute): umount2() as root, fusermount3 -u otherwise;
// `lazy` detaches it even while files in it are open. 0, or -1 with *err.
int unmount(const std::string& dir, bool lazy, std::string* err);

}  // namespace usrtrace::fusefs
