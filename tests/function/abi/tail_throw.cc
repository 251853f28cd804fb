// Built by tests/function/abi_test.sh. A traced function entered by a tail
// call shares its caller's return-address slot; an exception thrown from it
// must still unwind through both to the catch. main makes 1000 calls of
// outer (half of them throw): 3001 traced calls with main. Exit status 0
// when every result is right.
#include <stdexcept>

__attribute__((noinline)) int thrower(int x) {
  if (x & 1) throw std::runtime_error("odd");
  return x;
}
// At -O1 and above, a jmp to thrower: no frame of its own.
__attribute__((noinline)) int tail(int x) { return thrower(x * 3); }
__attribute__((noinline)) int outer(int x) {
  try {
    return tail(x) + 1;
  } catch (const std::runtime_error&) {
    return -1;
  }
}
int main() {
  long bad = 0;
  for (int i = 0; i < 1000; ++i) bad += outer(i) != ((i & 1) ? -1 : 3 * i + 1);
  return bad == 0 ? 0 : 1;
}
