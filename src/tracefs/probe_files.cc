// The dynamic probes' files (src/probe): uprobe_events and dynamic_events
// (trace_uprobe.c's and trace_dynevent.c's), uprobe_profile, and ours:
// dynamic_probe_sites, how each armed site is patched, and
// available_sdt_probes, the USDT probes one may define. Global files: in the
// top instance only, as in the kernel. A bad line is logged to the top
// instance's error_log under "trace_uprobe", with the kernel's text and
// caret.
#include <fcntl.h>

#include <cerrno>
#include <string>

#include "hist/synth.h"
#include "probe/probes.h"
#include "probe/sdt.h"
#include "tracefs/internal.h"

namespace usrtrace::tracefs::detail {
namespace {

bool truncating(int flags) { return (flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC); }

template <bool dynamic>
std::unique_ptr<File> open_events(Node n, int flags, int* err) {
  Instance* ip = n.inst.get();
  // `>`: every probe goes, or none and EBUSY (the kernel's open fails);
  // on dynamic_events the synthetic events too (dyn_events_release_all()).
  if (truncating(flags)) {
    if (dynamic && hist::synth::any_busy()) {
      *err = EBUSY;
      return nullptr;
    }
    if (int rc = probe::clear_all(); rc < 0) {
      *err = -rc;
      return nullptr;
    }
    if (int rc = dynamic ? hist::synth::clear_all() : 0; rc < 0) {
      *err = -rc;
      return nullptr;
    }
  }
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return probe::events_text(dynamic); };
  f->store = [ip](std::string_view s) -> long {
    probe::Error e;
    size_t at = 0;
    if (int rc = probe::write_text(s, dynamic, &e, &at); rc < 0) {
      if (e.text.empty()) return rc;  // where the kernel logs nothing (no such event, busy)
      std::string_view line = s.substr(at);
      line = line.substr(0, line.find('\n'));
      return fail_text(*ip, e.subsystem, e.text, line, e.pos, -rc);
    }
    return static_cast<long>(s.size());
  };
  return f;
}

std::unique_ptr<File> open_profile(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return probe::profile_text(); };
  return f;
}

std::unique_ptr<File> open_sites(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return probe::sites_text(); };
  return f;
}

// Ours: the USDT probes of the loaded objects (`%PROVIDER:NAME` targets),
// read from their notes when the file is opened.
std::unique_ptr<File> open_sdt(Node n, int, int*) {
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return probe::sdt_text(); };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"uprobe_events", kRW, Dir::kRoot, kTopOnly, open_events<false>},
    {"dynamic_events", kRW, Dir::kRoot, kTopOnly, open_events<true>},
    {"uprobe_profile", kRO, Dir::kRoot, kTopOnly, open_profile},
    {"dynamic_probe_sites", kRO, Dir::kRoot, kTopOnly, open_sites},
    {"available_sdt_probes", kRO, Dir::kRoot, kTopOnly, open_sdt},
};

}  // namespace

const std::span<const FileSpec> kProbeFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
