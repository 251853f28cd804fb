// A shared object with an event of its own, loaded by event_dso_test.
#include "usrtrace/event.h"

USRTRACE_EVENT(dsotest, ping, (int32_t, n), "n=%d", REC->n)

extern "C" __attribute__((visibility("default"))) void dsotest_fire(int32_t n) { trace_dsotest_ping(n); }
