// Internals of the recorder (usrtrace/tracedat.h) that other parts reuse.
#pragma once

#include <string>
#include <vector>

#include "clock/trace_clock.h"
#include "control/meta.h"
#include "ring_buffer/ring_buffer.h"
#include "tracedat/writer.h"
#include "usrtrace/tracedat.h"

namespace usrtrace::tracedat {

// What a trace.dat needs besides the buffers, read from the control files
// and the program's symbol tables; the trace clock is that of
// instances[0]. Context: control plane.
Metadata collect_metadata(const std::vector<std::string>& instances);

// collect_metadata(), and per instance (empty: the top one) its clock,
// shape and per-CPU stats, as a recorder outside the process gets them
// (kMeta) and as the journal keeps them. 0, or -ENOENT when an instance is
// missing. Context: control plane.
int collect_instance_meta(const std::vector<std::string>& instances, control::RemoteMeta* out);

// The TSC2NSEC/OFFSET conversion for a buffer on clock `id` (mult 0 when
// its stamps are not TSC counts).
Metadata::Tsc2Nsec tsc2nsec_for(clock::ClockId id);
// The same from a given calibration: mult below 2^31, since trace-cmd reads
// it into an int.
Metadata::Tsc2Nsec tsc2nsec_from(const clock::TscCalibration& c);
// The conversion through two samples (a before b), or mult 0 when they are
// less than kMinRefineNs apart (no better than the calibration's own).
inline constexpr uint64_t kMinRefineNs = 200'000'000;
Metadata::Tsc2Nsec tsc2nsec_between(const clock::TscSample& a, const clock::TscSample& b);

// One page of `cpu` as trace_pipe_raw hands it out, into `page`
// (page_size bytes) with its unwritten tail zeroed; *missed gets the events
// lost before it (0 if none). False when there is none (with full_only,
// no closed page). Context: control plane, one reader per buffer.
bool take_page(rb::RingBuffer& rb, int cpu, uint8_t* page, uint32_t page_size, bool full_only,
               uint64_t* missed);
// What take_page does to a page read_page handed out (`len` data bytes):
// zeroes its unwritten tail and reads its missed-events count.
void settle_page(uint8_t* page, uint32_t page_size, uint32_t len, uint64_t* missed);

// Checks what every recording checks; *dir gets the output's directory
// (for the temporary files). 0, or -EINVAL with *err set.
int check_options(const RecordOptions& o, std::string* dir, std::string* err);

// Where a CpuData marked in_place already is: the file `path`, open at
// `fd` for writing, whose pages end before `append_at`.
struct InPlaceFile {
  int fd = -1;
  std::string path;
  uint64_t append_at = 0;
};

// Writes opts.output from the metadata and the buffers' data, the top
// instance first (an empty one when it was not recorded, as trace-cmd
// does). With `in_place`, into that file, which is then renamed to
// opts.output. 0, or -errno with *err set.
int write_output(const RecordOptions& opts, Metadata meta, std::vector<BufferData> buffers, std::string* err,
                 const InPlaceFile* in_place = nullptr);

// Keeps in *now what went away since *before was taken: the formats of
// events unregistered meanwhile (a shared object unloaded, or a program's
// static destructors run at exit while it is recorded: its records are
// in the pages and must not print as UNKNOWN), and the names of threads
// that left saved_cmdlines. Linear in both; what it adds stops at
// kMaxCmdlines lines of saved_cmdlines in all (the kernel's largest
// saved_cmdlines_size) and kMaxDepartedFormats formats in all.
// Context: control plane.
inline constexpr size_t kMaxCmdlines = 32768;
inline constexpr size_t kMaxDepartedFormats = 65536;
void keep_departed(const Metadata& before, Metadata* now);

// "local" from the trace_clock file's "[local] global ...".
std::string clock_name(const std::string& trace_clock_text);

}  // namespace usrtrace::tracedat
