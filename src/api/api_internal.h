// Shared by the C and C++ API files; not installed.
#pragma once

#include <cstdarg>

#include "usrtrace/usrtrace.h"

namespace usrtrace::api {

// trace_array_printk() with the caller's address `ip` (what the trace
// shows as the function). -ENOENT for a NULL tr.
// Context: any thread but signal handlers (vsnprintf); no lock.
int printk_ap(usrtrace_array* tr, void* ip, const char* fmt, va_list ap);

}  // namespace usrtrace::api
