// Helpers shared by the tracefs tests: the test events, file shorthands and
// a look at what a buffer holds that does not depend on the text output.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "events/registry.h"
#include "instance/instance.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(tfstest, ping, (int32_t, n), "n=%d", REC->n)
USRTRACE_EVENT(tfstest, pong, (int32_t, n), "n=%d", REC->n)
USRTRACE_EVENT(tfsother, seq, (int32_t, writer)(int32_t, seq), "writer=%d seq=%d", REC->writer, REC->seq)

namespace usrtrace::tracefs_test {

inline std::string rd(const std::string& path) {
  std::string out;
  long rc = tracefs::read_file(path, &out);
  EXPECT_GE(rc, 0) << path;
  return out;
}

inline long wr(const std::string& path, std::string_view text, bool append = false) {
  return tracefs::write_file(path, text, append);
}

inline uint16_t event_id(const char* sys, const char* name) {
  const auto* e = events::Registry::get().find(sys, name);
  return e ? e->id : 0;
}

// One record of the buffer, decoded without the text formatter.
struct Rec {
  uint16_t type;
  int32_t pid;
  int cpu;
  std::vector<uint8_t> payload;  // after the common header
  std::string marker() const {   // ftrace:print text (without the newline)
    if (payload.size() <= 8) return "";
    std::string s(reinterpret_cast<const char*>(payload.data()) + 8, payload.size() - 8);
    s = s.substr(0, s.find('\0'));
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  int32_t i32(size_t at) const {
    int32_t v = 0;
    if (at + 4 <= payload.size()) std::memcpy(&v, payload.data() + at, 4);
    return v;
  }
};

// What the buffer holds, oldest first, not consumed.
inline std::vector<Rec> records(instance::Instance* inst) {
  std::vector<Rec> out;
  rb::RingBuffer::Iterator it(inst->buffer());
  rb::Event ev;
  while (it.next(&ev)) {
    if (ev.len < sizeof(internal::CommonHeader)) continue;
    internal::CommonHeader h;
    std::memcpy(&h, ev.data, sizeof h);
    out.push_back({h.type, h.pid, ev.cpu, std::vector<uint8_t>(ev.data + sizeof h, ev.data + ev.len)});
  }
  return out;
}

inline bool has_marker(instance::Instance* inst, const std::string& text) {
  for (const Rec& r : records(inst))
    if (r.type == events::kPrintId && r.marker() == text) return true;
  return false;
}

inline std::vector<int32_t> pings(instance::Instance* inst, const char* name = "ping") {
  std::vector<int32_t> out;
  const uint16_t id = event_id("tfstest", name);
  for (const Rec& r : records(inst))
    if (r.type == id) out.push_back(r.i32(0));
  return out;
}

inline size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace usrtrace::tracefs_test
