// USRTRACE_SECTION's kind is a string literal, resolved once per call site
// at load: a runtime string does not compile (Section(kind) takes those).
// expect: KindName
#include "usrtrace/latency.h"

int main() {
#ifdef USRTRACE_COMPILE_FAIL
  const char* kind = "io";
  USRTRACE_SECTION(kind);
#else
  USRTRACE_SECTION("io");
#endif
}
