// What a recorder outside the process needs besides the pages (kMeta): the
// trace.dat metadata and, per recorded instance, its clock, page size and
// per-CPU stats. Encoded by the server, decoded (as untrusted input) by the
// client.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tracedat/writer.h"

namespace usrtrace::control {

struct InstanceMeta {
  std::string name;
  std::string clock;
  uint32_t page_size = 0;
  int nr_cpus = 0;
  uint64_t capacity = 0;           // bytes of pages, all CPUs together
  std::vector<std::string> stats;  // per_cpu/cpuN/stats
};

struct RemoteMeta {
  tracedat::Metadata meta;
  std::vector<InstanceMeta> instances;
};

void encode_meta(const RemoteMeta& m, std::string* out);
// 0, or -EPROTO when the payload does not decode exactly.
int decode_meta(const uint8_t* p, size_t n, RemoteMeta* out);

}  // namespace usrtrace::control
