// function_graph's layout (kernel: kernel/trace/trace_functions_graph.c),
// by thread rather than by CPU: a leaf is an entry whose thread's next
// event is its own exit, and a thread that migrates keeps its nesting.
// Signal handlers take the place of the kernel's interrupts: their calls
// (records with the 'h' flag) are framed by "==========>" and
// "<==========" lines while funcgraph-irqs is on.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "events/builtin.h"
#include "events/flags.h"
#include "events/registry.h"
#include "function/core.h"
#include "output/text_internal.h"
#include "symbols/resolver.h"

namespace usrtrace::output::detail {
namespace {

// What the layout needs of an entry (func, depth) or an exit.
struct GraphRecord {
  uint64_t func;
  uint32_t depth;
  uint32_t overrun;
  uint64_t calltime;
  uint64_t rettime;
};

// 0: not a graph event; 1: entry; 2: exit. The records are copied out of
// the buffer (events/builtin.h), whose entries are only 4-byte aligned.
int graph_kind(const rb::Event& ev, CommonHeader* h, GraphRecord* r) {
  if (!read_header(ev, h)) return 0;
  if (h->type == function::kGraphEntryId && ev.len >= sizeof(events::GraphEntryRecord)) {
    events::GraphEntryRecord e;
    std::memcpy(&e, ev.data, sizeof e);
    r->func = e.func;
    r->depth = e.depth;
    return 1;
  }
  if (h->type == function::kGraphExitId && ev.len >= sizeof(events::GraphExitRecord)) {
    events::GraphExitRecord x;
    std::memcpy(&x, ev.data, sizeof x);
    r->func = x.func;
    r->depth = x.depth;
    r->overrun = x.overrun;
    r->calltime = x.calltime;
    r->rettime = x.rettime;
    return 2;
  }
  return 0;
}

}  // namespace

void put_graph_header(const Opts& o, std::string* out) {
  std::string l1 = "#", l2 = "#";
  if (o.fg_abstime) {
    l1 += "     TIME       ";
    l2 += "      |         ";
  }
  if (o.fg_cpu) {
    l1 += " CPU";
    l2 += " |  ";
  }
  if (o.fg_proc) {
    l1 += "  TASK/PID       ";
    l2 += "   |    |        ";
  }
  if (o.fg_duration) {
    l1 += "  DURATION        ";
    l2 += "   |   |          ";
  }
  l1 += "          FUNCTION CALLS\n";
  l2 += "           |   |   |   |\n";
  out->append(l1);
  out->append(l2);
}

namespace {

// Kernel: print_graph_duration() + trace_print_graph_duration().
void put_graph_duration(const Opts& o, bool has, uint64_t ns, std::string* out) {
  if (!o.fg_duration) return;
  if (!has) {
    out->append("              |  ");
    return;
  }
  out->push_back(o.fg_overhead ? time_mark(ns) : ' ');
  out->push_back(' ');
  char us[24], rest[8];
  snprintf(us, sizeof us, "%llu", static_cast<unsigned long long>(ns / 1000));
  out->append(us);
  size_t len = std::strlen(us);
  if (len < 7) {
    snprintf(rest, std::min<size_t>(sizeof rest, 8 - len), "%03llu",
             static_cast<unsigned long long>(ns % 1000));
    out->push_back('.');
    out->append(rest);
    len += std::strlen(rest) + 1;
  }
  out->append(" us ");
  for (; len < 8; ++len) out->push_back(' ');
  out->append("|  ");
}

void put_graph_proc(int pid, std::string* out) {
  std::string comm = comm_for(pid).substr(0, 7);
  const std::string s = comm + "-" + std::to_string(pid);
  const size_t spaces = s.size() < 14 ? 14 - s.size() : 0;
  out->append(spaces / 2, ' ');
  out->append(s);
  out->append(spaces - spaces / 2, ' ');
}

struct GraphState {
  int cpu_width = 1;
  std::vector<int> last_pid;  // per CPU: the context-switch marker
  // Per thread in a signal handler: the depth of the handler's entry.
  std::map<int, uint32_t> signal_depth;
};

// Kernel: print_graph_cpu().
void put_graph_cpu(const GraphState& g, int cpu, std::string* out) {
  char buf[24];
  snprintf(buf, sizeof buf, " %*d) ", g.cpu_width, cpu);
  out->append(buf);
}

void put_graph_prologue(const Opts& o, GraphState& g, const rb::Event& ev, const CommonHeader& h,
                        std::string* out) {
  if (o.fg_abstime) {
    const uint64_t ns = clock::raw_to_ns(o.clock, ev.ts);
    char buf[40];
    snprintf(buf, sizeof buf, "%5llu.%06llu |  ", static_cast<unsigned long long>(ns / 1000000000ull),
             static_cast<unsigned long long>(ns % 1000000000ull / 1000));
    out->append(buf);
  }
  if (o.fg_cpu) put_graph_cpu(g, ev.cpu, out);
  if (o.fg_proc) {
    put_graph_proc(h.pid, out);
    out->append(" | ");
  }
}

std::string graph_name(uint64_t func) {
  std::string n = symbols::Resolver::name(func, false);
  if (n.find('(') == std::string::npos) n += "()";
  return n;
}

// Kernel: print_graph_irq(): the prologue, the overhead column's blanks,
// the arrow and the duration column's end.
void put_graph_marker(const Opts& o, GraphState& g, const rb::Event& ev, const CommonHeader& h, bool enter,
                      std::string* out) {
  put_graph_prologue(o, g, ev, h, out);
  if (o.fg_duration) out->append("  ");
  out->append(enter ? "==========>" : "<==========");
  if (o.fg_duration) out->append(" |");
  out->push_back('\n');
}

void put_graph_line_text(const Opts& o, GraphState& g, const rb::Event& ev, CommonHeader& h, int kind,
                         const GraphRecord& r, const GraphRecord* leaf_exit, std::string* out);

// One graph line for event `ev`; `leaf_exit` is its exit when the entry is
// a leaf.
void put_graph_line(const Opts& o, GraphState& g, const rb::Event& ev, const GraphRecord* leaf_exit,
                    std::string* out) {
  if (ev.lost_before) {
    char buf[64];
    snprintf(buf, sizeof buf, "CPU:%d [LOST %llu EVENTS]\n", ev.cpu,
             static_cast<unsigned long long>(ev.missed_before));
    out->append(buf);
  }
  CommonHeader h;
  GraphRecord r{};
  const int kind = graph_kind(ev, &h, &r);
  if (ev.cpu >= 0 && static_cast<size_t>(ev.cpu) < g.last_pid.size() && read_header(ev, &h)) {
    int& last = g.last_pid[static_cast<size_t>(ev.cpu)];
    if (last != -1 && last != h.pid) {
      // Kernel: print_graph_proc() at a context switch.
      out->append(" ------------------------------------------\n");
      put_graph_cpu(g, ev.cpu, out);
      put_graph_proc(last, out);
      out->append(" => ");
      put_graph_proc(h.pid, out);
      out->append("\n ------------------------------------------\n\n");
    }
    last = h.pid;
  }
  // Signal handlers, as the kernel frames interrupts: "==========>" before
  // a handler's entry, "<==========" after its exit (or before the thread's
  // next call outside it, when the exit is not in the buffer).
  const bool in_signal = kind != 0 && (h.flags & kFlagHardirq) != 0;
  const auto sig = g.signal_depth.find(h.pid);
  if (o.fg_irqs && kind != 0) {
    if (in_signal && sig == g.signal_depth.end()) {
      put_graph_marker(o, g, ev, h, true, out);
      g.signal_depth[h.pid] = r.depth;
    } else if (!in_signal && sig != g.signal_depth.end()) {
      put_graph_marker(o, g, ev, h, false, out);
      g.signal_depth.erase(sig);
    }
  }
  put_graph_line_text(o, g, ev, h, kind, r, leaf_exit, out);
  if (o.fg_irqs && in_signal && (kind == 2 || leaf_exit != nullptr)) {
    const auto open = g.signal_depth.find(h.pid);
    if (open != g.signal_depth.end() && open->second == r.depth) {
      put_graph_marker(o, g, ev, h, false, out);
      g.signal_depth.erase(open);
    }
  }
}

// The line itself (after the markers of put_graph_line).
void put_graph_line_text(const Opts& o, GraphState& g, const rb::Event& ev, CommonHeader& h, int kind,
                         const GraphRecord& r, const GraphRecord* leaf_exit, std::string* out) {
  put_graph_prologue(o, g, ev, h, out);
  if (kind == 1 && leaf_exit != nullptr) {
    put_graph_duration(o, true, leaf_exit->rettime - leaf_exit->calltime, out);
    out->append(size_t{r.depth} * 2, ' ');
    std::string n = graph_name(r.func);
    out->append(n);
    out->append(";\n");
  } else if (kind == 1) {
    put_graph_duration(o, false, 0, out);
    out->append(size_t{r.depth} * 2, ' ');
    out->append(graph_name(r.func));
    out->append(" {\n");
  } else if (kind == 2) {
    put_graph_duration(o, true, r.rettime - r.calltime, out);
    out->append(size_t{r.depth} * 2, ' ');
    out->push_back('}');
    if (o.fg_tail || leaf_exit == nullptr) {
      // leaf_exit doubles as "the entry was seen" for exits (see callers).
      out->append(" /* ");
      out->append(symbols::Resolver::name(r.func, false));
      out->append(" */");
    }
    out->push_back('\n');
  } else {
    // Other events: a comment at the thread's level (kernel: print_graph_comment()).
    put_graph_duration(o, false, 0, out);
    out->append("/* ");
    std::string text;
    const EventDesc* d = read_header(ev, &h) ? events::Registry::get().by_id(h.type) : nullptr;
    if (d != nullptr) {
      put_event_text(*d, ev, &text);
      while (!text.empty() && text.back() == '\n') text.pop_back();
    } else {
      text = "Unknown type " + std::to_string(h.type);
    }
    out->append(text);
    out->append(" */\n");
  }
}

}  // namespace

struct GraphStream::Impl {
  Opts o;
  size_t window;
  GraphState g;
  // Per thread: the entries seen and not yet closed (func per depth).
  std::map<int, std::vector<uint64_t>> open;
  struct Held {
    HeldEvent he;
    int pid = -1;
    bool done = false;  // printed with an entry, as its leaf
  };
  std::deque<Held> win;
  uint64_t base = 0;  // sequence number of win.front()
  // Per thread: the sequence numbers of its events in the window, in order.
  std::unordered_map<int, std::deque<uint64_t>> by_pid;

  // The line of the window's first event, which leaves it.
  void emit_front(std::string* out) {
    Held& f = win.front();
    if (f.pid >= 0) {
      auto q = by_pid.find(f.pid);
      q->second.pop_front();
      if (!f.done)
        put(f, q->second.empty() ? nullptr : &win[static_cast<size_t>(q->second.front() - base)], out);
      if (q->second.empty()) by_pid.erase(q);
    } else if (!f.done) {
      put(f, nullptr, out);
    }
    win.pop_front();
    ++base;
  }

  // An event's line; `next` is its thread's next event, if the window has it.
  void put(Held& f, Held* next, std::string* out) {
    const rb::Event& ev = f.he.ev;
    CommonHeader h;
    GraphRecord r{};
    const int kind = graph_kind(ev, &h, &r);
    if (kind == 1) {
      GraphRecord x{};
      CommonHeader xh;
      if (next && graph_kind(next->he.ev, &xh, &x) == 2 && x.func == r.func && x.depth == r.depth) {
        next->done = true;
        put_graph_line(o, g, ev, &x, out);
        return;
      }
      auto& st = open[h.pid];
      st.resize(r.depth);
      st.push_back(r.func);
      put_graph_line(o, g, ev, nullptr, out);
    } else if (kind == 2) {
      auto& st = open[h.pid];
      const bool seen = st.size() == size_t{r.depth} + 1 && st.back() == r.func;
      if (st.size() > r.depth) st.resize(r.depth);
      put_graph_line(o, g, ev, seen ? &r : nullptr, out);
    } else {
      put_graph_line(o, g, ev, nullptr, out);
    }
  }
};

GraphStream::GraphStream(const Opts& o, int nr_cpus, size_t window) : impl_(std::make_unique<Impl>()) {
  impl_->o = o;
  impl_->window = std::max<size_t>(window, 2);
  impl_->g.cpu_width = static_cast<int>(std::to_string(std::max(nr_cpus - 1, 0)).size());
  impl_->g.last_pid.assign(static_cast<size_t>(std::max(nr_cpus, 1)), -1);
}

GraphStream::~GraphStream() = default;

void GraphStream::push(const rb::Event& ev, std::string* out) {
  Impl& m = *impl_;
  Impl::Held& h = m.win.emplace_back();
  h.he.hold(ev);
  CommonHeader ch;
  if (read_header(h.he.ev, &ch)) {
    h.pid = ch.pid;
    m.by_pid[ch.pid].push_back(m.base + m.win.size() - 1);
  }
  while (m.win.size() > m.window) m.emit_front(out);
}

void GraphStream::finish(std::string* out) {
  while (!impl_->win.empty()) impl_->emit_front(out);
}

}  // namespace usrtrace::output::detail
