// libFuzzer: an object's unwind table (.eh_frame_hdr, .eh_frame) as
// untrusted input to symbols::unwind_table_functions, which names a
// stripped object's functions from it (src/symbols/symbols.cc). The bytes
// start as this fuzzer's own tables, so that the fuzzer reaches past the
// header checks: the input's first 4 bytes choose an offset into them, the
// rest overwrites from there. The parser must return functions inside
// .text, never read out of bounds (ASan), crash or hang.
#include <link.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "symbols/symbols.h"

namespace {

struct Tables {
  std::vector<uint8_t> hdr, eh;
  uint64_t hdr_addr = 0, eh_addr = 0, text_addr = 0, text_size = 0;
};

// This program's own tables, from its PT_GNU_EH_FRAME segment.
Tables own_tables() {
  Tables t;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        auto* t = static_cast<Tables*>(arg);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
            t->text_addr = ph.p_vaddr;
            t->text_size = ph.p_memsz;
          }
          if (ph.p_type == PT_GNU_EH_FRAME) {
            const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
            t->hdr.assign(p, p + ph.p_memsz);
            t->hdr_addr = ph.p_vaddr;
          }
        }
        if (t->hdr.size() >= 8) {
          // .eh_frame_ptr (pcrel sdata4, as ld writes it): .eh_frame, whose
          // length the FDEs' own lengths give; a generous window suffices.
          int32_t rel;
          std::memcpy(&rel, t->hdr.data() + 4, 4);
          t->eh_addr = t->hdr_addr + 4 + static_cast<uint64_t>(static_cast<int64_t>(rel));
          // Up to 64 KiB, within the segment that holds it.
          size_t n = 0;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type == PT_LOAD && t->eh_addr >= ph.p_vaddr && t->eh_addr < ph.p_vaddr + ph.p_memsz)
              n = std::min<size_t>(65536, ph.p_vaddr + ph.p_memsz - t->eh_addr);
          }
          const auto* e = reinterpret_cast<const uint8_t*>(info->dlpi_addr + t->eh_addr);
          t->eh.assign(e, e + n);
        }
        return 1;  // the program only
      },
      &t);
  return t;
}

const Tables& seed() {
  static const Tables t = own_tables();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tables& t = seed();
  if (t.hdr.empty() || t.eh.empty() || size < 4) return 0;
  uint32_t at;
  std::memcpy(&at, data, 4);
  std::vector<uint8_t> all = t.hdr;
  all.insert(all.end(), t.eh.begin(), t.eh.end());
  at %= static_cast<uint32_t>(all.size());
  for (size_t i = 4; i < size && at + (i - 4) < all.size(); ++i) all[at + (i - 4)] = data[i];
  const size_t nh = t.hdr.size();
  // Exact-size copies, so that ASan sees a read past either table.
  std::vector<uint8_t> hdr(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nh));
  std::vector<uint8_t> eh(all.begin() + static_cast<std::ptrdiff_t>(nh), all.end());
  const auto fns = usrtrace::symbols::unwind_table_functions(
      {hdr.data(), hdr.size(), t.hdr_addr}, {eh.data(), eh.size(), t.eh_addr}, t.text_addr, t.text_size);
  for (const auto& f : fns)
    if (f.start < t.text_addr || f.start - t.text_addr >= t.text_size || f.size == 0 || f.size > t.text_size)
      abort();
  return 0;
}
