// The event write path: trace_SYSTEM_EVENT() (USRTRACE_EVENT) lands in
// internal::write_event(), which writes the record into every instance that
// enabled the event, or hands it to the controlled writer when the event has
// a filter or a trigger somewhere (kControlBit of its enabled word).
#pragma once

#include <cstdint>

#include "usrtrace/internal/event_impl.h"
#include "writers/writers.h"

namespace usrtrace::events {

// The write path of an event whose kControlBit is set (filters and
// triggers). The level above installs it (trigger/control.cc, before it
// sets a control bit), so that this level calls nothing above it
// (docs/design/layers.md). Called between writers::enter() and exit().
using ControlledWriter = void (*)(const internal::EventDesc& ev, void* rec, uint32_t len,
                                  const writers::ThreadState& t, uint64_t record_mask);
// Context: control plane. A writer that sees a control bit finds the writer
// installed: the bit is set (with release) after this store.
void set_controlled_writer(ControlledWriter w);

}  // namespace usrtrace::events
