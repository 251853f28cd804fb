#include "symbols/symbols.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

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

// The object's GNU build-id in hex ("" if it has none).
std::string build_id(Elf* elf) {
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_NOTE) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (d == nullptr || d->d_buf == nullptr) continue;
    GElf_Nhdr nh;
    size_t name_at = 0, desc_at = 0;
    for (size_t off = 0; (off = gelf_getnote(d, off, &nh, &name_at, &desc_at)) > 0;) {
      const auto* b = static_cast<const unsigned char*>(d->d_buf);
      if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 || std::memcmp(b + name_at, "GNU", 4) != 0)
        continue;
      std::string hex;
      char two[3];
      for (size_t i = 0; i < nh.n_descsz; ++i) {
        snprintf(two, sizeof two, "%02x", b[desc_at + i]);
        hex += two;
      }
      return hex;
    }
  }
  return "";
}

// The file name .gnu_debuglink gives ("" if none).
std::string debuglink(Elf* elf) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return "";
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_PROGBITS) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (name == nullptr || std::strcmp(name, ".gnu_debuglink") != 0) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (d == nullptr || d->d_buf == nullptr || d->d_size == 0) return "";
    const char* b = static_cast<const char*>(d->d_buf);
    const std::string link(b, strnlen(b, d->d_size));
    return link.find('/') == std::string::npos ? link : "";  // a name, not a path
  }
  return "";
}

// The symbol table of `elf` and its header, .symtab if it has one, else
// .dynsym (nullptr: neither).
Elf_Scn* symbol_table(Elf* elf, GElf_Shdr* hdr) {
  Elf_Scn* best = nullptr;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    if (sh.sh_type == SHT_SYMTAB || (sh.sh_type == SHT_DYNSYM && best == nullptr)) {
      best = scn;
      *hdr = sh;
    }
  }
  return best;
}

// An ELF file open for reading, closed with it.
struct ElfFile {
  int fd = -1;
  Elf* elf = nullptr;
  explicit ElfFile(const std::string& path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;
  ~ElfFile() {
    if (elf != nullptr) elf_end(elf);
    if (fd >= 0) ::close(fd);
  }
};

// Where separate debug files are looked for, as gdb's debug-file-directory:
// USRTRACE_DEBUG_FILE_DIRECTORY if set (empty: nowhere but beside the
// object), else /usr/lib/debug, where Debian's -dbg and -dbgsym packages
// put them.
std::string debug_file_directory() {
  const char* e = getenv("USRTRACE_DEBUG_FILE_DIRECTORY");
  return e != nullptr ? e : "/usr/lib/debug";
}

// The separate debug file of an object without .symtab (a stripped
// library whose symbols a -dbg package installed), as gdb finds it: by
// build-id under the debug directory, then by .gnu_debuglink beside the
// object, in its .debug/, and under the debug directory. A candidate
// counts when it has a .symtab and, if the object has a build-id, the same
// one (a debug file of another build would name the wrong functions).
std::unique_ptr<ElfFile> debug_file(const Object& o, Elf* elf) {
  const std::string id = build_id(elf), dir = debug_file_directory();
  std::vector<std::string> candidates;
  if (id.size() > 2 && !dir.empty())
    candidates.push_back(dir + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
  if (const std::string link = debuglink(elf); !link.empty()) {
    char real[PATH_MAX];
    if (realpath(o.path.c_str(), real) != nullptr) {
      std::string at(real);
      at.resize(at.rfind('/'));
      candidates.push_back(at + "/" + link);
      candidates.push_back(at + "/.debug/" + link);
      if (!dir.empty()) candidates.push_back(dir + at + "/" + link);
    }
  }
  for (const std::string& c : candidates) {
    auto f = std::make_unique<ElfFile>(c);
    GElf_Shdr sh;
    Elf_Scn* t = f->elf != nullptr ? symbol_table(f->elf, &sh) : nullptr;
    if (t != nullptr && sh.sh_type == SHT_SYMTAB && (id.empty() || build_id(f->elf) == id)) return f;
  }
  return nullptr;
}

// ---- Functions of a stripped object, from its unwind table (.eh_frame):
// every function the compiler gave call-frame information has an FDE, and
// .eh_frame_hdr lists them sorted by start, as the unwinder finds them. The
// bytes are the object's file: read with bounds, as hostile input.

// A bounded reader.
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  template <typename T>
  T get() {
    T v{};
    if (static_cast<size_t>(end - p) < sizeof v) {
      ok = false;
      p = end;
      return v;
    }
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto b = get<uint8_t>();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return v;
  }
  void skip(uint64_t n) {
    if (static_cast<uint64_t>(end - p) < n) {
      ok = false;
      p = end;
    } else {
      p += n;
    }
  }
  // A value in the format of a DWARF EH pointer encoding's low nibble (its
  // application, pc- or data-relative, is the caller's).
  int64_t encoded(uint8_t enc) {
    switch (enc & 0x0f) {
      case 0x00:
      case 0x04:
      case 0x0c:
        return static_cast<int64_t>(get<uint64_t>());
      case 0x01:
        return static_cast<int64_t>(uleb());
      case 0x02:
        return get<uint16_t>();
      case 0x03:
        return get<uint32_t>();
      case 0x09: {
        int64_t v = 0;
        int shift = 0;
        uint8_t b = 0;
        do {
          b = get<uint8_t>();
          v |= static_cast<int64_t>(b & 0x7f) << shift;
          shift += 7;
        } while ((b & 0x80) != 0 && shift < 64 && ok);
        if (shift < 64 && (b & 0x40) != 0) v |= -(int64_t{1} << shift);
        return v;
      }
      case 0x0a:
        return get<int16_t>();
      case 0x0b:
        return get<int32_t>();
      default:
        ok = false;
        return 0;
    }
  }
};

struct Section {
  uint64_t addr = 0;
  const uint8_t* bytes = nullptr;
  size_t size = 0;
};

Section section(Elf* elf, const char* want) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return {};
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (name == nullptr || std::strcmp(name, want) != 0) continue;
    Elf_Data* d = sh.sh_type == SHT_NOBITS ? nullptr : elf_getdata(scn, nullptr);
    return {sh.sh_addr, d != nullptr ? static_cast<const uint8_t*>(d->d_buf) : nullptr,
            d != nullptr ? d->d_size : 0};
  }
  return {};
}

// What an FDE needs of its CIE: the encoding of its addresses, whether it
// has augmentation data. ok false: a CIE this reader does not take.
struct Cie {
  uint8_t fde_enc = 0;
  bool z = false;
  bool ok = false;
};

Cie read_cie(const Section& eh, size_t off) {
  Cie c;
  if (off >= eh.size) return c;
  Cursor r{eh.bytes + off, eh.bytes + eh.size};
  const auto len = r.get<uint32_t>();
  if (len == 0 || len == 0xffffffff || len > eh.size - off - 4) return c;
  r.end = eh.bytes + off + 4 + len;
  if (r.get<uint32_t>() != 0) return c;  // not a CIE
  const auto version = r.get<uint8_t>();
  std::string aug;
  for (char ch; r.ok && (ch = static_cast<char>(r.get<uint8_t>())) != '\0';) aug += ch;
  if (aug.find("eh") != std::string::npos) r.skip(8);
  r.uleb();         // code alignment
  r.encoded(0x09);  // data alignment
  if (version == 1)
    r.skip(1);
  else
    r.uleb();  // return address register
  if (!aug.empty() && aug[0] == 'z') {
    c.z = true;
    r.uleb();
    for (size_t i = 1; i < aug.size() && r.ok; ++i) {
      if (aug[i] == 'R') {
        c.fde_enc = r.get<uint8_t>();
      } else if (aug[i] == 'P') {
        const auto enc = r.get<uint8_t>();
        r.encoded(enc);
      } else if (aug[i] == 'L') {
        r.skip(1);
      } else if (aug[i] != 'S' && aug[i] != 'B') {
        return c;  // unknown: its data cannot be skipped
      }
    }
  }
  c.ok = r.ok;
  return c;
}

// Adds "PREFIX+0xSTART" for every function of the object's .text that its
// unwind table knows and `known` (its named functions' link-time starts,
// sorted) does not.
void unwind_functions(Elf* elf, const Object& o, const std::string& prefix,
                      const std::vector<uint64_t>& known, std::vector<Symbol>* out) {
  const Section hdr = section(elf, ".eh_frame_hdr"), eh = section(elf, ".eh_frame"),
                text = section(elf, ".text");
  if (hdr.bytes == nullptr || eh.bytes == nullptr) return;
  for (const UnwindFunction& f : unwind_table_functions({hdr.bytes, hdr.size, hdr.addr},
                                                        {eh.bytes, eh.size, eh.addr}, text.addr, text.size)) {
    if (std::binary_search(known.begin(), known.end(), f.start)) continue;
    char name[32];
    snprintf(name, sizeof name, "+0x%" PRIx64, f.start);
    out->push_back({o.base + f.start, f.size, 't', prefix + name, o.module, false, 0, true});
  }
}

}  // namespace

std::vector<UnwindFunction> unwind_table_functions(const Bytes& hdr_in, const Bytes& eh_in,
                                                   uint64_t text_addr, uint64_t text_size) {
  std::vector<UnwindFunction> out;
  const Section hdr{hdr_in.addr, hdr_in.data, hdr_in.size}, eh{eh_in.addr, eh_in.data, eh_in.size};
  if (hdr.bytes == nullptr || eh.bytes == nullptr || text_size == 0 || hdr.size < 12) return out;
  Cursor h{hdr.bytes, hdr.bytes + hdr.size};
  if (h.get<uint8_t>() != 1) return out;
  const auto ptr_enc = h.get<uint8_t>(), count_enc = h.get<uint8_t>(), table_enc = h.get<uint8_t>();
  h.encoded(ptr_enc);
  if (table_enc != 0x3b) return out;  // datarel sdata4: what ld writes
  const int64_t count = h.encoded(count_enc);
  if (!h.ok || count <= 0 ||
      static_cast<uint64_t>(count) > (hdr.size - static_cast<size_t>(h.p - hdr.bytes)) / 8)
    return out;
  std::vector<std::pair<size_t, Cie>> cies;  // by offset
  for (int64_t i = 0; i < count; ++i) {
    const auto loc = h.get<int32_t>(), fde_at = h.get<int32_t>();
    const uint64_t start = hdr.addr + static_cast<uint64_t>(static_cast<int64_t>(loc));
    const uint64_t fde = hdr.addr + static_cast<uint64_t>(static_cast<int64_t>(fde_at));
    if (start < text_addr || start - text_addr >= text_size) continue;
    if (fde < eh.addr || fde - eh.addr >= eh.size || eh.size - (fde - eh.addr) < 8) continue;
    const size_t off = fde - eh.addr;
    Cursor f{eh.bytes + off, eh.bytes + eh.size};
    const auto len = f.get<uint32_t>();
    if (len == 0 || len == 0xffffffff || len > eh.size - off - 4) continue;
    f.end = eh.bytes + off + 4 + len;
    const auto cie_ptr = f.get<uint32_t>();
    if (cie_ptr == 0 || cie_ptr > off + 4) continue;
    const size_t cie_off = off + 4 - cie_ptr;
    auto it = std::find_if(cies.begin(), cies.end(), [&](const auto& e) { return e.first == cie_off; });
    if (it == cies.end()) {
      if (cies.size() >= 64) continue;  // real objects have a handful
      cies.emplace_back(cie_off, read_cie(eh, cie_off));
      it = cies.end() - 1;
    }
    const Cie& cie = it->second;
    if (!cie.ok) continue;
    f.encoded(cie.fde_enc);                                                    // pc_begin: the table's start
    const int64_t size = f.encoded(static_cast<uint8_t>(cie.fde_enc & 0x0f));  // pc_range
    if (cie.z) f.skip(f.uleb());
    if (!f.ok || size <= 0 || static_cast<uint64_t>(size) > text_size) continue;
    // The first call-frame instruction: an advance (or none, or a nop) at
    // an entry; a rule for the frame at offset 0 in a part of a function
    // (gcc's cold part, jumped to), which is no entry.
    if (f.p < f.end) {
      const uint8_t op = *f.p;
      if (!((op & 0xc0) == 0x40 || op == 0x02 || op == 0x03 || op == 0x04 || op == 0x00)) continue;
    }
    out.push_back({start, static_cast<uint64_t>(size)});
  }
  return out;
}

namespace {

void read_object(const Object& o, std::vector<Symbol>* out) {
  ElfFile file(o.path);
  Elf* elf = file.elf;
  if (elf == nullptr) return;
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
  GElf_Shdr best_hdr{};
  Elf_Scn* best = symbol_table(elf, &best_hdr);
  // A stripped object: its separate debug file's .symtab names its static
  // functions too (same link-time addresses).
  std::unique_ptr<ElfFile> debug;
  Elf* names = elf;
  if (best == nullptr || best_hdr.sh_type != SHT_SYMTAB) {
    debug = debug_file(o, elf);
    if (debug) {
      names = debug->elf;
      best = symbol_table(names, &best_hdr);
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
      const char* name = elf_strptr(names, best_hdr.sh_link, sym.st_name);
      if (name == nullptr || name[0] == '\0') continue;
      const bool global = GELF_ST_BIND(sym.st_info) != STB_LOCAL;
      char t = type == STT_FUNC ? 't' : 'd';
      if (global) t = static_cast<char>(t - 'a' + 'A');
      // A .symtab spells a versioned symbol "__libc_start_main@@GLIBC_2.34";
      // .dynsym, filters and readers say "__libc_start_main".
      const char* at = std::strchr(name, '@');
      out->push_back({o.base + sym.st_value, sym.st_size, t,
                      at != nullptr && at != name ? std::string(name, at) : std::string(name), o.module,
                      instrumented && type == STT_FUNC, hook_got});
    }
  }
  // No .symtab, here or in a debug file: the functions .dynsym does not
  // name (a stripped program's own, a library's static ones) from the
  // unwind table, as OBJECT+0xSTART.
  if (best == nullptr || best_hdr.sh_type != SHT_SYMTAB) {
    std::vector<uint64_t> known;
    for (const Symbol& sym : *out)
      if (sym.module == o.module && sym.addr >= o.base && (sym.type == 't' || sym.type == 'T'))
        known.push_back(sym.addr - o.base);
    std::sort(known.begin(), known.end());
    std::string prefix = o.module;
    if (prefix.empty()) {  // the main program: its file's name
      char exe[PATH_MAX];
      const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      prefix = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string("main");
      prefix = prefix.substr(prefix.rfind('/') + 1);
    }
    unwind_functions(elf, o, prefix, known, out);
  }
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

namespace {

// What the loaded objects' symbols depend on: the loader's counts of
// objects loaded and unloaded so far (dl_phdr_info's dlpi_adds and
// dlpi_subs, the same in every call's info), and the debug file directory.
struct SymbolsKey {
  unsigned long long adds = 0, subs = 0;
  std::string debug_dir;
  bool operator==(const SymbolsKey&) const = default;
};
SymbolsKey symbols_key() {
  SymbolsKey k;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* p) {
        auto* key = static_cast<SymbolsKey*>(p);
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
          key->adds = info->dlpi_adds;
          key->subs = info->dlpi_subs;
        }
        return 1;
      },
      &k);
  if (const char* d = getenv("USRTRACE_DEBUG_FILE_DIRECTORY")) k.debug_dir = d;
  return k;
}

}  // namespace

std::shared_ptr<const std::vector<Symbol>> process_symbols() {
  static std::mutex mu;
  static SymbolsKey key;
  static std::shared_ptr<const std::vector<Symbol>> kept;
  std::lock_guard<std::mutex> l(mu);
  SymbolsKey now = symbols_key();
  if (kept == nullptr || now.adds == 0 || !(now == key)) {
    kept = std::make_shared<const std::vector<Symbol>>(load_process_symbols());
    key = std::move(now);
  }
  return kept;
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
