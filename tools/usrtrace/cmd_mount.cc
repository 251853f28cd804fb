// usrtrace mount PID DIR: a traced process's control files as a filesystem
// (src/fuse), so that `cat DIR/trace_pipe`, `echo 1 > DIR/tracing_on` and
// `mkdir DIR/instances/foo` work as on /sys/kernel/tracing.
// usrtrace umount DIR takes it away again.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "remote.h"
#include "usrtrace_toolkit/toolkit.h"

namespace usrtrace::tool {
namespace {

// "" when `dir` is an empty directory, else why not.
std::string not_empty_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return why(dir, -errno);
  if (!S_ISDIR(st.st_mode)) return dir + ": not a directory";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return why(dir, -errno);
  bool empty = true;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty ? std::string() : dir + ": not an empty directory";
}

int run_mount(int pid, const std::string& dir, bool foreground) {
  if (!toolkit::have_fuse()) return fail("mount", "this usrtrace was built without libfuse3 (libfuse3-dev)");
  auto c = connect_to("mount", pid, true);
  if (!c) return 1;
  char abs[PATH_MAX];
  if (::realpath(dir.c_str(), abs) && toolkit::is_fuse_mount(abs))
    return fail("mount", dir + ": already a usrtrace mount");
  if (std::string e = not_empty_dir(dir); !e.empty()) return fail("mount", e);
  const std::string comm = c->comm();
  std::string err;
  auto m = toolkit::FuseMount::create(std::move(c), dir, &err);
  if (!m) return fail("mount", err);
  if (foreground) {
    fprintf(stderr, "usrtrace mount: process %d (%s) on %s; Ctrl-C or usrtrace umount to stop\n", pid,
            comm.c_str(), m->dir().c_str());
  } else if (m->daemonize() != 0) {  // only the daemon comes back
    return fail("mount", "cannot start the daemon");
  }
  return m->serve() == 0 ? 0 : 1;
}

// DIR as /proc/self/mountinfo names it. realpath() stats DIR, which fails
// on a mount whose daemon died (ENOTCONN): then DIR made absolute as written.
std::string mount_point(const std::string& dir) {
  char abs[PATH_MAX];
  if (::realpath(dir.c_str(), abs)) return abs;
  std::string p = dir;
  if (p.empty() || p[0] != '/') {
    char cwd[PATH_MAX];
    if (!::getcwd(cwd, sizeof cwd)) return dir;
    p = std::string(cwd) + "/" + p;
  }
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

int run_umount(const std::string& dir) {
  if (!toolkit::have_fuse()) return fail("umount", "this usrtrace was built without libfuse3 (libfuse3-dev)");
  const std::string abs = mount_point(dir);
  if (!toolkit::is_fuse_mount(abs)) return fail("umount", dir + ": not a usrtrace mount");
  std::string err;
  if (toolkit::fuse_unmount(abs, false, &err) != 0) return fail("umount", err);
  return 0;
}

}  // namespace

Runner add_mount(CLI::App& app) {
  struct Options {
    int pid = 0;
    std::vector<std::string> args;  // [PID] DIR
    bool foreground = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "mount", "Mount a process's control files (trace, trace_pipe, events/, instances/...) on DIR");
  sub->footer(
      "DIR must be an empty directory. Without -f the command returns once the mount is up and a\n"
      "daemon serves it until `usrtrace umount DIR`, or until the process exits (the mount then\n"
      "goes away by itself; files still open in it fail with ENODEV). See docs/cli/usrtrace-mount.md.");
  sub->add_flag("-f,--foreground", o->foreground,
                "Stay in the foreground until unmounted or interrupted (Ctrl-C unmounts)");
  // -P PID, as every other subcommand takes a process; the older positional
  // PID still works.
  sub->add_option("-P,--pid", o->pid, "The traced process")->check(CLI::PositiveNumber);
  sub->add_option("ARGS", o->args, "[PID] DIR: where to mount (an empty directory)")
      ->required()
      ->expected(1, 2);
  return [o]() -> int {
    int pid = o->pid;
    std::string dir = o->args.back();
    if (o->args.size() == 2) {
      if (pid != 0) {
        fprintf(stderr, "usrtrace mount: the process is named twice (-P %d and %s)\n", pid,
                o->args[0].c_str());
        return 2;
      }
      char* end = nullptr;
      const long v = std::strtol(o->args[0].c_str(), &end, 10);
      if (end == o->args[0].c_str() || *end != '\0' || v <= 0 || v > INT32_MAX) {
        fprintf(stderr, "usrtrace mount: %s is not a process id\n", o->args[0].c_str());
        return 2;
      }
      pid = static_cast<int>(v);
    } else if (pid == 0) {
      fprintf(stderr, "usrtrace mount: which process? usrtrace mount -P PID DIR\n");
      return 2;
    }
    return run_mount(pid, dir, o->foreground);
  };
}

Runner add_umount(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("umount", "Unmount a usrtrace mount");
  sub->footer("Refused while a file in DIR is open (as umount(8)). See docs/cli/usrtrace-mount.md.");
  sub->add_option("DIR", *dir, "The mount point")->required();
  return [dir] { return run_umount(*dir); };
}

}  // namespace usrtrace::tool
