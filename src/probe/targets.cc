// Resolving a probe's target in this process: its objects from
// dl_iterate_phdr, file offsets through their PT_LOAD headers (the kernel's
// uprobe offsets are file offsets), names through the symbol tables
// (src/symbols: .symtab, a debug file's, else .dynsym).
#include "probe/targets.h"

#include <link.h>
#include <unistd.h>
#include <climits>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "symbols/symbols.h"

namespace usrtrace::probe {
namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string base_name(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The kallsyms form ("ns::f(int)") of each C++ function of `syms`, "" for
// the others and for a clone (its .cold part, a constprop), which is not
// the function. Computed once per symbol table (symbols::process_symbols
// keeps one until an object comes or goes): demangling every symbol on
// each definition cost 10 ms with libstdc++ loaded.
std::shared_ptr<const std::vector<std::string>> kallsyms_names(
    const std::shared_ptr<const std::vector<symbols::Symbol>>& syms) {
  static std::mutex mu;
  static std::shared_ptr<const std::vector<symbols::Symbol>> of;
  static std::shared_ptr<const std::vector<std::string>> names;
  std::lock_guard<std::mutex> l(mu);
  if (of != syms) {
    auto v = std::make_shared<std::vector<std::string>>(syms->size());
    for (size_t i = 0; i < syms->size(); ++i) {
      const symbols::Symbol& sym = (*syms)[i];
      if ((sym.type == 't' || sym.type == 'T') && sym.name.rfind("_Z", 0) == 0 &&
          sym.name.find('.') == std::string::npos)
        (*v)[i] = symbols::kallsyms_name(sym.name);
    }
    of = syms;
    names = std::move(v);
  }
  return names;
}

// A symbol's name as the user may spell it: the table's (mangled) name, or
// the demangled one in kallsyms form (`k`, from kallsyms_names), or the
// demangled name up to its parameters ("ns::f").
bool name_matches(const symbols::Symbol& s, const std::string& k, std::string_view want) {
  if (s.name == want) return true;
  if (k.empty()) return false;
  if (k == want) return true;
  const size_t paren = k.find('(');
  return paren != std::string::npos && std::string_view(k).substr(0, paren) == want;
}

void fill_function(const std::vector<symbols::Symbol>& syms, Resolved* r) {
  for (const symbols::Symbol& s : syms) {
    if (s.type != 't' && s.type != 'T') continue;
    if (r->addr >= s.addr && r->addr < s.addr + (s.size != 0 ? s.size : 1)) {
      r->fn_start = s.addr;
      r->fn_size = s.size;
      r->function = s.name;
      return;
    }
  }
}

}  // namespace

std::vector<LoadedObject> loaded_objects() {
  std::vector<LoadedObject> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* v = static_cast<std::vector<LoadedObject>*>(arg);
        LoadedObject o;
        // The program is "" here; the vDSO has a name but no file.
        o.path = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0' ? info->dlpi_name
                 : v->empty()                                             ? self_exe()
                                                                          : std::string();
        if (o.path.empty()) return 0;
        o.bias = info->dlpi_addr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD)
            o.loads.push_back({ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_memsz, (ph.p_flags & PF_X) != 0,
                               (ph.p_flags & PF_W) != 0});
        }
        v->push_back(std::move(o));
        return 0;
      },
      &out);
  for (LoadedObject& o : out) o.real = real_path(o.path);
  return out;
}

uint64_t data_address(const std::string& object, uint64_t file_offset) {
  const std::string want = real_path(object);
  if (want.empty() || file_offset % 2 != 0) return 0;
  for (const LoadedObject& o : loaded_objects()) {
    if (o.real != want) continue;
    for (const LoadedObject::Load& l : o.loads)
      if (l.write && file_offset >= l.offset && file_offset - l.offset + 2 <= l.filesz)
        return o.bias + l.vaddr + (file_offset - l.offset);
  }
  return 0;
}

bool is_loaded(const std::string& path) {
  const std::string want = real_path(path);
  if (want.empty()) return false;
  for (const LoadedObject& o : loaded_objects())
    if (o.real == want) return true;
  return false;
}

int resolve(const Target& t, Resolved* out, bool* pending, std::string* why) {
  *pending = false;
  const std::vector<LoadedObject> objs = loaded_objects();
  const LoadedObject* obj = nullptr;
  if (!t.path.empty()) {
    const std::string want = real_path(t.path);
    if (want.empty()) {
      *why = t.path + ": " + std::strerror(errno);
      return -ENOENT;
    }
    for (const LoadedObject& o : objs)
      if (o.real == want) obj = &o;
    if (obj == nullptr) {
      *pending = true;
      *why = t.path + " is not loaded in this process";
      return -ENOENT;
    }
  }
  const std::shared_ptr<const std::vector<symbols::Symbol>> kept = symbols::process_symbols();
  const std::vector<symbols::Symbol>& syms = *kept;
  Resolved r;
  if (t.symbol.empty()) {
    // PATH:OFFSET: a file offset, into an executable PT_LOAD segment.
    for (const LoadedObject::Load& ph : obj->loads) {
      if (!ph.exec) continue;
      if (t.offset >= ph.offset && t.offset < ph.offset + ph.filesz) {
        r.addr = obj->bias + ph.vaddr + (t.offset - ph.offset);
        break;
      }
    }
    if (r.addr == 0) {
      *why = "offset 0x" +
             [&] {
               char b[32];
               snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(t.offset));
               return std::string(b);
             }() +
             " is not in the executable code of " + t.path;
      return -EINVAL;
    }
  } else {
    const symbols::Symbol* found = nullptr;
    const std::string module = obj != nullptr ? (obj == &objs.front() ? "" : base_name(obj->path)) : "";
    const std::shared_ptr<const std::vector<std::string>> knames = kallsyms_names(kept);
    for (size_t i = 0; i < syms.size(); ++i) {
      const symbols::Symbol& s = syms[i];
      if ((s.type != 't' && s.type != 'T') || !name_matches(s, (*knames)[i], t.symbol)) continue;
      if (obj != nullptr && s.module != module) continue;
      if (found != nullptr && found->addr != s.addr) {
        *why = "the symbol " + t.symbol + " is in more than one object (" +
               (found->module.empty() ? "the program" : found->module) + ", " +
               (s.module.empty() ? "the program" : s.module) + "): name it as PATH:SYMBOL";
        return -EADDRNOTAVAIL;
      }
      found = &s;
    }
    if (found == nullptr) {
      *why = "no function " + t.symbol + (t.path.empty() ? " in this process" : " in " + t.path);
      return -ENOENT;
    }
    if (found->size != 0 && t.offset >= found->size) {
      *why = "offset " + std::to_string(t.offset) + " is past the end of " + t.symbol + " (" +
             std::to_string(found->size) + " bytes)";
      return -EINVAL;
    }
    r.addr = found->addr + t.offset;
    if (obj == nullptr) {
      for (const LoadedObject& o : objs)
        if ((found->module.empty() && &o == &objs.front()) ||
            (!found->module.empty() && base_name(o.path) == found->module))
          obj = &o;
    }
  }
  if (obj != nullptr) {
    r.bias = obj->bias;
    r.object = obj->real.empty() ? obj->path : obj->real;
  }
  fill_function(syms, &r);
  *out = std::move(r);
  return 0;
}

}  // namespace usrtrace::probe
