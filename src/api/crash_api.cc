// The C API's dump on crash (usrtrace/usrtrace.h) on top of src/crash.
#include <cerrno>
#include <cstring>

#include "base/compiler.h"
#include "crash/crash.h"
#include "usrtrace/usrtrace.h"

using usrtrace::crash::DumpMode;

extern "C" {

int usrtrace_dump_on_crash(const char* mode, const char* path) {
  if (!mode) return -EINVAL;
  DumpMode m;
  size_t bad = 0;
  if (!usrtrace::crash::parse_mode(mode, &m, &bad)) return -EINVAL;
  if (int err = usrtrace::crash::prepare(); err != 0) return err;
  if (path) {
    if (int err = usrtrace::crash::set_file(path); err != 0) return err;
  }
  return usrtrace::crash::set_mode(m);
}

int usrtrace_dump(int fd) {
  int err = usrtrace::crash::dump(fd, usrtrace::crash::mode());
  if (err == -ENOMEM) {  // never prepared: this first call allocates
    if (usrtrace::crash::prepare() != 0) return -ENOMEM;
    err = usrtrace::crash::dump(fd, usrtrace::crash::mode());
  }
  return err;
}

}  // extern "C"
