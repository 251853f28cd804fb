// usrtrace recover FILE [--raw] [--snapshots]: prints the trace a dead
// process left in its buffer file, in the layout of the `trace` file
// (src/output), with the event formats stored in the file, through
// libtraceevent (the recovering process does not have the program's events).
//
// usrtrace recover FILE -o trace.dat [--file-version 6|7] [--compress]
// writes the live buffer as a trace.dat instead, for trace-cmd report,
// KernelShark and usrtrace report.
//
// usrtrace recover JOURNAL [-o trace.dat] finishes a recording whose
// recorder was killed or stopped by a full disk: the trace.dat it was
// writing, from the pages its journal holds.
#include <event-parse.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

#include "commands.h"
#include "tep_session.h"
#include "usrtrace/recover.h"
#include "usrtrace_toolkit/toolkit.h"

namespace usrtrace::tool {
namespace {

struct Options {
  std::string file;
  bool raw = false;
  bool snapshots = false;
  std::string tracedat;
  int file_version = 7;
  bool compress = false;    // what run() decided
  std::string compression;  // --compression as given: "", "none", "zstd" or "any"
};

int write_tracedat(const Recovery& rec, const Options& o) {
  if (o.file_version != 6 && o.file_version != 7) {
    fprintf(stderr, "usrtrace recover: --file-version must be 6 or 7\n");
    return 2;
  }
  std::string err;
  if (rec.write_tracedat(o.tracedat, o.file_version, o.compress, &err) != 0) {
    fprintf(stderr, "usrtrace recover: %s\n", err.c_str());
    return 1;
  }
  return 0;
}

void print_buffer(const Recovery& rec, const tool::TepSession& session, uint32_t tag, const Options& o) {
  tep_handle* tep = session.tep();
  const auto evs = rec.events(tag);
  const Recovery::Info& info = rec.info();
  printf("# tracer: nop\n#\n# entries-in-buffer/entries-written: %zu/%zu   #P:%d\n#\n", evs.size(),
         evs.size(), info.nr_cpus);
  printf("#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n");
  printf("#              | |         |   |||||     |         |\n");
  trace_seq s;
  trace_seq_init(&s);
  std::string line;
  for (const Recovery::Event& ev : evs) {
    if (ev.lost_before) printf("CPU:%d [LOST %" PRIu64 " EVENTS]\n", ev.cpu, ev.lost_before);
    line.clear();
    if (ev.len < 8) continue;  // no common fields: not an event record
    uint16_t type;
    int32_t pid;
    std::memcpy(&type, ev.data, 2);
    std::memcpy(&pid, ev.data + 4, 4);
    const uint8_t flags = ev.data[2], preempt = ev.data[3];
    if (o.raw) {
      printf("%d %d %" PRIu64 " %u", pid, ev.cpu, ev.ts, type);
      for (uint32_t i = 8; i < ev.len; ++i) printf(" %02x", ev.data[i]);
      printf("\n");
      continue;
    }
    // A copy with zeros past it, and formats checked first (TepSession): the
    // file's formats are as hostile as its records.
    tep_record rec_ = session.make_record(ev.data, ev.len, ev.ts, ev.cpu);
    tep_event* te = tep_find_event(tep, type);
    const char* comm = tep_data_comm_from_pid(tep, pid);
    char head[64];
    snprintf(head, sizeof head, "%16s-%-7d [%03d] ", comm ? comm : "<...>", pid, ev.cpu);
    line += head;
    toolkit::put_flag_columns(&line, flags, preempt);
    if (info.clock_in_ns) {
      const uint64_t us = ev.ts / 1000;
      snprintf(head, sizeof head, " %5" PRIu64 ".%06" PRIu64 ": ", us / 1000000, us % 1000000);
    } else {
      snprintf(head, sizeof head, " %12" PRIu64 ": ", ev.ts);
    }
    line += head;
    if (!te) {
      line += "Unknown type " + std::to_string(type);
    } else {
      trace_seq_reset(&s);
      tep_print_event(tep, &s, &rec_, "%s", TEP_PRINT_INFO);
      trace_seq_terminate(&s);
      if (std::strcmp(te->system, "ftrace") != 0) line += std::string(te->name) + ": ";
      std::string text(s.buffer, s.len);
      while (!text.empty() && text.back() == '\n') text.pop_back();
      line += text;
    }
    puts(line.c_str());
  }
  trace_seq_destroy(&s);
}

// A journal a recording left (killed, or stopped by a full disk): the
// trace.dat it was writing, built from what it had taken
// (src/record/journal.h), beside the journal (DIR/NAME for
// DIR/.NAME.usrtrace-rec-XXXXXX) or where -o says; the journal's own
// file version and compression hold unless given.
int recover_journal(int fd, const Options& o, bool version_given, bool compress_given) {
  std::string err;
  auto j = toolkit::JournalFile::read(fd, &err);
  if (!j) {
    fprintf(stderr, "usrtrace recover: %s: %s\n", o.file.c_str(), err.c_str());
    return 1;
  }
  if (!j->damage().empty())
    fprintf(stderr, "usrtrace recover: %s ends early (%s): what comes before is kept\n", o.file.c_str(),
            j->damage().c_str());
  if (version_given) {
    if (o.file_version != 6 && o.file_version != 7) {
      fprintf(stderr, "usrtrace recover: --file-version must be 6 or 7\n");
      return 2;
    }
    j->set_file_version(o.file_version);
  }
  if (compress_given)
    j->set_compress(o.compress);
  else if (version_given && o.file_version == 6)
    j->set_compress(false);  // a compressed recording's journal as version 6: decompressed
  if (j->compress() && j->file_version() != 7) {
    fprintf(stderr, "usrtrace recover: compression needs file version 7\n");
    return 2;
  }
  // Where the user says, or beside the journal, under the name its own
  // name carries: never the path the journal holds, which whoever wrote
  // the journal chose (run as root on another user's journal, it could
  // name any file).
  std::string out = o.tracedat;
  if (out.empty()) {
    out = toolkit::JournalFile::beside_journal(o.file);
    if (out.empty()) {
      fprintf(
          stderr,
          "usrtrace recover: %s is not named as a journal (.NAME.usrtrace-rec-XXXXXX): give -o FILE for the "
          "trace.dat\n",
          o.file.c_str());
      return 2;
    }
    std::string abs = out;
    if (abs[0] != '/') {
      char cwd[4096];
      if (getcwd(cwd, sizeof cwd)) abs = std::string(cwd) + "/" + abs;
    }
    if (abs != j->output())
      fprintf(stderr, "usrtrace recover: note: the recording was writing %s; writing %s beside the journal\n",
              j->output().c_str(), out.c_str());
  }
  if (j->write(out, &err) < 0) {
    fprintf(stderr, "usrtrace recover: %s\n", err.c_str());
    return 1;
  }
  const std::string also = j->has_page_files() ? ", and its page files " + o.file + ".*," : "";
  fprintf(stderr, "usrtrace recover: wrote %s: %" PRIu64 " pages from the journal %s (it%s may be removed)\n",
          out.c_str(), j->pages(), o.file.c_str(), also.c_str());
  return 0;
}

int run(Options o, bool version_given, bool compress_flag) {
  std::string err;
  // As record's: --compress is zstd, --compression none|zstd|any trace-cmd's.
  if (compress_flag && o.compression == "none") {
    fprintf(stderr, "usrtrace recover: --compress and --compression none disagree\n");
    return 2;
  }
  const bool compress_given = compress_flag || !o.compression.empty();
  o.compress = compress_flag || (!o.compression.empty() && o.compression != "none");
  {
    off_t size = 0;
    const int fd = toolkit::open_regular_for_read(o.file, &size, &err);
    if (fd < 0) {
      fprintf(stderr, "usrtrace recover: %s\n", err.c_str());
      return 1;
    }
    char magic[8];
    const bool journal = pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) &&
                         toolkit::is_journal(magic, sizeof magic);
    const int rc = journal ? recover_journal(fd, o, version_given, compress_given) : -1;
    ::close(fd);
    if (journal) return rc;
  }
  auto rec = Recovery::open(o.file, &err);
  if (!rec) {
    fprintf(stderr, "usrtrace recover: %s\n", err.c_str());
    return 1;
  }
  for (const std::string& w : rec->warnings()) fprintf(stderr, "usrtrace recover: warning: %s\n", w.c_str());
  if (!o.tracedat.empty()) return write_tracedat(*rec, o);
  std::vector<std::pair<std::string, std::string>> formats;
  for (const Recovery::Format& f : rec->formats()) formats.emplace_back(f.system, f.text);
  std::string warnings;
  auto session =
      tool::TepSession::from_formats(formats, rec->info().page_size, rec->info().nr_cpus, &warnings);
  if (!session) {
    fprintf(stderr, "usrtrace recover: out of memory\n");
    return 1;
  }
  for (size_t at = 0, nl; at < warnings.size(); at = nl + 1) {
    nl = warnings.find('\n', at);
    if (nl == std::string::npos) nl = warnings.size();
    fprintf(stderr, "usrtrace recover: warning: %s\n", warnings.substr(at, nl - at).c_str());
  }
  tep_handle* tep = session->tep();
  for (const auto& [tid, comm] : rec->cmdlines()) tep_register_comm(tep, comm.c_str(), tid);
  const Recovery::Info& info = rec->info();
  printf("# recovered from %s: pid %d (%s), instance %s, clock %s\n", o.file.c_str(), info.pid,
         info.program.c_str(), info.instance.empty() ? "top" : info.instance.c_str(), info.clock.c_str());
  print_buffer(*rec, *session, 0, o);
  if (o.snapshots)
    for (uint32_t tag : rec->tags())
      if (tag != 0) {
        printf("#\n# snapshot buffer %u\n", tag);
        print_buffer(*rec, *session, tag, o);
      }
  return 0;
}

}  // namespace

Runner add_recover(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "recover", "print the trace a dead process left in its buffer file, or finish a killed recording");
  sub->add_option("FILE", o->file,
                  "the buffer file (buffer_file, or USRTRACE_BUFFER_DIR), or the journal a recording left "
                  "(.OUTPUT.usrtrace-rec-XXXXXX)")
      ->required();
  sub->add_flag("--raw", o->raw, "print records as pid, cpu, time, type and bytes");
  sub->add_flag("--snapshots", o->snapshots, "also print the snapshot buffers in the file");
  sub->add_option("-o,--tracedat", o->tracedat,
                  "write the live buffer as a trace.dat instead of printing it");
  CLI::Option* version =
      sub->add_option("--file-version", o->file_version, "trace.dat version: 6 or 7 (default)");
  CLI::Option* compress = sub->add_flag("--compress", o->compress, "zstd-compress the trace.dat (version 7)");
  sub->add_option("--compression", o->compression,
                  "compression of the trace.dat (version 7), as record's: none, zstd or any (zstd); a "
                  "journal's own by default")
      ->check(CLI::IsMember({"none", "zstd", "any"}));
  return [o, version, compress] { return run(*o, version->count() > 0, compress->count() > 0); };
}

}  // namespace usrtrace::tool
