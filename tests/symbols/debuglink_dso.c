// A library shipped as distributions ship theirs: stripped of its .symtab,
// with its symbols in a separate debug file that .gnu_debuglink names
// (tests/CMakeLists.txt makes both with objcopy). Its static function is in
// no table the library itself carries.
__attribute__((noinline)) static int hidden_work(int x) {
  __asm__ volatile("" ::: "memory");  // not folded into its caller
  return x * 3 + 1;
}

// The static function's address, and a call of it (so that it is kept).
void* debuglink_hidden_address(void) { return (void*)&hidden_work; }
int debuglink_call(int x) { return hidden_work(x); }
