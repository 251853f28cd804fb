/* The C scenarios of c_api_test.c, called by the C++ driver. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

#include "usrtrace/usrtrace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL on success, else the failed check. */
const char *c_lifecycle(const char *name);
const char *c_errors(void);
const char *c_tracing_on_off(struct usrtrace_array *tr);
const char *c_tracefs(const char *name);

/* Record through the C API; return what it returned. */
int c_printk(struct usrtrace_array *tr, int value);
int c_vprintk(struct usrtrace_array *tr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int c_set_clr_event(struct usrtrace_array *tr, const char *system, const char *event, bool enable);

#ifdef __cplusplus
}
#endif
