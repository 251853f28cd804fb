// LTTng-UST tracepoint provider for BM_LttngUst: the same event as the
// usrtrace benchmarks, 3 integers and a 16-byte string.
//
// Written with the classic macro names (TRACEPOINT_EVENT, ctf_integer,
// ctf_array_text), which LTTng-UST 2.13 still accepts (compat API 1) and
// 2.12 needs. Included by usrtrace_bench_tp.c (probes + definitions) and by
// ring_buffer_bench.cc (the tracepoint() call sites only).

#undef TRACEPOINT_PROVIDER
#define TRACEPOINT_PROVIDER usrtrace_bench

#undef TRACEPOINT_INCLUDE
#define TRACEPOINT_INCLUDE "usrtrace_bench_tp.h"

#if !defined(USRTRACE_BENCH_TP_H) || defined(TRACEPOINT_HEADER_MULTI_READ)
#define USRTRACE_BENCH_TP_H

#include <lttng/tracepoint.h>
#include <stdint.h>

TRACEPOINT_EVENT(usrtrace_bench, event,
                 TP_ARGS(int32_t, a_arg, int32_t, b_arg, int32_t, c_arg, const char *, s_arg),
                 TP_FIELDS(ctf_integer(int32_t, a, a_arg) ctf_integer(int32_t, b, b_arg)
                               ctf_integer(int32_t, c, c_arg) ctf_array_text(char, s, s_arg, 16)))

#endif  // USRTRACE_BENCH_TP_H

#include <lttng/tracepoint-event.h>
