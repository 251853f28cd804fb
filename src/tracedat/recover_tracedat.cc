// Recovery::write_tracedat: a dead process's buffer file as a trace.dat.
// The file holds events, not pages in order, so they are encoded again
// (PageBuilder), with ns times for ns clocks (no TSC conversion needed).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/files.h"
#include "tracedat/page_builder.h"
#include "tracedat/writer.h"
#include "usrtrace/recover.h"

namespace usrtrace {

int Recovery::write_tracedat(const std::string& path, int file_version, bool compress,
                             std::string* error) const {
  const Info& in = info();
  tracedat::Metadata m;
  m.page_size = in.page_size ? in.page_size : 4096;
  m.nr_cpus = in.nr_cpus > 0 ? in.nr_cpus : 1;
  m.header_page = header_page();
  m.header_event = header_event();
  std::map<std::string, std::vector<std::string>> systems;
  for (const Format& f : formats()) {
    if (f.system == "ftrace")
      m.ftrace_formats.push_back(f.text);
    else
      systems[f.system].push_back(f.text);
  }
  for (auto& [sys, texts] : systems) m.systems.emplace_back(sys, std::move(texts));
  for (const auto& [tid, comm] : cmdlines()) m.cmdlines += std::to_string(tid) + " " + comm + "\n";
  m.trace_clock = "[" + in.clock + "]\n";
  m.version = "usrtrace recover (pid " + std::to_string(in.pid) + ", " + in.program + ")";

  std::vector<tracedat::PageBuilder> pages(static_cast<size_t>(m.nr_cpus),
                                           tracedat::PageBuilder(m.page_size));
  for (const Event& ev : events(0))
    if (ev.cpu >= 0 && ev.cpu < m.nr_cpus)
      pages[static_cast<size_t>(ev.cpu)].add(in.clock_in_ns ? ev.ts : ev.ts_raw, ev.data, ev.len,
                                             ev.lost_before);
  const int data = memfd_create("usrtrace-recover", MFD_CLOEXEC);
  if (data < 0) {
    *error = std::string("memfd_create: ") + std::strerror(errno);
    return -errno;
  }
  tracedat::BufferData top;
  top.clock = in.clock;
  top.page_size = m.page_size;
  uint64_t at = 0;
  for (auto& b : pages) {
    const std::vector<uint8_t> bytes = b.finish();
    if (!bytes.empty() && pwrite(data, bytes.data(), bytes.size(), static_cast<off_t>(at)) !=
                              static_cast<ssize_t>(bytes.size())) {
      const int e = errno ? errno : EIO;
      *error = std::string("writing pages: ") + std::strerror(e);
      ::close(data);
      return -e;
    }
    top.cpus.push_back({data, {{at, bytes.size()}}});
    at += bytes.size();
  }
  tracedat::WriteOptions w;
  w.version = file_version;
  w.compression = compress ? tracedat::Compression::kZstd : tracedat::Compression::kNone;
  // Written whole or not at all, 0600 (base::replace_file).
  const int r = base::replace_file(
      path, [&](int fd, std::string* e) { return tracedat::write_file(fd, m, {top}, w, e); }, error);
  ::close(data);
  return r;
}

}  // namespace usrtrace
