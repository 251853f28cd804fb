// Running a probe's fetch programs (parse.h) on a hit, and the shape of its
// event: the fields, print fmt and print function the kernel's uprobe
// events have for the same definition (events/GRP/EVENT/format equal to
// the kernel's but for the id; `trace` lines equal to its lines).
//
// The record, as trace_uprobe.c writes it (all little-endian, packed):
//
//   0   common header (8)           type = the event id
//   8   __probe_ip                  entry probes: the probed address
//   8   __probe_func, __probe_ret_ip   return probes: the function, the
//  16                                  address it returns to
//   16|24  the args, each at Arg::offset, sizes as their types, no padding
//   fixed_size ...  the strings: each field a __data_loc (len << 16 | offset),
//                   len counting the NUL; len 0 is a fault ("(fault)")
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "patch/regs.h"
#include "probe/parse.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::probe {

// symstr's callback (ours; the kernel's sprint_symbol()): writes the name
// of the symbol holding `addr` ("name+0xoff/0xsize") into buf, NUL
// included, and returns its length without the NUL, or < 0 when it has
// none. Context: the hit's thread: no lock, no allocation.
using Symbolizer = int (*)(uint64_t addr, char* buf, size_t size, void* arg);

// What a hit knows.
struct RunContext {
  const patch::Regs* regs = nullptr;     // at the probed instruction (a return probe: at the return)
  uint64_t func = 0;                     // return probes: the function's entry (__probe_func)
  const uint64_t* entry_args = nullptr;  // return probes: di si dx cx r8 r9 at the entry ($argN)
  // @+FILEOFFS reads at bias + FILEOFFS. The kernel's base is the probed
  // address minus the probe's file offset, which is the object's load bias
  // (dlpi_addr) when its code segment's file offset equals its vaddr, as
  // the usual linkers lay it out.
  uint64_t bias = 0;
  const char* comm = nullptr;      // the thread's name ($comm); nullptr: asked of the kernel (prctl)
  Symbolizer symbolize = nullptr;  // symstr; nullptr: the address as 0x%lx
  void* symbolize_arg = nullptr;
};

// The event of one definition. Owns the strings its EventDesc points to.
class EventShape {
 public:
  explicit EventShape(const Definition& d);
  EventShape(const EventShape&) = delete;
  EventShape& operator=(const EventShape&) = delete;
  internal::EventDesc* desc() { return &desc_; }
  const Definition& def() const { return def_; }

 private:
  Definition def_;
  std::vector<std::string> names_, types_;
  std::vector<internal::FieldDesc> fields_;
  std::string print_fmt_;
  internal::EventDesc desc_{};
};

// The shapes by event id, for the print function (a PrintFn has no
// context pointer): set once Registry::add() gave the event its id, cleared
// (nullptr) before Registry::remove(). Context: control plane.
void publish_shape(uint16_t id, const EventShape* shape);

// Writes the record of one hit into rec (cap bytes, at most
// internal::kMaxRecord): the common header's type (`id`; the rest is
// write_event's), the probe's fields, the args, then the strings after the
// fixed part, cut to fit. Returns its length (0: cap is below the fixed
// part). Memory is read fault-safe (base/safe_copy.h): a read that faults
// stores 0 (the kernel leaves its buffer's old bytes when a dereference
// faults, and keeps the bytes before the fault of a value that straddles
// one), a string that faults is (fault). Context: the hit's thread, any context the program
// runs in; no lock, no allocation, no system call but $comm's prctl when
// ctx.comm is nullptr.
uint32_t run(const Definition& d, uint16_t id, const RunContext& ctx, uint8_t* rec, uint32_t cap);

// The record as the kernel's `trace` prints the event's part, after
// "EVENT: ": "(0x55e0c3a1b2c0) s=\"abc\" n=5", or for a return probe
// "(0xRET_IP <- 0xFUNC) ...". symbol args print as %pS through
// symbols::Resolver. Returns the length printed (snprintf's convention).
// Context: reader side; allocates (symbol names).
int print_record(const Definition& d, const void* rec, uint32_t len, char* buf, size_t size);

}  // namespace usrtrace::probe
