// Functions the probe tests probe, compiled with plain -O2 and no tracing
// flag (tests/CMakeLists.txt), noinline so that every call is a call.
#include <csetjmp>
#include <stdexcept>

extern "C" {

__attribute__((noinline)) int probe_fixture_add(int a, const char* s) {
  int n = a;
  for (const char* p = s; p != nullptr && *p != '\0'; ++p) n += *p;
  return n;
}

// Reads a global through a rip-relative load in its first instructions.
int probe_fixture_global = 7;
__attribute__((noinline)) int probe_fixture_read_global(int x) { return probe_fixture_global * x; }

__attribute__((noinline)) long probe_fixture_mix(long a, long b, long c, long d, long e, long f, long g,
                                                 long h) {
  return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f + 7 * g + 8 * h;
}

}  // extern "C"

__attribute__((noinline)) int probe_fixture_throw(int x) {
  if (x < 0) throw std::runtime_error("negative");
  return x + 1;
}

std::jmp_buf probe_fixture_env;
__attribute__((noinline)) int probe_fixture_jump(int x) {
  if (x < 0) std::longjmp(probe_fixture_env, 42);
  return x + 2;
}

// A function with a debugger's breakpoint already at its entry (another
// tool's int3): a probe there cannot be armed. Never called.
asm(R"(
  .text
  .globl probe_fixture_breakpoint
  .type probe_fixture_breakpoint, @function
probe_fixture_breakpoint:
  int3
  xorl %eax, %eax
  ret
  .size probe_fixture_breakpoint, . - probe_fixture_breakpoint
)");
