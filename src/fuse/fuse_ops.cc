// fuse_operations of the FUSE mount: each one a call (or a few) of
// control::Client on a pooled connection (pool.h).
//
//   getattr   stat(path) -> S_IFDIR/S_IFREG | mode, the mounting user's
//   readdir   list(dir)
//   open      open(path, O_ACCMODE | O_TRUNC | O_APPEND): the handle is kept
//             with its connection in fi->fh (a pipe's on a pipe connection,
//             pool.h); direct_io, no page cache
//   read      read(handle, wait_ms): an empty pipe (trace_pipe,
//             trace_pipe_raw) answers -EAGAIN after kReadRoundMs; the read
//             asks again until data, an interrupt (EINTR) or the loop's end;
//             opened with O_NONBLOCK: -EAGAIN at once
//   write     write(handle)
//   truncate  open(path, O_WRONLY | O_TRUNC) + close (size 0 only)
//   release   close(handle)
//   mkdir     mkdir(instances/NAME);  rmdir: rmdir
//   create    EACCES, unlink EPERM: tracefs makes no files on request
//
// Errors: the server's -errno; a connection whose process is gone (-EPIPE)
// gives -ENODEV, an answer that does not decode (-EPROTO) -EIO.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuse/ops.h"

namespace usrtrace::fusefs {
namespace {

// How long one round of a blocking read waits on the server: how soon an
// interrupted reader (Ctrl-C on a cat of trace_pipe) is let go.
constexpr int kReadRoundMs = 200;

struct OpenFile {
  Conn* conn;
  int handle;
  bool nonblock;
};

Fs* fs() { return static_cast<Fs*>(fuse_get_context()->private_data); }

// "/events/enable" -> "events/enable"; "/" -> "" (the root).
std::string rel(const char* path) {
  while (*path == '/') ++path;
  return path;
}

int to_errno(long rc) {
  if (rc >= 0) return 0;
  if (rc == -EPIPE || rc == -ECONNRESET || rc == -ENOTCONN) return -ENODEV;
  if (rc == -EPROTO) return -EIO;
  return static_cast<int>(rc);
}

// The files whose reads wait for data (pool.h: they get connections of
// their own): trace_pipe and trace_pipe_raw, at the top, in an instance or
// in per_cpu/cpuN.
bool is_pipe(const char* path) {
  const char* slash = std::strrchr(path, '/');
  const std::string_view base = slash ? slash + 1 : path;
  return base == "trace_pipe" || base == "trace_pipe_raw";
}

OpenFile* open_file(fuse_file_info* fi) { return reinterpret_cast<OpenFile*>(fi->fh); }

void* op_init(fuse_conn_info* conn, fuse_config* cfg) {
  // The tree changes under us (instances come and go, files are rewritten
  // by the program): nothing may be cached.
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->auto_cache = 0;
  // `echo x > file` must reach the server as one open with O_TRUNC (trace
  // and error_log clear on it), not an open and a separate truncate.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  return fuse_get_context()->private_data;
}

int op_getattr(const char* path, struct stat* st, fuse_file_info*) {
  Fs* f = fs();
  Lease l(&f->pool);
  if (int rc = l.acquire(Role::kGeneral, false); rc < 0) return rc;
  bool is_dir = false;
  unsigned mode = 0;
  const int rc = to_errno(l.note(l.client().stat(rel(path), &is_dir, &mode)));
  if (rc < 0) return rc;
  std::memset(st, 0, sizeof *st);
  st->st_mode = (is_dir ? S_IFDIR : S_IFREG) | (mode & 07777);
  st->st_nlink = is_dir ? 2 : 1;
  st->st_uid = f->uid;
  st->st_gid = f->gid;
  st->st_size = 0;  // as tracefs: contents are made when read
  st->st_blksize = 4096;
  st->st_atim = st->st_mtim = st->st_ctim = f->mounted_at;
  return 0;
}

int op_readdir(const char* path, void* buf, fuse_fill_dir_t filler, off_t, fuse_file_info*,
               fuse_readdir_flags) {
  std::vector<std::string> names;
  {
    Lease l(&fs()->pool);
    if (int rc = l.acquire(Role::kGeneral, false); rc < 0) return rc;
    if (int rc = to_errno(l.note(l.client().list(rel(path), &names))); rc < 0) return rc;
  }
  const auto none = static_cast<fuse_fill_dir_flags>(0);
  filler(buf, ".", nullptr, 0, none);
  filler(buf, "..", nullptr, 0, none);
  for (const std::string& n : names)
    if (filler(buf, n.c_str(), nullptr, 0, none) != 0) break;
  return 0;
}

int op_open(const char* path, fuse_file_info* fi) {
  Fs* f = fs();
  Lease l(&f->pool);
  const int flags = fi->flags & (O_ACCMODE | O_TRUNC | O_APPEND);
  const bool pipe = is_pipe(path) && (flags & O_ACCMODE) != O_WRONLY;
  if (int rc = l.acquire(pipe ? Role::kPipe : Role::kGeneral, true); rc < 0) return rc;
  const int h = l.client().open(rel(path), flags);
  if (int rc = to_errno(l.note(h)); rc < 0) return rc;
  f->pool.add_files(l.conn(), 1);
  fi->fh = reinterpret_cast<uint64_t>(new OpenFile{l.conn(), h, (fi->flags & O_NONBLOCK) != 0});
  // Sizes are 0 (as on tracefs): only direct I/O reads past them. And the
  // contents change, so nothing is kept.
  fi->direct_io = 1;
  fi->keep_cache = 0;
  return 0;
}

int op_read(const char*, char* buf, size_t size, off_t, fuse_file_info* fi) {
  Fs* f = fs();
  OpenFile* of = open_file(fi);
  fuse_session* se = fuse_get_session(fuse_get_context()->fuse);
  size = std::min<size_t>(size, INT_MAX);
  for (;;) {
    long n;
    {
      Lease l(&f->pool);
      l.acquire(of->conn);
      n = l.note(l.client().read(of->handle, buf, size, of->nonblock ? 0 : kReadRoundMs));
    }  // the connection is free for others between rounds
    if (n >= 0) return static_cast<int>(n);
    if (n != -EAGAIN || of->nonblock) return to_errno(n);
    // An empty pipe: wait again, unless the reader was interrupted (the
    // kernel then sent FUSE_INTERRUPT) or the mount is going away.
    if (fuse_interrupted() || fuse_session_exited(se)) return -EINTR;
  }
}

int op_write(const char*, const char* buf, size_t size, off_t, fuse_file_info* fi) {
  Fs* f = fs();
  OpenFile* of = open_file(fi);
  Lease l(&f->pool);
  l.acquire(of->conn);
  const long n = l.note(l.client().write(of->handle, buf, std::min<size_t>(size, INT_MAX)));
  return n >= 0 ? static_cast<int>(n) : to_errno(n);
}

int op_release(const char*, fuse_file_info* fi) {
  Fs* f = fs();
  OpenFile* of = open_file(fi);
  {
    Lease l(&f->pool);
    l.acquire(of->conn);
    l.note(l.client().close(of->handle));
  }
  f->pool.add_files(of->conn, -1);
  delete of;
  return 0;
}

int op_truncate(const char* path, off_t size, fuse_file_info*) {
  // Without atomic O_TRUNC, or truncate(1): what `>` does to the file.
  if (size != 0) return -EINVAL;
  Lease l(&fs()->pool);
  if (int rc = l.acquire(Role::kGeneral, true); rc < 0) return rc;
  const int h = l.client().open(rel(path), O_WRONLY | O_TRUNC);
  if (int rc = to_errno(l.note(h)); rc < 0) return rc;
  return to_errno(l.note(l.client().close(h)));
}

int op_mkdir(const char* path, mode_t) {
  Lease l(&fs()->pool);
  if (int rc = l.acquire(Role::kGeneral, false); rc < 0) return rc;
  return to_errno(l.note(l.client().mkdir(rel(path))));
}

int op_rmdir(const char* path) {
  Lease l(&fs()->pool);
  if (int rc = l.acquire(Role::kGeneral, false); rc < 0) return rc;
  return to_errno(l.note(l.client().rmdir(rel(path))));
}

// tracefs has no create and no unlink (the VFS answers EACCES and EPERM).
int op_create(const char*, mode_t, fuse_file_info*) { return -EACCES; }
int op_unlink(const char*) { return -EPERM; }

const fuse_operations kOperations = [] {
  fuse_operations o{};
  o.init = op_init;
  o.getattr = op_getattr;
  o.readdir = op_readdir;
  o.open = op_open;
  o.read = op_read;
  o.write = op_write;
  o.release = op_release;
  o.truncate = op_truncate;
  o.mkdir = op_mkdir;
  o.rmdir = op_rmdir;
  o.create = op_create;
  o.unlink = op_unlink;
  return o;
}();

}  // namespace

const fuse_operations* operations() { return &kOperations; }

}  // namespace usrtrace::fusefs
