// A field type USRTRACE_EVENT has no record layout for (std::string): the
// static_assert names the types it takes, instead of an incomplete type.
// expect: not a field type
#include <string>

#include "usrtrace/event.h"

#ifdef USRTRACE_COMPILE_FAIL
USRTRACE_EVENT(cf, unsupported, (std::string, s), "s=%s", "?")
#else
USRTRACE_EVENT(cf, unsupported, (const char*, s), "s=%s", __get_str(s))
#endif

int main() { trace_cf_unsupported("x"); }
