// Running a probe's fetch args (lang.h) on a hit, and the shape of its
// event: the fields, print fmt and print function the kernel's probe
// events have for the same definition (events/GRP/EVENT/format equal to
// the kernel's, but for the id).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "patch/regs.h"
#include "probe/lang.h"
#include "usrtrace/internal/event_impl.h"

namespace usrtrace::probe {

// What a hit knows.
struct HitContext {
  const patch::Regs* regs = nullptr;
  uint64_t func = 0;                     // return probes: the function's entry
  const uint64_t* entry_args = nullptr;  // return probes: di si dx cx r8 r9 at the entry
  uint64_t bias = 0;                     // the probed object's load bias (@+FILEOFFS)
  const char* comm = nullptr;            // the thread's name ($comm)
};

// The event of one definition. Owns the strings its EventDesc points to.
class ProbeShape {
 public:
  explicit ProbeShape(const ProbeDef& d);
  internal::EventDesc* desc() { return &desc_; }
  const ProbeDef& def() const { return def_; }

 private:
  ProbeDef def_;
  std::vector<std::string> names_, types_;
  std::vector<internal::FieldDesc> fields_;
  std::string print_fmt_;
  internal::EventDesc desc_{};
};

// Writes the record of one hit into rec (cap bytes): the common header's
// type, the probe's fields, the args, strings after the fixed part.
// Returns its length. Memory is read fault-safe (base/safe_copy.h): a bad
// read stores 0, a bad string "(fault)". Context: the hit's thread; no
// lock, no allocation, no system call.
uint32_t write_fields(const ProbeDef& d, uint16_t id, const HitContext& ctx, uint8_t* rec, uint32_t cap);

// Makes records of event `id` print with `shape` (null: no more).
// Context: control plane, after registration / before removal.
void publish_shape(uint16_t id, const ProbeShape* shape);

// The record as the kernel's `trace` prints the event's part:
// "(0x55e0c3a1b2c0) s=\"abc\" n=5". Context: reader side.
int print_record(const ProbeDef& d, const void* rec, uint32_t len, char* buf, size_t size);

}  // namespace usrtrace::probe
