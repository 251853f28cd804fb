// The trace text. Every line shape here is the kernel's (kernel/trace/
// trace.c print_trace_line() and trace_output.c), checked against a live
// tracefs by tests/output/trace_output_test.cc:
//
//   default   "%16s-%-7d [%03d] FFFFF %5lu.%06lu: name: text"
//             (comm-pid, cpu, 5 flag columns, seconds.microseconds)
//   irq-info=0      the flag columns go
//   record-tgid=1   "(%7d) " or "(-------) " after comm-pid
//   latency-format  "%8.8s-%-7d %3dFFFFF %4lluus%c: name: text"
//                   (µs since the buffer's reset, delay mark to the next entry)
//   context-info=0  only "name: text"
//   raw             "pid cpu ts type: id" ("# ip text" for markers)
//   hex             "%08x %08x %016llx type: id" and an empty line
//   bin             pid, cpu (4 bytes each), ts (8) then "type: id\n"
//   fields          "name: field=value ..." by field type
//
// Built-in ftrace events print without a "name: " prefix: their printers
// give what the kernel's do ("tracing_mark_write: text", "# id buf: ..").
#include "output/trace_output.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "clock/trace_clock.h"
#include "events/builtin.h"
#include "events/flags.h"
#include "events/registry.h"
#include "function/control.h"
#include "function/core.h"
#include "function/options.h"
#include "latency/latency.h"
#include "output/text_internal.h"
#include "symbols/resolver.h"
#include "writers/writers.h"

namespace usrtrace::output {

namespace detail {

bool read_header(const rb::Event& ev, CommonHeader* h) {
  if (ev.len < sizeof(CommonHeader)) {
    std::memset(h, 0, sizeof *h);
    if (ev.len >= 2) std::memcpy(&h->type, ev.data, 2);
    return false;
  }
  std::memcpy(h, ev.data, sizeof *h);
  return true;
}

std::string comm_for(int pid) { return writers::comm_of(pid); }

char time_mark(uint64_t ns) {
  if (ns > 1000000000ull) return '$';
  if (ns > 100000000ull) return '@';
  if (ns > 10000000ull) return '*';
  if (ns > 1000000ull) return '#';
  if (ns > 100000ull) return '!';
  if (ns > 10000ull) return '+';
  return ' ';
}

}  // namespace detail

// Kernel: trace_print_lat_fmt() (flag letters of 6.13+).
void put_flag_columns(std::string* out, uint8_t f, uint8_t preempt_count) {
  const bool nmi = f & kFlagNmi, hard = f & kFlagHardirq, soft = f & kFlagSoftirq;
  const bool bh = f & kFlagBhOff, irqs = f & kFlagIrqsOff;
  char c[5];
  c[0] = irqs && bh ? 'D' : irqs ? 'd' : bh ? 'b' : '.';
  switch (f & (kFlagNeedResched | kFlagNeedReschedLazy | kFlagPreemptResched)) {
    case kFlagNeedResched | kFlagNeedReschedLazy | kFlagPreemptResched:
      c[1] = 'B';
      break;
    case kFlagNeedResched | kFlagPreemptResched:
      c[1] = 'N';
      break;
    case kFlagNeedReschedLazy | kFlagPreemptResched:
      c[1] = 'L';
      break;
    case kFlagNeedResched | kFlagNeedReschedLazy:
      c[1] = 'b';
      break;
    case kFlagNeedResched:
      c[1] = 'n';
      break;
    case kFlagPreemptResched:
      c[1] = 'p';
      break;
    case kFlagNeedReschedLazy:
      c[1] = 'l';
      break;
    default:
      c[1] = '.';
      break;
  }
  c[2] = nmi && hard ? 'Z' : nmi ? 'z' : hard && soft ? 'H' : hard ? 'h' : soft ? 's' : '.';
  static constexpr char kHex[] = "0123456789abcdef";
  c[3] = (preempt_count & 0xf) ? kHex[preempt_count & 0xf] : '.';
  c[4] = (preempt_count & 0xf0) ? kHex[preempt_count >> 4] : '.';
  out->append(c, 5);
}

namespace {

using namespace detail;  // NOLINT: this file's own helpers

using instance::Instance;
using internal::CommonHeader;
using internal::EventDesc;
using internal::FieldDesc;
using internal::FieldKind;

Opts options_of(Instance& inst) {
  Opts o;
  o.raw = inst.option(instance::kOptRaw);
  o.hex = inst.option(instance::kOptHex);
  o.bin = inst.option(instance::kOptBin);
  o.fields = inst.option(instance::kOptFields);
  o.context = inst.option(instance::kOptContextInfo);
  o.latency = inst.option(instance::kOptLatencyFormat);
  o.tgid = inst.option(instance::kOptRecordTgid);
  o.irq_info = inst.option(instance::kOptIrqInfo);
  o.printk = inst.option(instance::kOptTracePrintk);
  o.msg_only = inst.option(instance::kOptPrintkMsgOnly);
  o.clock = inst.buffer().clock();
  o.in_ns = clock::describe(o.clock).in_ns;
  const uint64_t start = inst.buffer().time_start();
  o.time_start_ns = start == 0 ? 0 : clock::raw_to_ns(o.clock, start);
  o.self_pid = o.tgid ? static_cast<int>(getpid()) : 0;  // a system call: only when shown
  o.tracer = function::tracer(inst);
  o.graph_text = o.tracer == function::Tracer::kGraph && !o.raw && !o.hex && !o.bin;
  o.fg_cpu = inst.option(function::option(function::kFuncgraphCpu));
  o.fg_overhead = inst.option(function::option(function::kFuncgraphOverhead));
  o.fg_duration = inst.option(function::option(function::kFuncgraphDuration));
  o.fg_proc = inst.option(function::option(function::kFuncgraphProc));
  o.fg_abstime = inst.option(function::option(function::kFuncgraphAbstime));
  o.fg_tail = inst.option(function::option(function::kFuncgraphTail));
  o.fg_irqs = inst.option(function::option(function::kFuncgraphIrqs));
  return o;
}

// Small appenders: the default line is built without printf, which keeps a
// line well under the 500 ns a 2 M lines/s reader has.
void put_chars(std::string* out, char c, size_t n) { out->append(n, c); }

// Appends v in decimal, right-aligned in `width` (padded with `pad`).
void put_udec(std::string* out, uint64_t v, int width, char pad = ' ') {
  char buf[24];
  int n = 0;
  do {
    buf[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  if (width > n) put_chars(out, pad, static_cast<size_t>(width - n));
  while (n) out->push_back(buf[--n]);
}

void put_sdec(std::string* out, int64_t v) {
  if (v < 0) {
    out->push_back('-');
    put_udec(out, 0 - static_cast<uint64_t>(v), 0);
  } else {
    put_udec(out, static_cast<uint64_t>(v), 0);
  }
}

// Left-aligned "%-{width}d".
void put_sdec_left(std::string* out, int64_t v, size_t width) {
  const size_t before = out->size();
  put_sdec(out, v);
  const size_t n = out->size() - before;
  if (n < width) put_chars(out, ' ', width - n);
}

// ns -> µs, rounded to nearest (the kernel's ns2usecs).
uint64_t ns2usecs(uint64_t ns) { return (ns + 500) / 1000; }

void put_flags(std::string* out, const CommonHeader& h) { put_flag_columns(out, h.flags, h.preempt_count); }

// Kernel: trace_print_context().
void put_context(const Opts& o, const CommonHeader& h, const rb::Event& ev, std::string* out) {
  const std::string comm = comm_for(h.pid);
  if (comm.size() < 16) put_chars(out, ' ', 16 - comm.size());
  out->append(comm);
  out->push_back('-');
  put_sdec_left(out, h.pid, 7);
  out->push_back(' ');
  if (o.tgid) {
    // Our threads are the ones whose names we saved; their tgid is ours.
    if (h.pid != 0 && (h.pid == o.self_pid || comm != "<...>")) {
      out->push_back('(');
      put_udec(out, static_cast<uint64_t>(o.self_pid), 7);
      out->append(") ");
    } else {
      out->append("(-------) ");
    }
  }
  out->push_back('[');
  put_udec(out, static_cast<uint64_t>(ev.cpu), 3, '0');
  out->append("] ");
  if (o.irq_info) put_flags(out, h);
  const uint64_t t = clock::raw_to_ns(o.clock, ev.ts);
  out->push_back(' ');
  if (o.in_ns) {
    const uint64_t us = ns2usecs(t);
    put_udec(out, us / 1000000, 5);
    out->push_back('.');
    put_udec(out, us % 1000000, 6, '0');
  } else {
    put_udec(out, t, 12);
  }
  out->append(": ");
}

// Kernel: lat_print_generic() + lat_print_timestamp() (not verbose).
void put_lat_context(const Opts& o, const CommonHeader& h, const rb::Event& ev, uint64_t next_ts,
                     std::string* out) {
  char buf[96];
  const std::string comm = comm_for(h.pid);
  snprintf(buf, sizeof buf, "%8.8s-%-7d %3d", comm.c_str(), h.pid, ev.cpu);
  out->append(buf);
  put_flags(out, h);
  const uint64_t t = clock::raw_to_ns(o.clock, ev.ts);
  const uint64_t nt = clock::raw_to_ns(o.clock, next_ts);
  const uint64_t abs_t = t > o.time_start_ns ? t - o.time_start_ns : 0;
  const uint64_t rel_t = nt > t ? nt - t : 0;
  if (o.in_ns) {
    const uint64_t rel_us = ns2usecs(rel_t);
    snprintf(buf, sizeof buf, " %4lluus%c: ", static_cast<unsigned long long>(ns2usecs(abs_t)),
             time_mark(rel_us * 1000));
  } else {
    snprintf(buf, sizeof buf, " %4lld: ", static_cast<long long>(abs_t));
  }
  out->append(buf);
}

// Appends a printer's text without its trailing newlines, then one.
void put_text_line(std::string* out, const char* text, size_t n) {
  while (n > 0 && text[n - 1] == '\n') --n;
  out->append(text, n);
  out->push_back('\n');
}

// Runs the event's compiled printer into a bounded stack buffer (a trace_seq
// page in the kernel: longer text is cut).
size_t run_printer(const EventDesc& d, const rb::Event& ev, char* buf, size_t size) {
  int n = d.print(ev.data, ev.len, buf, size);
  if (n < 0) return 0;
  return std::min(static_cast<size_t>(n), size - 1);
}

bool is_ftrace(const EventDesc& d) { return std::strcmp(d.system, "ftrace") == 0; }

}  // namespace

void detail::put_event_text(const EventDesc& d, const rb::Event& ev, std::string* out) {
  char buf[4096];
  size_t n = run_printer(d, ev, buf, sizeof buf);
  if (!is_ftrace(d)) {
    out->append(d.name);
    out->append(": ");
  }
  put_text_line(out, buf, n);
}

namespace {

// Kernel: print_event_fields() (options/fields).
void put_fields(const EventDesc& d, const rb::Event& ev, std::string* out) {
  if (is_ftrace(d)) {
    out->append("UNKNOWN TYPE ");
    put_udec(out, d.id, 0);
    out->push_back('\n');
    return;
  }
  out->append(d.name);
  out->push_back(':');
  if (d.nfields == 0) out->append("No fields found\n");
  char buf[64];
  for (uint16_t i = 0; i < d.nfields; ++i) {
    const FieldDesc& f = d.fields[i];
    out->push_back(' ');
    out->append(f.name);
    out->push_back('=');
    if (uint32_t{f.offset} + f.size > ev.len) {
      out->append("<OVERFLOW>");
      continue;
    }
    const uint8_t* pos = ev.data + f.offset;
    if (f.kind == FieldKind::kCharArray) {
      out->append(reinterpret_cast<const char*>(pos), strnlen(reinterpret_cast<const char*>(pos), f.size));
      continue;
    }
    if (f.kind == FieldKind::kString || f.kind == FieldKind::kDynBytes) {
      uint32_t loc;
      std::memcpy(&loc, pos, 4);
      const uint32_t off = loc & 0xffff, len = loc >> 16;
      if (off + len > ev.len) {
        out->append("<OVERFLOW>");
        continue;
      }
      const uint8_t* p = ev.data + off;
      if (f.kind == FieldKind::kString) {
        out->append(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), len));
      } else {
        for (uint32_t k = 0; k < len; ++k) {
          snprintf(buf, sizeof buf, k ? ",%02x" : "%02x", p[k]);
          out->append(buf);
        }
      }
      continue;
    }
    switch (f.size) {
      case 1:
        if (std::isprint(*pos))
          snprintf(buf, sizeof buf, "'%c'(%d)", *pos, *pos);
        else
          snprintf(buf, sizeof buf, "(%d)", *pos);
        break;
      case 2: {
        uint16_t v;
        std::memcpy(&v, pos, 2);
        snprintf(buf, sizeof buf, "0x%x (%d)", v, v);
        break;
      }
      case 4: {
        uint32_t v;
        std::memcpy(&v, pos, 4);
        snprintf(buf, sizeof buf, "0x%x (%d)", v, static_cast<int32_t>(v));
        break;
      }
      case 8: {
        uint64_t v;
        std::memcpy(&v, pos, 8);
        snprintf(buf, sizeof buf, "0x%llx (%lld)", static_cast<unsigned long long>(v),
                 static_cast<long long>(v));
        break;
      }
      default:
        snprintf(buf, sizeof buf, "<INVALID-SIZE>");
        break;
    }
    out->append(buf);
  }
  out->push_back('\n');
}

// ftrace:print's text: what follows the fixed part (events/builtin.h).
std::string_view print_buf(const rb::Event& ev) {
  constexpr size_t kText = sizeof(events::PrintRecord);
  if (ev.len <= kText) return {};
  const char* p = reinterpret_cast<const char*>(ev.data) + kText;
  return {p, strnlen(p, ev.len - kText)};
}

// Kernel: print_raw_fmt() and the events' raw functions.
void put_raw(const Opts& o, const CommonHeader& h, const EventDesc* d, const rb::Event& ev,
             std::string* out) {
  char buf[64];
  snprintf(buf, sizeof buf, "%d %d %llu ", h.pid, ev.cpu,
           static_cast<unsigned long long>(clock::raw_to_ns(o.clock, ev.ts)));
  out->append(buf);
  if (!d) {
    snprintf(buf, sizeof buf, "%d ?\n", h.type);
    out->append(buf);
  } else if (d->id == events::kPrintId) {
    uint64_t ip = 0;
    if (ev.len >= sizeof(events::PrintRecord))
      std::memcpy(&ip, ev.data + offsetof(events::PrintRecord, ip), sizeof ip);
    snprintf(buf, sizeof buf, "# %llx ", static_cast<unsigned long long>(ip));
    out->append(buf);
    std::string_view t = print_buf(ev);
    put_text_line(out, t.data(), t.size());
  } else if (d->id == events::kRawDataId) {
    char text[4096];
    put_text_line(out, text, run_printer(*d, ev, text, sizeof text));
  } else {
    snprintf(buf, sizeof buf, "type: %d\n", h.type);
    out->append(buf);
  }
}

// Kernel: trace_hex_print(): each value as its big-endian hex digits.
void put_hex(const Opts& o, const CommonHeader& h, const EventDesc* d, const rb::Event& ev,
             std::string* out) {
  char buf[96];
  snprintf(buf, sizeof buf, "%08x %08x %016llx ", static_cast<uint32_t>(h.pid), static_cast<uint32_t>(ev.cpu),
           static_cast<unsigned long long>(clock::raw_to_ns(o.clock, ev.ts)));
  out->append(buf);
  if (d) {
    snprintf(buf, sizeof buf, "type: %d\n", h.type);
    out->append(buf);
  }
  out->push_back('\n');
}

// Kernel: trace_bin_print(): pid, cpu, ts as stored in memory.
void put_bin(const Opts& o, const CommonHeader& h, const EventDesc* d, const rb::Event& ev,
             std::string* out) {
  const int32_t pid = h.pid, cpu = ev.cpu;
  const uint64_t ts = clock::raw_to_ns(o.clock, ev.ts);
  out->append(reinterpret_cast<const char*>(&pid), 4);
  out->append(reinterpret_cast<const char*>(&cpu), 4);
  out->append(reinterpret_cast<const char*>(&ts), 8);
  if (d) {
    char buf[32];
    snprintf(buf, sizeof buf, "type: %d\n", h.type);
    out->append(buf);
  }
}

void format_line(const Opts& o, bool latency, const rb::Event& ev, uint64_t next_ts, std::string* out) {
  if (ev.lost_before) {
    char buf[64];
    if (ev.missed_before != 0)
      snprintf(buf, sizeof buf, "CPU:%d [LOST %llu EVENTS]\n", ev.cpu,
               static_cast<unsigned long long>(ev.missed_before));
    else
      snprintf(buf, sizeof buf, "CPU:%d [LOST EVENTS]\n", ev.cpu);
    out->append(buf);
  }
  CommonHeader h;
  const bool whole = read_header(ev, &h);
  const EventDesc* d = whole ? events::Registry::get().by_id(h.type) : nullptr;
  if (d && d->id == events::kPrintId && o.printk && o.msg_only) {
    std::string_view t = print_buf(ev);  // kernel: trace_print_printk_msg_only()
    put_text_line(out, t.data(), t.size());
    return;
  }
  if (o.bin) return put_bin(o, h, d, ev, out);
  if (o.hex) return put_hex(o, h, d, ev, out);
  if (o.raw) return put_raw(o, h, d, ev, out);
  if (o.context) {
    if (latency)
      put_lat_context(o, h, ev, next_ts, out);
    else
      put_context(o, h, ev, out);
  }
  if (!d) {
    out->append("Unknown type ");
    put_udec(out, h.type, 0);
    out->push_back('\n');
    return;
  }
  if (o.fields) return put_fields(*d, ev, out);
  put_event_text(*d, ev, out);
}

struct Totals {
  uint64_t entries = 0;  // in the buffer now
  uint64_t written = 0;  // entries + overrun (the kernel's "entries-written")
};

// Kernel: get_total_entries(): every CPU, also for per_cpu/cpuN/trace.
Totals totals(rb::RingBuffer& rb) {
  Totals t;
  for (int c = 0; c < rb.nr_cpus(); ++c) {
    rb::CpuStats s = rb.stats(c);
    t.entries += s.entries;
    t.written += s.entries + s.overrun;
  }
  return t;
}

long online_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

// Kernel: print_event_info().
void put_event_info(const Totals& t, std::string* out) {
  char buf[128];
  snprintf(buf, sizeof buf, "# entries-in-buffer/entries-written: %llu/%llu   #P:%ld\n#\n",
           static_cast<unsigned long long>(t.entries), static_cast<unsigned long long>(t.written),
           online_cpus());
  out->append(buf);
}

// Kernel: print_func_help_header_irq() / print_func_help_header().
void put_func_help(const Opts& o, std::string* out) {
  if (o.irq_info) {
    const char* sp = o.tgid ? "            " : "  ";
    const char* lines[] = {"  _-----=> irqs-off/BH-disabled", " / _----=> need-resched",
                           "| / _---=> hardirq/softirq",      "|| / _--=> preempt-depth",
                           "||| / _-=> migrate-disable",      "|||| /     delay"};
    for (const char* l : lines) {
      out->append("#                            ");
      out->append(sp);
      out->append(l);
      out->push_back('\n');
    }
    out->append(o.tgid ? "#           TASK-PID       TGID    CPU#  |||||  TIMESTAMP  FUNCTION\n"
                       : "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n");
    out->append(o.tgid ? "#              | |           |       |   |||||     |         |\n"
                       : "#              | |         |   |||||     |         |\n");
  } else {
    out->append(o.tgid ? "#           TASK-PID       TGID    CPU#     TIMESTAMP  FUNCTION\n"
                       : "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n");
    out->append(o.tgid ? "#              | |           |       |         |         |\n"
                       : "#              | |         |         |         |\n");
  }
}

// Kernel: print_trace_header() + print_lat_help_header(). `max`: a latency
// tracer's max trace, whose latency, CPU, task and ends the head shows.
void put_lat_header(std::string_view tracer, const Totals& t, const instance::SnapshotInfo* max,
                    std::string* out) {
  utsname u;
  const char* release = uname(&u) == 0 ? u.release : "unknown";
  char buf[256];
  snprintf(buf, sizeof buf, "# %.*s latency trace v1.1.5 on %s\n", static_cast<int>(tracer.size()),
           tracer.data(), release);
  out->append(buf);
  out->append("# --------------------------------------------------------------------\n");
  uint64_t latency_us = 0;
  int cpu = 0;
  if (max != nullptr && max->window_end != 0) {
    latency_us = latency::latency_ns(*max) / 1000;
    cpu = max->end_cpu < 0 ? 0 : max->end_cpu;
  }
  // User-space threads can be preempted anywhere: the "full" model.
  snprintf(buf, sizeof buf,
           "# latency: %llu us, #%llu/%llu, CPU#%d | (M:PREEMPT(full) VP:0, KP:0, SP:0 HP:0 #P:%ld)\n",
           static_cast<unsigned long long>(latency_us), static_cast<unsigned long long>(t.entries),
           static_cast<unsigned long long>(t.written), cpu, online_cpus());
  out->append(buf);
  out->append("#    -----------------\n");
  if (max != nullptr && max->window_end != 0) {
    snprintf(buf, sizeof buf, "#    | task: %s-%d (uid:%d nice:%d policy:%d rt_prio:%d)\n",
             comm_for(max->tid).c_str(), max->tid, max->uid, max->nice, max->policy, max->rt_prio);
    out->append(buf);
    out->append("#    -----------------\n");
    out->append("#  => started at: " + symbols::Resolver::name(max->start_ip, false) + "\n");
    out->append("#  => ended at:   " + symbols::Resolver::name(max->end_ip, false) + "\n#\n");
  } else {
    out->append("#    | task: -0 (uid:0 nice:0 policy:0 rt_prio:0)\n");
    out->append("#    -----------------\n");
  }
  out->append(
      "#\n"
      "#                    _------=> CPU#            \n"
      "#                   / _-----=> irqs-off/BH-disabled\n"
      "#                  | / _----=> need-resched    \n"
      "#                  || / _---=> hardirq/softirq \n"
      "#                  ||| / _--=> preempt-depth   \n"
      "#                  |||| / _-=> migrate-disable \n"
      "#                  ||||| /     delay           \n"
      "#  cmd     pid     |||||| time  |   caller     \n"
      "#     \\   /        ||||||  \\    |    /       \n");
}

// The current tracer's name: a latency tracer's, else the function tracers'.
std::string tracer_label(const Instance& inst) {
  std::string name = latency::tracer_name(inst);
  if (!name.empty()) return name;
  switch (function::tracer(inst)) {
    case function::Tracer::kGraph:
      return "function_graph";
    case function::Tracer::kFunction:
      return "function";
    case function::Tracer::kNop:
      break;
  }
  return "nop";
}

// A max trace's totals: the entries inside its window (the kernel counts
// the entries before time_start as skipped).
Totals window_totals(rb::RingBuffer& rb, const latency::Window& w) {
  Totals t;
  rb::RingBuffer::Iterator it(rb);
  rb::Event ev;
  while (it.next(&ev))
    if (ev.ts >= w.start && ev.ts <= w.end) ++t.entries;
  t.written = t.entries;
  return t;
}

void put_header(const Opts& o, std::string_view tracer, rb::RingBuffer& rb, int cpu, std::string_view head,
                const instance::SnapshotInfo* max, std::string* out) {
  out->append("# tracer: ");
  out->append(tracer);
  out->append("\n#\n");
  out->append(head);
  if (!o.context) return;
  if (o.graph_text) return put_graph_header(o, out);
  Totals t = max != nullptr ? window_totals(rb, latency::window_of(*max)) : totals(rb);
  if (o.latency) {
    // Nothing more for an empty buffer (kernel: trace_empty()), but a max
    // trace's head says its latency even when nothing was recorded in it.
    uint64_t here = cpu < 0 || max != nullptr ? t.entries : rb.stats(cpu).entries;
    if (here == 0 && (max == nullptr || max->window_end == 0)) return;
    put_lat_header(tracer, t, max, out);
  } else {
    put_event_info(t, out);
    put_func_help(o, out);
  }
}

bool valid_cpu(Instance& inst, int cpu) { return cpu < inst.buffer().nr_cpus(); }

// The head of a kept snapshot: which one it is and why it was taken.
std::string snapshot_head(const Opts& o, const instance::Snapshots& snaps, int age,
                          const instance::SnapshotInfo& info) {
  std::string h;
  char buf[160];
  if (info.number == 0) {
    // Nothing taken yet: how to use the file, as the kernel says it.
    h += snaps.allocated() ? "# * Snapshot is allocated *\n" : "# * Snapshot is freed *\n";
    h += "#\n# Snapshot commands:\n"
         "# echo 0 > snapshot : frees the spare buffer(s)\n"
         "# echo 1 > snapshot : allocates the spare buffer(s) if needed and swaps the live\n"
         "#                     buffer with the next one (takes a snapshot)\n"
         "# echo 2 > snapshot : empties the kept snapshot(s), keeping the memory\n"
         "#                     (any number but 0 and 1 does the same)\n#\n";
    return h;
  }
  const uint64_t ns = clock::raw_to_ns(o.clock, info.ts);
  const uint64_t usec = (ns + 500) / 1000;
  snprintf(buf, sizeof buf, "# snapshot: #%llu (%s, ring of %d)\n",
           static_cast<unsigned long long>(info.number), age == 0 ? "newest" : "older", snaps.ring_size());
  h += buf;
  snprintf(buf, sizeof buf, "# taken at: %llu.%06llu by thread %d, %s",
           static_cast<unsigned long long>(usec / 1000000), static_cast<unsigned long long>(usec % 1000000),
           info.tid, info.cpu < 0 ? "all CPUs" : "CPU ");
  h += buf;
  if (info.cpu >= 0) h += std::to_string(info.cpu);
  h += "\n";
  if (info.merged) h += "# requests merged into it: " + std::to_string(info.merged) + "\n";
  if (info.scored) h += "# score: " + std::to_string(info.score) + "\n";
  if (info.reason[0]) {
    h += "# reason: ";
    for (const char* p = info.reason; *p; ++p) h += (*p == '\n' ? ' ' : *p);
    h += "\n";
  }
  h += "#\n";
  return h;
}

}  // namespace

std::string trace_header(Instance& inst, int cpu) {
  std::string out;
  put_header(options_of(inst), tracer_label(inst), inst.buffer(), cpu, "", nullptr, &out);
  return out;
}

void format_event(Instance& inst, const rb::Event& ev, uint64_t next_ts, std::string* out) {
  const Opts o = options_of(inst);
  format_line(o, o.latency, ev, next_ts, out);
}

void format_dump_event(Instance& inst, const rb::Event& ev, uint64_t next_ts, std::string* out) {
  Opts o = options_of(inst);
  o.raw = o.hex = o.bin = o.fields = false;
  // A name longer than the line bound would make the line outgrow the
  // caller's buffer; events are named in code, so this does not happen.
  format_line(o, true, ev, next_ts, out);
}

struct TraceText::State {
  Instance& inst;
  int cpu;
  Opts o;
  rb::RingBuffer* rb = nullptr;
  instance::Snapshots::Ref ref;  // a snapshot's: holds it while read
  std::string head;              // the header, given first
  bool shows_events = false;
  latency::Window w;
  std::unique_ptr<rb::RingBuffer::Iterator> it;  // made at the first fill
  HeldEvent cur;                                 // latency-format: the line waits for the next event's time
  bool have_cur = false;
  std::unique_ptr<GraphStream> graph;  // function_graph's layout, made as read
  bool ended = false;

  State(Instance& i, int c, instance::Snapshots::Ref r)
      : inst(i), cpu(c), o(options_of(i)), ref(std::move(r)) {}

  bool next(rb::Event* ev) {
    while (it->next(ev))
      if ((cpu < 0 || ev->cpu == cpu) && ev->ts >= w.start && ev->ts <= w.end) return true;
    return false;
  }
};

TraceText::TraceText(std::unique_ptr<State> s) : s_(std::move(s)) {}
TraceText::~TraceText() = default;

namespace {

// The state for buffer `rb` (the live one, a snapshot's or the max buffer),
// with `head` (a snapshot's) and, for a max trace, its window.
std::unique_ptr<TraceText::State> text_state(Instance& inst, int cpu, instance::Snapshots::Ref ref,
                                             rb::RingBuffer& rb, std::string_view head,
                                             const instance::SnapshotInfo* max) {
  auto st = std::make_unique<TraceText::State>(inst, cpu, std::move(ref));
  st->rb = &rb;
  put_header(st->o, tracer_label(inst), rb, cpu, head, max, &st->head);
  // A max trace shows its window only, timed from its start (the kernel's
  // max_buf time_start).
  if (max != nullptr) st->w = latency::window_of(*max);
  if (max != nullptr && max->window_end != 0)
    st->o.time_start_ns = clock::raw_to_ns(st->o.clock, st->w.start);
  st->shows_events = valid_cpu(inst, cpu);
  return st;
}

}  // namespace

std::unique_ptr<TraceText> TraceText::live(Instance& inst, int cpu) {
  // A latency tracer's `trace` is its max trace (the kernel's print_max).
  if (latency::uses_max_buffer(inst)) {
    instance::Snapshots::Ref ref = inst.snapshots().get(0);
    if (ref) {
      const instance::SnapshotInfo info = ref.info();
      rb::RingBuffer& rb = ref.buffer();
      return std::unique_ptr<TraceText>(new TraceText(text_state(inst, cpu, std::move(ref), rb, "", &info)));
    }
  }
  return std::unique_ptr<TraceText>(
      new TraceText(text_state(inst, cpu, instance::Snapshots::Ref(), inst.buffer(), "", nullptr)));
}

std::unique_ptr<TraceText> TraceText::snapshot(Instance& inst, int age, int cpu) {
  instance::Snapshots& snaps = inst.snapshots();
  instance::Snapshots::Ref ref = snaps.get(age);
  if (!ref) {
    auto st = std::make_unique<State>(inst, cpu, instance::Snapshots::Ref());
    st->head = "# tracer: nop\n#\n" + snapshot_head(st->o, snaps, age, instance::SnapshotInfo{});
    return std::unique_ptr<TraceText>(new TraceText(std::move(st)));
  }
  const instance::SnapshotInfo info = ref.info();
  const std::string head = snapshot_head(options_of(inst), snaps, age, info);
  rb::RingBuffer& rb = ref.buffer();
  return std::unique_ptr<TraceText>(
      new TraceText(text_state(inst, cpu, std::move(ref), rb, head, info.window_end != 0 ? &info : nullptr)));
}

bool TraceText::fill(std::string* out, size_t want) {
  State& s = *s_;
  if (s.ended) return false;
  const size_t at_start = out->size();
  if (!s.head.empty()) {
    *out += s.head;
    s.head.clear();
    s.head.shrink_to_fit();
  }
  if (!s.shows_events) {
    s.ended = true;
    return out->size() > at_start;
  }
  if (!s.it) s.it = std::make_unique<rb::RingBuffer::Iterator>(*s.rb);
  rb::Event ev;
  if (s.o.graph_text) {
    if (!s.graph) s.graph = std::make_unique<GraphStream>(s.o, s.rb->nr_cpus());
    while (out->size() < want) {
      if (!s.next(&ev)) {
        s.graph->finish(out);
        s.ended = true;
        break;
      }
      s.graph->push(ev, out);
    }
    return out->size() > at_start;
  }
  if (!s.o.latency) {
    while (out->size() < want) {
      if (!s.next(&ev)) {
        s.ended = true;
        break;
      }
      format_line(s.o, false, ev, ev.ts, out);
    }
    return out->size() > at_start;
  }
  // latency-format: an event's line needs the next event's time.
  if (!s.have_cur) {
    if (!s.next(&ev)) {
      s.ended = true;
      return out->size() > at_start;
    }
    s.cur.hold(ev);
    s.have_cur = true;
  }
  while (out->size() < want) {
    const bool more = s.next(&ev);
    format_line(s.o, true, s.cur.ev, more ? ev.ts : s.cur.ev.ts, out);
    if (!more) {
      s.ended = true;
      s.have_cur = false;
      break;
    }
    s.cur.hold(ev);
  }
  return out->size() > at_start;
}

std::string read_trace(Instance& inst, int cpu) {
  std::string out;
  auto t = TraceText::live(inst, cpu);
  while (t->fill(&out, SIZE_MAX)) {
  }
  return out;
}

std::string read_snapshot(Instance& inst, int age, int cpu) {
  std::string out;
  auto t = TraceText::snapshot(inst, age, cpu);
  while (t->fill(&out, SIZE_MAX)) {
  }
  return out;
}

size_t read_pipe(Instance& inst, int cpu, size_t max_bytes, std::string* out) {
  const Opts o = options_of(inst);
  if (!valid_cpu(inst, cpu)) return 0;
  rb::RingBuffer& rb = inst.buffer();
  size_t n = 0;
  HeldEvent cur;
  rb::Event ev;
  // The event's own copy: another consumer of the CPU (trace_pipe_raw)
  // may read on while this one is printed.
  std::vector<uint8_t> copy(rb::kMaxPageSize);
  while (out->size() < max_bytes && rb.consume_copy(&ev, cpu, copy.data(), copy.size())) {
    ++n;
    uint64_t next_ts = ev.ts;
    if (o.latency) {
      cur.hold(ev);
      rb::Event nx;
      if (rb.peek(&nx, cpu)) next_ts = nx.ts;
      format_line(o, true, cur.ev, next_ts, out);
    } else {
      format_line(o, false, ev, next_ts, out);
    }
  }
  return n;
}

}  // namespace usrtrace::output
