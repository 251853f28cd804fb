#include "function/options.h"

namespace usrtrace::function {
namespace {

// In FuncOption's order; listed after the core options, as the kernel lists
// a tracer's flags after trace_options' own.
constexpr instance::OptionInfo kFuncOptions[kNumFuncOptions] = {
    {"func_stack_trace", false},  {"funcgraph-overrun", false}, {"funcgraph-cpu", true},
    {"funcgraph-overhead", true}, {"funcgraph-proc", false},    {"funcgraph-duration", true},
    {"funcgraph-abstime", false}, {"funcgraph-irqs", true},     {"funcgraph-tail", false},
    {"sleep-time", true},         {"graph-time", true},
};

// Rank 1: the function tracers' block comes before the latency tracers'.
constexpr int kRank = 1;

struct Register {
  Register() { g_first_option = instance::register_options(kFuncOptions, kNumFuncOptions, kRank); }
};
__attribute__((init_priority(101))) Register g_register;

}  // namespace

int g_first_option;

}  // namespace usrtrace::function
