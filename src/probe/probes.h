// The dynamic probes: uprobe_events in this process (docs/design/probes.md,
// docs/guide/probes.md). A definition makes an event (events/GRP/EVENT)
// whose site the patch engine (src/patch) arms while some instance enables
// it, or an enable_event trigger names it (the kernel's soft mode), and
// disarms when none does; its handler runs the definition's fetch program
// and writes the record through the event write path (filters, triggers,
// hist as for any event).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace usrtrace::probe {

// An error as the kernel's error_log shows it: its text (trace_probe.h's),
// the byte of the command the caret points at, and the errno to return.
struct Error {
  std::string text;
  size_t pos = 0;
  int errnum = EINVAL;
  // Where error_log files it: a synthetic event's line of dynamic_events
  // is the kernel's "synthetic_events".
  const char* subsystem = "trace_uprobe";
};

// One write to uprobe_events (dynamic_events: `dynamic`, where the other
// kinds' prefixes are refused as the kernel without them does): lines of
// `p|r[:[GRP/][EVENT]] TARGET [ARGS]`, `-:[GRP/]EVENT`, comments and blank
// lines. dynamic_events also takes the synthetic events' lines
// (hist/synth.h): `s:[synthetic/]NAME FIELDS`, and `-:synthetic/NAME`, or
// `-:NAME` when a synthetic event has that name (a probe of that name in
// any group goes too, as the kernel's dyn_event_release() removes every
// kind that matches). Each line is done before the next; the first error stops and
// returns -errno with *e (the caret's position within that line, *line_at:
// the line's start in `text`).
// Context: control plane; patches code (mprotect, membarrier, signals).
int write_text(std::string_view text, bool dynamic, Error* e, size_t* line_at);

// `>` on the file: every probe removed, or -EBUSY and none when one is
// enabled. (`>` on dynamic_events also removes the synthetic events:
// probe_files.cc.)
int clear_all();

// The files' texts: uprobe_events/dynamic_events (one definition per line,
// as the kernel prints them back; dynamic_events the synthetic events'
// `s:` lines after the probes), uprobe_profile ("  PATH EVENT HITS
// MISSES"), dynamic_probe_sites ("GRP/EVENT ADDRESS METHOD").
std::string events_text(bool dynamic);
std::string profile_text();
std::string sites_text();

// Re-checks which probes should be armed: called after enable bits or
// enable_event triggers change (the registry's enable hook). A probe whose
// site cannot be armed is disabled again in every instance, its other
// sites disarmed, and the first such failure returned: -errno with *why
// (may be null), as the kernel's enable write fails with the uprobe's
// registration error. Context: control plane.
int sync_armed(std::string* why);

}  // namespace usrtrace::probe
