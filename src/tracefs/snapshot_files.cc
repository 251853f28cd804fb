// snapshot, snapshot_enabled, snapshot_ring_size, snapshot.AGE and
// per_cpu/cpuN/snapshot, snapshot_raw: the kernel's snapshot files over
// instance::Snapshots (instance/snapshot.h). Their table, kSnapshotFiles,
// is at the end.
#include <cerrno>
#include <memory>

#include "latency/latency.h"
#include "output/trace_output.h"
#include "tracefs/internal.h"

namespace usrtrace::tracefs::detail {
namespace {

constexpr const char kSub[] = "snapshot";

long size_of(std::string_view s) { return static_cast<long>(s.size()); }

// A decimal number, or the errno with an error_log line.
long parse_value(Instance& inst, std::string_view s, size_t at, std::string_view whole, uint64_t* v) {
  size_t bad = 0;
  if (int rc = parse_u64(s, 10, v, &bad); rc < 0)
    return fail(inst, kSub, s.empty() ? Err::kEmpty : Err::kNotNumber, whole, at + bad,
                rc == -ERANGE ? ERANGE : EINVAL);
  return 0;
}

// "N" or, for echo 1, "1 REASON...": the reason shows at the head of the
// snapshot (a usrtrace addition; the kernel takes a number only).
long write_snapshot(Instance& inst, int cpu, std::string_view s) {
  const std::string_view body = strip(s);
  const size_t sp = body.find_first_of(" \t");
  const std::string_view num = body.substr(0, sp);
  const std::string_view reason = sp == std::string_view::npos ? std::string_view() : strip(body.substr(sp));
  uint64_t v = 0;
  const size_t at = static_cast<size_t>(num.data() - s.data());
  if (long rc = parse_value(inst, num, at, s, &v); rc < 0) return rc;
  if (v != 1 && !reason.empty())
    return fail(inst, kSub, Err::kNotNumber, s, static_cast<size_t>(reason.data() - s.data()), EINVAL);
  // The kernel's use_max_tr: the spare is the latency tracer's max buffer.
  if (latency::uses_max_buffer(inst)) return fail(inst, kSub, Err::kMaxBufferBusy, s, at, EBUSY);
  instance::Snapshots& snaps = inst.snapshots();
  switch (v) {
    case 0:
      if (cpu >= 0) return fail(inst, kSub, Err::kSnapshotFreeCpu, s, at, EINVAL);
      if (snaps.release() == -EBUSY) return fail(inst, kSub, Err::kSnapshotBusy, s, at, EBUSY);
      break;
    case 1:
      if (snaps.allocate() < 0) return fail(inst, kSub, Err::kNoMemory, s, at, ENOMEM);
      snaps.take(reason, cpu);
      break;
    default:
      snaps.clear(cpu);
      break;
  }
  return size_of(s);
}

long write_enabled(Instance& inst, std::string_view s) {
  uint64_t v = 0;
  if (long rc = parse_value(inst, s, 0, s, &v); rc < 0) return rc;
  if (v > 1) return fail(inst, kSub, Err::kNotBool, s, 0, EINVAL);
  instance::Snapshots& snaps = inst.snapshots();
  if (v == 1) {
    if (snaps.allocate() < 0) return fail(inst, kSub, Err::kNoMemory, s, 0, ENOMEM);
  } else if (latency::uses_max_buffer(inst)) {
    return fail(inst, kSub, Err::kMaxBufferBusy, s, 0, EBUSY);  // it is the max buffer
  } else if (snaps.release() == -EBUSY) {
    return fail(inst, kSub, Err::kSnapshotBusy, s, 0, EBUSY);
  }
  return size_of(s);
}

long write_ring_size(Instance& inst, std::string_view s) {
  uint64_t v = 0;
  if (long rc = parse_value(inst, s, 0, s, &v); rc < 0) return rc;
  if (v < 1 || v > instance::kMaxSnapshotRing) return fail(inst, kSub, Err::kSnapshotRing, s, 0, EINVAL);
  switch (inst.snapshots().set_ring_size(static_cast<int>(v))) {
    case 0:
      return size_of(s);
    case -EBUSY:
      return fail(inst, kSub, Err::kSnapshotBusy, s, 0, EBUSY);
    default:
      return fail(inst, kSub, Err::kNoMemory, s, 0, ENOMEM);
  }
}

// ---- The open functions; `ip` stays valid as long as the file, which holds
// the node's reference on it.

// snapshot (n.cpu -1) and per_cpu/cpuN/snapshot.
std::unique_ptr<File> open_snapshot(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const int cpu = n.cpu;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->stream = [ip, cpu, t = std::shared_ptr<output::TraceText>()](std::string* out, size_t want) mutable {
    if (!t) t = output::TraceText::snapshot(*ip, 0, cpu);
    return t->fill(out, want);
  };
  f->store = [ip, cpu](std::string_view s) { return write_snapshot(*ip, cpu, s); };
  return f;
}

std::unique_ptr<File> open_snapshot_raw(Node n, int, int* err) {
  Instance* ip = n.inst.get();
  auto ref = std::make_shared<instance::Snapshots::Ref>(ip->snapshots().get(0));
  if (!*ref) {
    *err = ENODEV;  // the kernel's answer when no spare is allocated
    return nullptr;
  }
  rb::RingBuffer* rb = &ref->buffer();
  return make_pipe_raw(std::move(n.inst), rb, n.cpu, true, std::move(ref));
}

// snapshot.AGE: the kept snapshots older than the newest.
bool match_age(std::string_view name, Node* n) {
  if (name.substr(0, 9) != "snapshot.") return false;
  uint64_t age = 0;
  size_t bad = 0;
  const std::string_view d = name.substr(9);
  if (d.empty() || d[0] == '0' || d[0] == '+' || parse_u64(d, 10, &age, &bad) < 0 ||
      age >= static_cast<uint64_t>(n->inst->snapshots().ring_size()))
    return false;
  n->age = static_cast<int>(age);
  return true;
}

void list_ages(const Node& n, std::vector<std::string>* out) {
  for (int age = 1; age < n.inst->snapshots().ring_size(); ++age)
    out->push_back("snapshot." + std::to_string(age));
}

std::unique_ptr<File> open_snapshot_old(Node n, int, int*) {
  Instance* ip = n.inst.get();
  const int age = n.age;
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->stream = [ip, age, t = std::shared_ptr<output::TraceText>()](std::string* out, size_t want) mutable {
    if (!t) t = output::TraceText::snapshot(*ip, age, -1);
    return t->fill(out, want);
  };
  return f;
}

std::unique_ptr<File> open_snapshot_enabled(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::string(ip->snapshots().allocated() ? "1\n" : "0\n"); };
  f->store = [ip](std::string_view s) { return write_enabled(*ip, s); };
  return f;
}

std::unique_ptr<File> open_snapshot_ring_size(Node n, int, int*) {
  Instance* ip = n.inst.get();
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [ip] { return std::to_string(ip->snapshots().ring_size()) + "\n"; };
  f->store = [ip](std::string_view s) { return write_ring_size(*ip, s); };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"snapshot", kRW, Dir::kRoot, 0, open_snapshot},
    {"snapshot_enabled", kRW, Dir::kRoot, 0, open_snapshot_enabled},
    {"snapshot_ring_size", kRW, Dir::kRoot, 0, open_snapshot_ring_size},
    {nullptr, kRO, Dir::kRoot, kNoSubpath, open_snapshot_old, match_age, list_ages},
    {"snapshot", kRW, Dir::kCpu, 0, open_snapshot},
    {"snapshot_raw", kRO, Dir::kCpu, 0, open_snapshot_raw},
};

}  // namespace

constinit const std::span<const FileSpec> kSnapshotFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
