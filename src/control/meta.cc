#include "control/meta.h"

#include <cerrno>

#include "control/protocol.h"

namespace usrtrace::control {
namespace {

constexpr size_t kMaxText = 256u << 20;
constexpr uint32_t kMaxCount = 1u << 20;

void strs(Encoder& e, const std::vector<std::string>& v) {
  e.u32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) e.str(s);
}

bool strs(Decoder& d, std::vector<std::string>* v) {
  const uint32_t n = d.u32();
  if (n > kMaxCount) return false;
  for (uint32_t i = 0; i < n && d.ok(); ++i) v->push_back(d.str(kMaxText));
  return d.ok();
}

}  // namespace

void encode_meta(const RemoteMeta& r, std::string* out) {
  Encoder e(out);
  const tracedat::Metadata& m = r.meta;
  e.u32(m.page_size);
  e.u32(static_cast<uint32_t>(m.nr_cpus));
  e.str(m.header_page);
  e.str(m.header_event);
  strs(e, m.ftrace_formats);
  e.u32(static_cast<uint32_t>(m.systems.size()));
  for (const auto& [sys, formats] : m.systems) {
    e.str(sys);
    strs(e, formats);
  }
  e.str(m.kallsyms);
  e.str(m.printk);
  e.str(m.cmdlines);
  e.str(m.trace_clock);
  e.str(m.uname);
  e.str(m.version);
  e.u32(m.tsc2nsec.mult);
  e.u32(m.tsc2nsec.shift);
  e.i64(m.tsc2nsec.offset);
  e.u32(static_cast<uint32_t>(r.instances.size()));
  for (const InstanceMeta& i : r.instances) {
    e.str(i.name);
    e.str(i.clock);
    e.u32(i.page_size);
    e.u32(static_cast<uint32_t>(i.nr_cpus));
    e.u64(i.capacity);
    strs(e, i.stats);
  }
  // Last, so that a journal written before it was added still reads.
  strs(e, m.procmaps);
}

int decode_meta(const uint8_t* p, size_t n, RemoteMeta* out) {
  Decoder d(p, n);
  RemoteMeta r;
  tracedat::Metadata& m = r.meta;
  m.page_size = d.u32();
  m.nr_cpus = static_cast<int>(d.u32());
  m.header_page = d.str(kMaxText);
  m.header_event = d.str(kMaxText);
  if (!strs(d, &m.ftrace_formats)) return -EPROTO;
  const uint32_t nsys = d.u32();
  if (nsys > kMaxCount) return -EPROTO;
  for (uint32_t i = 0; i < nsys && d.ok(); ++i) {
    std::string sys = d.str(kMaxText);
    std::vector<std::string> formats;
    if (!strs(d, &formats)) return -EPROTO;
    m.systems.emplace_back(std::move(sys), std::move(formats));
  }
  m.kallsyms = d.str(kMaxText);
  m.printk = d.str(kMaxText);
  m.cmdlines = d.str(kMaxText);
  m.trace_clock = d.str(kMaxText);
  m.uname = d.str(kMaxText);
  m.version = d.str(kMaxText);
  m.tsc2nsec.mult = d.u32();
  m.tsc2nsec.shift = d.u32();
  m.tsc2nsec.offset = d.i64();
  const uint32_t ninst = d.u32();
  if (ninst > kMaxInstancesPerMeta) return -EPROTO;
  for (uint32_t i = 0; i < ninst && d.ok(); ++i) {
    InstanceMeta im;
    im.name = d.str(kMaxPath);
    im.clock = d.str(kMaxPath);
    im.page_size = d.u32();
    im.nr_cpus = static_cast<int>(d.u32());
    if (im.nr_cpus < 0 || im.nr_cpus > kMaxCpus) return -EPROTO;
    im.capacity = d.u64();
    if (!strs(d, &im.stats)) return -EPROTO;
    r.instances.push_back(std::move(im));
  }
  if (d.ok() && !d.done() && !strs(d, &m.procmaps)) return -EPROTO;
  if (!d.done() || m.nr_cpus <= 0 || m.nr_cpus > kMaxCpus || m.tsc2nsec.shift > 63) return -EPROTO;
  *out = std::move(r);
  return 0;
}

}  // namespace usrtrace::control
