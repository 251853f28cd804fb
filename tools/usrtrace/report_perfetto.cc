#include "report_perfetto.h"

#include <cinttypes>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "report_fields.h"

namespace usrtrace::tool {
namespace {

// Field numbers, from Perfetto's protos/perfetto/trace/perfetto_trace.proto
// (tests/output/perfetto/ keeps the copy the tests decode with).
namespace pb {
constexpr uint32_t kTracePacket = 1;  // Trace.packet
// TracePacket
constexpr uint32_t kClockSnapshot = 6;
constexpr uint32_t kTimestamp = 8;
constexpr uint32_t kTrustedPacketSequenceId = 10;
constexpr uint32_t kTrackEvent = 11;
constexpr uint32_t kInternedData = 12;
constexpr uint32_t kSequenceFlags = 13;
constexpr uint32_t kTracePacketDefaults = 59;
constexpr uint32_t kTrackDescriptor = 60;
constexpr uint32_t kSeqIncrementalStateCleared = 1;
constexpr uint32_t kSeqNeedsIncrementalState = 2;
// TracePacketDefaults, and TracePacket's own
constexpr uint32_t kTimestampClockId = 58;
// ClockSnapshot, ClockSnapshot.Clock
constexpr uint32_t kClocks = 1;
constexpr uint32_t kPrimaryTraceClock = 2;
constexpr uint32_t kClockId = 1;
constexpr uint32_t kClockTimestamp = 2;
// BuiltinClock
constexpr uint32_t kMonotonic = 3;
constexpr uint32_t kMonotonicRaw = 5;
constexpr uint32_t kBoottime = 6;
constexpr uint32_t kFileClock = 64;  // sequence-scoped, the file's own
// TrackDescriptor, ProcessDescriptor, ThreadDescriptor
constexpr uint32_t kUuid = 1;
constexpr uint32_t kTrackName = 2;
constexpr uint32_t kProcess = 3;
constexpr uint32_t kThread = 4;
constexpr uint32_t kParentUuid = 5;
constexpr uint32_t kCounter = 8;  // TrackDescriptor.counter: a CounterDescriptor
constexpr uint32_t kPid = 1;
constexpr uint32_t kProcessName = 6;
constexpr uint32_t kTid = 2;
constexpr uint32_t kThreadName = 5;
// TrackEvent
constexpr uint32_t kCategoryIids = 3;
constexpr uint32_t kDebugAnnotations = 4;
constexpr uint32_t kType = 9;
constexpr uint32_t kNameIid = 10;
constexpr uint32_t kTrackUuid = 11;
constexpr uint32_t kSliceBegin = 1;
constexpr uint32_t kSliceEnd = 2;
constexpr uint32_t kInstant = 3;
constexpr uint32_t kCounterEvent = 4;
constexpr uint32_t kCounterValue = 30;
// DebugAnnotation
constexpr uint32_t kAnnotationNameIid = 1;
constexpr uint32_t kUintValue = 3;
constexpr uint32_t kIntValue = 4;
constexpr uint32_t kStringValue = 6;
constexpr uint32_t kPointerValue = 7;
// InternedData; each entry is {iid = 1, name = 2}
constexpr uint32_t kEventCategories = 1;
constexpr uint32_t kEventNames = 2;
constexpr uint32_t kDebugAnnotationNames = 3;
constexpr uint32_t kIid = 1;
constexpr uint32_t kName = 2;
// TracePacket.ftrace_events: a FtraceEventBundle
constexpr uint32_t kFtraceEvents = 1;
constexpr uint32_t kBundleCpu = 1;
constexpr uint32_t kBundleEvent = 2;
constexpr uint32_t kBundleFtraceClock = 5;
constexpr uint32_t kFtraceClockMonoRaw = 4;  // FtraceClock.FTRACE_CLOCK_MONO_RAW
// FtraceEvent, and the events of its oneof that are given typed
constexpr uint32_t kFtraceTimestamp = 1;
constexpr uint32_t kFtracePid = 2;
constexpr uint32_t kFtraceGeneric = 327;  // GenericFtraceEvent
constexpr uint32_t kGenericEventName = 1;
constexpr uint32_t kGenericField = 2;
constexpr uint32_t kGenericFieldName = 1;
constexpr uint32_t kGenericStr = 3;
constexpr uint32_t kGenericInt = 4;
constexpr uint32_t kGenericUint = 5;
}  // namespace pb

// The kernel's events Perfetto knows by type (FtraceEvent's oneof), with
// their fields' numbers; the rest go as GenericFtraceEvent.
struct FtraceKind {
  const char* system;
  const char* name;
  uint32_t field;  // in FtraceEvent
  std::vector<std::pair<const char*, uint32_t>> fields;
};
const std::vector<FtraceKind>& ftrace_kinds() {
  static const std::vector<std::pair<const char*, uint32_t>> wakeup = {
      {"comm", 1}, {"pid", 2}, {"prio", 3}, {"success", 4}, {"target_cpu", 5}};
  static const std::vector<FtraceKind> kinds = {
      {"sched",
       "sched_switch",
       4,
       {{"prev_comm", 1},
        {"prev_pid", 2},
        {"prev_prio", 3},
        {"prev_state", 4},
        {"next_comm", 5},
        {"next_pid", 6},
        {"next_prio", 7}}},
      {"sched", "sched_wakeup", 17, wakeup},
      {"sched", "sched_waking", 20, wakeup},
      {"sched", "sched_wakeup_new", 114, wakeup},
      {"ftrace", "print", 3, {{"ip", 1}, {"buf", 2}}},
  };
  return kinds;
}

// A message being encoded (protobuf's wire format: a key of field << 3 |
// wire type, then a varint or a length and bytes). Nested messages are
// encoded into a Msg of their own and appended whole with their length.
class Msg {
 public:
  void varint(uint32_t field, uint64_t v) {
    key(field, 0);
    put(v);
  }
  // int64: a negative value is its 64-bit two's complement (10 bytes).
  void int64(uint32_t field, int64_t v) { varint(field, static_cast<uint64_t>(v)); }
  void bytes(uint32_t field, const char* p, size_t n) {
    key(field, 2);
    put(n);
    b_.append(p, n);
  }
  void bytes(uint32_t field, const std::string& s) { bytes(field, s.data(), s.size()); }
  void msg(uint32_t field, const Msg& m) { bytes(field, m.b_); }
  // Fields already encoded (another Msg's), appended as they are.
  void raw(const std::string& fields) { b_ += fields; }
  bool empty() const { return b_.empty(); }
  const std::string& data() const { return b_; }
  void clear() { b_.clear(); }

 private:
  void key(uint32_t field, uint32_t wire) { put(uint64_t{field} << 3 | wire); }
  void put(uint64_t v) {
    while (v >= 0x80) {
      b_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    b_.push_back(static_cast<char>(v));
  }
  std::string b_;
};

// Strings interned per kind: the iid of each, and the entries new since
// the last packet, which that packet's InternedData carries.
class Interned {
 public:
  explicit Interned(uint32_t field) : field_(field) {}
  uint64_t iid(const std::string& s) {
    auto [it, added] = ids_.emplace(s, ids_.size() + 1);
    if (added) {
      Msg e;
      e.varint(pb::kIid, it->second);
      e.bytes(pb::kName, s);
      fresh_.msg(field_, e);
    }
    return it->second;
  }
  void flush(Msg* interned_data) {
    interned_data->raw(fresh_.data());
    fresh_.clear();
  }

 private:
  uint32_t field_;
  std::unordered_map<std::string, uint64_t> ids_;
  Msg fresh_;
};

// The Perfetto clock a file's clock is given as: builtin where it is one,
// else the file's own (see the header).
uint32_t perfetto_clock(const std::string& clock) {
  if (clock == "boot") return pb::kBoottime;
  if (clock == "mono") return pb::kMonotonic;
  if (clock == "mono_raw" || clock == "local" || clock == "global" || clock == "perf")
    return pb::kMonotonicRaw;
  return pb::kFileClock;
}

constexpr uint32_t kSequence = 1;        // every track event packet is on one sequence
constexpr uint32_t kFtraceSequence = 2;  // the kernel's events, as traced_probes writes them

// The FtraceClock the kernel buffer's time stamps are given in: 0 for
// BOOTTIME (Perfetto's default, the field left out), kFtraceClockMonoRaw,
// or -1 when the file's clock is neither (then the kernel's events are
// track events like the process's: ftrace's other clocks are sequence-scoped
// in Perfetto and need BOOTTIME pairs the file does not have).
int ftrace_clock(uint32_t perfetto_clock) {
  if (perfetto_clock == pb::kBoottime) return 0;
  if (perfetto_clock == pb::kMonotonicRaw) return static_cast<int>(pb::kFtraceClockMonoRaw);
  return -1;
}

class Writer {
 public:
  Writer(FILE* out, uint32_t clock) : out_(out), clock_(clock) {}

  // The first packet: the sequence's state cleared, the clock every
  // packet's time stamp is in, and that clock as the trace's.
  void start() {
    Msg p, defaults, snapshot, c;
    p.varint(pb::kTrustedPacketSequenceId, kSequence);
    p.varint(pb::kSequenceFlags, pb::kSeqIncrementalStateCleared);
    defaults.varint(pb::kTimestampClockId, clock_);
    p.msg(pb::kTracePacketDefaults, defaults);
    c.varint(pb::kClockId, clock_);
    c.varint(pb::kClockTimestamp, 0);
    snapshot.msg(pb::kClocks, c);
    if (clock_ == pb::kFileClock) {  // 1:1 with BOOTTIME
      Msg b;
      b.varint(pb::kClockId, pb::kBoottime);
      b.varint(pb::kClockTimestamp, 0);
      snapshot.msg(pb::kClocks, b);
      snapshot.varint(pb::kPrimaryTraceClock, pb::kBoottime);
    } else {
      snapshot.varint(pb::kPrimaryTraceClock, clock_);
    }
    p.msg(pb::kClockSnapshot, snapshot);
    emit(p);
  }

  // The track of (pid, tid), described the first time it is used.
  // Track uuids are numbered from 1 in the order of first use: small
  // varints in every event.
  uint64_t track(int pid, int tid, const std::string& process, const std::string& comm) {
    auto [it, added] = threads_.emplace(std::make_pair(pid, tid), 0);
    if (!added) return it->second;
    auto [pit, padded] = processes_.emplace(pid, 0);
    if (padded) {
      pit->second = ++uuids_;
      Msg d, proc;
      d.varint(pb::kUuid, pit->second);
      proc.int64(pb::kPid, pid);
      proc.bytes(pb::kProcessName, process);
      d.msg(pb::kProcess, proc);
      describe(d);
    }
    const uint64_t uuid = it->second = ++uuids_;
    Msg d, th;
    d.varint(pb::kUuid, uuid);
    d.varint(pb::kParentUuid, pit->second);
    th.int64(pb::kPid, pid);
    th.int64(pb::kTid, tid);
    th.bytes(pb::kThreadName, comm);
    d.msg(pb::kThread, th);
    d.bytes(pb::kTrackName, comm);
    describe(d);
    return uuid;
  }

  // The counter track `name` of process `pid` (whose track exists),
  // described the first time it is used.
  uint64_t counter(int pid, const std::string& name) {
    auto [it, added] = counters_.emplace(std::make_pair(pid, name), 0);
    if (!added) return it->second;
    it->second = ++uuids_;
    Msg d, c;
    d.varint(pb::kUuid, it->second);
    d.varint(pb::kParentUuid, processes_.at(pid));
    d.bytes(pb::kTrackName, name);
    d.msg(pb::kCounter, c);
    describe(d);
    return it->second;
  }

  uint64_t name(const std::string& s) { return names_.iid(s); }
  uint64_t category(const std::string& s) { return categories_.iid(s); }
  uint64_t annotation(const std::string& s) { return annotations_.iid(s); }

  // One TrackEvent at `ts`, with the strings interned since the last one.
  void event(uint64_t ts, const Msg& track_event) {
    Msg p, interned;
    p.varint(pb::kTimestamp, ts);
    p.varint(pb::kTrustedPacketSequenceId, kSequence);
    p.varint(pb::kSequenceFlags, pb::kSeqNeedsIncrementalState);
    names_.flush(&interned);
    categories_.flush(&interned);
    annotations_.flush(&interned);
    if (!interned.empty()) p.msg(pb::kInternedData, interned);
    p.msg(pb::kTrackEvent, track_event);
    emit(p);
  }

  // One kernel event as an FtraceEventBundle of its own (one CPU's,
  // in the clock `clock`: ftrace_clock()).
  void ftrace(int cpu, int clock, const Msg& ftrace_event) {
    Msg p, bundle;
    p.varint(pb::kTrustedPacketSequenceId, kFtraceSequence);
    bundle.varint(pb::kBundleCpu, static_cast<uint64_t>(cpu));
    bundle.msg(pb::kBundleEvent, ftrace_event);
    if (clock > 0) bundle.varint(pb::kBundleFtraceClock, static_cast<uint64_t>(clock));
    p.msg(pb::kFtraceEvents, bundle);
    emit(p);
  }

  int finish() {
    fwrite(buf_.data(), 1, buf_.size(), out_);
    buf_.clear();
    return fflush(out_) == 0 && !ferror(out_) ? 0 : 1;
  }

 private:
  // A packet of one TrackDescriptor.
  void describe(const Msg& descriptor) {
    Msg p;
    p.varint(pb::kTrustedPacketSequenceId, kSequence);
    p.msg(pb::kTrackDescriptor, descriptor);
    emit(p);
  }
  void emit(const Msg& packet) {
    Msg t;
    t.msg(pb::kTracePacket, packet);
    buf_ += t.data();
    if (buf_.size() > (1u << 20)) {
      fwrite(buf_.data(), 1, buf_.size(), out_);
      buf_.clear();
    }
  }

  FILE* out_;
  uint32_t clock_;
  std::string buf_;
  uint64_t uuids_ = 0;
  std::map<std::pair<int, int>, uint64_t> threads_;           // (pid, tid) -> track uuid
  std::map<int, uint64_t> processes_;                         // pid -> track uuid
  std::map<std::pair<int, std::string>, uint64_t> counters_;  // (pid, SYS:EVENT.FIELD) -> track uuid
  Interned names_{pb::kEventNames}, categories_{pb::kEventCategories},
      annotations_{pb::kDebugAnnotationNames};
};

// An event field given as a counter (--counter): its track is named
// SYS:EVENT.FIELD under the event's process.
struct Counter {
  int id;
  tep_format_field* field;
  std::string name;
};

void annotate(Writer& w, Msg* ev, const std::string& key, const FieldValue& v) {
  Msg a;
  a.varint(pb::kAnnotationNameIid, w.annotation(key));
  switch (v.kind) {
    case FieldValue::kNone:
      return;
    case FieldValue::kString:
    case FieldValue::kBytes:
      a.bytes(pb::kStringValue, v.text);
      break;
    case FieldValue::kPointer:
      a.varint(pb::kPointerValue, v.u);
      break;
    case FieldValue::kInt:
      a.int64(pb::kIntValue, v.i);
      break;
    case FieldValue::kUint:
      a.varint(pb::kUintValue, v.u);
      break;
  }
  ev->msg(pb::kDebugAnnotations, a);
}

// A field's value as protobuf: a string, or a varint (int64 for signed).
void put_value(Msg* m, uint32_t field, const FieldValue& v) {
  switch (v.kind) {
    case FieldValue::kNone:
      return;
    case FieldValue::kString:
    case FieldValue::kBytes:
      m->bytes(field, v.text);
      return;
    case FieldValue::kInt:
      m->int64(field, v.i);
      return;
    case FieldValue::kPointer:
    case FieldValue::kUint:
      m->varint(field, v.u);
      return;
  }
}

// A kernel record as an FtraceEvent: typed where Perfetto has the type
// (ftrace_kinds), else generic, with every field of its format.
Msg ftrace_event(tep_handle* tep, tep_event* ev, const TraceFile::Record& r, int tid) {
  Msg fe, body;
  fe.varint(pb::kFtraceTimestamp, r.ts);
  fe.varint(pb::kFtracePid, static_cast<uint32_t>(tid));
  for (const FtraceKind& k : ftrace_kinds())
    if (std::strcmp(ev->system, k.system) == 0 && std::strcmp(ev->name, k.name) == 0) {
      for (const auto& [name, number] : k.fields)
        if (tep_format_field* fl = tep_find_field(ev, name))
          put_value(&body, number, read_field(tep, fl, r.data, r.len));
      fe.msg(k.field, body);
      return fe;
    }
  body.bytes(pb::kGenericEventName, ev->name);
  for (tep_format_field* fl = ev->format.fields; fl; fl = fl->next) {
    const FieldValue v = read_field(tep, fl, r.data, r.len);
    Msg f;
    f.bytes(pb::kGenericFieldName, fl->name);
    put_value(&f,
              v.kind == FieldValue::kInt                                      ? pb::kGenericInt
              : v.kind == FieldValue::kString || v.kind == FieldValue::kBytes ? pb::kGenericStr
                                                                              : pb::kGenericUint,
              v);
    body.msg(pb::kGenericField, f);
  }
  fe.msg(pb::kFtraceGeneric, body);
  return fe;
}

}  // namespace

int write_perfetto(const TraceFile& f, const TepSession& session, TraceFile::Cursor& cursor,
                   const std::string& clock, const std::vector<std::string>& counter_specs,
                   const std::function<bool(const TraceFile::Record&, const char*)>& keep, FILE* out,
                   Progress* progress) {
  tep_handle* tep = session.tep();
  std::map<int, std::string> processes;
  const std::vector<int> buffer_pid = buffer_processes(f, &processes);
  // SYS:EVENT:FIELD of --counter, resolved before anything is written.
  std::vector<Counter> counters;
  for (const std::string& spec : counter_specs) {
    const size_t a = spec.find(':'), b = spec.rfind(':');
    tep_event* ev =
        a != b ? tep_find_event_by_name(tep, spec.substr(0, a).c_str(), spec.substr(a + 1, b - a - 1).c_str())
               : nullptr;
    tep_format_field* fl = ev ? tep_find_field(ev, spec.substr(b + 1).c_str()) : nullptr;
    if (fl == nullptr || (fl->flags & (TEP_FIELD_IS_ARRAY | TEP_FIELD_IS_DYNAMIC | TEP_FIELD_IS_STRING)) ||
        (fl->size != 1 && fl->size != 2 && fl->size != 4 && fl->size != 8)) {
      fprintf(stderr, "usrtrace report: --counter %s: %s\n", spec.c_str(),
              a == b ? "give SYS:EVENT:FIELD"
              : !ev  ? "no such event in the file"
              : !fl  ? "the event has no such field"
                     : "not a number field");
      return 2;
    }
    counters.push_back({ev->id, fl, spec.substr(0, b) + "." + spec.substr(b + 1)});
  }
  Writer w(out, perfetto_clock(clock));
  w.start();
  // The kernel's buffer (record -K) goes as ftrace events where the clock
  // allows: Perfetto then draws its CPU and thread-state tracks.
  const int kclock = ftrace_clock(perfetto_clock(clock));
  std::vector<bool> kernel_buffer;
  for (const TraceFile::Buffer& b : f.buffers()) kernel_buffer.push_back(kclock >= 0 && b.name == "kernel");
  // Slices open per thread track: an exit with none open is one whose
  // entry was not recorded (tracing_thresh keeps exits only), given as a
  // whole slice from its calltime.
  std::unordered_map<uint64_t, uint64_t> open;
  for_each_kept(
      session, cursor, buffer_pid, keep, progress,
      [&](const TraceFile::Record& r, tep_record& rec, int tid, const char* comm, int pid) {
        if (kernel_buffer[static_cast<size_t>(r.buffer)]) {
          if (tep_event* ev = tep_find_event_by_record(tep, &rec)) {
            w.ftrace(r.cpu, kclock, ftrace_event(tep, ev, r, tid));
            return;
          }
        }
        auto pit = processes.find(pid);
        const uint64_t track = w.track(pid, tid, pit != processes.end() ? pit->second : std::string("trace"),
                                       comm ? comm : "<...>");
        tep_event* ev = tep_find_event_by_record(tep, &rec);
        Msg te;
        te.varint(pb::kTrackUuid, track);
        // A funcgraph record that does not hold its function is an instant.
        uint64_t func = 0;
        const bool graph =
            ev && std::strcmp(ev->system, "ftrace") == 0 &&
            (std::strcmp(ev->name, "funcgraph_entry") == 0 || std::strcmp(ev->name, "funcgraph_exit") == 0) &&
            read_number(tep, tep_find_field(ev, "func"), r.data, r.len, &func);
        if (graph) {
          const bool entry = ev->name[10] == 'e' && ev->name[11] == 'n';
          uint64_t& n = open[track];
          if (entry || n == 0) {
            const char* fname = tep_find_function(tep, func);
            char hex[32];
            snprintf(hex, sizeof hex, "0x%" PRIx64, func);
            Msg begin = te;
            begin.varint(pb::kType, pb::kSliceBegin);
            begin.varint(pb::kNameIid, w.name(fname ? fname : hex));
            uint64_t at = r.ts;
            if (!entry) {  // the whole call, from the exit's calltime
              read_number(tep, tep_find_field(ev, "calltime"), r.data, r.len, &at);
            }
            w.event(at, begin);
            if (entry) {
              ++n;
              return;
            }
          } else {
            --n;
          }
          te.varint(pb::kType, pb::kSliceEnd);
          w.event(r.ts, te);
          return;
        }
        if (ev) {
          bool counted = false;
          for (const Counter& c : counters)
            if (c.id == ev->id) {
              const FieldValue v = read_field(tep, c.field, r.data, r.len);
              if (v.kind != FieldValue::kInt && v.kind != FieldValue::kUint) continue;
              Msg ce;
              ce.varint(pb::kTrackUuid, w.counter(pid, c.name));
              ce.varint(pb::kType, pb::kCounterEvent);
              ce.int64(pb::kCounterValue, v.kind == FieldValue::kInt ? v.i : static_cast<int64_t>(v.u));
              w.event(r.ts, ce);
              counted = true;
            }
          if (counted) return;
        }
        te.varint(pb::kType, pb::kInstant);
        te.varint(pb::kNameIid,
                  w.name(ev ? std::string(ev->system) + ":" + ev->name : std::string("unknown")));
        te.varint(pb::kCategoryIids, w.category(ev ? ev->system : "unknown"));
        FieldValue cpu;
        cpu.kind = FieldValue::kUint;
        cpu.u = static_cast<uint64_t>(r.cpu);
        annotate(w, &te, "cpu", cpu);
        if (ev)
          for (tep_format_field* fl = ev->format.fields; fl; fl = fl->next)
            annotate(w, &te, fl->name, read_field(tep, fl, r.data, r.len));
        if (r.missed != 0) {
          FieldValue lost;
          lost.kind = FieldValue::kInt;  // -1: some, the count unknown
          lost.i = r.missed;
          annotate(w, &te, "events_lost_before", lost);
        }
        w.event(r.ts, te);
      });
  return w.finish();
}

}  // namespace usrtrace::tool
