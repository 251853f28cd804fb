// The tracepoint provider of BM_LttngUst, linked statically into
// ring_buffer_bench: this translation unit holds the probes
// (TRACEPOINT_CREATE_PROBES) and the tracepoint definitions
// (TRACEPOINT_DEFINE); the benchmark only calls tracepoint().
#define TRACEPOINT_CREATE_PROBES
#define TRACEPOINT_DEFINE
#include "usrtrace_bench_tp.h"
