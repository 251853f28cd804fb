// Mounting, serving and unmounting (fuse_fs.h).
//
// The process's exit is seen by a watcher thread on a pidfd (polling
// kill(pid, 0) where pidfd_open is missing). It unmounts lazily: the mount
// point is free at once, files still open keep answering ENODEV until
// closed, and when the last one is the kernel ends the connection, so
// libfuse's loop returns and the daemon exits.
#define FUSE_USE_VERSION 312
#include <fuse.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "fuse/fuse_fs.h"
#include "fuse/ops.h"

extern char** environ;

namespace usrtrace::fusefs {
namespace {

constexpr const char* kSubtype = "usrtrace";

bool alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// /proc/self/mountinfo writes ' ', '\t', '\n' and '\\' as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Runs fusermount3 with `args`; its exit status, or -1 when it could not run.
int run_fusermount(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::vector<std::string> all = {"fusermount3"};
  all.insert(all.end(), args.begin(), args.end());
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child;
  if (posix_spawnp(&child, "fusermount3", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::unique_ptr<Mount> Mount::create(std::unique_ptr<control::Client> first, const std::string& dir,
                                     std::string* err) {
  char abs[PATH_MAX];
  if (!::realpath(dir.c_str(), abs)) {
    *err = dir + ": " + std::strerror(errno);
    return nullptr;
  }
  const int pid = first->pid();
  std::unique_ptr<Mount> m(new Mount());
  m->dir_ = abs;
  m->fs_ = std::make_unique<Fs>(pid, std::move(first));
  m->fs_->uid = ::getuid();
  m->fs_->gid = ::getgid();
  ::clock_gettime(CLOCK_REALTIME, &m->fs_->mounted_at);

  // fsname (the mount's source) names the process; the type is
  // fuse.usrtrace, which is how umount and is_mount() know our mounts.
  // default_permissions: the kernel checks modes (trace_marker 0220...)
  // as it does on tracefs.
  const std::string opts =
      "fsname=usrtrace-" + std::to_string(pid) + ",subtype=" + kSubtype + ",default_permissions";
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  if (fuse_opt_add_arg(&args, "usrtrace") != 0 || fuse_opt_add_arg(&args, "-o") != 0 ||
      fuse_opt_add_arg(&args, opts.c_str()) != 0) {
    fuse_opt_free_args(&args);
    *err = "out of memory";
    return nullptr;
  }
  m->fuse_ = fuse_new(&args, operations(), sizeof(fuse_operations), m->fs_.get());
  fuse_opt_free_args(&args);
  if (!m->fuse_) {
    *err = "libfuse could not set up the filesystem";
    return nullptr;
  }
  if (fuse_mount(m->fuse_, m->dir_.c_str()) != 0) {
    // libfuse has said why on stderr (no /dev/fuse, fusermount3 missing...).
    *err = "cannot mount on " + m->dir_;
    return nullptr;
  }
  m->mounted_ = true;
  return m;
}

Mount::~Mount() {
  if (fuse_) {
    if (mounted_) fuse_unmount(fuse_);
    fuse_destroy(fuse_);
  }
}

int Mount::daemonize() { return fuse_daemonize(0); }

int Mount::serve() {
  fuse_session* se = fuse_get_session(fuse_);
  if (fuse_set_signal_handlers(se) != 0) return -1;

  // The watcher takes no signal: SIGINT and the like must reach the thread
  // in libfuse's loop, which then ends. (libfuse's workers block them too.)
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  std::thread watcher;
  if (stop_fd >= 0) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    watcher = std::thread([this, stop_fd] { watch_process(stop_fd); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }

  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_idle_threads(cfg, 4);
  const int rc = fuse_loop_mt(fuse_, cfg);
  fuse_loop_cfg_destroy(cfg);

  if (watcher.joinable()) {
    const uint64_t one = 1;
    if (::write(stop_fd, &one, sizeof one) == sizeof one)
      watcher.join();
    else
      watcher.detach();
  }
  if (stop_fd >= 0) ::close(stop_fd);
  fuse_remove_signal_handlers(se);
  // Unmounts unless the kernel did already (umount, or our lazy unmount).
  fuse_unmount(fuse_);
  mounted_ = false;
  return rc < 0 ? -1 : 0;
}

void Mount::watch_process(int stop_fd) {
  const int pid = fs_->pid;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  for (;;) {
    pollfd fds[2] = {{stop_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    const int n = ::poll(fds, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 500);
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    if (pidfd >= 0 ? (fds[1].revents != 0) : !alive(pid)) {
      std::string err;
      unmount(dir_, true, &err);
      break;
    }
  }
  if (pidfd >= 0) ::close(pidfd);
}

bool is_mount(const std::string& dir) {
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
    std::istringstream in(line);
    std::string id, parent, dev, root, point, word;
    in >> id >> parent >> dev >> root >> point;
    while (in >> word && word != "-") {
    }
    std::string type;
    in >> type;
    if (unescape(point) == dir && type == std::string("fuse.") + kSubtype) return true;
  }
  return false;
}

int unmount(const std::string& dir, bool lazy, std::string* err) {
  if (::geteuid() == 0) {
    if (::umount2(dir.c_str(), lazy ? MNT_DETACH : 0) == 0) return 0;
    *err = dir + ": " + std::strerror(errno) +
           (errno == EBUSY ? " (a file in it is open, or a process has its directory there)" : "");
    return -1;
  }
  // Quiet when lazy: that is the daemon, whose stderr goes nowhere.
  std::vector<std::string> args = {"-u"};
  if (lazy) args.insert(args.end(), {"-q", "-z"});
  args.push_back("--");
  args.push_back(dir);
  const int rc = run_fusermount(args);
  if (rc == 0) return 0;
  *err = rc < 0 ? "cannot run fusermount3 (is the fuse3 package installed?)"
                : "fusermount3 -u " + dir + " failed";
  return -1;
}

}  // namespace usrtrace::fusefs
