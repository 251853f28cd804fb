// One argument per field: a call with more does not compile (the trailing
// ArgsEnd parameter takes no value a caller could pass by mistake).
// expect: ArgsEnd|too many arguments|no matching function|no viable
#include <cstdint>

#include "usrtrace/event.h"

USRTRACE_EVENT(cf, one, (int32_t, n), "n=%d", REC->n)

int main() {
#ifdef USRTRACE_COMPILE_FAIL
  trace_cf_one(1, 2);
#else
  trace_cf_one(1);
#endif
}
