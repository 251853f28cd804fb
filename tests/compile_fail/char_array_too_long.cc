// char[N] fields hold 1..1024 bytes (a record is at most kMaxRecord).
// expect: char array fields hold 1\.\.1024 bytes
#include "usrtrace/event.h"

#ifdef USRTRACE_COMPILE_FAIL
USRTRACE_EVENT(cf, long_name, (char[2000], name), "name=%s", REC->name)
#else
USRTRACE_EVENT(cf, long_name, (char[1024], name), "name=%s", REC->name)
#endif

int main() { trace_cf_long_name("x"); }
