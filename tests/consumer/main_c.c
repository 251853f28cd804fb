/* A C user of usrtrace: printk into an instance made with mkdir, read back
 * through the control files. Exits nonzero if anything is missing. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <usrtrace/usrtrace.h>

int main(void) {
  if (usrtrace_tracefs_mkdir("instances/consumer_c") != 0) return 1;
  struct usrtrace_array *tr = usrtrace_array_lookup("consumer_c");
  if (!tr) return 2;
  if (usrtrace_array_printk(tr, "from C %d\n", 11) <= 0) return 3;
  static char buf[1 << 16];
  long n = usrtrace_tracefs_read("instances/consumer_c/trace", buf, sizeof buf - 1);
  if (n < 0) return 4;
  buf[n] = 0;
  if (!strstr(buf, ": from C 11\n")) {
    fprintf(stderr, "consumer_c: printk line missing\n--- trace:\n%s---\n", buf);
    return 5;
  }
  if (usrtrace_tracefs_rmdir("instances/consumer_c") != -EBUSY) return 6;
  usrtrace_array_put(tr);
  if (usrtrace_tracefs_rmdir("instances/consumer_c") != 0) return 7;
  puts("consumer_c: ok");
  return 0;
}
