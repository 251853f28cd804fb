// The FUSE mount's door (usrtrace_toolkit/toolkit.h). Built with
// src/fuse when libfuse3 was found (USRTRACE_HAVE_FUSE), else every
// function says the build has none.
#include "usrtrace_toolkit/toolkit.h"

#ifdef USRTRACE_HAVE_FUSE
#include "fuse/fuse_fs.h"
#endif

namespace usrtrace::toolkit {

#ifdef USRTRACE_HAVE_FUSE
bool have_fuse() { return true; }

FuseMount::FuseMount() = default;
FuseMount::~FuseMount() = default;

std::unique_ptr<FuseMount> FuseMount::create(std::unique_ptr<control::Client> first, const std::string& dir,
                                             std::string* err) {
  auto m = fusefs::Mount::create(std::move(first), dir, err);
  if (!m) return nullptr;
  std::unique_ptr<FuseMount> f(new FuseMount);
  f->m_ = std::move(m);
  return f;
}

int FuseMount::daemonize() { return m_->daemonize(); }
int FuseMount::serve() { return m_->serve(); }
const std::string& FuseMount::dir() const { return m_->dir(); }

bool is_fuse_mount(const std::string& dir) { return fusefs::is_mount(dir); }

int fuse_unmount(const std::string& dir, bool lazy, std::string* err) {
  return fusefs::unmount(dir, lazy, err);
}
#else
}  // namespace usrtrace::toolkit
// Without libfuse3 no mount is ever made; the type is only completed.
namespace usrtrace::fusefs {
class Mount {};
}  // namespace usrtrace::fusefs
namespace usrtrace::toolkit {

namespace {
constexpr const char* kNoFuse = "this usrtrace was built without libfuse3 (libfuse3-dev)";
}
bool have_fuse() { return false; }

FuseMount::FuseMount() = default;
FuseMount::~FuseMount() = default;

std::unique_ptr<FuseMount> FuseMount::create(std::unique_ptr<control::Client>, const std::string&,
                                             std::string* err) {
  if (err) *err = kNoFuse;
  return nullptr;
}
int FuseMount::daemonize() { return -1; }
int FuseMount::serve() { return -1; }
const std::string& FuseMount::dir() const {
  static const std::string none;
  return none;
}
bool is_fuse_mount(const std::string&) { return false; }
int fuse_unmount(const std::string&, bool, std::string* err) {
  if (err) *err = kNoFuse;
  return -1;
}
#endif

}  // namespace usrtrace::toolkit
