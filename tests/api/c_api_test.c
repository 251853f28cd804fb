/* The C API from C (compiled as C11): each function runs one scenario and
 * returns NULL, or a description of the first check that failed. The
 * buffer contents are checked by the C++ driver (c_api_test.cc). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "usrtrace/usrtrace.h"
#include "c_api_test.h"

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      snprintf(failure, sizeof failure, "%s:%d: %s", __FILE__, __LINE__, #cond); \
      return failure;                                                         \
    }                                                                         \
  } while (0)

static char failure[256];

const char *c_lifecycle(const char *name) {
  errno = 0;
  struct usrtrace_array *a = usrtrace_array_lookup(name);
  CHECK(a == NULL && errno == ENOENT);

  a = usrtrace_array_create(name);
  CHECK(a != NULL);
  CHECK(strcmp(usrtrace_array_name(a), name) == 0);
  errno = 0;
  CHECK(usrtrace_array_create(name) == NULL && errno == EEXIST);

  /* get_by_name and lookup find the same instance and take references. */
  struct usrtrace_array *b = usrtrace_array_get_by_name(name);
  CHECK(b == a);
  struct usrtrace_array *c = usrtrace_array_lookup(name);
  CHECK(c == a);
  CHECK(usrtrace_array_get(c) == a);
  CHECK(usrtrace_array_destroy(a) == -EBUSY); /* a, b, c and c again */
  usrtrace_array_put(b);
  usrtrace_array_put(c);
  usrtrace_array_put(c);
  CHECK(usrtrace_array_destroy(a) == -EBUSY); /* a's own: put it first */
  /* Held references make rmdir fail too, as a module's do in the kernel. */
  CHECK(driver_rmdir(name) == -EBUSY);
  usrtrace_array_put(a);
  CHECK(usrtrace_array_destroy(a) == 0);
  errno = 0;
  CHECK(usrtrace_array_lookup(name) == NULL && errno == ENOENT);

  /* get_by_name creates; destroying twice finds nothing the second time. */
  a = usrtrace_array_get_by_name(name);
  CHECK(a != NULL);
  usrtrace_array_put(a);
  CHECK(usrtrace_array_destroy(a) == 0);
  CHECK(usrtrace_array_destroy(a) == -ENODEV);
  errno = 0;
  CHECK(usrtrace_array_lookup(name) == NULL && errno == ENOENT);
  return NULL;
}

const char *c_errors(void) {
  static const char *const bad[] = {"a/b", "..", ".", "sp ace", "x\n",
                                    "0123456789012345678901234567890123456789012345678901234567890123456789"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    errno = 0;
    CHECK(usrtrace_array_create(bad[i]) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(usrtrace_array_get_by_name(bad[i]) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(usrtrace_array_lookup(bad[i]) == NULL && errno == EINVAL);
  }
  errno = 0;
  CHECK(usrtrace_array_create("") == NULL && errno == EEXIST); /* the top */
  CHECK(usrtrace_array_create(NULL) == NULL && errno == EEXIST);

  struct usrtrace_array *top = usrtrace_array_get_by_name(NULL);
  CHECK(top != NULL);
  CHECK(usrtrace_array_get_by_name("") == top);
  usrtrace_array_put(top);
  CHECK(strcmp(usrtrace_array_name(top), "") == 0);
  CHECK(usrtrace_array_destroy(top) == -EINVAL);
  usrtrace_array_put(top);
  CHECK(usrtrace_array_destroy(NULL) == -EINVAL);
  CHECK(usrtrace_array_printk(NULL, "x") == -ENOENT);
  CHECK(usrtrace_array_set_clr_event(NULL, "a", "b", true) == -ENOENT);
  usrtrace_array_put(NULL); /* ignored */
  return NULL;
}

/* The print event shows the function that called printk: its return
 * address. The empty asm keeps these calls from being tail calls, which
 * would show this function's caller instead. */
int c_printk(struct usrtrace_array *tr, int value) {
  int r = usrtrace_array_printk(tr, "c value=%d %s\n", value, "done");
  __asm__ volatile("" ::: "memory");
  return r;
}

int c_vprintk(struct usrtrace_array *tr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = usrtrace_array_vprintk(tr, fmt, ap);
  va_end(ap);
  __asm__ volatile("" ::: "memory");
  return r;
}

int c_set_clr_event(struct usrtrace_array *tr, const char *system, const char *event,
                    bool enable) {
  return usrtrace_array_set_clr_event(tr, system, event, enable);
}

const char *c_tracing_on_off(struct usrtrace_array *tr) {
  usrtrace_tracing_off(tr);
  CHECK(!usrtrace_tracing_is_on(tr));
  usrtrace_tracing_on(tr);
  CHECK(usrtrace_tracing_is_on(tr));
  return NULL;
}
