// The function tracers on code built with no tracing flag
// (docs/design/function-patching.md, "Plain functions"): the entry of each
// wanted function becomes a probe of the patch engine (src/patch: a 5-byte
// detour where the first instructions allow it, a punned jump, else int3),
// whose handler is this file's. The handler does what the trampoline of a
// -fpatchable-function-entry site does: patched_entry(), and when it asks,
// the return address goes to the full return hook (trampoline.cc), which
// keeps every register, since the callers of plain code may keep values in
// call-clobbered ones (gcc's -fipa-ra).
//
// Which functions: those with a size, in objects that are neither built for
// tracing (an object with an -finstrument-functions or patchable function
// keeps the set its compiler flags chose) nor usrtrace's runtime and what
// it runs on (the object holding this code, the objects it needs, their
// needs in turn, the dynamic loader): the tracer calls those, as the
// kernel's tracing code is notrace. `_start`, entered by no call, has no
// return address to hook.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "function/control_internal.h"
#include "function/function.h"
#include "patch/patch.h"

namespace usrtrace::function {
namespace engine = usrtrace::patch;
namespace {

struct Object {
  std::string module;  // file name; "" for the main program
  std::string soname;
  std::vector<std::string> needed;
  bool runtime = false;  // holds this code
};

int collect(dl_phdr_info* info, size_t, void* arg) {
  auto* objs = static_cast<std::vector<Object>*>(arg);
  Object o;
  const char* name = info->dlpi_name;
  if (name != nullptr && name[0] != '\0') {
    const char* slash = std::strrchr(name, '/');
    o.module = slash != nullptr ? slash + 1 : name;
  } else if (!objs->empty()) {
    return 0;  // the vdso: no symbols of ours come from it
  }
  const auto here = reinterpret_cast<uintptr_t>(&collect);
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);
    if (ph.p_type == PT_LOAD && here - (info->dlpi_addr + ph.p_vaddr) < ph.p_memsz) o.runtime = true;
  }
  if (dyn != nullptr) {
    uintptr_t strtab = 0;
    size_t strsz = 0;
    std::vector<size_t> needed;
    size_t soname = SIZE_MAX;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
      if (d->d_tag == DT_STRSZ) strsz = d->d_un.d_val;
      if (d->d_tag == DT_NEEDED) needed.push_back(d->d_un.d_val);
      if (d->d_tag == DT_SONAME) soname = d->d_un.d_val;
    }
    // glibc relocates the dynamic section's pointers in place where it is
    // writable (every object but the vdso); an unrelocated one is an
    // offset from the load address.
    if (strtab != 0 && strtab < info->dlpi_addr) strtab += info->dlpi_addr;
    auto str = [&](size_t off) {
      return off < strsz ? std::string(reinterpret_cast<const char*>(strtab + off),
                                       strnlen(reinterpret_cast<const char*>(strtab + off), strsz - off))
                         : std::string();
    };
    if (strtab != 0) {
      for (size_t off : needed) o.needed.push_back(str(off));
      if (soname != SIZE_MAX) o.soname = str(soname);
    }
  }
  objs->push_back(std::move(o));
  return 0;
}

}  // namespace

std::set<std::string> runtime_modules() {
  std::vector<Object> objs;
  dl_iterate_phdr(collect, &objs);
  std::set<std::string> out;
  std::vector<const Object*> todo;
  for (const Object& o : objs)
    if (o.runtime || o.module.rfind("libusrtrace", 0) == 0 || o.module.rfind("ld-linux", 0) == 0 ||
        o.soname.rfind("ld-linux", 0) == 0)
      todo.push_back(&o);
  while (!todo.empty()) {
    const Object* o = todo.back();
    todo.pop_back();
    if (!out.insert(o->module).second) continue;
    for (const std::string& n : o->needed)
      for (const Object& dep : objs)
        if (!out.count(dep.module) && (dep.module == n || dep.soname == n)) todo.push_back(&dep);
  }
  return out;
}

namespace {

// The plain functions armed now, by address, with the name they had (an
// address whose function changed is another site), and why the engine left
// some on int3 or refused them.
std::map<uint64_t, std::string> g_armed USRTRACE_GUARDED_BY(g_mu);
std::map<uint64_t, std::string> g_refused USRTRACE_GUARDED_BY(g_mu);  // "name [module]\twhy"
std::map<uint64_t, engine::Method> g_method USRTRACE_GUARDED_BY(g_mu);

// The engine's handler, at a plain function's entry: regs->sp points at
// the return address. Context: the traced thread; no lock, no allocation.
void on_entry(const engine::Regs* regs, void*) {
  auto* slot = reinterpret_cast<uint64_t*>(regs->sp);
  if (plain_entry(regs->ip, *slot, slot)) *slot = patch::full_return_hook_address();
}

}  // namespace

void arm_plain_locked(const std::vector<Func>& funcs, const std::vector<uint64_t>& wanted)
    USRTRACE_REQUIRES(g_mu) {
  // What should be armed: the wanted plain functions.
  std::map<uint64_t, const Func*> want;
  for (uint64_t fn : wanted) {
    auto f = std::lower_bound(funcs.begin(), funcs.end(), fn,
                              [](const Func& a, uint64_t b) { return a.addr < b; });
    if (f != funcs.end() && f->addr == fn && f->plain) want.emplace(fn, &*f);
  }
  for (auto it = g_refused.begin(); it != g_refused.end();)
    it = want.count(it->first) ? std::next(it) : g_refused.erase(it);
  // Sites of objects since unloaded, or whose code is not what the engine
  // wrote (another object there now): forgotten without a write.
  std::vector<uintptr_t> stale = engine::stale_sites();
  std::vector<engine::Removal> gone, drop;
  for (uintptr_t a : stale)
    if (g_armed.count(a)) gone.push_back({a, &on_entry, nullptr});
  if (!gone.empty()) {
    engine::remove_many(gone, true);
    for (const engine::Removal& r : gone) g_armed.erase(r.addr);
  }
  for (auto it = g_armed.begin(); it != g_armed.end();) {
    auto w = want.find(it->first);
    if (w != want.end() && w->second->mangled == it->second) {
      ++it;
      continue;
    }
    drop.push_back({it->first, &on_entry, nullptr});
    g_method.erase(it->first);
    it = g_armed.erase(it);
  }
  if (!drop.empty()) engine::remove_many(drop);
  std::vector<engine::Request> add;
  std::vector<const Func*> of;
  for (const auto& [fn, f] : want) {
    if (g_armed.count(fn)) continue;
    add.push_back({fn, fn, f->size, &on_entry, nullptr, true});
    of.push_back(f);
  }
  if (add.empty()) return;
  const std::vector<engine::Outcome> out = engine::add_many(add);
  for (size_t i = 0; i < out.size(); ++i) {
    const Func& f = *of[i];
    if (out[i].rc < 0) {
      g_refused[f.addr] = f.name + " [" + f.module + "]\t" + out[i].err;
      continue;
    }
    if (out[i].how == engine::Method::kInt3) {
      g_refused[f.addr] = f.name + " [" + f.module + "]\tint3: " + out[i].why;
    } else {
      g_refused.erase(f.addr);
    }
    g_armed.emplace(f.addr, f.mangled);
    g_method[f.addr] = out[i].how;
  }
}

const char* plain_method_locked(uint64_t fn) USRTRACE_REQUIRES(g_mu) {
  auto it = g_method.find(fn);
  return it == g_method.end() ? "" : engine::method_name(it->second);
}

std::string plain_sites_locked() USRTRACE_REQUIRES(g_mu) {
  std::string out;
  for (const auto& [fn, how] : g_method) {
    char line[64];
    snprintf(line, sizeof line, "%#lx %s\n", static_cast<unsigned long>(fn), engine::method_name(how));
    out += line;
  }
  return out;
}

std::string plain_refused_locked() USRTRACE_REQUIRES(g_mu) {
  std::string out;
  for (const auto& [fn, why] : g_refused) out += why + "\n";
  return out;
}

}  // namespace usrtrace::function

// ---- When the unwinder interposers are not the ones the program calls --
//
// A runtime loaded into a running process (docs/guide/attach.md) comes
// after libgcc_s and libstdc++ in the lookup order, and the program's calls
// are bound already: interpose.cc's shells are never called. The same work is
// then done by probes of the patch engine at the entries of the functions
// the program does call: the unwinder's entries get shadow_unhook_all(),
// __cxa_begin_catch's gets shadow_rehook() with its caller's stack pointer
// (the CFA, as the shell has it: sp + 8 at the entry). Checked at each
// rebuild of the function tracers' sites (ensure_unwind_hooks); armed once,
// kept (a probe that never fires costs nothing).

namespace {

void on_unwind(const usrtrace::patch::Regs*, void*) {
  usrtrace::function::shadow_unhook_all();
  usrtrace::patch::unhook_returns();
}

void on_begin_catch(const usrtrace::patch::Regs* regs, void*) {
  const uint64_t sp = regs->sp + 8;
  usrtrace::function::shadow_rehook(sp);
  usrtrace::patch::rehook_returns(sp);
}

}  // namespace

namespace usrtrace::function {

void ensure_unwind_hooks() {
  static bool done = false;  // under the function tracers' lock (rebuild_locked)
  if (done) return;
  struct Hook {
    const char* name;
    usrtrace::patch::Handler h;
  };
  const Hook hooks[] = {
      {"_Unwind_RaiseException", on_unwind},    {"_Unwind_ForcedUnwind", on_unwind},
      {"_Unwind_Resume_or_Rethrow", on_unwind}, {"_Unwind_Resume", on_unwind},
      {"__cxa_begin_catch", on_begin_catch},
  };
  // The program's binding: the first definition in the global scope. Ours
  // (libusrtrace, or the preload's shells, or a static link's) needs no
  // probe; the calls of a program whose binding is libgcc_s's do. Both at
  // once would be harmless: unhooking and rehooking twice change nothing.
  void* bound = dlsym(RTLD_DEFAULT, "_Unwind_RaiseException");
  if (bound == nullptr) return;  // no unwinder loaded: nothing throws yet
  done = true;
  // (Not compared with &_Unwind_RaiseException: in a runtime loaded
  // RTLD_LOCAL, that address resolves through the global scope first, to
  // libgcc_s's.)
  Dl_info at{}, self{};
  if (dladdr(bound, &at) == 0 || dladdr(reinterpret_cast<const void*>(&ensure_unwind_hooks), &self) == 0 ||
      at.dli_fbase == self.dli_fbase ||
      (at.dli_fname != nullptr && std::strstr(at.dli_fname, "libusrtrace") != nullptr))
    return;
  for (const Hook& k : hooks) {
    void* fn = dlsym(RTLD_DEFAULT, k.name);
    Dl_info owner{};
    if (fn == nullptr || dladdr(fn, &owner) == 0 || owner.dli_fbase == self.dli_fbase) continue;
    Dl_info info{};
    void* extra = nullptr;
    size_t size = 0;
    if (dladdr1(fn, &info, &extra, RTLD_DL_SYMENT) != 0 && extra != nullptr)
      size = static_cast<const ElfW(Sym)*>(extra)->st_size;
    usrtrace::patch::Method how{};
    std::string err;
    const auto at_fn = reinterpret_cast<uintptr_t>(fn);
    if (usrtrace::patch::add(at_fn, at_fn, size, k.h, nullptr, &how, &err) < 0)
      fprintf(
          stderr,
          "usrtrace: function: cannot watch %s (%s): exceptions through traced calls may end the program\n",
          k.name, err.c_str());
  }
}

}  // namespace usrtrace::function
