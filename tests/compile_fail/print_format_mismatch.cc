// Instance::print checks its format against its arguments at compile time
// (fmt::format_string): "{:d}" of a string does not compile.
// expect: invalid type specifier
#include "usrtrace/usrtrace.hpp"

int main() {
  usrtrace::Instance top = usrtrace::Instance::top();
#ifdef USRTRACE_COMPILE_FAIL
  top.print("n={:d}", "text");
#else
  top.print("n={:d}", 42);
#endif
}
