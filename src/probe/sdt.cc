// USDT/SDT notes (sys/sdt.h, systemtap's format): in each loaded object's
// file, SHT_NOTE sections named .note.stapsdt whose notes, owner "stapsdt"
// type 3, hold three addresses (the site, the link-time address of
// .stapsdt.base, the semaphore) and three strings (provider, name,
// arguments). An object prelinked or otherwise moved since its notes were
// written has its .stapsdt.base elsewhere: the difference moves the site
// and the semaphore with it, as systemtap and bcc read them.
//
// The files are the objects the process loaded: hostile input as much as
// any file (a truncated note, strings without their NUL, a site outside
// the object): such a note is skipped, never trusted.
#include "probe/sdt.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

namespace usrtrace::probe {
namespace {

constexpr uint32_t kNtStapsdt = 3;

void read_object(const LoadedObject& o, std::vector<SdtSite>* out) {
  const int fd = ::open(o.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  if (elf == nullptr) {
    ::close(fd);
    return;
  }
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) shstrndx = 0;
  uint64_t base_addr = 0;
  bool have_base = false;
  std::vector<Elf_Scn*> notes;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) continue;
    const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (name == nullptr) continue;
    if (std::strcmp(name, ".stapsdt.base") == 0) {
      base_addr = sh.sh_addr;
      have_base = true;
    }
    if (sh.sh_type == SHT_NOTE && std::strcmp(name, ".note.stapsdt") == 0) notes.push_back(scn);
  }
  // The segment of the object's code holding an address, as loaded.
  auto code_load = [&o](uint64_t vaddr) -> const LoadedObject::Load* {
    for (const LoadedObject::Load& l : o.loads)
      if (l.exec && vaddr >= l.vaddr && vaddr < l.vaddr + l.filesz) return &l;
    return nullptr;
  };
  // Whether a u16 at an address is in the object's writable data.
  auto in_data = [&o](uint64_t vaddr) {
    for (const LoadedObject::Load& l : o.loads)
      if (l.write && vaddr >= l.vaddr && vaddr + 2 <= l.vaddr + l.memsz && vaddr + 2 > vaddr) return true;
    return false;
  };
  for (Elf_Scn* scn : notes) {
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) continue;
    size_t off = 0;
    GElf_Nhdr nh;
    size_t name_off = 0, desc_off = 0;
    while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
      if (nh.n_type != kNtStapsdt || nh.n_namesz != 8 ||
          std::memcmp(static_cast<const char*>(data->d_buf) + name_off, "stapsdt", 8) != 0)
        continue;
      if (nh.n_descsz < 3 * 8 + 3 || desc_off + nh.n_descsz > data->d_size) continue;
      const char* d = static_cast<const char*>(data->d_buf) + desc_off;
      uint64_t pc, base, sem;
      std::memcpy(&pc, d, 8);
      std::memcpy(&base, d + 8, 8);
      std::memcpy(&sem, d + 16, 8);
      // Three NUL-terminated strings within the descriptor.
      const char* s = d + 24;
      const char* end = d + nh.n_descsz;
      std::string parts[3];
      bool ok = true;
      for (std::string& part : parts) {
        const void* nul = s < end ? std::memchr(s, '\0', static_cast<size_t>(end - s)) : nullptr;
        if (nul == nullptr) {
          ok = false;
          break;
        }
        part.assign(s, static_cast<const char*>(nul));
        s = static_cast<const char*>(nul) + 1;
      }
      if (!ok || parts[0].empty() || parts[1].empty()) continue;
      const uint64_t shift = have_base ? base_addr - base : 0;
      pc += shift;
      if (sem != 0) sem += shift;
      const LoadedObject::Load* l = code_load(pc);
      if (l == nullptr || (sem != 0 && (!in_data(sem) || sem % 2 != 0))) continue;
      out->push_back({parts[0], parts[1], o.real.empty() ? o.path : o.real, o.bias + pc,
                      pc - l->vaddr + l->offset, sem != 0 ? o.bias + sem : 0, parts[2]});
    }
  }
  elf_end(elf);
  ::close(fd);
}

// An AT&T register name as uprobe_events spells it: the 64-bit register of
// any of its low parts. "" for what has no spelling there (%ah, %xmm0).
std::string reg64(std::string_view r) {
  static const char* const kMap[][5] = {
      {"ax", "rax", "eax", "ax", "al"},  {"bx", "rbx", "ebx", "bx", "bl"},  {"cx", "rcx", "ecx", "cx", "cl"},
      {"dx", "rdx", "edx", "dx", "dl"},  {"si", "rsi", "esi", "si", "sil"}, {"di", "rdi", "edi", "di", "dil"},
      {"bp", "rbp", "ebp", "bp", "bpl"}, {"sp", "rsp", "esp", "sp", "spl"}, {"ip", "rip", "eip", "ip", "ip"},
  };
  for (const auto& row : kMap)
    for (int i = 1; i < 5; ++i)
      if (r == row[i]) return row[0];
  // r8..r15 and their d/w/b parts.
  if (r.size() >= 2 && r[0] == 'r' && std::isdigit(static_cast<unsigned char>(r[1]))) {
    size_t n = 1;
    while (n < r.size() && std::isdigit(static_cast<unsigned char>(r[n]))) ++n;
    const std::string_view num = r.substr(1, n - 1), tail = r.substr(n);
    if ((num.size() == 1 && (num[0] == '8' || num[0] == '9')) ||
        (num.size() == 2 && num[0] == '1' && num[1] <= '5'))
      if (tail.empty() || tail == "d" || tail == "w" || tail == "b") return "r" + std::string(num);
  }
  return "";
}

}  // namespace

std::vector<SdtSite> sdt_sites() {
  std::vector<SdtSite> out;
  for (const LoadedObject& o : loaded_objects()) read_object(o, &out);
  return out;
}

std::vector<SdtSite> sdt_sites_in(const LoadedObject& o) {
  std::vector<SdtSite> out;
  read_object(o, &out);
  return out;
}

std::vector<SdtSite> sdt_file_sites(const std::string& path) {
  // The object as it would be loaded at bias 0: its PT_LOAD headers.
  LoadedObject o;
  o.path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  elf_version(EV_CURRENT);
  if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr); elf != nullptr) {
    size_t n = 0;
    if (elf_getphdrnum(elf, &n) == 0) {
      for (size_t i = 0; i < n; ++i) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
        o.loads.push_back({ph.p_offset, ph.p_vaddr, ph.p_filesz, ph.p_memsz, (ph.p_flags & PF_X) != 0,
                           (ph.p_flags & PF_W) != 0});
      }
    }
    elf_end(elf);
  }
  ::close(fd);
  return sdt_sites_in(o);
}

bool sdt_fetch_args(std::string_view note_args, const std::vector<std::string>& names, std::string* out,
                    std::string* why) {
  out->clear();
  size_t n = 0;
  size_t i = 0;
  while (i < note_args.size()) {
    while (i < note_args.size() && note_args[i] == ' ') ++i;
    if (i >= note_args.size()) break;
    size_t j = note_args.find(' ', i);
    if (j == std::string_view::npos) j = note_args.size();
    const std::string_view arg = note_args.substr(i, j - i);
    i = j;
    // [-]SIZE@OPERAND
    const size_t at = arg.find('@');
    if (at == std::string_view::npos || at == 0) {
      *why = "argument '" + std::string(arg) + "' of the note is not SIZE@OPERAND";
      return false;
    }
    const bool is_signed = arg[0] == '-';
    const std::string_view size = arg.substr(is_signed ? 1 : 0, at - (is_signed ? 1 : 0));
    const char* type = size == "1"   ? "8"
                       : size == "2" ? "16"
                       : size == "4" ? "32"
                       : size == "8" ? "64"
                                     : nullptr;
    if (type == nullptr) {
      *why = "argument '" + std::string(arg) + "' of the note has a size of " + std::string(size);
      return false;
    }
    const std::string_view op = arg.substr(at + 1);
    std::string fetch;
    if (!op.empty() && op[0] == '%') {
      const std::string r = reg64(op.substr(1));
      if (r.empty()) {
        *why =
            "argument '" + std::string(arg) + "': register " + std::string(op) + " has no uprobe_events name";
        return false;
      }
      fetch = "%" + r;
    } else if (!op.empty() && op[0] == '$') {
      fetch = "\\" + std::string(op.substr(1));
    } else {
      // DISP(%REG), or (%REG): no index or scale.
      const size_t open = op.find('('), close = op.find(')');
      if (open == std::string_view::npos || close != op.size() - 1 ||
          op.find(',') != std::string_view::npos) {
        *why = "argument '" + std::string(arg) + "': operand " + std::string(op) + " is not DISP(%REG)";
        return false;
      }
      const std::string_view disp = op.substr(0, open), reg = op.substr(open + 1, close - open - 1);
      if (reg.empty() || reg[0] != '%') {
        *why = "argument '" + std::string(arg) + "': operand " + std::string(op) + " is not DISP(%REG)";
        return false;
      }
      const std::string r = reg64(reg.substr(1));
      if (r.empty()) {
        *why = "argument '" + std::string(arg) + "': register " + std::string(reg) +
               " has no uprobe_events name";
        return false;
      }
      std::string d = disp.empty() ? "0" : std::string(disp);
      if (d[0] != '-' && d[0] != '+') d = "+" + d;
      fetch = d + "(%" + r + ")";
    }
    ++n;
    // NAME, or NAME:TYPE: the note's size and sign give way to TYPE, and a
    // string type reads the string the operand points at.
    std::string name = n <= names.size() ? names[n - 1] : "arg" + std::to_string(n);
    std::string as = std::string(is_signed ? "s" : "u") + type;
    if (const size_t colon = name.find(':'); colon != std::string::npos) {
      as = name.substr(colon + 1);
      name.resize(colon);
      if (as == "string" || as == "ustring") {
        if (fetch[0] == '\\') {
          *why = "argument '" + std::string(arg) + "' is a constant, not a string's address";
          return false;
        }
        fetch = "+0(" + fetch + ")";
      }
    }
    if (!out->empty()) *out += ' ';
    *out += name + "=" + fetch + ":" + as;
  }
  if (names.size() > n) {
    *why = std::to_string(names.size()) + " names for a probe of " + std::to_string(n) + " arguments";
    return false;
  }
  return true;
}

std::string sdt_text() {
  std::string out;
  char buf[128];
  for (const SdtSite& s : sdt_sites()) {
    out += s.provider + ":" + s.name + " " + s.object;
    snprintf(buf, sizeof buf, " 0x%llx", static_cast<unsigned long long>(s.addr));
    out += buf;
    if (s.semaphore != 0) {
      snprintf(buf, sizeof buf, " semaphore=0x%llx", static_cast<unsigned long long>(s.semaphore));
      out += buf;
    }
    if (!s.args.empty()) out += " " + s.args;
    out += "\n";
  }
  return out;
}

}  // namespace usrtrace::probe
