// Parses arbitrary text as a uprobe_events line (src/probe/parse.h); what
// parses is shaped into an event and its programs are run against
// registers pointing at the input's bytes, at nothing and at a PROT_NONE
// page, then printed. Must never crash, leak or hang; the caret must be in
// the command; a record must stay within cap and its strings inside it; two
// runs on the same state must write the same record.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "probe/fetch.h"

namespace {

char* none_page() {
  static char* p = [] {
    void* m = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? nullptr : static_cast<char*>(m);
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace usrtrace::probe;
  if (size == 0) return 0;
  // Half the inputs are args after a head that parses, to reach the
  // fetch-arg parser and the programs.
  std::string line(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) line = std::string(data[0] & 2 ? "r:g/e" : "p:g/e") + " /proc/self/exe:0x10 " + line;
  Definition d;
  Error e;
  const int rc = parse(line, &d, &e);
  if (rc < 0) {
    if (rc >= 0 || e.errnum != -rc) abort();
    if (!e.text.empty() && e.pos > command_text(line).size() + 1) abort();
    return 0;
  }
  if (d.kind == '-') {
    (void)removal_matches(d, d);
    return 0;
  }
  (void)d.text();
  EventShape shape(d);
  shape.desc()->id = 1000;
  // Registers: the input, nothing, a PROT_NONE page, small numbers.
  alignas(8) static uint8_t mem[4096];
  std::memset(mem, 0, sizeof mem);
  std::memcpy(mem, data, size < sizeof mem - 1 ? size : sizeof mem - 1);
  usrtrace::patch::Regs regs{};
  regs.di = reinterpret_cast<uint64_t>(mem);
  regs.si = reinterpret_cast<uint64_t>(none_page());
  regs.dx = 0;
  regs.cx = 8;
  regs.ax = reinterpret_cast<uint64_t>(mem + 64);
  regs.sp = reinterpret_cast<uint64_t>(mem + 128);
  regs.bx = reinterpret_cast<uint64_t>(none_page()) - 3;
  const uint64_t entry[6] = {regs.di, regs.si, 1, 2, 3, 4};
  RunContext ctx;
  ctx.regs = &regs;
  ctx.func = 0x401000;
  ctx.entry_args = entry;
  ctx.bias = reinterpret_cast<uint64_t>(mem);
  ctx.comm = "fuzz";
  static uint8_t a[usrtrace::internal::kMaxRecord + 16], b[usrtrace::internal::kMaxRecord + 16];
  for (uint32_t cap : {usrtrace::internal::kMaxRecord, static_cast<uint32_t>(d.fixed_size) + 5u}) {
    std::memset(a, 0xa5, sizeof a);
    std::memset(b, 0xa5, sizeof b);
    const uint32_t la = run(d, 1000, ctx, a, cap);
    const uint32_t lb = run(d, 1000, ctx, b, cap);
    if (la != lb || la > cap || std::memcmp(a, b, sizeof a) != 0) abort();
    if (la != 0 && la < d.fixed_size) abort();
    for (size_t i = cap; i < sizeof a; ++i)
      if (a[i] != 0xa5) abort();
    char out[8192];
    const int n = print_record(d, a, la, out, sizeof out);
    if (n < 0) abort();
  }
  return 0;
}
