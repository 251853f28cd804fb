// The -fpatchable-function-entry patcher: finds every patchable function of
// the loaded objects and turns their entries into calls to the trampoline
// and back, while other threads run through them. The long story, with the
// argument for why each step is safe, is docs/design/function-patching.md.
//
// A site, as the compiler leaves it and as we make it (L = its nop bytes up
// to the first instruction boundary at or after 5; usually 5):
//
//   fn-M      fn                 fn+5        fn+L
//   | M nops  | nop(s), 5 bytes   | more nops |  function body ...
//                   disarmed: the original nop when it was one instruction
//                             of L bytes, else 0f 1f 44 00 00 + 0x90 x (L-5)
//                   armed:    e8 <rel32 to the object's stub> + 0x90 x (L-5)
//
//   stub (one page per object, within +-2 GiB of it):  jmp *trampoline(%rip)
//
// Every flip writes the bytes in the kernel's text_poke_bp order, for a
// batch of sites at once (text_poke_bp_batch):
//
//   [A] byte 0 of every site := int3; sync every core
//   [B] (first arming of a site made of several nops only) sweep: every
//       other thread runs our signal handler, which moves it past any site it
//       stopped in the middle of
//   [C] bytes 1..L-1 := new bytes; sync
//   [D] byte 0 := new first byte; sync
//
// Between [A] and [D] a thread reaching byte 0 traps: the SIGTRAP handler
// moves it to fn+L (that call is skipped, a nop run is skipped; both are
// fine). After [A]'s sync no thread can be inside the old instruction except
// where the old bytes were several instructions, hence [B].
#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/compiler.h"
#include "base/mutex.h"
#include "function/function.h"
#include "function/patch_internal.h"
#include "patch/text.h"

namespace usrtrace::function::patch {
namespace internal {

// ---- Nop decoding -------------------------------------------------------

size_t nop_length(const uint8_t* p, size_t avail) {
  size_t i = 0;
  bool opsize = false;
  // Prefixes: operand size, segment overrides (cs/ds/es/ss/fs/gs): clang and
  // the assemblers pad long nops with them.
  while (i < avail && i < 14) {
    const uint8_t b = p[i];
    if (b == 0x66) {
      opsize = true;
    } else if (b != 0x2e && b != 0x3e && b != 0x26 && b != 0x36 && b != 0x64 && b != 0x65) {
      break;
    }
    ++i;
  }
  if (i >= avail) return 0;
  if (p[i] == 0x90) return i + 1;  // nop, xchg %ax,%ax (no REX: 41 90 is xchg %eax,%r8d)
  bool rex = false;
  if ((p[i] & 0xf0) == 0x40) {  // REX, only in front of 0f 1f
    rex = true;
    ++i;
  }
  (void)opsize;
  (void)rex;
  if (i + 2 >= avail || p[i] != 0x0f || p[i + 1] != 0x1f) return 0;
  i += 2;
  const uint8_t modrm = p[i++];
  if (((modrm >> 3) & 7) != 0) return 0;  // 0f 1f /0 is the only nop form
  const uint8_t mod = modrm >> 6, rm = modrm & 7;
  size_t disp = 0;
  if (mod != 3) {
    if (rm == 4) {  // SIB
      if (i >= avail) return 0;
      const uint8_t sib = p[i++];
      if (mod == 0 && (sib & 7) == 5) disp = 4;
    } else if (mod == 0 && rm == 5) {
      disp = 4;  // rip-relative
    }
    if (mod == 1) disp = 1;
    if (mod == 2) disp = 4;
  }
  i += disp;
  return i <= avail && i <= 15 ? i : 0;
}

SiteShape classify(const uint8_t* p, size_t avail) {
  SiteShape s;
  size_t len = 0;
  unsigned insns = 0;
  while (len < 5) {
    const size_t n = nop_length(p + len, avail - len);
    if (n == 0) {
      s.why = len == 0
                  ? "the entry is not a nop (patched by someone else, or not a patchable entry)"
                  : "fewer than 5 bytes of nops at the entry (-fpatchable-function-entry=N,M needs N-M >= 5)";
      return s;
    }
    len += n;
    ++insns;
  }
  if (len > kMaxSiteLen) {
    s.why = "nop longer than 15 bytes";
    return s;
  }
  s.len = static_cast<uint8_t>(len);
  s.insns = static_cast<uint8_t>(insns);
  return s;
}

}  // namespace internal

namespace {

using internal::kMaxSiteLen;
using internal::kNop5;

// ---- Objects and sites --------------------------------------------------

struct Segment {
  uint64_t lo, hi;  // runtime addresses
  int prot;
};

struct Object {
  std::string name;  // dlpi_name ("" for the program)
  uint64_t base;     // dlpi_addr
  std::vector<Segment> segs;
  uint64_t text_lo = 0, text_hi = 0;
  uint64_t stub = 0;  // our page, mapped at the first arming
};

struct Site {
  uint64_t fn;
  Object* obj;
  uint8_t len;                // L
  uint8_t insns;              // instructions in the compiler's [0, L)
  bool armed;                 // [0, 5) is our call
  bool converted;             // [0, 5) is one instruction and [5, L) single-byte
                              // nops (or the site was one 5-byte nop already)
  uint8_t orig[kMaxSiteLen];  // the compiler's [0, L)
  uint8_t disarmed[5];        // what [0, 5) holds when disarmed, once converted
};

struct State {
  base::Mutex mu;
  bool init = false;
  unsigned long long adds = ~0ull, subs = ~0ull;
  std::vector<std::unique_ptr<Object>> objects USRTRACE_GUARDED_BY(mu);
  std::map<uint64_t, Site> sites USRTRACE_GUARDED_BY(mu);  // by fn
  std::vector<internal::Refused> refused USRTRACE_GUARDED_BY(mu);
  uint64_t sweeps = 0, batches = 0;
};
State& state() {
  static State* s = new State;  // never destroyed: threads may patch at exit
  return *s;
}

struct LoadedObject {
  std::string name;
  uint64_t base;
  std::vector<Segment> segs;
};

int collect(dl_phdr_info* info, size_t, void* arg) {
  auto* out = static_cast<std::vector<LoadedObject>*>(arg);
  LoadedObject o{info->dlpi_name ? info->dlpi_name : "", info->dlpi_addr, {}};
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    int prot = 0;
    if (ph.p_flags & PF_R) prot |= PROT_READ;
    if (ph.p_flags & PF_W) prot |= PROT_WRITE;
    if (ph.p_flags & PF_X) prot |= PROT_EXEC;
    o.segs.push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz, prot});
  }
  out->push_back(std::move(o));
  return 0;
}

bool in_text(const Object& o, uint64_t a, uint64_t n) {
  for (const Segment& s : o.segs)
    if ((s.prot & PROT_EXEC) && a >= s.lo && a + n <= s.hi) return true;
  return false;
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::string object_label(const Object& o) { return o.name.empty() ? "(program)" : o.name; }

// Reads o's lists of entry sites and adds the sites:
// __patchable_function_entries (-fpatchable-function-entry; the section is
// written by ld.so's relocations) and __mcount_loc (gcc's -pg -mfentry
// -mnop-mcount -mrecord-mcount: the 5-byte nop that replaced the call to
// __fentry__, at the function's first byte; gcc allows -mnop-mcount only
// without -fPIC/-fPIE, so the addresses are final). Both list addresses of
// nops; the same decoding applies.
void discover(State& st, Object& o) USRTRACE_REQUIRES(st.mu) {
  const std::string path = o.name.empty() ? "/proc/self/exe" : o.name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // the vdso, a deleted file: nothing to patch
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) {
    ::close(fd);
    return;
  }
  size_t shstrndx = 0;
  std::vector<GElf_Shdr> entry_secs;
  std::vector<uint64_t> funcs;  // function symbols (link-time), to find fn = site + M
  if (elf_getshdrstrndx(elf, &shstrndx) == 0) {
    Elf_Scn* symtab = nullptr;
    GElf_Shdr symtab_hdr{};
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr) continue;
      const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (name != nullptr &&
          (std::strcmp(name, "__patchable_function_entries") == 0 ||
           std::strcmp(name, "__mcount_loc") == 0) &&
          (sh.sh_flags & SHF_ALLOC) && sh.sh_type == SHT_PROGBITS)
        entry_secs.push_back(sh);
      if (sh.sh_type == SHT_SYMTAB || (sh.sh_type == SHT_DYNSYM && symtab == nullptr)) {
        symtab = scn;
        symtab_hdr = sh;
      }
    }
    if (!entry_secs.empty() && symtab != nullptr && symtab_hdr.sh_entsize != 0) {
      Elf_Data* data = elf_getdata(symtab, nullptr);
      const size_t n = data ? symtab_hdr.sh_size / symtab_hdr.sh_entsize : 0;
      for (size_t i = 0; i < n; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
        if (GELF_ST_TYPE(sym.st_info) == STT_FUNC && sym.st_shndx != SHN_UNDEF && sym.st_value != 0)
          funcs.push_back(sym.st_value);
      }
      std::sort(funcs.begin(), funcs.end());
    }
  }
  elf_end(elf);
  ::close(fd);

  const uint64_t bias = o.base;
  size_t n_refused = 0;
  for (const GElf_Shdr& sh : entry_secs) {
    // The section is SHF_ALLOC (|SHF_WRITE when relocated by ld.so): read
    // it in memory. An object still being relocated (dlopen in another thread)
    // holds link-time values: both forms name the same site.
    const auto* entries = reinterpret_cast<const uint64_t*>(bias + sh.sh_addr);
    const size_t count = sh.sh_size / sizeof(uint64_t);
    for (size_t i = 0; i < count; ++i) {
      uint64_t site = __atomic_load_n(&entries[i], __ATOMIC_RELAXED);
      if (!in_text(o, site, 1) && in_text(o, site + bias, 1)) site += bias;
      if (site == 0 || site == bias) continue;  // a discarded function's entry
      if (!in_text(o, site, 1)) {
        st.refused.push_back({site, object_label(o), "outside the object's code"});
        ++n_refused;
        continue;
      }
      // fn = site + M: the function symbol within the nops that start at
      // the site (M = 0 when there is none).
      uint64_t fn = site;
      auto it = std::lower_bound(funcs.begin(), funcs.end(), site - bias);
      if (it != funcs.end() && *it + bias > site && *it + bias - site < 64) {
        const uint64_t cand = *it + bias;
        uint64_t p = site;
        while (p < cand && in_text(o, p, 1)) {
          const size_t k = internal::nop_length(reinterpret_cast<const uint8_t*>(p), cand - p);
          if (k == 0) break;
          p += k;
        }
        if (p == cand) fn = cand;
      }
      const uint64_t avail = std::min<uint64_t>(kMaxSiteLen, [&] {
        for (const Segment& s : o.segs)
          if ((s.prot & PROT_EXEC) && fn >= s.lo && fn < s.hi) return s.hi - fn;
        return uint64_t{0};
      }());
      const internal::SiteShape shape =
          internal::classify(reinterpret_cast<const uint8_t*>(fn), static_cast<size_t>(avail));
      if (shape.len == 0) {
        char bytes[64] = "";
        size_t w = 0;
        for (uint64_t k = 0; k < std::min<uint64_t>(avail, 5) && w + 4 < sizeof bytes; ++k)
          w += static_cast<size_t>(snprintf(bytes + w, sizeof bytes - w, "%s%02x", k ? " " : "",
                                            reinterpret_cast<const uint8_t*>(fn)[k]));
        st.refused.push_back({fn, object_label(o), std::string(shape.why) + " (bytes " + bytes + ")"});
        ++n_refused;
        continue;
      }
      Site s{};
      s.fn = fn;
      s.obj = &o;
      s.len = shape.len;
      s.insns = shape.insns;
      s.armed = false;
      std::memcpy(s.orig, reinterpret_cast<const void*>(fn), shape.len);
      // One instruction: flipping its first 5 bytes is atomic for every
      // thread, and we go back to exactly what the compiler wrote.
      s.converted = shape.insns == 1 && shape.len == 5;
      std::memcpy(s.disarmed, s.converted ? s.orig : kNop5, 5);
      st.sites.emplace(fn, s);
    }
  }
  if (n_refused != 0) {
    const internal::Refused& r = st.refused.back();
    fprintf(stderr, "usrtrace: function: %s: %zu patchable entries are not traced (e.g. %s: %s)\n",
            object_label(o).c_str(), n_refused, hex(r.addr).c_str(), r.why.c_str());
  }
}

// Does the site still hold the bytes we left there? False when its object
// was unloaded and another loaded at the same place between two refreshes.
bool site_intact(const Site& s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.fn);
  if (!s.armed) return s.converted ? std::memcmp(p, s.disarmed, 5) == 0 : std::memcmp(p, s.orig, s.len) == 0;
  if (p[0] != 0xe8) return false;
  int32_t rel;
  std::memcpy(&rel, p + 1, 4);
  return s.obj->stub != 0 && s.fn + 5 + static_cast<uint64_t>(static_cast<int64_t>(rel)) == s.obj->stub;
}

void publish_handler_table(State& st) USRTRACE_REQUIRES(st.mu) {
  std::vector<detail::HandlerSite> sites;
  sites.reserve(st.sites.size());
  for (const auto& [fn, site] : st.sites) sites.push_back({fn, site.len});
  detail::publish_handler_sites(sites);
}

void install_handlers(State& st) USRTRACE_REQUIRES(st.mu) {
  if (st.init) return;
  st.init = true;
  elf_version(EV_CURRENT);
  detail::install_signal_handlers();
}

// Brings the object and site tables up to date with the loaded objects.
// Runs inside dl_iterate_phdr (see apply_locked): no object can be
// unloaded meanwhile.
void refresh(State& st, const std::vector<LoadedObject>& loaded) USRTRACE_REQUIRES(st.mu) {
  install_handlers(st);
  std::vector<std::unique_ptr<Object>> keep;
  std::vector<Object*> fresh;
  for (const LoadedObject& lo : loaded) {
    std::unique_ptr<Object> found;
    for (auto& o : st.objects)
      if (o && o->base == lo.base && o->name == lo.name) found = std::move(o);
    if (found) {
      bool intact = true;
      for (auto it = st.sites.lower_bound(found->text_lo); it != st.sites.end() && it->first < found->text_hi;
           ++it)
        if (it->second.obj == found.get() && !site_intact(it->second)) intact = false;
      if (!intact) {
        // Reloaded at the same address: start over with it.
        if (found->stub) munmap(reinterpret_cast<void*>(found->stub), 4096);
        found.reset();
      }
    }
    if (!found) {
      found = std::make_unique<Object>();
      found->name = lo.name;
      found->base = lo.base;
      found->segs = lo.segs;
      found->text_lo = ~0ull;
      for (const Segment& s : lo.segs)
        if (s.prot & PROT_EXEC) {
          found->text_lo = std::min(found->text_lo, s.lo);
          found->text_hi = std::max(found->text_hi, s.hi);
        }
      if (found->text_lo == ~0ull) found->text_lo = 0;
      fresh.push_back(found.get());
    }
    keep.push_back(std::move(found));
  }
  // Objects gone (or reloaded): their sites and stubs go.
  for (auto& o : st.objects) {
    if (!o) continue;
    for (auto it = st.sites.begin(); it != st.sites.end();)
      it = it->second.obj == o.get() ? st.sites.erase(it) : std::next(it);
    if (o->stub) munmap(reinterpret_cast<void*>(o->stub), 4096);
    const std::string label = object_label(*o);
    std::erase_if(st.refused, [&](const internal::Refused& r) { return r.object == label; });
  }
  st.objects = std::move(keep);
  for (Object* o : fresh) discover(st, *o);
  publish_handler_table(st);
}

// The object's stub: one page within rel32 reach of all its code, holding
// `jmp *0(%rip)` and the trampoline's address.
uint64_t ensure_stub(Object& o, std::string* why) {
  if (o.stub) return o.stub;
  constexpr uint64_t kPage = 4096;
  std::string near_why;
  const uint64_t at =
      usrtrace::patch::map_near(o.text_lo, o.text_hi, kPage, PROT_READ | PROT_WRITE, &near_why);
  if (at == 0) {
    *why = "no free page within +-2 GiB of " + object_label(o) + " for its stub";
    return 0;
  }
  auto* b = reinterpret_cast<uint8_t*>(at);
  const uint8_t jmp[6] = {0xff, 0x25, 0x00, 0x00, 0x00, 0x00};  // jmp *0(%rip)
  std::memcpy(b, jmp, sizeof jmp);
  const uint64_t target = reinterpret_cast<uint64_t>(&usrtrace_function_trampoline);
  std::memcpy(b + 6, &target, 8);
  std::memset(b + 14, 0xcc, kPage - 14);
  if (mprotect(b, kPage, PROT_READ | PROT_EXEC) != 0) {
    munmap(b, kPage);
    *why = "mprotect of the stub page: " + std::string(strerror(errno));
    return 0;
  }
  o.stub = at;
  return at;
}

// ---- Writing code ------------------------------------------------------

struct Change {
  Site* site;
  uint8_t bytes[kMaxSiteLen];  // the new [0, L)
};

int page_prot(const Object& o, uint64_t page) {
  for (const Segment& s : o.segs)
    if (page + 4096 > s.lo && page < s.hi) return s.prot;
  return PROT_READ | PROT_EXEC;
}

using usrtrace::patch::poke;

// [B], with the count the statistics keep.
bool sweep_threads(State& st, std::string* why) USRTRACE_REQUIRES(st.mu) {
  ++st.sweeps;
  return detail::sweep_threads(why);
}

// Writes every change with the [A]..[D] protocol. The pages are writable
// for the duration.
int write_changes(State& st, std::vector<Change>& changes, std::string* why) USRTRACE_REQUIRES(st.mu) {
  std::map<uint64_t, int> pages;  // page -> protection to restore
  for (const Change& c : changes)
    for (uint64_t p = c.site->fn & ~4095ull; p < c.site->fn + c.site->len; p += 4096)
      pages.emplace(p, page_prot(*c.site->obj, p));
  for (auto it = pages.begin(); it != pages.end(); ++it) {
    if (mprotect(reinterpret_cast<void*>(it->first), 4096, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
      const int err = errno;
      *why = "mprotect " + hex(it->first) + " writable: " + strerror(err);
      for (auto back = pages.begin(); back != it; ++back)
        mprotect(reinterpret_cast<void*>(back->first), 4096, back->second);
      return -err;
    }
  }
  bool need_sweep = false;
  std::vector<uint8_t> old0;
  old0.reserve(changes.size());
  // [A]
  for (const Change& c : changes) {
    old0.push_back(*reinterpret_cast<const uint8_t*>(c.site->fn));
    poke(c.site->fn, 0xcc);
    if (!c.site->converted && c.site->insns > 1) need_sweep = true;
  }
  detail::sync_cores();
  // [B] Only for sites of several instructions not yet converted: a single
  // instruction cannot be half-executed once [A] is synced.
  int rc = 0;
  if (need_sweep && !sweep_threads(st, why)) {
    // Undo [A]: bytes 1.. were never touched.
    for (size_t i = 0; i < changes.size(); ++i) poke(changes[i].site->fn, old0[i]);
    detail::sync_cores();
    rc = -EBUSY;
  }
  if (rc == 0) {
    // [C]
    for (const Change& c : changes)
      for (size_t k = 1; k < c.site->len; ++k) poke(c.site->fn + k, c.bytes[k]);
    detail::sync_cores();
    // [D]
    for (const Change& c : changes) poke(c.site->fn, c.bytes[0]);
    detail::sync_cores();
  }
  for (const auto& [page, prot] : pages) mprotect(reinterpret_cast<void*>(page), 4096, prot);
  return rc;
}

struct ApplyCall {
  State* st;
  const std::vector<uint64_t>* wanted;  // nullptr: refresh only
  std::string* why;
  int rc;
  bool ran;
};

int apply_locked(State& st, const std::vector<uint64_t>& wanted, std::string* why) USRTRACE_REQUIRES(st.mu) {
  for (uint64_t fn : wanted)
    if (st.sites.find(fn) == st.sites.end()) {
      *why = hex(fn) + " is not a patchable function (not found, refused, or its object was unloaded)";
      return -EINVAL;
    }
  std::vector<Change> changes;
  for (auto& [fn, s] : st.sites) {
    const bool want = std::binary_search(wanted.begin(), wanted.end(), fn);
    if (want == s.armed && (s.converted || !want)) continue;
    Change c{&s, {}};
    if (want) {
      const uint64_t stub = ensure_stub(*s.obj, why);
      if (stub == 0) return -ENOMEM;
      const int64_t rel = static_cast<int64_t>(stub) - static_cast<int64_t>(fn + 5);
      const auto rel32 = static_cast<int32_t>(rel);
      c.bytes[0] = 0xe8;
      std::memcpy(c.bytes + 1, &rel32, 4);
      // [5, L): single-byte nops, so that fn+5 (where the trampoline
      // returns) is an instruction boundary.
      std::memset(c.bytes + 5, 0x90, kMaxSiteLen - 5);
    } else {
      std::memcpy(c.bytes, s.disarmed, 5);
      std::memset(c.bytes + 5, 0x90, kMaxSiteLen - 5);
    }
    changes.push_back(c);
  }
  if (changes.empty()) return 0;
  ++st.batches;
  const int rc = write_changes(st, changes, why);
  if (rc != 0) return rc;
  for (Change& c : changes) {
    c.site->armed = c.bytes[0] == 0xe8;
    if (!c.site->converted) {
      // [0, L) is now the call (or a nop5) + single-byte nops: every later
      // flip changes one instruction only.
      c.site->converted = true;
    }
  }
  return 0;
}

// Inside dl_iterate_phdr, which holds the loader's list lock: dlclose cannot
// unlink (and so unmap) an object while we read or patch it.
int with_loader_locked(dl_phdr_info*, size_t, void* arg) {
  auto* call = static_cast<ApplyCall*>(arg);
  if (call->ran) return 1;
  call->ran = true;
  std::vector<LoadedObject> loaded;
  dl_iterate_phdr(collect, &loaded);  // the lock is recursive
  State& st = *call->st;
  base::MutexLock lock(&st.mu);
  refresh(st, loaded);
  call->rc = call->wanted ? apply_locked(st, *call->wanted, call->why) : 0;
  return 1;
}

}  // namespace

std::vector<uint64_t> patchable_functions() {
  State& st = state();
  std::string why;
  ApplyCall call{&st, nullptr, &why, 0, false};
  dl_iterate_phdr(with_loader_locked, &call);
  base::MutexLock lock(&st.mu);
  std::vector<uint64_t> out;
  out.reserve(st.sites.size());
  for (const auto& [fn, s] : st.sites) out.push_back(fn);
  return out;
}

int apply(const std::vector<uint64_t>& wanted, std::string* why) {
  State& st = state();
  std::string ignored;
  if (why == nullptr) why = &ignored;
  if (!std::is_sorted(wanted.begin(), wanted.end())) {
    *why = "the wanted functions are not sorted";
    return -EINVAL;
  }
  ApplyCall call{&st, &wanted, why, 0, false};
  dl_iterate_phdr(with_loader_locked, &call);
  return call.rc;
}

namespace internal {

Stats stats() {
  State& st = state();
  base::MutexLock lock(&st.mu);
  const detail::SignalStats sig = detail::signal_stats();
  return {sig.traps, st.sweeps, sig.sweep_moves, sig.syncs, st.batches, sig.sync_method};
}

std::vector<Refused> refused_sites() {
  State& st = state();
  base::MutexLock lock(&st.mu);
  return st.refused;
}

std::vector<uint8_t> read_site(uint64_t fn, size_t n) {
  State& st = state();
  base::MutexLock lock(&st.mu);
  const auto* p = reinterpret_cast<const uint8_t*>(fn);
  return std::vector<uint8_t>(p, p + n);
}

uint64_t stub_for(uint64_t fn) {
  State& st = state();
  base::MutexLock lock(&st.mu);
  auto it = st.sites.find(fn);
  return it == st.sites.end() ? 0 : it->second.obj->stub;
}

}  // namespace internal
}  // namespace usrtrace::function::patch

namespace usrtrace::function::patch {

uint64_t return_hook_address() { return reinterpret_cast<uint64_t>(&usrtrace_function_return_hook); }
uint64_t full_return_hook_address() {
  return reinterpret_cast<uint64_t>(&usrtrace_function_full_return_hook);
}

}  // namespace usrtrace::function::patch

namespace usrtrace::function::patch {

int sweep_signal() { return detail::sweep_signal_number(); }

}  // namespace usrtrace::function::patch
