// The path-based half of the API: usrtrace_tracefs_* and Instance::read /
// write, on top of the control tree (tracefs/tracefs.h).
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "tracefs/tracefs.h"
#include "usrtrace/instance.h"
#include "usrtrace/usrtrace.h"

namespace {

long write_path(const char* path, const char* text, size_t size, int mode) {
  if (!path || (!text && size)) return -EINVAL;
  std::unique_ptr<usrtrace::tracefs::File> f;
  if (int r = usrtrace::tracefs::open(path, O_WRONLY | mode, &f); r < 0) return r;
  return f->write(text ? text : "", size);
}

}  // namespace

extern "C" {

long usrtrace_tracefs_read(const char* path, char* buf, size_t size) {
  if (!path || (!buf && size)) return -EINVAL;
  std::unique_ptr<usrtrace::tracefs::File> f;
  if (int r = usrtrace::tracefs::open(path, O_RDONLY | O_NONBLOCK, &f); r < 0) return r;
  size_t got = 0;
  while (got < size) {
    long n = f->read(buf + got, size - got);
    if (n == -EAGAIN) break;  // trace_pipe with nothing more
    if (n < 0) return got ? static_cast<long>(got) : n;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return static_cast<long>(got);
}

long usrtrace_tracefs_write(const char* path, const char* text, size_t size) {
  return write_path(path, text, size, O_TRUNC);
}

long usrtrace_tracefs_append(const char* path, const char* text, size_t size) {
  return write_path(path, text, size, O_APPEND);
}

int usrtrace_tracefs_mkdir(const char* path) { return path ? usrtrace::tracefs::mkdir(path) : -EINVAL; }

int usrtrace_tracefs_rmdir(const char* path) { return path ? usrtrace::tracefs::rmdir(path) : -EINVAL; }

}  // extern "C"

namespace usrtrace {

Result<std::string> Instance::read(std::string_view path) const {
  if (!tr_) return Result<std::string>::error(ENOENT);
  std::string out;
  long r = tracefs::read_file(dir() + std::string(path), &out);
  if (r < 0) return Result<std::string>::error(static_cast<int>(-r));
  return out;
}

long Instance::write(std::string_view path, std::string_view text) {
  if (!tr_) return -ENOENT;
  std::string p = dir() + std::string(path);
  return write_path(p.c_str(), text.data(), text.size(), O_TRUNC);
}

long Instance::append(std::string_view path, std::string_view text) {
  if (!tr_) return -ENOENT;
  std::string p = dir() + std::string(path);
  return write_path(p.c_str(), text.data(), text.size(), O_APPEND);
}

}  // namespace usrtrace
