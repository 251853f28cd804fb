// synthetic_events (trace_events_synth.c's synth_events_fops): the
// definitions of the synthetic events (src/hist/synth.h), one per line. A
// global file: in the top instance only, as in the kernel. `>` removes
// every synthetic event, or none and EBUSY when one is busy. A bad command
// is logged to the top instance's error_log under "synthetic_events", with
// the kernel's text and caret.
#include <fcntl.h>

#include <string>

#include "hist/synth.h"
#include "tracefs/internal.h"
#include "trigger/control.h"

namespace usrtrace::tracefs::detail {
namespace {

bool truncating(int flags) { return (flags & O_ACCMODE) != O_RDONLY && (flags & O_TRUNC); }

std::unique_ptr<File> open_synthetic_events(Node n, int flags, int* err) {
  Instance* ip = n.inst.get();
  if (truncating(flags)) {
    if (int rc = hist::synth::clear_all(); rc < 0) {
      *err = -rc;
      return nullptr;
    }
  }
  auto f = std::make_unique<SimpleFile>(std::move(n.inst));
  f->show = [] { return hist::synth::events_text(); };
  f->store = [ip](std::string_view s) -> long {
    hist::synth::Error e;
    size_t at = 0;
    if (int rc = hist::synth::write_text(s, &e, &at); rc < 0) {
      if (e.text.empty()) return rc;  // where the kernel logs nothing (no such event, busy)
      return fail_text(*ip, "synthetic_events", e.text, e.command, e.pos, -rc);
    }
    return static_cast<long>(s.size());
  };
  return f;
}

constexpr FileSpec kFiles[] = {
    {"synthetic_events", kRW, Dir::kRoot, kTopOnly, open_synthetic_events},
};

// An enable_event trigger that names a synthetic event makes it busy, as
// the kernel's event reference does (trace_event_try_get_ref()).
[[maybe_unused]] const bool g_busy_hooked = [] {
  hist::synth::set_busy_hook(trigger::soft_mode_any);
  return true;
}();

}  // namespace

const std::span<const FileSpec> kSynthFiles = kFiles;

}  // namespace usrtrace::tracefs::detail
