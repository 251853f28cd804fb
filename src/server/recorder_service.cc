// The recorder service (recorder_service.h): the answers to kPages, kMeta
// and kRecord, and the kMetaChanged flag. Apart from the server (server.cc)
// so that the poll loop knows connections and requests, not ring buffers
// and trace.dat metadata.
#include "server/recorder_service.h"

#include <cerrno>

#include "base/sys.h"
#include "control/meta.h"
#include "instance/instance.h"
#include "persist/file_store.h"
#include "record/recorder.h"

namespace usrtrace::control {

using instance::Instance;

void RecorderSession::release_readers() {
  for (auto& [name, inst] : readers) inst->put_reader();
  readers.clear();
}

namespace {

// The instance r.path with the session's reader reference on it, nullptr
// with *rc when there is none.
Instance* reader_of(RecorderSession& s, const std::string& path, int* rc) {
  if (auto it = s.readers.find(path); it != s.readers.end()) return it->second;
  int err = 0;
  Instance* inst = Instance::get(path, Instance::GetMode::kExisting, &err);
  if (!inst) {
    *rc = -(err ? err : ENOENT);
    return nullptr;
  }
  s.readers.emplace(path, inst);  // the reference keeps rmdir away (EBUSY)
  return inst;
}

}  // namespace

bool take_pages(RecorderSession& s, const Request& r, bool may_park, const ExitHandshake& exit, Reply* out) {
  int rc = 0;
  Instance* inst = reader_of(s, r.path, &rc);
  if (!inst) {
    *out = {rc, {}};
    return true;
  }
  rb::RingBuffer& rb = inst->buffer();
  const uint32_t ps = rb.page_size(0);
  const int ncpu = rb.nr_cpus();
  if (r.size < 8 + 4 + ps) {
    *out = {-EINVAL, {}};  // not even one page fits
    return true;
  }
  std::string payload;
  Encoder e(&payload);
  e.u32(ps);
  e.u32(static_cast<uint32_t>(ncpu));
  int32_t count = 0;
  for (int k = 0; k < ncpu; ++k) {
    const int cpu = static_cast<int>((s.next_cpu + static_cast<uint32_t>(k)) % static_cast<uint32_t>(ncpu));
    while (payload.size() + 4 + ps <= r.size) {
      const size_t at = payload.size();
      e.u32(static_cast<uint32_t>(cpu));
      payload.resize(at + 4 + ps);
      uint64_t missed = 0;
      if (!tracedat::take_page(rb, cpu, reinterpret_cast<uint8_t*>(payload.data() + at + 4), ps, !r.on,
                               &missed)) {
        payload.resize(at);
        break;
      }
      ++count;
    }
  }
  ++s.next_cpu;  // the next answer starts at another CPU: none starves
  if (count == 0 && may_park && !r.on && r.wait_ms > 0 && !exit.exiting()) return false;
  *out = {count, std::move(payload)};
  return true;
}

Reply share_buffer(RecorderSession& s, const Request& r) {
  int rc = 0;
  Instance* inst = reader_of(s, r.path, &rc);
  if (!inst) return {rc, {}};
  auto* fs = dynamic_cast<persist::FileStore*>(inst->buffer().store().get());
  const int fd = fs ? fs->shared_fd() : -1;
  if (fd < 0) return {-ENOTSUP, {}};
  Reply reply;
  Encoder(&reply.payload).u32(static_cast<uint32_t>(fd));
  return reply;
}

Reply collect_meta(RecorderSession& s, const Request& r) {
  // Read before collecting: a change while it runs makes the next answer
  // say kMetaChanged again.
  const uint32_t generation = base::metadata_generation();
  RemoteMeta m;
  if (int rc = tracedat::collect_instance_meta(r.names, &m); rc < 0) return {rc, {}};
  Reply reply;
  encode_meta(m, &reply.payload);
  s.meta_generation = generation;
  s.has_meta = true;
  return reply;
}

uint32_t meta_flags(const RecorderSession& s) {
  const bool stale = !s.has_meta || s.meta_generation != base::metadata_generation();
  return stale ? kMetaChanged : 0;
}

void set_recording(RecorderSession& s, bool on, ExitHandshake* exit) {
  if (s.recording == on) return;
  s.recording = on;
  exit->add_recorders(on ? 1 : -1);
}

}  // namespace usrtrace::control
