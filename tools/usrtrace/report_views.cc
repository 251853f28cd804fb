#include "report_views.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include "report_fields.h"

namespace usrtrace::tool {
namespace {

int64_t now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

// The fields of ftrace's function_graph events that the views read.
struct GraphFields {
  int entry_id = -1, exit_id = -1;
  tep_format_field *entry_func = nullptr, *entry_depth = nullptr;
  tep_format_field *exit_func = nullptr, *exit_depth = nullptr, *calltime = nullptr, *rettime = nullptr;

  explicit GraphFields(tep_handle* tep) {
    if (tep_event* e = tep_find_event_by_name(tep, "ftrace", "funcgraph_entry")) {
      entry_id = e->id;
      entry_func = tep_find_field(e, "func");
      entry_depth = tep_find_field(e, "depth");
    }
    if (tep_event* e = tep_find_event_by_name(tep, "ftrace", "funcgraph_exit")) {
      exit_id = e->id;
      exit_func = tep_find_field(e, "func");
      exit_depth = tep_find_field(e, "depth");
      calltime = tep_find_field(e, "calltime");
      rettime = tep_find_field(e, "rettime");
    }
  }
  bool usable() const { return entry_func && entry_depth && exit_func && exit_depth && calltime && rettime; }
};

// calls: entries, and exits whose entry is not in the file (a threshold,
// or the buffer's start), so that a call that never returned (main, when
// the program calls exit()) counts as uftrace counts it; the times are of
// the calls that returned (`done`).
struct FuncStats {
  uint64_t calls = 0, done = 0, total = 0, self = 0, min = UINT64_MAX, max = 0;
};

// The call tree merged by path: node 0 is the root (no function).
struct Node {
  uint64_t func = 0;
  int parent = -1;
  uint64_t calls = 0, total = 0;
  std::map<uint64_t, int> children;  // by function address; printed by time
};

// A thread's open calls and the time of its returned children, by depth,
// as stacks of the depths the records have (ascending): a record may claim
// any depth up to 65535 (the recorder's shadow stack), and what a thread
// costs follows its records, not the depths they claim (vectors indexed by
// depth held 768 KiB a thread id: a 144 KB file, 1.5 GB).
struct Thread {
  struct Call {
    uint32_t depth;
    int node;  // in the graph
  };
  struct Children {
    uint32_t depth;
    uint64_t ns;  // time of the exits at `depth` since the last exit at depth - 1
  };
  std::vector<Call> path;                  // the open calls; a depth missing: unknown
  std::vector<Children> child_ns;          // a depth missing: 0
  std::unordered_map<uint64_t, int> open;  // per function: its calls in `path`
};

class Views {
 public:
  Views(tep_handle* tep, const GraphFields& g) : tep_(tep), g_(g) { nodes_.push_back({}); }

  // A funcgraph_entry or funcgraph_exit record (`len` bytes) of thread
  // `tid`; one that does not hold the fields is counted in skipped().
  void entry(int tid, const uint8_t* data, uint32_t len) {
    uint64_t func, depth;
    if (!read_number(tep_, g_.entry_func, data, len, &func) ||
        !read_number(tep_, g_.entry_depth, data, len, &depth)) {
      ++skipped_;
      return;
    }
    if (depth > kMaxDepth) return;
    Thread& t = threads_[tid];
    truncate(t, depth);
    const int parent = !t.path.empty() && t.path.back().depth + 1 == depth ? t.path.back().node : 0;
    const int n = child(parent, func);
    nodes_[static_cast<size_t>(n)].calls++;
    funcs_[func].calls++;
    t.path.push_back({static_cast<uint32_t>(depth), n});
    t.open[func]++;
  }

  void exit(int tid, const uint8_t* data, uint32_t len) {
    uint64_t func, depth, call, ret;
    if (!read_number(tep_, g_.exit_func, data, len, &func) ||
        !read_number(tep_, g_.exit_depth, data, len, &depth) ||
        !read_number(tep_, g_.calltime, data, len, &call) ||
        !read_number(tep_, g_.rettime, data, len, &ret)) {
      ++skipped_;
      return;
    }
    if (depth > kMaxDepth) return;
    const uint64_t dur = ret > call ? ret - call : 0;
    Thread& t = threads_[tid];
    // Self time: this call's time less its children's (the exits one
    // deeper since this depth's last exit). Deeper ones are left from
    // calls whose exits are not in the file; they are no one's children.
    while (!t.child_ns.empty() && t.child_ns.back().depth > depth + 1) t.child_ns.pop_back();
    uint64_t children = 0;
    if (!t.child_ns.empty() && t.child_ns.back().depth == depth + 1) {
      children = t.child_ns.back().ns;
      t.child_ns.pop_back();
    }
    if (!t.child_ns.empty() && t.child_ns.back().depth == depth)
      t.child_ns.back().ns += dur;
    else
      t.child_ns.push_back({static_cast<uint32_t>(depth), dur});
    // The graph: the open call of this depth, if it is this function's;
    // an exit without its entry (a threshold, or the buffer's start)
    // goes under the path known above it.
    truncate(t, depth + 1);
    int n = !t.path.empty() && t.path.back().depth == depth ? t.path.back().node : -1;
    const bool matched = n >= 0 && nodes_[static_cast<size_t>(n)].func == func;
    truncate(t, depth);
    // A recursive call's time is in its outermost call's already: the
    // total counts the outermost only, as uftrace's does (so no function's
    // total is more than its caller's).
    const auto open = t.open.find(func);
    const bool nested = open != t.open.end() && open->second > 0;
    FuncStats& s = funcs_[func];
    s.done++;
    if (!nested) s.total += dur;
    s.self += dur > children ? dur - children : 0;
    s.min = std::min(s.min, dur);
    s.max = std::max(s.max, dur);
    if (!matched) {
      const int parent = !t.path.empty() && t.path.back().depth + 1 == depth ? t.path.back().node : 0;
      n = child(parent, func);
      nodes_[static_cast<size_t>(n)].calls++;
      s.calls++;
    }
    nodes_[static_cast<size_t>(n)].total += dur;
    any_graph_ = true;
  }

  uint64_t skipped() const { return skipped_; }

  void event(const char* system, const char* name) { events_[std::string(system) + ":" + name]++; }

  int write(const ViewOptions& o, FILE* out) const {
    switch (o.view) {
      case View::kProfile:
        return any_graph_ ? profile(o, out) : event_counts(out);
      case View::kGraph:
        return any_graph_ ? graph(out) : none(out);
      case View::kFlame:
        if (any_graph_) folded(out);
        return any_graph_ ? 0 : none(out);
    }
    return 0;
  }

 private:
  // Deeper than the recorder's shadow stack (65536 frames): a corrupt
  // depth field is not followed.
  static constexpr uint64_t kMaxDepth = (1 << 16) - 1;

  void close_last(Thread& t) {
    t.open[nodes_[static_cast<size_t>(t.path.back().node)].func]--;
    t.path.pop_back();
  }

  // Closes the open calls at `depth` and deeper (their exits are not in
  // the file: a longjmp, or the end of the recording).
  void truncate(Thread& t, uint64_t depth) {
    while (!t.path.empty() && t.path.back().depth >= depth) close_last(t);
  }

  int child(int parent, uint64_t func) {
    auto& kids = nodes_[static_cast<size_t>(parent)].children;
    auto it = kids.find(func);
    if (it != kids.end()) return it->second;
    const int n = static_cast<int>(nodes_.size());
    kids.emplace(func, n);
    Node node;
    node.func = func;
    node.parent = parent;
    nodes_.push_back(std::move(node));
    return n;
  }

  std::string name(uint64_t func) const {
    if (const char* s = tep_find_function(tep_, func)) return s;
    char b[32];
    snprintf(b, sizeof b, "0x%" PRIx64, func);
    return b;
  }

  static int none(FILE* out) {
    fputs("# no function_graph records in this file (record with -p function_graph)\n", out);
    return 0;
  }

  int profile(const ViewOptions& o, FILE* out) const {
    struct Row {
      std::string name;
      FuncStats s;
    };
    std::vector<Row> rows;
    for (const auto& [func, s] : funcs_)
      if (s.total >= o.threshold_ns || (o.threshold_ns == 0 && s.done == 0)) rows.push_back({name(func), s});
    auto key = [&o](const FuncStats& s) -> uint64_t {
      if (o.sort == "self") return s.self;
      if (o.sort == "calls") return s.calls;
      if (o.sort == "avg") return s.done ? s.total / s.done : 0;
      if (o.sort == "min") return s.min;
      if (o.sort == "max") return s.max;
      return s.total;
    };
    std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
      if (o.sort == "name") return a.name < b.name;
      const uint64_t ka = key(a.s), kb = key(b.s);
      return ka != kb ? ka > kb : a.name < b.name;
    });
    fprintf(out, "  %10s  %10s  %10s  %10s  %10s  %10s  %s\n", "Total time", "Self time", "Calls", "Avg time",
            "Min time", "Max time", "Function");
    fprintf(out, "  %10s  %10s  %10s  %10s  %10s  %10s  %s\n", "==========", "==========", "==========",
            "==========", "==========", "==========", "====================");
    for (const Row& r : rows) {
      const bool done = r.s.done != 0;  // some call returned: it has times
      fprintf(out, "  %10s  %10s  %10" PRIu64 "  %10s  %10s  %10s  %s\n", format_ns(r.s.total).c_str(),
              format_ns(r.s.self).c_str(), r.s.calls, done ? format_ns(r.s.total / r.s.done).c_str() : "-",
              done ? format_ns(r.s.min).c_str() : "-", done ? format_ns(r.s.max).c_str() : "-",
              r.name.c_str());
    }
    return 0;
  }

  int event_counts(FILE* out) const {
    std::vector<std::pair<std::string, uint64_t>> rows(events_.begin(), events_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    fprintf(out, "  %10s  %s\n  %10s  %s\n", "Count", "Event", "==========", "====================");
    for (const auto& [ev, n] : rows) fprintf(out, "  %10" PRIu64 "  %s\n", n, ev.c_str());
    return 0;
  }

  // Children by total time, the longest first (uftrace graph's order is
  // first call; by time puts the cost first, which is what one looks for).
  std::vector<int> sorted_children(const Node& n) const {
    std::vector<int> kids;
    for (const auto& [func, c] : n.children) kids.push_back(c);
    std::sort(kids.begin(), kids.end(), [this](int a, int b) {
      const Node &x = nodes_[static_cast<size_t>(a)], &y = nodes_[static_cast<size_t>(b)];
      return x.total != y.total ? x.total > y.total : x.func < y.func;
    });
    return kids;
  }

  int graph(FILE* out) const {
    fputs("# Function Call Graph\n#\n# TOTAL TIME   FUNCTION\n", out);
    std::string prefix;
    // Iterative, depth first: a deep recursion in the program is a deep
    // path here, which must not cost our stack.
    struct Item {
      int node;
      size_t prefix_len;
      bool last, branch;
    };
    std::vector<Item> todo;
    const std::vector<int> roots = sorted_children(nodes_[0]);
    for (size_t i = roots.size(); i-- > 0;)
      todo.push_back({roots[i], 0, i + 1 == roots.size(), roots.size() > 1});
    while (!todo.empty()) {
      const Item it = todo.back();
      todo.pop_back();
      prefix.resize(it.prefix_len);
      const Node& n = nodes_[static_cast<size_t>(it.node)];
      fprintf(out, "%12s : %s%s(%" PRIu64 ") %s\n", format_ns(n.total).c_str(), prefix.c_str(),
              it.branch ? "+-" : "", n.calls, name(n.func).c_str());
      if (it.branch) prefix += it.last ? "  " : "| ";
      const std::vector<int> kids = sorted_children(n);
      for (size_t i = kids.size(); i-- > 0;)
        todo.push_back({kids[i], prefix.size(), i + 1 == kids.size(), kids.size() > 1});
    }
    return 0;
  }

  void folded(FILE* out) const {
    std::string path;
    std::vector<std::pair<int, size_t>> todo;  // node, path length before it
    for (const auto& [func, c] : nodes_[0].children) todo.push_back({c, 0});
    while (!todo.empty()) {
      const auto [id, len] = todo.back();
      todo.pop_back();
      const Node& n = nodes_[static_cast<size_t>(id)];
      path.resize(len);
      if (len) path += ';';
      path += name(n.func);
      uint64_t kids = 0;
      for (const auto& [func, c] : n.children) {
        kids += nodes_[static_cast<size_t>(c)].total;
        todo.push_back({c, path.size()});
      }
      const uint64_t self = n.total > kids ? n.total - kids : 0;
      if (self > 0) fprintf(out, "%s %" PRIu64 "\n", path.c_str(), self);
    }
  }

  tep_handle* tep_;
  const GraphFields& g_;
  std::unordered_map<int, Thread> threads_;
  std::unordered_map<uint64_t, FuncStats> funcs_;
  std::map<std::string, uint64_t> events_;
  std::vector<Node> nodes_;
  bool any_graph_ = false;
  uint64_t skipped_ = 0;
};

}  // namespace

std::string format_ns(uint64_t ns) {
  char b[32];
  if (ns < 1000)
    snprintf(b, sizeof b, "%" PRIu64 " ns", ns);
  else if (ns < 1000000)
    snprintf(b, sizeof b, "%.3f us", static_cast<double>(ns) / 1e3);
  else if (ns < 1000000000)
    snprintf(b, sizeof b, "%.3f ms", static_cast<double>(ns) / 1e6);
  else
    snprintf(b, sizeof b, "%.3f s", static_cast<double>(ns) / 1e9);
  return b;
}

// Files under this much data read in well under a second: no progress line.
// USRTRACE_REPORT_PROGRESS_BYTES sets another floor (0: always; the tests).
uint64_t progress_floor() {
  const char* e = getenv("USRTRACE_REPORT_PROGRESS_BYTES");
  return e && *e ? strtoull(e, nullptr, 10) : 64ull << 20;
}

Progress::Progress(bool enabled, const std::string& file, uint64_t total)
    : on_(enabled && total > 0 && total >= progress_floor()), file_(file), total_(total) {}

void Progress::update(uint64_t done) {
  if (!on_ || done < next_check_) return;
  next_check_ = done + (1 << 20);  // the clock at most once a MiB
  const int64_t now = now_ms();
  if (drawn_ && now - last_ms_ < 250) return;
  last_ms_ = now;
  drawn_ = true;
  fprintf(stderr, "\rusrtrace report: reading %s: %3d%% (%.1f of %.1f GB)", file_.c_str(),
          static_cast<int>(done * 100 / total_), static_cast<double>(done) / 1e9,
          static_cast<double>(total_) / 1e9);
  fflush(stderr);
}

void Progress::done() {
  if (drawn_) fputs("\r\033[K", stderr);  // the line erased: what follows starts clean
  drawn_ = false;
}

int write_view(const TepSession& session, TraceFile::Cursor& cursor,
               const std::function<bool(const TraceFile::Record&, const char*)>& keep, const ViewOptions& o,
               FILE* out) {
  tep_handle* tep = session.tep();
  const GraphFields g(tep);
  if ((g.entry_id >= 0 || g.exit_id >= 0) && !g.usable()) {
    fprintf(stderr, "usrtrace report: the file's funcgraph formats lack func, depth, calltime or rettime\n");
    return 1;
  }
  Views v(tep, g);
  uint64_t done = 0, total = 0;
  cursor.progress(&done, &total);
  Progress progress(o.progress, o.file, total);
  progress.update(done);  // at once: a reader of a large file sees it started
  TraceFile::Record r;
  uint64_t n = 0;
  while (cursor.next(&r)) {
    if ((++n & 0xfff) == 0) {
      cursor.progress(&done, &total);
      progress.update(done);
    }
    if (r.len < 8) continue;
    tep_record rec = session.make_record(r);
    const int pid = tep_data_pid(tep, &rec);
    if (!keep(r, tep_data_comm_from_pid(tep, pid))) continue;
    uint16_t id;
    std::memcpy(&id, r.data, 2);
    if (id == g.entry_id) {
      v.entry(pid, r.data, r.len);
    } else if (id == g.exit_id) {
      v.exit(pid, r.data, r.len);
    } else if (tep_event* ev = tep_find_event(tep, id)) {
      v.event(ev->system, ev->name);
    }
  }
  progress.done();
  if (v.skipped() != 0)
    fprintf(stderr,
            "usrtrace report: %" PRIu64
            " function_graph records do not hold their fields; skipped (their format puts func, depth, "
            "calltime or rettime past the record)\n",
            v.skipped());
  const int rc = v.write(o, out);
  return fflush(out) == 0 ? rc : 1;
}

}  // namespace usrtrace::tool
