// usrtrace report [-i FILE | FILE] [--cpu N]... [-F FILTER]... [-B NAME]...
//                 [--stat] [-l] [-t] [-R] [--format text|json|perfetto] [-o OUT]
// Prints a trace.dat (ours or the kernel's) as `trace-cmd report` does:
// the same line layout, through the same libtraceevent printers, so the two
// print the same text for the same file. --format=json writes the
// Chrome/Perfetto trace-event JSON instead, --format=perfetto Perfetto's
// protobuf trace.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "remote.h"
#include "report_json.h"
#include "report_perfetto.h"
#include "report_views.h"
#include "tep_session.h"
#include "usrtrace/tracedat.h"
#include "usrtrace_toolkit/toolkit.h"

namespace usrtrace::tool {
namespace {

struct Options {
  std::string input;
  std::string positional;
  std::vector<int> cpus;
  std::vector<std::string> filters;
  std::vector<std::string> buffers;
  bool stat = false, latency = false, nsec = false, raw = false;
  std::string format = "text";
  std::string output;                 // -o: the export's file
  std::vector<std::string> counters;  // --counter SYS:EVENT:FIELD
  bool profile = false, graph = false, flame = false;
  std::string sort = "total", threshold;
};

struct EventFilters {
  bool any = false;  // some -F given: events without one are not shown
  // Per event id: the filters (nullptr: the event is shown unfiltered).
  std::vector<std::vector<std::unique_ptr<TraceFile::EventFilter>>> by_id =
      std::vector<std::vector<std::unique_ptr<TraceFile::EventFilter>>>(65536);
};

bool glob(const char* pat, const char* s) {
  // '*' and '?' only, as the names in -F are matched.
  if (*pat == '\0') return *s == '\0';
  if (*pat == '*') return glob(pat + 1, s) || (*s != '\0' && glob(pat, s + 1));
  if (*s != '\0' && (*pat == '?' || *pat == *s)) return glob(pat + 1, s + 1);
  return false;
}

// -F 'SYS/EVENT[,SYS/EVENT...][: EXPR]' (trace-cmd's form; SYS/ optional,
// names may be globs).
int add_filter(const std::string& spec, tep_handle* tep, const TepSession& session, EventFilters* out) {
  const size_t colon = spec.find(':');
  std::string names = spec.substr(0, colon);
  std::string expr = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const size_t first = expr.find_first_not_of(" \t");
  expr = first == std::string::npos ? "" : expr.substr(first);
  out->any = true;
  size_t pos = 0;
  while (pos <= names.size()) {
    size_t comma = names.find(',', pos);
    if (comma == std::string::npos) comma = names.size();
    std::string name = names.substr(pos, comma - pos);
    pos = comma + 1;
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.erase(0, 1);
    if (name.empty()) {
      fprintf(stderr, "usrtrace report: -F '%s': no event named\n", spec.c_str());
      return -1;
    }
    std::string sys = "*";
    const size_t slash = name.find('/');
    if (slash != std::string::npos) {
      sys = name.substr(0, slash);
      name = name.substr(slash + 1);
    }
    int matched = 0;
    tep_event** events = tep_list_events(tep, TEP_EVENT_SORT_ID);
    for (int i = 0; events && events[i]; ++i) {
      tep_event* ev = events[i];
      if (!glob(sys.c_str(), ev->system) || !glob(name.c_str(), ev->name)) continue;
      ++matched;
      auto& list = out->by_id[static_cast<size_t>(ev->id)];
      if (expr.empty()) {
        list.push_back(nullptr);
        continue;
      }
      std::string err;
      auto f = TraceFile::EventFilter::compile(session.format_of(ev->id), expr, &err);
      if (!f) {
        fprintf(stderr, "usrtrace report: -F '%s': %s/%s:\n%s", spec.c_str(), ev->system, ev->name,
                err.c_str());
        if (!err.empty() && err.back() != '\n') fputc('\n', stderr);
        return -1;
      }
      list.push_back(std::move(f));
    }
    if (matched == 0) {
      fprintf(stderr, "usrtrace report: -F '%s': no event matches '%s/%s'\n", spec.c_str(), sys.c_str(),
              name.c_str());
      return -1;
    }
  }
  return 0;
}

bool shown(const EventFilters& f, const TraceFile::Record& r, const char* comm) {
  if (!f.any) return true;
  if (r.len < 2) return false;
  uint16_t id;
  std::memcpy(&id, r.data, 2);
  for (const auto& p : f.by_id[id])
    if (!p || p->match(r, comm)) return true;
  return false;
}

void print_event_name(trace_seq* s, tep_event* ev) {
  const char* name = ev ? ev->name : "(NULL)";
  trace_seq_printf(s, " %s: ", name);
  const int len = static_cast<int>(std::strlen(name));
  if (len < 20) trace_seq_printf(s, "%.*s", 20 - len, "                    ");
}

int print_stat(const TraceFile& f) {
  printf(
      "\nKernel buffer statistics:\n"
      "  Note: \"entries\" are the entries left in the kernel ring buffer and are not\n"
      "        recorded in the trace data. They should all be zero.\n\n");
  if (f.cpu_stats().empty()) {
    printf(" No stats in this file\n");
  } else {
    std::string all;
    for (const std::string& s : f.cpu_stats()) all += s + "\n";  // the option's NUL became '\n'
    printf("%s\n", all.c_str());
  }
  const TraceFile::Buffer& top = f.buffers()[0];
  for (size_t i = 0; i < top.cpus.size(); ++i)
    printf("CPU%zu data recorded at offset=0x%" PRIx64 "\n    %" PRIu64 " bytes in size\n", i,
           top.cpus[i].offset, top.cpus[i].size);
  return 0;
}

int run(Options o) {
  if (!o.positional.empty()) {
    if (!o.input.empty()) {
      fprintf(stderr, "usrtrace report: give the file once (-i FILE or FILE)\n");
      return 2;
    }
    o.input = o.positional;
  }
  if (o.input.empty()) o.input = "trace.dat";
  if (o.format != "text" && o.format != "json" && o.format != "perfetto") {
    fprintf(stderr, "usrtrace report: --format must be text, json or perfetto\n");
    return 2;
  }
  if (!o.counters.empty() && o.format != "perfetto") {
    fprintf(stderr, "usrtrace report: --counter is for --format perfetto\n");
    return 2;
  }
  if (!o.output.empty() && o.format == "text") {
    fprintf(stderr, "usrtrace report: -o is for --format json or perfetto (the text goes to stdout)\n");
    return 2;
  }
  if (o.format == "perfetto" && o.output.empty() && isatty(STDOUT_FILENO)) {
    fprintf(stderr, "usrtrace report: a Perfetto trace is binary: give -o FILE, or redirect stdout\n");
    return 2;
  }
  std::string err;
  auto file = TraceFile::open(o.input, &err);
  if (!file) {
    fprintf(stderr, "usrtrace report: %s\n", err.c_str());
    return 1;
  }
  const TraceFile& f = *file;
  std::string warn;
  auto session = TepSession::load(f, &warn);
  if (!session) {
    fprintf(stderr, "usrtrace report: out of memory\n");
    return 1;
  }
  if (!warn.empty()) fprintf(stderr, "usrtrace report: warning: %s", warn.c_str());
  tep_handle* tep = session->tep();

  // Buffers: -B NAME ("top" or "" for the top instance); all by default.
  std::vector<int> bufs;
  for (const std::string& name : o.buffers) {
    int found = -1;
    for (size_t i = 0; i < f.buffers().size(); ++i)
      if (f.buffers()[i].name == name || (i == 0 && name == "top")) found = static_cast<int>(i);
    if (found < 0) {
      std::string have;
      for (const auto& b : f.buffers()) have += " " + (b.name.empty() ? std::string("top") : b.name);
      fprintf(stderr, "usrtrace report: no buffer '%s' in %s (it has:%s)\n", name.c_str(), o.input.c_str(),
              have.c_str());
      return 1;
    }
    bufs.push_back(found);
  }
  for (int cpu : o.cpus)
    if (cpu < 0 || cpu >= f.nr_cpus()) {
      fprintf(stderr, "usrtrace report: --cpu %d: the file has CPUs 0..%d\n", cpu, f.nr_cpus() - 1);
      return 1;
    }
  EventFilters filters;
  for (const std::string& spec : o.filters)
    if (add_filter(spec, tep, *session, &filters) < 0) return 1;

  std::string clock = f.trace_clock();
  {
    const size_t a = clock.find('['), b = clock.find(']');
    clock = a != std::string::npos && b != std::string::npos && b > a ? clock.substr(a + 1, b - a - 1)
                                                                      : f.buffers()[0].clock;
  }
  const bool in_ns = clock_in_ns(clock);

  if (o.profile + o.graph + o.flame > 1) {
    fprintf(stderr, "usrtrace report: --profile, --graph and --flame-graph are one view each: give one\n");
    return 2;
  }
  if (o.profile || o.graph || o.flame) {
    ViewOptions v;
    v.view = o.profile ? View::kProfile : o.graph ? View::kGraph : View::kFlame;
    v.sort = o.sort;
    v.progress = isatty(STDERR_FILENO) != 0;
    v.file = o.input;
    if (!o.threshold.empty()) {
      std::string us, why_not;
      if (!time_filter_us(o.threshold, &us, &why_not)) {
        fprintf(stderr, "usrtrace report: --threshold '%s': %s\n", o.threshold.c_str(), why_not.c_str());
        return 2;
      }
      v.threshold_ns = std::stoull(us) * 1000;
    }
    TraceFile::Cursor cur(f, bufs, o.cpus);
    const int r = write_view(
        *session, cur,
        [&](const TraceFile::Record& rec, const char* comm) { return shown(filters, rec, comm); }, v, stdout);
    for (const std::string& w : f.warnings()) fprintf(stderr, "usrtrace report: warning: %s\n", w.c_str());
    return r;
  }

  if (o.format == "json" || o.format == "perfetto") {
    auto keep = [&](const TraceFile::Record& rec, const char* comm) { return shown(filters, rec, comm); };
    auto write = [&](FILE* out) {
      TraceFile::Cursor cur(f, bufs, o.cpus);
      uint64_t done = 0, total = 0;
      cur.progress(&done, &total);
      // On a terminal, unless the export itself goes there.
      Progress progress(isatty(STDERR_FILENO) != 0 && (out != stdout || isatty(STDOUT_FILENO) == 0), o.input,
                        total);
      return o.format == "json" ? write_json(f, *session, cur, in_ns, keep, out, &progress)
                                : write_perfetto(f, *session, cur, clock, o.counters, keep, out, &progress);
    };
    int r = 0;
    if (o.output.empty()) {
      r = write(stdout);
    } else {
      // -o FILE: written whole or not at all (a new file beside it, 0600,
      // renamed over it once complete: a failure leaves FILE as it was),
      // or, for a device or FIFO (/dev/null, a pipe), written in place and
      // never replaced (toolkit::write_output).
      std::string why;
      bool export_failed = false;  // write() said why
      const int rc = toolkit::write_output(
          o.output,
          [&](int fd, std::string*) {
            const int dup_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
            FILE* out = dup_fd >= 0 ? fdopen(dup_fd, "w") : nullptr;
            if (!out) {
              const int e = errno ? errno : ENOMEM;
              if (dup_fd >= 0) ::close(dup_fd);
              return -e;
            }
            export_failed = write(out) != 0;
            const bool flushed = fclose(out) == 0;
            return export_failed ? -EIO : flushed ? 0 : -(errno ? errno : EIO);
          },
          &why);
      if (rc < 0) {
        if (!export_failed) fprintf(stderr, "usrtrace report: %s\n", why.c_str());
        fprintf(stderr, "usrtrace report: %s not written\n", o.output.c_str());
        r = 1;
      }
    }
    for (const std::string& w : f.warnings()) fprintf(stderr, "usrtrace report: warning: %s\n", w.c_str());
    return r;
  }

  printf("cpus=%d\n", f.nr_cpus());
  if (!f.latency_text().empty()) {
    fwrite(f.latency_text().data(), 1, f.latency_text().size(), stdout);
    return 0;
  }
  if (o.stat) return print_stat(f);
  if (o.nsec) tep_set_flag(tep, TEP_NSEC_OUTPUT);

  // With instances, each line starts with its buffer's name, as trace-cmd
  // prints each buffer as an input of its own.
  size_t name_width = 0;
  const bool instances = f.buffers().size() > 1;
  for (const auto& b : f.buffers()) name_width = std::max(name_width, b.name.size());
  const char* cfmt = o.latency ? "%8.8s-%-5d %3d" : "%16s-%-5d [%03d]";
  const char* tfmt = in_ns ? (o.nsec ? " %9.1d:" : " %6.1000d:") : "%12d:";
  const char* info = o.raw ? TEP_PRINT_INFO_RAW : TEP_PRINT_INFO;
  TraceFile::Cursor cur(f, bufs, o.cpus);
  TraceFile::Record r;
  trace_seq s;
  trace_seq_init(&s);
  while (cur.next(&r)) {
    if (filters.any) {
      tep_record probe = session->make_record(r);
      const char* comm = tep_data_comm_from_pid(tep, tep_data_pid(tep, &probe));
      if (!shown(filters, r, comm)) continue;
    }
    tep_record rec = session->make_record(r);
    trace_seq_reset(&s);
    if (instances) {
      const std::string& name = f.buffers()[static_cast<size_t>(r.buffer)].name;
      if (name.empty())
        trace_seq_printf(&s, "%*s  ", static_cast<int>(name_width), "");
      else
        trace_seq_printf(&s, "%*s: ", static_cast<int>(name_width), name.c_str());
    }
    if (r.missed > 0)
      trace_seq_printf(&s, "CPU:%d [%" PRId64 " EVENTS DROPPED]\n", r.cpu, r.missed);
    else if (r.missed < 0)
      trace_seq_printf(&s, "CPU:%d [EVENTS DROPPED]\n", r.cpu);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"  // trace-cmd's formats, chosen above
    tep_print_event(tep, &s, &rec, cfmt, TEP_PRINT_COMM, TEP_PRINT_PID, TEP_PRINT_CPU);
    if (o.latency) tep_print_event(tep, &s, &rec, "%s", TEP_PRINT_LATENCY);
    tep_print_event(tep, &s, &rec, tfmt, TEP_PRINT_TIME);
#pragma GCC diagnostic pop
    print_event_name(&s, tep_find_event_by_record(tep, &rec));
    tep_print_event(tep, &s, &rec, "%s", info);
    unsigned int len = s.len;
    if (len > 0 && s.buffer[len - 1] == '\n') --len;
    fwrite(s.buffer, 1, len, stdout);
    fputc('\n', stdout);
  }
  trace_seq_destroy(&s);
  fflush(stdout);
  for (const std::string& w : f.warnings()) fprintf(stderr, "usrtrace report: warning: %s\n", w.c_str());
  return 0;
}

}  // namespace

int export_trace(const std::string& input, const std::string& format, const std::string& output) {
  Options o;
  o.input = input;
  o.format = format;
  o.output = output;
  return run(o);
}

Runner add_report(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub =
      app.add_subcommand("report", "print a trace.dat as trace-cmd report does, or export it as JSON");
  sub->add_option("FILE", o->positional, "the trace.dat (default: trace.dat)");
  sub->add_option("-i,--input", o->input, "the trace.dat to read");
  sub->add_option("--cpu", o->cpus, "only these CPUs (N or N,M; repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("-F,--filter", o->filters,
                  "only events matching 'SYS/EVENT[,...][: FILTER]' (the filter files' language; repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("-B,--buffer", o->buffers,
                  "only this instance's buffer ('top' for the top instance; repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("--stat", o->stat, "print the buffers' statistics recorded in the file");
  sub->add_flag("-l,--latency", o->latency, "print the latency columns (flags, preempt depth)");
  sub->add_flag("-t,--nsec", o->nsec, "print timestamps in nanoseconds");
  sub->add_flag("-R,--raw", o->raw, "print the raw fields instead of the events' print formats");
  // Checked in run(), which says what the formats are.
  sub->add_option(
      "--format", o->format,
      "text (as trace-cmd report), json (Chrome trace events) or perfetto (Perfetto's protobuf trace)");
  sub->add_option("-o,--output", o->output, "--format json or perfetto: write to FILE instead of stdout");
  sub->add_option("--counter", o->counters,
                  "--format perfetto: SYS:EVENT:FIELD as a counter track (FIELD over time; repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag(
      "--profile", o->profile,
      "per function: total and self time, calls, avg, min, max (uftrace report's view; per event: counts)");
  sub->add_flag("--graph", o->graph,
                "the call graph merged by path, with calls and total time (uftrace graph)");
  sub->add_flag("--flame-graph", o->flame,
                "folded stacks weighted by self time in ns, for flamegraph.pl, speedscope, Perfetto");
  sub->add_option("--sort", o->sort, "--profile's order: total (default), self, calls, avg, min, max or name")
      ->check(CLI::IsMember({"total", "self", "calls", "avg", "min", "max", "name"}));
  sub->add_option("--threshold", o->threshold,
                  "--profile: only functions whose total time is at least TIME (N with ns, us, ms or s)");
  return [o] { return run(*o); };
}

}  // namespace usrtrace::tool
