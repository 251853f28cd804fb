// Everything of usrtrace's C++ API in one include: typed events
// (USRTRACE_EVENT), instances (usrtrace::Instance) and the C API.
#pragma once

#include "usrtrace/event.h"     // IWYU pragma: export
#include "usrtrace/instance.h"  // IWYU pragma: export
#include "usrtrace/status.h"    // IWYU pragma: export
#include "usrtrace/usrtrace.h"  // IWYU pragma: export
