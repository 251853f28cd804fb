// A function the patch engine's tests probe, compiled with -O2
// -fcf-protection (tests/CMakeLists.txt): it starts with endbr64, which the
// engine keeps in place.
extern "C" __attribute__((noinline)) long patch_fixture_cet(long a, long b) { return a * b + 3; }
