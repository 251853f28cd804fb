/* fib(8) by tree recursion, and nothing of usrtrace: built at -O0 with
 * -finstrument-functions and with -fpatchable-function-entry=5
 * (tests/CMakeLists.txt), the program of the depth limit's test against
 * uftrace -D (cli_record_test.cc). Prints 21. */
#include <stdio.h>

__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(void) {
  printf("%d\n", fib(8));
  return 0;
}
