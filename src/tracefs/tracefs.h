// The tree of control files: ftrace's names and semantics, in process.
// Paths are relative to the root, as the kernel's are under
// /sys/kernel/tracing: "trace", "events/sched/enable",
// "instances/foo/buffer_size_kb". The C API, the control socket and the FUSE
// mount all go through this interface.
//
// Errors are -errno (the kernel's errno for the same mistake), and a failed
// write adds a line to the instance's error_log the way the kernel does.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace usrtrace::tracefs {

struct Stat {
  bool is_dir = false;
  mode_t mode = 0;  // permission bits as the kernel's tracefs shows them
};

// Context of everything here: any thread but signal handlers; may allocate
// and take locks; File::read on trace_pipe may block.
int stat(std::string_view path, Stat* st);
int list(std::string_view dir, std::vector<std::string>* names);
int mkdir(std::string_view path);  // only instances/NAME
int rmdir(std::string_view path);  // only instances/NAME

class File {
 public:
  virtual ~File() = default;
  // Returns bytes read (0 at end) or -errno.
  virtual long read(char* buf, size_t size) = 0;
  // Returns bytes taken or -errno.
  virtual long write(const char* buf, size_t size) = 0;
};

// flags: O_RDONLY / O_WRONLY / O_RDWR, O_TRUNC (echo >), O_APPEND (echo >>),
// O_NONBLOCK (trace_pipe does not wait).
int open(std::string_view path, int flags, std::unique_ptr<File>* out);

// Whole-file helpers: read everything (trace_pipe: what is there, without
// waiting); write as `echo text > path` (or >> with append).
long read_file(std::string_view path, std::string* out);
long write_file(std::string_view path, std::string_view text, bool append = false);

}  // namespace usrtrace::tracefs
