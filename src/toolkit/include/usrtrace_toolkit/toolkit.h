// The tools-only layer: what the `usrtrace` command needs of the library's
// internals and the public API (include/usrtrace/) does not give, behind
// headers that name no internal type. tools/ includes these and the public
// headers only; it has no src/ include path (tools/CMakeLists.txt), so a
// new internal include there fails to compile instead of growing a quiet
// dependency. Not installed, not part of libusrtrace's ABI: the command is
// built from the same tree as the library it links.
//
// Why a layer and not more public API: these are the command's conveniences
// (the recording journal's recovery, the FUSE mount, the trace file's flag
// letters), which a program tracing itself has no use for, and which may
// change at any commit (include/README.md's "none" tier, seen through one
// door).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "usrtrace/control.h"

namespace usrtrace::tracedat {
struct Journal;
}
namespace usrtrace::fusefs {
class Mount;
}

namespace usrtrace::toolkit {

// ---- Attaching (src/toolkit/attach.cc) ----

// Loads `library` into process `pid` (ptrace: a thread stopped in or at a
// system call calls dlopen, then is put back as it was; the call is
// restarted or made). 0, or -errno with *err in one line (ptrace refused
// and why: another user, Yama's ptrace_scope; a static program; dlopen
// failed). Context: the command; blocks up to 35 s.
int inject_library(int pid, const std::string& library, std::string* err);

// ---- Files (src/base/files.h) ----

// Opens PATH for reading if it is a regular file (a FIFO or device is
// refused without blocking on it); *size gets its size. The fd, or -errno
// with *why saying it in one line.
int open_regular_for_read(const std::string& path, off_t* size, std::string* why);

// Writes an export to PATH (base::write_output): a regular file or a new
// name whole or not at all; an existing character device or FIFO
// (/dev/null, a pipe) in place, never replaced; anything else refused.
// `fill` writes to the descriptor: 0 or -errno (and may set *err).
// Returns 0 or -errno with *err.
int write_output(const std::string& path, const std::function<int(int fd, std::string* err)>& fill,
                 std::string* err);

// When process PID started (base::process_start_time): /proc/PID/stat's
// field 22, 0 if unknown. With the pid it names one process.
uint64_t process_start_time(int pid);

// ---- The trace file's flag columns (src/output) ----

// Appends the five latency-format columns (irqs-off, need-resched,
// hardirq/softirq, preempt-depth, migrate-disable) of a record's common
// `flags` and `preempt_count` bytes, exactly as the `trace` file prints
// them.
void put_flag_columns(std::string* out, uint8_t flags, uint8_t preempt_count);

// ---- A recording's journal (src/record/journal.h) ----

// True if the `n` bytes at `p` begin a journal.
bool is_journal(const void* p, size_t n);

// record -K's checks before anything starts (src/record/kernel_source.h):
// the kernel's tracefs (mounted if nothing is), the right to create an
// instance, an event for each of `specs`. 0, or -errno with *err.
int check_kernel_events(const std::vector<std::string>& specs, std::string* err);

// The journals beside `output` that no live recording holds: what killed
// or failed recordings of that output left.
std::vector<std::string> abandoned_journals(const std::string& output);

// A journal read back, to write the trace.dat its recording was writing.
class JournalFile {
 public:
  // Reads the journal open at `fd` (kept open by the caller while the
  // JournalFile lives). nullptr with *err when it is not a journal.
  static std::unique_ptr<JournalFile> read(int fd, std::string* err);
  ~JournalFile();
  JournalFile(const JournalFile&) = delete;
  JournalFile& operator=(const JournalFile&) = delete;

  const std::string& output() const;  // the trace.dat the recording named (never written: see write)
  int file_version() const;
  bool compress() const;
  const std::string& damage() const;  // why it ends early; "" if whole
  uint64_t pages() const;             // pages it holds, all buffers
  bool has_page_files() const;        // its pages are in JOURNAL.S.C beside it
  void set_file_version(int v);
  void set_compress(bool c);

  // Writes `output` from the journal. The path comes from the command
  // line (or beside_journal()), never from the journal: a journal is
  // input, maybe another user's. 0, or -errno with *err.
  int write(const std::string& output, std::string* err) const;

  // DIR/NAME for a journal DIR/.NAME.usrtrace-rec-XXXXXX: where recover
  // writes without -o. "" for a file not named so.
  static std::string beside_journal(const std::string& journal);

 private:
  JournalFile();
  std::unique_ptr<tracedat::Journal> j_;
};

// ---- The FUSE mount (src/fuse) ----

// Whether this build has the mount (libfuse3-dev when it was built).
bool have_fuse();

class FuseMount {
 public:
  // Mounts the control files of `first`'s process on `dir`; nullptr with
  // *err (also when the build has no FUSE).
  static std::unique_ptr<FuseMount> create(std::unique_ptr<control::Client> first, const std::string& dir,
                                           std::string* err);
  ~FuseMount();
  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;

  // Leaves the terminal: only the daemon returns, with 0.
  int daemonize();
  // Serves until the mount goes away; 0, or -1 when libfuse's loop failed.
  int serve();
  const std::string& dir() const;

 private:
  FuseMount();
  std::unique_ptr<fusefs::Mount> m_;
};

// Whether `dir` (absolute) is a usrtrace mount.
bool is_fuse_mount(const std::string& dir);

// Unmounts `dir` (absolute); `lazy` detaches it while files are open.
// 0, or -1 with *err.
int fuse_unmount(const std::string& dir, bool lazy, std::string* err);

}  // namespace usrtrace::toolkit
