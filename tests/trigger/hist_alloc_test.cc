// The write path of inter-event hist triggers allocates nothing: a record
// that sets a variable, one that reads it by key, computes a latency,
// generates a synthetic event (whose own histogram counts it), saves fields
// on a new max and takes a snapshot, counted by replacing the allocator
// (testing/alloc_counter.h). Made to fail: the count includes the control
// plane's writes when they are inside the armed window (checked first).
#include <gtest/gtest.h>

#include <string>

#include "testing/alloc_counter.h"
#include "tracefs/tracefs.h"
#include "usrtrace/event.h"

USRTRACE_EVENT(ha, begin, (int32_t, id), "id=%d", REC->id)
USRTRACE_EVENT(ha, end, (int32_t, id)(char[16], who), "id=%d who=%s", REC->id, REC->who)

namespace usrtrace {
namespace {

long add(const std::string& path, std::string_view text) { return tracefs::write_file(path, text, true); }

TEST(HistAlloc, VariablesActionsAndSyntheticEventsAllocateNothingPerRecord) {
  install_counter();
  // The counter sees the control plane's allocations: it can fail.
  g_allocs = 0;
  g_armed = 1;
  ASSERT_GT(tracefs::write_file("synthetic_events", "ha_lat u64 lat; int id; char who[16]", false), 0);
  g_armed = 0;
  ASSERT_GT(g_allocs, 0);

  ASSERT_GT(tracefs::write_file("events/ha/enable", "1", false), 0);
  ASSERT_GT(tracefs::write_file("events/synthetic/ha_lat/enable", "1", false), 0);
  ASSERT_GT(add("events/ha/begin/trigger", "hist:keys=id:t0=common_timestamp"), 0);
  ASSERT_GT(add("events/ha/end/trigger",
                "hist:keys=id:lat=common_timestamp-$t0:onmatch(ha.begin).ha_lat($lat,id,who):"
                "onmax($lat).save(who):onmax($lat).snapshot()"),
            0);
  ASSERT_GT(add("events/synthetic/ha_lat/trigger", "hist:keys=id:vals=lat"), 0);
  // First records of the thread (its registration) and first entries.
  for (int i = 0; i < 64; ++i) {
    trace_ha_begin(i);
    trace_ha_end(i, "warm");
  }
  g_allocs = 0;
  g_armed = 1;
  for (int round = 0; round < 100; ++round)
    for (int i = 0; i < 64; ++i) {
      trace_ha_begin(i);
      trace_ha_end(i, "counted");
    }
  g_armed = 0;
  EXPECT_EQ(g_allocs, 0);
  std::string h;
  ASSERT_GE(tracefs::read_file("events/synthetic/ha_lat/hist", &h), 0);
  EXPECT_NE(h.find("Hits: 6464\n"), std::string::npos) << h;  // the records were made
  add("events/synthetic/ha_lat/trigger", "!hist:keys=id:vals=lat");
  add("events/ha/end/trigger",
      "!hist:keys=id:lat=common_timestamp-$t0:onmatch(ha.begin).ha_lat($lat,id,who):onmax($lat).save(who):"
      "onmax($lat).snapshot()");
  add("events/ha/begin/trigger", "!hist:keys=id:t0=common_timestamp");
  tracefs::write_file("events/synthetic/ha_lat/enable", "0", false);
  EXPECT_GT(tracefs::write_file("synthetic_events", "!ha_lat", true), 0);
}

}  // namespace
}  // namespace usrtrace
