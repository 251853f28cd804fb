#include "symbols/symbols.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace usrtrace::symbols {
namespace {

struct Object {
  std::string path;
  std::string module;
  uint64_t base;
};

int collect(struct dl_phdr_info* info, size_t, void* arg) {
  auto* objs = static_cast<std::vector<Object>*>(arg);
  const char* name = info->dlpi_name;
  if (name == nullptr || name[0] == '\0') {
    if (objs->empty()) objs->push_back({"/proc/self/exe", "", info->dlpi_addr});  // main program
    return 0;
  }
  if (std::strstr(name, "linux-vdso") != nullptr) return 0;
  std::string path(name);
  const size_t slash = path.rfind('/');
  objs->push_back({path, slash == std::string::npos ? path : path.substr(slash + 1), info->dlpi_addr});
  return 0;
}

void read_object(const Object& o, std::vector<Symbol>* out) {
  const int fd = ::open(o.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) {
    ::close(fd);
    return;
  }
  Elf_Scn* best = nullptr;
  GElf_Shdr best_hdr{};
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    if (sh.sh_type == SHT_SYMTAB || (sh.sh_type == SHT_DYNSYM && best == nullptr)) {
      best = scn;
      best_hdr = sh;
    }
  }
  // -finstrument-functions code calls the hook: the name is in the symbol
  // tables (undefined, or defined in a program linked with libusrtrace.a;
  // not glibc's own empty definitions). Its GOT slot comes from the dynamic
  // relocations (JUMP_SLOT for the PLT, GLOB_DAT for -fno-plt).
  bool instrumented = false;
  uint64_t hook_got = 0;
  const bool is_libc = o.module.rfind("libc.so", 0) == 0;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_entsize == 0) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (d == nullptr) continue;
    const size_t n = sh.sh_size / sh.sh_entsize;
    if (sh.sh_type == SHT_DYNSYM || sh.sh_type == SHT_SYMTAB) {
      for (size_t i = 0; i < n && !instrumented; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(d, static_cast<int>(i), &sym) == nullptr) continue;
        const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
        if (name != nullptr && std::strcmp(name, "__cyg_profile_func_enter") == 0)
          instrumented = !is_libc && o.module.rfind("libusrtrace", 0) != 0;
      }
    } else if (sh.sh_type == SHT_RELA) {
      Elf_Scn* symscn = elf_getscn(elf, sh.sh_link);
      GElf_Shdr symsh;
      if (symscn == nullptr || gelf_getshdr(symscn, &symsh) == nullptr || symsh.sh_type != SHT_DYNSYM)
        continue;
      Elf_Data* symdata = elf_getdata(symscn, nullptr);
      for (size_t i = 0; i < n && symdata != nullptr; ++i) {
        GElf_Rela r;
        GElf_Sym sym;
        if (gelf_getrela(d, static_cast<int>(i), &r) == nullptr) continue;
        const auto t = GELF_R_TYPE(r.r_info);
        if (t != R_X86_64_JUMP_SLOT && t != R_X86_64_GLOB_DAT) continue;
        if (gelf_getsym(symdata, static_cast<int>(GELF_R_SYM(r.r_info)), &sym) == nullptr) continue;
        const char* name = elf_strptr(elf, symsh.sh_link, sym.st_name);
        if (name != nullptr && std::strcmp(name, "__cyg_profile_func_enter") == 0)
          hook_got = o.base + r.r_offset;
      }
    }
  }
  Elf_Data* data = best ? elf_getdata(best, nullptr) : nullptr;
  if (data != nullptr && best_hdr.sh_entsize != 0) {
    const size_t n = best_hdr.sh_size / best_hdr.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      const int type = GELF_ST_TYPE(sym.st_info);
      if ((type != STT_FUNC && type != STT_OBJECT) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
        continue;
      const char* name = elf_strptr(elf, best_hdr.sh_link, sym.st_name);
      if (name == nullptr || name[0] == '\0') continue;
      const bool global = GELF_ST_BIND(sym.st_info) != STB_LOCAL;
      char t = type == STT_FUNC ? 't' : 'd';
      if (global) t = static_cast<char>(t - 'a' + 'A');
      out->push_back({o.base + sym.st_value, sym.st_size, t, name, o.module, instrumented && type == STT_FUNC,
                      hook_got});
    }
  }
  elf_end(elf);
  ::close(fd);
}

}  // namespace

std::vector<Symbol> load_process_symbols() {
  elf_version(EV_CURRENT);
  std::vector<Object> objs;
  dl_iterate_phdr(collect, &objs);
  std::vector<Symbol> syms;
  for (const Object& o : objs) read_object(o, &syms);
  std::sort(syms.begin(), syms.end(), [](const Symbol& a, const Symbol& b) {
    return a.addr != b.addr ? a.addr < b.addr : a.name < b.name;
  });
  syms.erase(
      std::unique(syms.begin(), syms.end(),
                  [](const Symbol& a, const Symbol& b) { return a.addr == b.addr && a.name == b.name; }),
      syms.end());
  return syms;
}

std::string demangle(const std::string& name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

std::string kallsyms_name(const std::string& name) {
  const std::string d = demangle(name);
  std::string out;
  out.reserve(d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    const char c = d[i];
    if (c == ' ' || c == '\t') {
      if (i > 0 && d[i - 1] == ',') continue;
      out += '_';
    } else {
      out += c;
    }
  }
  return out;
}

std::string kallsyms_text(const std::vector<Symbol>& syms) {
  std::string out;
  char line[64];
  for (const Symbol& s : syms) {
    snprintf(line, sizeof line, "%016" PRIx64 " %c ", s.addr, s.type);
    out += line;
    out += kallsyms_name(s.name);
    if (!s.module.empty()) {
      out += "\t[";
      out += s.module;
      out += ']';
    }
    out += '\n';
  }
  return out;
}

}  // namespace usrtrace::symbols
