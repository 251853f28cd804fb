// trace-cmd's trace.dat file format, versions 6 and 7: the constants both
// the writer and the reader use. The layout itself is described in
// docs/design/tracedat.md and in trace-cmd's trace-cmd.dat.v6(5) and
// trace-cmd.dat.v7(5).
#pragma once

#include <cstdint>

namespace usrtrace::tracedat {

inline constexpr uint8_t kMagic[3] = {0x17, 0x08, 0x44};
inline constexpr char kTag[] = "tracing";  // 7 bytes after the magic

// Option ids (v6 options block; v7 options sections). 16..22 are also v7
// section ids; a flyrecord section has id kBuffer.
enum Option : uint16_t {
  kOptDone = 0,
  kOptDate = 1,
  kOptCpuStat = 2,
  kOptBuffer = 3,
  kOptTraceClock = 4,
  kOptUname = 5,
  kOptHook = 6,
  kOptOffset = 7,
  kOptCpuCount = 8,
  kOptVersion = 9,
  kOptProcMaps = 10,
  kOptTraceId = 11,
  kOptTimeShift = 12,
  kOptGuest = 13,
  kOptTsc2Nsec = 14,
  kOptStrings = 15,
  kOptHeaderInfo = 16,
  kOptFtraceEvents = 17,
  kOptEventFormats = 18,
  kOptKallsyms = 19,
  kOptPrintk = 20,
  kOptCmdlines = 21,
  kOptBufferText = 22,
};

// v7 section header flag: the section's data is compressed.
inline constexpr uint16_t kSectionCompressed = 1;
// v7 section header: u16 id, u16 flags, u32 description string id, u64 size.
inline constexpr uint32_t kSectionHeaderSize = 16;

}  // namespace usrtrace::tracedat
