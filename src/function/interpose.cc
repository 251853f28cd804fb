// Interposed functions that keep patched tracing correct across exceptions
// and dlopen/dlclose (docs/design/function-patching.md, "Exceptions" and
// "Objects"):
//
//   _Unwind_RaiseException, _Unwind_ForcedUnwind, _Unwind_Resume_or_Rethrow,
//   _Unwind_Resume:  shadow_unhook_all() first, so that the unwinder walks
//                    the real return addresses, not the return hook;
//   __cxa_begin_catch: shadow_rehook(sp of the catching frame);
//   dlopen, dlclose: objects_changed() after the real call returns (so not
//                    under the loader's lock).
//
// Each public definition is a thin shell around a usrtrace_internal_*
// body, exported so that libusrtrace-preload.so defines the same shells
// (src/preload/preload.cc): a preloaded object comes before libgcc_s, libstdc++
// and libc in the lookup order, whereas libusrtrace.so loaded as its
// dependency comes after them. The versions in cmake/usrtrace.map are those
// programs bind these names to.
//
// Not seen: glibc's own calls (pthread_exit and pthread_cancel reach
// libgcc_s's _Unwind_ForcedUnwind through a pointer glibc looked up itself).
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>
#include <unwind.h>

#include <cxxabi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "base/compiler.h"
#include "function/function.h"
#include "patch/patch.h"

extern "C" {
USRTRACE_EXPORT _Unwind_Reason_Code usrtrace_internal_unwind_raise(_Unwind_Exception* e);
USRTRACE_EXPORT _Unwind_Reason_Code usrtrace_internal_unwind_forced(_Unwind_Exception* e,
                                                                    _Unwind_Stop_Fn stop, void* arg);
USRTRACE_EXPORT _Unwind_Reason_Code usrtrace_internal_unwind_rethrow(_Unwind_Exception* e);
USRTRACE_EXPORT void usrtrace_internal_unwind_resume(_Unwind_Exception* e);
USRTRACE_EXPORT void* usrtrace_internal_begin_catch(void* exc, uint64_t sp);
USRTRACE_EXPORT void* usrtrace_internal_dlopen(const char* file, int mode);
USRTRACE_EXPORT int usrtrace_internal_dlclose(void* handle);
}

// libusrtrace-preload.so's RTLD_NEXT (src/preload/preload.cc), when it is there.
extern "C" __attribute__((weak, visibility("default"))) void* usrtrace_preload_next(const char* name);

namespace {

// The real `name`: the next definition after us, or, when we come after its
// owner in the lookup order (libusrtrace.so as the preload's dependency),
// the one in the object that holds `anchor` (a function of the same library
// that we do not interpose). Never dlopen: that would come back here.
void* real(const char* name, const void* anchor, const void* self) {
  void* f = dlsym(RTLD_NEXT, name);
  // Preloaded: libusrtrace-preload.so, before the owners, asks for us.
  if ((f == nullptr || f == self) && usrtrace_preload_next != nullptr) f = usrtrace_preload_next(name);
  if (f == nullptr || f == self) {
    Dl_info info{};
    link_map* lm = nullptr;
    // A glibc link_map is a dlsym handle.
    if (dladdr1(anchor, &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) != 0 && lm != nullptr)
      f = dlsym(lm, name);
  }
  if (f == nullptr || f == self) {
    fprintf(stderr, "usrtrace: function: cannot find the real %s\n", name);
    abort();
  }
  return f;
}

template <typename Fn>
Fn real_fn(const char* name, const void* anchor, const void* self) {
  return reinterpret_cast<Fn>(real(name, anchor, self));
}

// Nested dlopen (a constructor that dlopens): the outermost call reports.
thread_local int t_dl_depth = 0;

}  // namespace

// ---- The bodies --------------------------------------------------------

extern "C" USRTRACE_EXPORT _Unwind_Reason_Code usrtrace_internal_unwind_raise(_Unwind_Exception* e) {
  using Fn = _Unwind_Reason_Code (*)(_Unwind_Exception*);
  static const Fn f = real_fn<Fn>("_Unwind_RaiseException", reinterpret_cast<const void*>(&_Unwind_GetIP),
                                  reinterpret_cast<const void*>(&usrtrace_internal_unwind_raise));
  usrtrace::function::shadow_unhook_all();
  usrtrace::patch::unhook_returns();
  return f(e);
}

extern "C" USRTRACE_EXPORT _Unwind_Reason_Code usrtrace_internal_unwind_forced(_Unwind_Exception* e,
                                                                               _Unwind_Stop_Fn stop,
                                                                               void* arg) {
  using Fn = _Unwind_Reason_Code (*)(_Unwind_Exception*, _Unwind_Stop_Fn, void*);
  static const Fn f = real_fn<Fn>("_Unwind_ForcedUnwind", reinterpret_cast<const void*>(&_Unwind_GetIP),
                                  reinterpret_cast<const void*>(&usrtrace_internal_unwind_forced));
  usrtrace::function::shadow_unhook_all();
  usrtrace::patch::unhook_returns();
  return f(e, stop, arg);
}

extern "C" USRTRACE_EXPORT _Unwind_Reason_Code usrtrace_internal_unwind_rethrow(_Unwind_Exception* e) {
  using Fn = _Unwind_Reason_Code (*)(_Unwind_Exception*);
  static const Fn f = real_fn<Fn>("_Unwind_Resume_or_Rethrow", reinterpret_cast<const void*>(&_Unwind_GetIP),
                                  reinterpret_cast<const void*>(&usrtrace_internal_unwind_rethrow));
  usrtrace::function::shadow_unhook_all();
  usrtrace::patch::unhook_returns();
  return f(e);
}

// A cleanup (a destructor run during the unwind) may have caught an
// exception of its own, and so rehooked frames this unwind still has to
// cross: unhook again before going on.
extern "C" USRTRACE_EXPORT void usrtrace_internal_unwind_resume(_Unwind_Exception* e) {
  using Fn = void (*)(_Unwind_Exception*);
  static const Fn f = real_fn<Fn>("_Unwind_Resume", reinterpret_cast<const void*>(&_Unwind_GetIP),
                                  reinterpret_cast<const void*>(&usrtrace_internal_unwind_resume));
  usrtrace::function::shadow_unhook_all();
  usrtrace::patch::unhook_returns();
  f(e);
  abort();  // _Unwind_Resume does not return
}

// `sp` is the catching function's stack pointer, as the landing pad that
// calls __cxa_begin_catch sees it (the CFA of the shell). The slot of a
// frame the unwind removed lies below it; the catching function's own slot
// and its callers' lie above it.
extern "C" USRTRACE_EXPORT void* usrtrace_internal_begin_catch(void* exc, uint64_t sp) {
  using Fn = void* (*)(void*);
  static const Fn f =
      real_fn<Fn>("__cxa_begin_catch", reinterpret_cast<const void*>(&__cxxabiv1::__cxa_end_catch),
                  reinterpret_cast<const void*>(&usrtrace_internal_begin_catch));
  usrtrace::function::shadow_rehook(sp);
  usrtrace::patch::rehook_returns(sp);
  return f(exc);
}

extern "C" USRTRACE_EXPORT void* usrtrace_internal_dlopen(const char* file, int mode) {
  using Fn = void* (*)(const char*, int);
  static const Fn f = real_fn<Fn>("dlopen", reinterpret_cast<const void*>(&dlerror),
                                  reinterpret_cast<const void*>(&usrtrace_internal_dlopen));
  ++t_dl_depth;
  void* h = f(file, mode);
  --t_dl_depth;
  if (h != nullptr && t_dl_depth == 0 && !(mode & RTLD_NOLOAD)) usrtrace::function::objects_changed();
  return h;
}

extern "C" USRTRACE_EXPORT int usrtrace_internal_dlclose(void* handle) {
  using Fn = int (*)(void*);
  static const Fn f = real_fn<Fn>("dlclose", reinterpret_cast<const void*>(&dlerror),
                                  reinterpret_cast<const void*>(&usrtrace_internal_dlclose));
  ++t_dl_depth;
  const int rc = f(handle);
  --t_dl_depth;
  if (rc == 0 && t_dl_depth == 0) usrtrace::function::objects_changed();
  return rc;
}

// ---- The shells (the same in src/preload/preload.cc) --------------------

extern "C" USRTRACE_EXPORT _Unwind_Reason_Code _Unwind_RaiseException(_Unwind_Exception* e) {
  return usrtrace_internal_unwind_raise(e);
}
extern "C" USRTRACE_EXPORT _Unwind_Reason_Code _Unwind_ForcedUnwind(_Unwind_Exception* e,
                                                                    _Unwind_Stop_Fn stop, void* arg) {
  return usrtrace_internal_unwind_forced(e, stop, arg);
}
extern "C" USRTRACE_EXPORT _Unwind_Reason_Code _Unwind_Resume_or_Rethrow(_Unwind_Exception* e) {
  return usrtrace_internal_unwind_rethrow(e);
}
extern "C" USRTRACE_EXPORT void _Unwind_Resume(_Unwind_Exception* e) { usrtrace_internal_unwind_resume(e); }
extern "C" USRTRACE_EXPORT void* __cxa_begin_catch(void* exc) noexcept {
  return usrtrace_internal_begin_catch(exc, reinterpret_cast<uint64_t>(__builtin_dwarf_cfa()));
}
extern "C" USRTRACE_EXPORT void* dlopen(const char* file, int mode) {
  return usrtrace_internal_dlopen(file, mode);
}
extern "C" USRTRACE_EXPORT int dlclose(void* handle) { return usrtrace_internal_dlclose(handle); }
