/*
 * plain_target: a program that does not link usrtrace, for
 * `usrtrace record -- COMMAND`. What the preloaded runtime gives it:
 *   - thread names: pthread_setname_np is interposed, so each rename is a
 *     usrtrace:thread_rename event;
 *   - markers through weak references: usrtrace_array_printk resolves to
 *     the preloaded runtime when it is there and stays NULL when not, so
 *     the program runs the same without it.
 * Usage: plain_target N: N threads, each renamed "plain-I", each writing
 * one marker "plain marker I" to the top instance.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct usrtrace_array;
extern struct usrtrace_array *usrtrace_array_lookup(const char *name) __attribute__((weak));
extern int usrtrace_array_printk(struct usrtrace_array *tr, const char *fmt, ...) __attribute__((weak));
extern void usrtrace_array_put(struct usrtrace_array *tr) __attribute__((weak));

static void *worker(void *arg) {
  long i = (long)arg;
  char name[16];
  snprintf(name, sizeof name, "plain-%ld", i);
  pthread_setname_np(pthread_self(), name);
  if (usrtrace_array_lookup && usrtrace_array_printk && usrtrace_array_put) {
    struct usrtrace_array *top = usrtrace_array_lookup(NULL);
    usrtrace_array_printk(top, "plain marker %ld\n", i);
    usrtrace_array_put(top);
  }
  return NULL;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2;
  if (n < 0 || n > 64) n = 2;
  pthread_t t[64];
  for (long i = 0; i < n; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) return 1;
  for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
  printf("plain_target: %ld threads done, runtime %s\n", n, usrtrace_array_printk ? "preloaded" : "absent");
  return 0;
}
