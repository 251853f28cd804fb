/* Built by tests/function/abi_test.sh with -mpreferred-stack-boundary=3
 * (kernel-style code: calls keep rsp only 8-aligned) or as the ABI has it,
 * with either instrumentation. main calls mid 1000 times, mid calls leaf:
 * 2001 traced calls. Exit status 0 when the sums are right. */
__attribute__((noinline)) static int leaf(int x) { return x * 3; }
__attribute__((noinline)) static int mid(int x) {
  volatile char pad[8]; /* an odd frame size, so that alignment varies */
  pad[0] = (char)x;
  return leaf(x) + pad[0];
}
int main(void) {
  long s = 0;
  for (int i = 0; i < 1000; i++) s += mid(i);
  long want = 0;
  for (int i = 0; i < 1000; i++) want += 3L * i + (signed char)i;
  return s == want ? 0 : 1;
}
