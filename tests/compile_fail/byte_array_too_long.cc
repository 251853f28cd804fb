// uint8_t[N] fields hold 1..1024 bytes.
// expect: byte array fields hold 1\.\.1024 bytes
#include <cstdint>

#include "usrtrace/event.h"

#ifdef USRTRACE_COMPILE_FAIL
USRTRACE_EVENT(cf, blob, (uint8_t[4096], b), "%d", 0)
#else
USRTRACE_EVENT(cf, blob, (uint8_t[16], b), "%d", 0)
#endif

int main() {}
