#include "tep_session.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// LeakSanitizer's built-in suppressions for this program (read only by an
// ASan build). libtraceevent 1.7.1 (Debian 12) loses a 2-byte strdup inside
// tep_parse_event() on some of the kernel 6.18 event formats that trace-cmd
// saves in every file it writes; the allocation is libtraceevent's own, and
// without this every report of such a file under ASan exits 1. Only stacks
// through tep_parse_event are silenced: a tep handle we forget to free is still
// reported from tep_alloc().
extern "C" const char* __lsan_default_suppressions();  // NOLINT(bugprone-reserved-identifier)
extern "C" __attribute__((used)) const char*
__lsan_default_suppressions() {  // NOLINT(bugprone-reserved-identifier)
  return "leak:tep_parse_event\n";
}
// ... and without the "Suppressions used" table on stderr at every exit.
extern "C" const char* __lsan_default_options();  // NOLINT(bugprone-reserved-identifier)
extern "C" __attribute__((used)) const char*
__lsan_default_options() {  // NOLINT(bugprone-reserved-identifier)
  return "print_suppressions=0";
}

namespace usrtrace::tool {

std::unique_ptr<TepSession> TepSession::load(const TraceFile& f, std::string* warnings) {
  auto s = std::make_unique<TepSession>();
  s->tep_ = tep_alloc();
  if (!s->tep_) return nullptr;
  tep_handle* tep = s->tep_;
  // The event plugins trace-cmd loads (sched_switch's print handler, ...).
  s->plugins_ = tep_load_plugins(tep);
  tep_set_file_bigendian(tep, TEP_LITTLE_ENDIAN);
  tep_set_local_bigendian(tep, TEP_LITTLE_ENDIAN);
  tep_set_long_size(tep, f.long_size());
  tep_set_page_size(tep, static_cast<int>(f.page_size()));
  tep_set_cpus(tep, f.nr_cpus());
  std::string hp = f.header_page();
  if (!hp.empty()) tep_parse_header_page(tep, hp.data(), hp.size(), f.long_size());
  for (const TraceFile::Format& fmt : f.formats()) {
    const char* id = std::strstr(fmt.text.c_str(), "\nID: ");
    if (id) s->formats_[std::atoi(id + 5)] = fmt.text;
    if (tep_parse_event(tep, fmt.text.data(), fmt.text.size(), fmt.system.c_str()) != 0 && warnings) {
      *warnings += "cannot parse an event format of system " + fmt.system + "\n";
    }
  }
  if (!f.kallsyms().empty()) {
    tep_parse_kallsyms(tep, f.kallsyms().c_str());
  }
  if (!f.printk_formats().empty()) {
    tep_parse_printk_formats(tep, f.printk_formats().c_str());
  }
  // saved_cmdlines: "PID COMM" lines.
  const std::string& c = f.cmdlines();
  size_t pos = 0;
  while (pos < c.size()) {
    size_t nl = c.find('\n', pos);
    if (nl == std::string::npos) nl = c.size();
    const std::string line = c.substr(pos, nl - pos);
    pos = nl + 1;
    char* end = nullptr;
    const long pid = std::strtol(line.c_str(), &end, 10);
    if (end == line.c_str() || *end != ' ') continue;
    tep_register_comm(tep, end + 1, static_cast<int>(pid));
  }
  return s;
}

TepSession::~TepSession() {
  if (plugins_) tep_unload_plugins(plugins_, tep_);
  if (tep_) tep_free(tep_);
}

const std::string& TepSession::format_of(int id) const {
  static const std::string kNone;
  auto it = formats_.find(id);
  return it == formats_.end() ? kNone : it->second;
}

tep_record TepSession::make_record(const TraceFile::Record& r) const {
  tep_record rec{};
  rec.ts = r.ts;
  rec.cpu = r.cpu;
  rec.size = static_cast<int>(r.len);
  rec.data = const_cast<uint8_t*>(r.data);
  rec.missed_events = r.missed;
  return rec;
}

bool clock_in_ns(const std::string& clock) {
  // trace-cmd's list (tracecmd_parse_trace_clock): not "boot", "counter" or "x86-tsc".
  static const char* const kNs[] = {"local", "global", "uptime", "perf", "tsc2nsec", "tai"};
  if (clock.empty() || clock.rfind("mono", 0) == 0) return true;
  for (const char* n : kNs)
    if (clock == n) return true;
  return false;
}

}  // namespace usrtrace::tool
