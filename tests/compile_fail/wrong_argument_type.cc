// A trace_SYSTEM_NAME() call with an argument its field cannot take (an
// int for a string field) does not compile: the call site is typed.
// expect: string_view|no matching function|cannot convert|invalid conversion|no viable
#include "usrtrace/event.h"

USRTRACE_EVENT(cf, typed, (const char*, s), "s=%s", __get_str(s))

int main() {
#ifdef USRTRACE_COMPILE_FAIL
  trace_cf_typed(42);
#else
  trace_cf_typed("42");
#endif
}
