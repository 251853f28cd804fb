/* The C API from C (compiled as C11): each function runs one scenario and
 * returns NULL, or a description of the first check that failed. The
 * buffer contents are checked by the C++ driver (c_api_test.cc). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "c_api_test.h"
#include "usrtrace/usrtrace.h"

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      snprintf(failure, sizeof failure, "%s:%d: %s", __FILE__, __LINE__, #cond); \
      return failure;                                                            \
    }                                                                            \
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
  char dir[128];
  snprintf(dir, sizeof dir, "instances/%s", name);
  CHECK(usrtrace_tracefs_rmdir(dir) == -EBUSY);
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
  static const char *const bad[] = {
      "a/b",    "..",  ".",
      "sp ace", "x\n", "0123456789012345678901234567890123456789012345678901234567890123456789"};
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
 * address. The empty asm keeps these calls from being tail calls, and
 * noinline these functions from being folded into a caller: either would
 * show another function. */
__attribute__((noinline)) int c_printk(struct usrtrace_array *tr, int value) {
  int r = usrtrace_array_printk(tr, "c value=%d %s\n", value, "done");
  __asm__ volatile("" ::: "memory");
  return r;
}

__attribute__((noinline)) int c_vprintk(struct usrtrace_array *tr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = usrtrace_array_vprintk(tr, fmt, ap);
  va_end(ap);
  __asm__ volatile("" ::: "memory");
  return r;
}

int c_set_clr_event(struct usrtrace_array *tr, const char *system, const char *event, bool enable) {
  return usrtrace_array_set_clr_event(tr, system, event, enable);
}

const char *c_tracing_on_off(struct usrtrace_array *tr) {
  usrtrace_tracing_off(tr);
  CHECK(!usrtrace_tracing_is_on(tr));
  usrtrace_tracing_on(tr);
  CHECK(usrtrace_tracing_is_on(tr));
  return NULL;
}

/* The control files from C: mkdir/rmdir and their errors, printk read back
 * from instances/NAME/trace, a refused write and its error_log line. */
const char *c_tracefs(const char *name) {
  char dir[128], path[192];
  static char buf[1 << 16];
  snprintf(dir, sizeof dir, "instances/%s", name);

  CHECK(usrtrace_tracefs_mkdir(dir) == 0);
  CHECK(usrtrace_tracefs_mkdir(dir) == -EEXIST);
  CHECK(usrtrace_tracefs_mkdir("instances/bad name") == -EINVAL);
  CHECK(usrtrace_tracefs_mkdir("not_instances") == -EPERM);
  CHECK(usrtrace_tracefs_rmdir("instances/never_made") == -ENOENT);

  struct usrtrace_array *tr = usrtrace_array_lookup(name);
  CHECK(tr != NULL);
  CHECK(c_printk(tr, 31) > 0);
  snprintf(path, sizeof path, "%s/trace", dir);
  long n = usrtrace_tracefs_read(path, buf, sizeof buf - 1);
  CHECK(n > 0);
  buf[n] = 0;
  CHECK(strstr(buf, " c_printk: c value=31 done\n") != NULL);
  /* A short buffer gets the file's start. */
  char head[8];
  CHECK(usrtrace_tracefs_read(path, head, sizeof head) == (long)sizeof head);
  CHECK(memcmp(head, buf, sizeof head) == 0);

  /* A refused write: the kernel's errno and an error_log line. */
  snprintf(path, sizeof path, "%s/trace_clock", dir);
  CHECK(usrtrace_tracefs_write(path, "nosuchclock", 11) == -EINVAL);
  snprintf(path, sizeof path, "%s/error_log", dir);
  n = usrtrace_tracefs_read(path, buf, sizeof buf - 1);
  CHECK(n > 0);
  buf[n] = 0;
  CHECK(strstr(buf, "Command: nosuchclock\n") != NULL);

  /* tracing_on through the file and through the call agree. */
  snprintf(path, sizeof path, "%s/tracing_on", dir);
  CHECK(usrtrace_tracefs_write(path, "0", 1) == 1);
  CHECK(!usrtrace_tracing_is_on(tr));
  usrtrace_tracing_on(tr);
  CHECK(usrtrace_tracefs_read(path, buf, 2) == 2 && memcmp(buf, "1\n", 2) == 0);

  CHECK(usrtrace_tracefs_read("no/such/file", buf, sizeof buf) == -ENOENT);
  CHECK(usrtrace_tracefs_read(NULL, buf, sizeof buf) == -EINVAL);

  CHECK(usrtrace_tracefs_rmdir(dir) == -EBUSY); /* tr holds it */
  usrtrace_array_put(tr);
  CHECK(usrtrace_tracefs_rmdir(dir) == 0);
  CHECK(usrtrace_tracefs_rmdir(dir) == -ENOENT);
  return NULL;
}
