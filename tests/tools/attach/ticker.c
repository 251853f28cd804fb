/* A plain program for the attach test (tests/tools/attach_test.sh): built
 * with no tracing flag and never linked with usrtrace. Its main thread
 * blocks in read(2) on stdin and prints a line per byte read; a second
 * thread computes and sleeps in nanosleep(2) in a loop. A system call that
 * an attach failed to restart shows: the program says so and exits 2. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) long work(long i) {
  long s = 0;
  for (long k = 0; k < i % 50; ++k) s += k * k;
  return s;
}

__attribute__((noinline)) long step(long i) { return work(i) + work(i + 1); }

static void* spin(void* arg) {
  (void)arg;
  for (long i = 0;; ++i) {
    sink += step(i);
    struct timespec ts = {0, 500000};
    if (nanosleep(&ts, NULL) != 0) {
      fprintf(stderr, "ticker: nanosleep: errno %d\n", errno);
      exit(2);
    }
  }
  return NULL;
}

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, spin, NULL);
  for (long i = 0;; ++i) {
    char c;
    const ssize_t n = read(0, &c, 1);
    if (n == 0) return 0;
    if (n < 0) {
      fprintf(stderr, "ticker: read: errno %d\n", errno);
      return 2;
    }
    printf("tick %ld %ld\n", i, step(i));
    fflush(stdout);
  }
}
