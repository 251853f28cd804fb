// Attaching to a process that has no usrtrace runtime (docs/guide/attach.md):
// one of its threads is stopped with ptrace and made to call
// dlopen(LIBRARY, RTLD_NOW) as gdb's `call` would, then put back exactly
// as it was. The library's constructor starts the control server; the
// command then connects as to any process that links usrtrace.
//
// The thread and the moment. dlopen takes the loader's lock and calls
// malloc: a thread stopped while it holds malloc's (or the loader's) lock
// would wait for itself forever. A thread inside a system call holds no
// such lock unless the call is one that malloc or the loader makes (mmap,
// munmap, mremap, brk, madvise, mprotect): so the thread is taken when it
// is in any other system call, blocked in one (stopped by PTRACE_INTERRUPT:
// the call is interrupted, to be restarted) or entering one (PTRACE_SYSCALL's
// entry stop: the call is made after, instead of before). A thread that is
// running user code is let run to its next system call.
//
// Putting it back. Interrupted in a call: its registers are restored as
// they were (rax holds -ERESTART*, orig_rax the call), and the kernel
// restarts the call as it restarts any call a stop interrupts. At a
// call's entry: the registers are restored with rip back on the `syscall`
// instruction and rax the call's number, so the thread makes the call it
// was about to make. The vector state is saved and restored whole
// (NT_X86_XSTATE). Signals that came for the thread while dlopen ran are
// sent again after the detach.
//
// dlopen returns to address 0: the fault stops the thread for us, with
// the handle in rax.
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "usrtrace_toolkit/toolkit.h"

namespace usrtrace::toolkit {
namespace {

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Why ptrace was refused, in the words a user needs.
std::string ptrace_refused(int pid, int err) {
  std::string why = std::string("ptrace: ") + strerror(err);
  if (err == EPERM) {
    const std::string scope = read_file("/proc/sys/kernel/yama/ptrace_scope");
    why += " (attaching to process " + std::to_string(pid) +
           " needs the same user and no setuid history, or CAP_SYS_PTRACE";
    if (!scope.empty() && scope[0] != '0')
      why += "; Yama's kernel.yama.ptrace_scope is " + scope.substr(0, 1) +
             (scope[0] == '1'   ? ": only a parent may attach, or root (CAP_SYS_PTRACE)"
              : scope[0] == '2' ? ": only root (CAP_SYS_PTRACE) may attach"
                                : ": no process may attach");
    why += ")";
  }
  return why;
}

// The run-time address of `name` (its default version) in the target's
// libc, from /proc/PID/maps and the library's dynamic symbols. 0 with *why.
uint64_t find_in_libc(int pid, const char* name, std::string* why) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  if (!maps) {
    *why = "cannot read /proc/" + std::to_string(pid) + "/maps";
    return 0;
  }
  std::string line, path;
  uint64_t base = 0;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0, off = 0;
    char perms[8] = {};
    int n = 0;
    if (sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %n", &lo, &hi, perms, &off, &n) < 4 || n <= 0) continue;
    const std::string file = line.substr(static_cast<size_t>(n));
    const size_t slash = file.rfind('/');
    const std::string base_name = slash == std::string::npos ? file : file.substr(slash + 1);
    if (off == 0 && (base_name.rfind("libc.so", 0) == 0 || base_name.rfind("libc-2.", 0) == 0)) {
      base = lo;
      path = file;
      break;
    }
  }
  if (path.empty()) {
    *why = "process " + std::to_string(pid) +
           " has no libc loaded (a static program: nothing can load the runtime)";
    return 0;
  }
  // The file as the target sees it (its mount namespace).
  const std::string at = "/proc/" + std::to_string(pid) + "/root" + path;
  const int fd = open(at.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot open the target's libc " + path + ": " + strerror(errno);
    return 0;
  }
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  uint64_t addr = 0;
  Elf_Data *syms = nullptr, *versym = nullptr;
  size_t strndx = 0, count = 0;
  for (Elf_Scn* scn = elf != nullptr ? elf_nextscn(elf, nullptr) : nullptr; scn != nullptr;
       scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    if (sh.sh_type == SHT_DYNSYM && sh.sh_entsize != 0) {
      syms = elf_getdata(scn, nullptr);
      strndx = sh.sh_link;
      count = sh.sh_size / sh.sh_entsize;
    } else if (sh.sh_type == SHT_GNU_versym) {
      versym = elf_getdata(scn, nullptr);
    }
  }
  for (size_t i = 0; syms != nullptr && i < count; ++i) {
    GElf_Sym s;
    if (gelf_getsym(syms, static_cast<int>(i), &s) == nullptr || s.st_value == 0 ||
        GELF_ST_TYPE(s.st_info) != STT_FUNC)
      continue;
    const char* n = elf_strptr(elf, strndx, s.st_name);
    if (n == nullptr || strcmp(n, name) != 0) continue;
    GElf_Versym v = 0;
    if (versym != nullptr && gelf_getversym(versym, static_cast<int>(i), &v) != nullptr && (v & 0x8000) != 0)
      continue;  // a hidden (old) version
    addr = base + s.st_value;
    break;
  }
  if (elf != nullptr) elf_end(elf);
  close(fd);
  if (addr == 0) *why = std::string("no ") + name + " in " + path;
  return addr;
}

// Waits for the thread's next stop, at most until `deadline` (ms,
// CLOCK_MONOTONIC). The status, or -ETIMEDOUT, or -errno.
int wait_stop(int tid, uint64_t deadline) {
  for (;;) {
    int status = 0;
    const int rc = waitpid(tid, &status, __WALL | WNOHANG);
    if (rc == tid) return status;
    if (rc < 0 && errno != EINTR) return -errno;
    if (now_ms() >= deadline) return -ETIMEDOUT;
    // A child of ours it is not: no SIGCHLD to wait on, so a short sleep
    // between polls of a bounded wait.
    const timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
}

bool malloc_call(long nr) {
  return nr == SYS_mmap || nr == SYS_munmap || nr == SYS_mremap || nr == SYS_brk || nr == SYS_madvise ||
         nr == SYS_mprotect;
}

// The thread to borrow: the main one, unless it has exited.
int pick_thread(int pid) {
  const std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close_paren = st.rfind(')');
  if (close_paren != std::string::npos && close_paren + 2 < st.size() && st[close_paren + 2] != 'Z')
    return pid;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (d == nullptr) return pid;
  int tid = pid;
  while (dirent* e = readdir(d)) {
    const int t = atoi(e->d_name);
    if (t > 0 && t != pid) {
      tid = t;
      break;
    }
  }
  closedir(d);
  return tid;
}

}  // namespace

int inject_library(int pid, const std::string& library, std::string* err) {
  std::string why;
  const uint64_t dlopen_at = find_in_libc(pid, "dlopen", &why);
  if (dlopen_at == 0) {
    *err = why;
    return -ENOENT;
  }
  const int tid = pick_thread(pid);
  if (ptrace(PTRACE_SEIZE, tid, nullptr, reinterpret_cast<void*>(PTRACE_O_TRACESYSGOOD)) != 0) {
    const int e = errno;
    *err = ptrace_refused(pid, e);
    return -e;
  }
  std::vector<int> pending;  // signals that came meanwhile, sent again after
  int rc = 0;
  auto detach = [&]() {
    ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    for (int sig : pending) syscall(SYS_tgkill, pid, tid, sig);
  };
  const uint64_t deadline = now_ms() + 5000;
  ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  // Stop the thread in or at a system call that is not malloc's.
  user_regs_struct saved{};
  bool at_entry = false;
  for (;;) {
    const int st = wait_stop(tid, deadline);
    if (st < 0) {
      *err = st == -ETIMEDOUT ? "thread " + std::to_string(tid) +
                                    " made no system call in 5 s (it runs user code only, or is stopped)"
                              : std::string("waitpid: ") + strerror(-st);
      if (st == -ETIMEDOUT) {
        ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
        wait_stop(tid, now_ms() + 1000);
      }
      detach();
      return st;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      *err = "process " + std::to_string(pid) + " exited";
      return -ESRCH;
    }
    const int sig = WSTOPSIG(st);
    const int event = st >> 16;
    if (event == 0 && sig != (SIGTRAP | 0x80)) {  // a signal for the thread: later
      if (sig != SIGSTOP) pending.push_back(sig);
      ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr);
      continue;
    }
    if (ptrace(PTRACE_GETREGS, tid, nullptr, &saved) != 0) {
      *err = std::string("PTRACE_GETREGS: ") + strerror(errno);
      detach();
      return -EIO;
    }
    const long nr = static_cast<long>(saved.orig_rax);
    if (nr >= 0 && !malloc_call(nr)) {
      at_entry = sig == (SIGTRAP | 0x80);
      break;
    }
    ptrace(PTRACE_SYSCALL, tid, nullptr, nullptr);  // to the next call's entry
  }
  // The vector state, whole.
  std::vector<uint8_t> xstate(16384);
  iovec xio{xstate.data(), xstate.size()};
  const bool have_x = ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &xio) == 0;
  const size_t xlen = xio.iov_len;

  // The call: the path below the red zone, a zero return address.
  const uint64_t str = (saved.rsp - 256 - library.size() - 1) & ~uint64_t{15};
  const uint64_t sp = str - 8;  // [sp] = 0; rsp % 16 == 8, as at any function's entry
  std::vector<uint8_t> frame(8 + library.size() + 1, 0);
  std::memcpy(frame.data() + 8, library.c_str(), library.size() + 1);
  iovec local{frame.data(), frame.size()}, remote{reinterpret_cast<void*>(sp), frame.size()};
  if (process_vm_writev(tid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(frame.size())) {
    // Without process_vm_writev (seccomp, old kernel): word by word.
    for (size_t i = 0; i < frame.size(); i += 8) {
      uint64_t w = 0;
      std::memcpy(&w, frame.data() + i, std::min<size_t>(8, frame.size() - i));
      if (frame.size() - i < 8) {
        errno = 0;
        const long old = ptrace(PTRACE_PEEKDATA, tid, reinterpret_cast<void*>(sp + i), nullptr);
        const size_t n = frame.size() - i;
        std::memcpy(reinterpret_cast<uint8_t*>(&w) + n, reinterpret_cast<const uint8_t*>(&old) + n, 8 - n);
      }
      if (ptrace(PTRACE_POKEDATA, tid, reinterpret_cast<void*>(sp + i), reinterpret_cast<void*>(w)) != 0) {
        *err = std::string("cannot write the target's stack: ") + strerror(errno);
        detach();
        return -EIO;
      }
    }
  }
  user_regs_struct call = saved;
  call.rip = dlopen_at;
  call.rsp = sp;
  call.rdi = str;
  call.rsi = RTLD_NOW;
  call.rax = 0;
  call.orig_rax = static_cast<unsigned long long>(-1);  // no restart, no call made at an entry stop
  if (ptrace(PTRACE_SETREGS, tid, nullptr, &call) != 0) {
    *err = std::string("PTRACE_SETREGS: ") + strerror(errno);
    detach();
    return -EIO;
  }
  ptrace(PTRACE_CONT, tid, nullptr, nullptr);
  user_regs_struct done{};
  const uint64_t call_deadline = now_ms() + 30000;
  for (;;) {
    const int st = wait_stop(tid, call_deadline);
    if (st < 0) {
      // dlopen is still running (a lock held elsewhere?): the thread cannot
      // be put back without abandoning the loader's state; leave it be.
      *err = "dlopen in process " + std::to_string(pid) + " did not return in 30 s";
      ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
      return -ETIMEDOUT;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      *err = "process " + std::to_string(pid) + " exited while loading the runtime";
      return -ESRCH;
    }
    const int sig = WSTOPSIG(st);
    if ((st >> 16) == 0 && sig == SIGSEGV && ptrace(PTRACE_GETREGS, tid, nullptr, &done) == 0 &&
        done.rip == 0)
      break;
    if ((st >> 16) == 0 && sig != SIGSTOP && sig != (SIGTRAP | 0x80)) pending.push_back(sig);
    ptrace(PTRACE_CONT, tid, nullptr, nullptr);
  }
  // Back as it was.
  user_regs_struct back = saved;
  if (at_entry) {
    back.rax = saved.orig_rax;  // the call it was entering, made again
    back.rip -= 2;              // on its `syscall` instruction
    back.orig_rax = static_cast<unsigned long long>(-1);
  }
  if (have_x) {
    iovec xback{xstate.data(), xlen};
    ptrace(PTRACE_SETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &xback);
  }
  if (ptrace(PTRACE_SETREGS, tid, nullptr, &back) != 0) rc = -EIO;
  detach();
  if (rc < 0) {
    *err = "cannot restore the registers of thread " + std::to_string(tid);
    return rc;
  }
  if (done.rax == 0) {
    *err = "dlopen(" + library + ") failed in process " + std::to_string(pid) +
           " (a library it cannot load: another libc, a missing dependency, or noexec)";
    return -ENOEXEC;
  }
  return 0;
}

}  // namespace usrtrace::toolkit
