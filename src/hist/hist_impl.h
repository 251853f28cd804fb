// Private to src/hist: a histogram's live state (Histogram::Impl, with the
// parsed command it extends), one record's evaluation (Eval), and the
// actions of histogram.rst section 2.2 (actions.cc) that record() runs and
// print() shows. docs/design/histograms.md has the protocols.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "events/record.h"
#include "hist/hist.h"
#include "hist/hist_parse.h"
#include "hist/synth.h"
#include "hist/tracing_map.h"

namespace usrtrace::hist {

// A histogram's variables as the other histograms of its instance see them
// (the kernel's find_var() over the trace_array's hist triggers).
struct Published {
  int slot = 0;
  std::string system, event;
  std::vector<std::string> vars;
  std::vector<Units> units;
  std::shared_ptr<TracingMap> table;  // kept alive by the readers too
  std::string key_layout;             // a reader's key must be laid out alike
  std::atomic<int> users{0};          // histograms reading these variables
};

// The parsed command, and the live state beside it.
struct Histogram::Impl : HistSpec {
  std::atomic<bool> paused{false};
  std::shared_ptr<TracingMap> table;
  Scope scope;
  const internal::EventDesc* event = nullptr;
  std::string actions_sig;
  // The histograms whose variables this one reads (one per ref_tables).
  std::vector<std::shared_ptr<Published>> ref_pubs;
  std::shared_ptr<Published> mine;  // set by publish()
  // One per action: the synthetic event trace() generates (else null).
  std::vector<std::shared_ptr<synth::Event>> synths;
  int snapshot_action = -1;  // the onmax/onchange(...).snapshot(), if any

  // The snapshots .snapshot() took, as the hist file tells of them: the
  // values and the entries (element index) of the kept ones, up to the
  // instance's ring of snapshots. Changed by the writer that holds
  // snap_busy; one that finds it held counts snap_lost.
  std::atomic<uint32_t> snap_busy{0};
  std::atomic<uint32_t> snap_n{0};
  std::atomic<uint64_t> snap_val[16] = {};
  std::atomic<uint32_t> snap_elt[16] = {};
  std::atomic<uint64_t> snap_lost{0};

  // Makes the table this histogram aggregates into or, for a name=, joins the
  // one the live histograms of that name share; false if that one's keys,
  // values or size differ. Kernel: create_tracing_map(), and
  // hist_register_trigger()'s named-trigger check.
  // Context: control plane; takes g_named_mu; allocates the table.
  bool create_tracing_map();

  // Kernel: find_var(), create_var_ref(), the action parsers' checks: the
  // references to other histograms' variables, the units of expressions
  // that use them, and each action's event. Context: control plane.
  bool resolve(Error* err);
};

// One record's evaluation: its fields, the time stamp (read once), the
// variables of this histogram (computed on demand, each once) and the
// values of the references read from other histograms.
struct Eval {
  const HistSpec& im;
  const uint8_t* rec;
  uint32_t len;
  const RecordContext& ctx;
  uint64_t ts = 0;
  bool have_ts = false;
  uint32_t computed = 0;  // bit i: vars[i] holds variable i
  uint64_t vars[kMaxVars] = {};
  uint64_t refs[kMaxRefs] = {};

  uint64_t field(const Field& f) {
    switch (f.src) {
      case Src::kCpu:
        return static_cast<uint64_t>(static_cast<int64_t>(ctx.cpu));
      case Src::kTimestamp: {
        if (!have_ts) {
          ts = ctx.now_ns ? ctx.now_ns(ctx.now_arg) : 0;
          have_ts = true;
        }
        // .usecs: the kernel's ns2usecs(), rounded to the nearest, as the
        // trace file prints time stamps.
        return (f.flags & kUsecs) ? (ts + 500) / 1000 : ts;
      }
      case Src::kHitcount:
        return 1;
      case Src::kExpr:
        return eval(f.expr);
      default:
        return events::read_int_field(rec, len, f.offset, f.size, f.is_signed);
    }
  }
  uint64_t var(int i) {
    const uint32_t bit = 1u << i;
    if (!(computed & bit)) {
      // Cycles were refused when the command was parsed.
      vars[i] = eval(im.vars[static_cast<size_t>(i)].expr);
      computed |= bit;
    }
    return vars[i];
  }
  // Kernel: hist_fn_call() and the operators' fns: u64 arithmetic; a
  // division by zero gives -1.
  uint64_t eval(int node) {
    if (node < 0) return 0;
    const Expr& e = im.exprs[static_cast<size_t>(node)];
    switch (e.op) {
      case Expr::kField:
        return field(e.field);
      case Expr::kConst:
        return e.constant;
      case Expr::kSelfVar:
        return var(e.index);
      case Expr::kRef:
        return refs[e.index];
      case Expr::kAdd:
        return eval(e.a) + eval(e.b);
      case Expr::kSub:
        return eval(e.a) - eval(e.b);
      case Expr::kMul:
        return eval(e.a) * eval(e.b);
      case Expr::kDiv: {
        const uint64_t a = eval(e.a), b = eval(e.b);
        return b == 0 ? ~uint64_t{0} : a / b;
      }
      case Expr::kNeg:
        return 0 - eval(e.a);
    }
    return 0;
  }
};

// actions.cc: one action of entry `e`'s record (Kernel: action_trace(),
// ontrack_action()), and what the hist file shows of the actions: after
// an entry (track_text) and before the totals (snapshot_text).
// Context: run_action: the write path; the others: control plane.
void run_action(Histogram::Impl& im, size_t i, TracingMap::Elt* e, Eval& ev);
std::string track_text(const Histogram::Impl& im, const TracingMap::Elt* e);
std::string snapshot_text(const Histogram::Impl& im);

// hist.cc: a key as the kernel's hist_trigger_print_key() prints it.
std::string format_key(const Field& k, const uint8_t* key, const char* comm);

}  // namespace usrtrace::hist
