// The function tracers' options (the kernel's func_flags, the
// function_graph tracer's tracer_flags and the profiler's sleep-time and
// graph-time), registered with the instance level at load: the instance
// level keeps the values, per instance, and knows nothing of what they mean.
#pragma once

#include "instance/instance.h"

namespace usrtrace::function {

enum FuncOption : int {
  kFuncStackTrace,
  kFuncgraphOverrun,
  kFuncgraphCpu,
  kFuncgraphOverhead,
  kFuncgraphProc,
  kFuncgraphDuration,
  kFuncgraphAbstime,
  kFuncgraphIrqs,
  kFuncgraphTail,
  kSleepTime,
  kGraphTime,
  kNumFuncOptions,
};

// The first id of the block, set by options.cc's static initialiser at
// init_priority(101), before anything asks an instance for one of them.
extern int g_first_option;

// FuncOption `o` as an instance option id.
inline instance::Option option(FuncOption o) { return static_cast<instance::Option>(g_first_option + o); }

}  // namespace usrtrace::function
