/* A program that knows nothing of usrtrace, built with
 * -fpatchable-function-entry=5 (tests/package/package_test.sh): the installed
 * `usrtrace record -p function_graph -- ./graph` patches its entries. Each
 * leaf is called a known number of times. */
#include <stdio.h>

__attribute__((noinline)) int pkg_leaf(int x) { return x * 3 + 1; }

__attribute__((noinline)) int pkg_middle(int x) {
  int s = 0;
  for (int i = 0; i < 4; ++i) s += pkg_leaf(x + i);
  return s;
}

int main(void) {
  int s = 0;
  for (int i = 0; i < 25; ++i) s += pkg_middle(i);
  printf("%d\n", s);
  return 0;
}
